"""Writing one batch's records into the open transaction, one record batch per partition.

`producer.send()` costs a coroutine, a future and a partitioner call per record, which
dominated the runtime's CPU profile. Building one `BatchBuilder` per target partition
and submitting it with `send_batch()` leaves one future per partition per transaction.
Partitioning is aiokafka's own default (murmur2 of the key, as the Java client), so a
conversation's outputs land where a plain `send()` would put them.

The first record of every record batch carries the transaction's tag (`txn_tag.py`) as a header:
whichever of its batches a partition holds, it names its transaction (one header per batch).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

from turnledger.processors.errors import ProcessorError
from turnledger.processors.txn_tag import TxnTag

Record = tuple[str, int | None, bytes | None, bytes | None]
"""(topic, partition or None to partition by key, key, value)."""


@lru_cache(maxsize=65_536)
def key_partition(key: bytes, partitions: int) -> int:
    """The partition aiokafka's (and Java's) default partitioner gives `key`; cached since a processor
    writes many records per conversation id."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


class BatchWriter:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self._partitions: dict[str, int] = {}

    async def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            parts = await self._producer.partitions_for(topic)
            count = self._partitions[topic] = len(parts)
            if sorted(parts) != list(range(count)):
                raise ProcessorError(f"topic {topic!r} reports partitions {sorted(parts)}")
        return count

    async def write(
        self, records: Iterable[Record], tag: TxnTag | None = None
    ) -> list[asyncio.Future[object]]:
        """Queue every record into the current transaction, `tag` on the first record of every
        batch (None: no headers, for a writer outside a processor's transactions, such as the
        benchmarks' copy loops); returns the delivery futures to await."""
        producer = self._producer
        first = None if tag is None else tag.header()
        open_batches: dict[tuple[str, int], Any] = {}
        futures: list[asyncio.Future[object]] = []
        for topic, partition, key, value in records:
            if partition is None:
                count = await self._partition_count(topic)
                partition = key_partition(key, count) if key is not None else random.randrange(count)
            target = (topic, partition)
            batch = open_batches.get(target)
            if batch is None:
                batch = open_batches[target] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None, headers=first)
            elif batch.append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = open_batches[target] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None, headers=first)
        for (topic, partition), batch in open_batches.items():
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        return futures
