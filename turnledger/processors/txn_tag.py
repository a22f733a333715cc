"""The identity of one transaction of a partition's producer, carried as a record header.

Every transaction of a term is tagged `(producer id, producer epoch, n)`, n counting the term's
transactions (`PartitionTransactions`): a producer id and epoch belong to one term (its
InitProducerId bumped the epoch), so the triple names one transaction for good. `BatchWriter`
puts it on the first record of every record batch it builds, on every partition the transaction
writes (the changelog included). The first batch of a transaction on a partition is where a
hanging transaction's `currentTxnStartOffset` points, so the hanging data names its transaction,
and the changelog record with the same tag says how that transaction ended
(`processors/hanging.py`). Readers ignore the header: no consumer of these topics reads record
headers (they all go through `SourceRecord`, which has none), and keys and values are unchanged.

Wire form: `HEADER` -> version byte 1, producer id (int64), epoch (int16), n (uint64), big-endian:
19 bytes on one record per partition batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

HEADER = "turnledger-txn"
VERSION = 1
_LAYOUT = struct.Struct(">BqhQ")


@dataclass(frozen=True, slots=True)
class TxnTag:
    producer_id: int
    producer_epoch: int
    n: int

    def encode(self) -> bytes:
        return _LAYOUT.pack(VERSION, self.producer_id, self.producer_epoch, self.n)

    def header(self) -> list[tuple[str, bytes]]:
        """The record headers of a batch's first record."""
        return [(HEADER, self.encode())]

    def __str__(self) -> str:
        return f"{self.producer_id}/{self.producer_epoch}/{self.n}"


def decode(value: bytes | None) -> TxnTag | None:
    """The tag in a `HEADER` value; None when it is not one this version wrote (never a guess)."""
    if value is None or len(value) != _LAYOUT.size or value[0] != VERSION:
        return None
    _version, producer_id, epoch, n = _LAYOUT.unpack(value)
    return TxnTag(producer_id, epoch, n)


def tag_of(headers: Iterable[tuple[str, bytes | None]] | None) -> TxnTag | None:
    """The transaction tag among a record's headers (aiokafka's `ConsumerRecord.headers`), else None."""
    for name, value in headers or ():
        if name == HEADER:
            return decode(value)
    return None


def producer_identity(producer: AIOKafkaProducer) -> tuple[int, int]:
    """(producer id, epoch) of an initialised transactional producer. aiokafka has no public
    accessor; its transaction manager holds both."""
    txn_manager = producer._txn_manager
    assert txn_manager is not None and txn_manager.has_pid(), "the producer is not initialised"
    return int(txn_manager.producer_id), int(txn_manager.producer_epoch)
