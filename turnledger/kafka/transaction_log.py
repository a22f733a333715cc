"""What the transaction coordinator recorded of a transactional id: its records in `__transaction_state`.

A hanging transaction whose markers the broker lost (Kafka 4.4.0's clean shutdown can drop the
markers of a transaction that commits during it, docs/architecture.md, Outages) leaves no trace of
its outcome on the partitions it wrote, when the changelog itself hangs with it. The coordinator's
own log holds it: every state change of a transactional id is a record keyed by the id in the
`__transaction_state` partition `partition_for(id)`, with the producer id and epoch, the status
(`TxnStatus`) and, while the transaction runs and as it prepares to end, the partitions it wrote.
The processor's term reads it to say in its report what the coordinator decided, and, where the
changelog hangs with that very transaction and the coordinator's log proves how it ended
(`completed_outcome`), to end it with that marker (`hanging.py`).

The record formats, from Kafka's message specs (`TransactionLogKey.json`, `TransactionLogValue.json`):

- key, version 0: int16 version, string transactional id (int16 length);
- value, version 0: int16 version, int64 producer id, int16 epoch, int32 timeout, int8 status, a
  nullable array (int32 count) of (string topic, int32 array of partitions), int64 last update,
  int64 start;
- value, version 1 (flexible): the same, each array and string compact (unsigned varint of length
  + 1), with a tagged-field section after each partition entry and at the end (previous and next
  producer id, client transaction version).

A record of another key or value version, or a tombstone, is skipped (`TransactionLogError` says why
a value could not be read); nothing is guessed. Pure but for `read_transaction_log`.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnledger.errors import TurnledgerError
from turnledger.kafka.clients import close_client, start_client
from turnledger.kafka.connection import kafka_options

TRANSACTION_STATE_TOPIC = "__transaction_state"
READ_BUDGET = 20_000
"""Records of the partition read at most (from its end back): the recent ones, where a transaction
that just lost its markers is."""
READ_TIMEOUT_S = 20.0


class TxnStatus(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


COMMITTED = frozenset({TxnStatus.PREPARE_COMMIT, TxnStatus.COMPLETE_COMMIT})
ABORTED = frozenset({TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_ABORT})


class TransactionLogError(TurnledgerError):
    """A `__transaction_state` value this module cannot read."""


@dataclass(frozen=True, slots=True)
class TxnLogEntry:
    offset: int
    producer_id: int
    producer_epoch: int
    status: TxnStatus
    partitions: frozenset[tuple[str, int]]


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: over UTF-16 code units, 32-bit signed."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(transactional_id: str, partitions: int) -> int:
    """The `__transaction_state` partition of a transactional id: `Utils.abs(id.hashCode()) % count`,
    Kafka's `abs` giving 0 for Integer.MIN_VALUE."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        layout = struct.Struct(">" + fmt)
        if self.pos + layout.size > len(self.data):
            raise TransactionLogError("value cut short")
        (value,) = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return int(value)

    def varint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise TransactionLogError("bad unsigned varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def text(self, length: int) -> str:
        if length < 0 or self.pos + length > len(self.data):
            raise TransactionLogError("string cut short")
        value = self.data[self.pos : self.pos + length].decode("utf-8")
        self.pos += length
        return value

    def skip_tagged_fields(self) -> None:
        for _ in range(self.varint()):
            self.varint()  # tag
            size = self.varint()
            if self.pos + size > len(self.data):
                raise TransactionLogError("tagged field cut short")
            self.pos += size


def parse_key(key: bytes | None) -> str | None:
    """The transactional id of a key of version 0, else None (another kind of key)."""
    if key is None or len(key) < 4:
        return None
    reader = _Reader(key)
    if reader.take("h") != 0:
        return None
    try:
        return reader.text(reader.take("h"))
    except (TransactionLogError, UnicodeDecodeError):
        return None


def parse_value(value: bytes, offset: int = -1) -> TxnLogEntry:
    """A value of version 0 or 1 (module docstring); raises `TransactionLogError` on anything else."""
    reader = _Reader(value)
    version = reader.take("h")
    if version not in (0, 1):
        raise TransactionLogError(f"value version {version}")
    flexible = version == 1
    producer_id, epoch = reader.take("q"), reader.take("h")
    reader.take("i")  # timeout
    status_byte = reader.take("b")
    try:
        status = TxnStatus(status_byte)
    except ValueError as exc:
        raise TransactionLogError(f"transaction status {status_byte}") from exc
    count = reader.varint() - 1 if flexible else reader.take("i")
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(count, 0)):
        topic = reader.text(reader.varint() - 1 if flexible else reader.take("h"))
        ids = reader.varint() - 1 if flexible else reader.take("i")
        partitions.update((topic, reader.take("i")) for _ in range(max(ids, 0)))
        if flexible:
            reader.skip_tagged_fields()
    reader.take("q")  # last update
    reader.take("q")  # start
    if flexible:
        reader.skip_tagged_fields()
    return TxnLogEntry(offset, producer_id, epoch, status, frozenset(partitions))


Record = tuple[int, bytes | None, bytes | None]
"""(offset, key, value) of one `__transaction_state` record."""


def entries_of(records: Iterable[Record], transactional_id: str) -> list[TxnLogEntry]:
    """The readable entries of `transactional_id` among (offset, key, value) records, in log order."""
    entries = []
    for offset, key, value in records:
        if value is None or parse_key(key) != transactional_id:
            continue
        try:
            entries.append(parse_value(value, offset))
        except (TransactionLogError, UnicodeDecodeError):
            continue
    return entries


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the coordinator recorded last of one producer id and epoch."""

    status: TxnStatus | None
    """The status of the last entry of that producer id and epoch; None when there is none."""
    partitions: frozenset[tuple[str, int]]
    """The partitions of the last of those entries that lists any (a transaction's Complete entry
    lists none: its Prepare entry does)."""
    offset: int | None = None

    @property
    def committed(self) -> bool:
        return self.status in COMMITTED

    @property
    def aborted(self) -> bool:
        return self.status in ABORTED

    def describe(self, tp: TopicPartition) -> str:
        if self.status is None:
            return "the coordinator's log holds no record of that producer id and epoch within the read"
        listed = "lists" if (tp.topic, tp.partition) in self.partitions else "does not list"
        return (
            f"the coordinator's log (offset {self.offset}) records {self.status.name} for that producer id "
            f"and epoch, and its transaction {listed} {tp.topic}-{tp.partition}"
        )


def recorded(entries: Sequence[TxnLogEntry], producer_id: int, epoch: int) -> Recorded:
    mine = [e for e in entries if e.producer_id == producer_id and e.producer_epoch == epoch]
    if not mine:
        return Recorded(None, frozenset())
    listed = next((e.partitions for e in reversed(mine) if e.partitions), frozenset[tuple[str, int]]())
    return Recorded(mine[-1].status, listed, mine[-1].offset)


_PREPARED_BY = {
    TxnStatus.COMPLETE_COMMIT: TxnStatus.PREPARE_COMMIT,
    TxnStatus.COMPLETE_ABORT: TxnStatus.PREPARE_ABORT,
}


def completed_outcome(
    entries: Sequence[TxnLogEntry], producer_id: int, epoch: int, tp: TopicPartition
) -> TxnStatus | None:
    """COMPLETE_COMMIT or COMPLETE_ABORT when the coordinator's log proves that the last transaction
    of (producer id, epoch) ended so and wrote `tp`; None when it proves nothing.

    The proof: the last entry of that producer id and epoch completes a transaction, and the entry of
    the transactional id just before it (in log order: one coordinator writes them in turn) is the
    matching Prepare of the same producer id and epoch, listing `tp`. A Complete entry lists no
    partitions, its Prepare does; a Prepare compacted away, or a Complete with another entry before
    it, proves nothing. The entries are one transactional id's (`entries_of`)."""
    mine = [i for i, e in enumerate(entries) if (e.producer_id, e.producer_epoch) == (producer_id, epoch)]
    if not mine or mine[-1] == 0:
        return None
    last, before = entries[mine[-1]], entries[mine[-1] - 1]
    if (
        _PREPARED_BY.get(last.status) is not before.status
        or (before.producer_id, before.producer_epoch) != (producer_id, epoch)
        or (tp.topic, tp.partition) not in before.partitions
    ):
        return None
    return last.status


async def read_transaction_log(
    bootstrap: str, transactional_id: str, *, budget: int = READ_BUDGET, timeout_s: float = READ_TIMEOUT_S
) -> list[TxnLogEntry]:
    """The entries of `transactional_id` among the last `budget` records of its `__transaction_state`
    partition, in log order (read_uncommitted: nothing there is transactional). Connection errors
    propagate; a read that runs out of time returns what it read."""
    consumer = await start_client(
        lambda: AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **kafka_options()),
        bootstrap=bootstrap,
        action="read the transaction coordinator's log",
    )
    try:
        cluster = await consumer._client.fetch_all_metadata()  # internal topics included
        partitions = cluster.partitions_for_topic(TRANSACTION_STATE_TOPIC)
        if not partitions:
            return []  # no transaction has run on this cluster yet
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, len(partitions)))
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        start = max((await consumer.beginning_offsets([tp]))[tp], end - budget)
        consumer.seek(tp, start)
        records: list[Record] = []
        deadline = asyncio.get_running_loop().time() + timeout_s
        while await consumer.position(tp) < end and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=200, max_records=1000)
            records += [(r.offset, r.key, r.value) for r in batch.get(tp, [])]
        return entries_of(records, transactional_id)
    finally:
        await close_client(consumer)
