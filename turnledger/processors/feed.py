"""One input partition of the process's shared consumer, as that partition's processor sees it.

A process runs one consumer for all the partitions it owns (its group membership is the
consumer's); each partition's processor reads only its own partition through a feed. A feed's
fetch returns at once when the processor is asked to stop, which matters during a rebalance:
aiokafka holds every fetch until the new assignment is complete, and that assignment waits for
the revocation, which waits for the processors to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnledger.kafka.positions import seek_settled
from turnledger.kafka.reading import source_record
from turnledger.records import SourceRecord


class PartitionFeed:
    def __init__(self, consumer: AIOKafkaConsumer, tp: TopicPartition, stop: asyncio.Event) -> None:
        self.consumer = consumer
        self.tp = tp
        self._stop = stop
        self._stopped: asyncio.Future[Any] | None = None

    def pause(self) -> None:
        """No records of this partition are fetched or returned until `resume()`."""
        if self.tp in self.consumer.assignment():
            self.consumer.pause(self.tp)

    def resume(self) -> None:
        if self.tp in self.consumer.assignment():
            self.consumer.resume(self.tp)

    async def committed(self) -> int | None:
        """The group's committed offset of this partition, asked of the coordinator now (not cached)."""
        committed: int | None = await self.consumer.committed(self.tp)
        return committed

    async def seek(self, offset: int | None) -> int:
        """Position at `offset`, or at the partition's log start when None; returns the offset."""
        return await seek_settled(self.consumer, self.tp, offset)

    async def fetch(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        """This partition's records available now, waiting at most `timeout_ms` for the first one;
        `[]` at once when the processor is asked to stop."""
        if self._stop.is_set():
            return []
        # Fast path, no tasks: what is buffered already (getmany with no timeout never waits on a
        # fetch, but it can wait out a reassignment, so it is only taken when none is running).
        if not self.consumer._subscription.reassignment_in_progress:
            buffered = await self.consumer.getmany(self.tp, timeout_ms=0, max_records=max_records)
            if buffered:
                return [source_record(m) for m in buffered.get(self.tp, [])]
            if timeout_ms <= 0:
                return []
        if self._stopped is None:
            self._stopped = asyncio.ensure_future(self._stop.wait())
        fetch = asyncio.ensure_future(
            self.consumer.getmany(self.tp, timeout_ms=timeout_ms, max_records=max_records)
        )
        done, _ = await asyncio.wait({fetch, self._stopped}, return_when=asyncio.FIRST_COMPLETED)
        if fetch not in done:
            # Records a cancelled fetch already took are lost to this processor, which is stopping:
            # whoever owns the partition next starts from its committed offset.
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fetch
            return []
        return [source_record(m) for m in fetch.result().get(self.tp, [])]

    def close(self) -> None:
        if self._stopped is not None:
            self._stopped.cancel()
            self._stopped = None
