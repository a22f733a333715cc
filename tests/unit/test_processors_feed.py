"""A partition's feed: a fetch that aiokafka holds (a rebalance in progress) returns when the term stops."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition

from turnledger.processors.feed import PartitionFeed


class HeldConsumer:
    """`getmany` blocks until released, as aiokafka's does while a reassignment is in progress."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.cancelled = 0
        self._subscription = type("Subscription", (), {"reassignment_in_progress": True})()

    async def getmany(self, *tps: TopicPartition, **_: Any) -> dict[TopicPartition, list[object]]:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return {}


async def test_stop_returns_a_held_fetch_at_once_and_cancels_it() -> None:
    consumer, stop = HeldConsumer(), asyncio.Event()
    feed = PartitionFeed(consumer, TopicPartition("in", 0), stop)  # type: ignore[arg-type]
    fetch = asyncio.create_task(feed.fetch(60_000, 10))
    await asyncio.sleep(0.01)
    assert not fetch.done()
    stop.set()
    assert await asyncio.wait_for(fetch, 1) == []
    assert consumer.cancelled == 1
    assert await feed.fetch(60_000, 10) == []  # once stopped, no fetch at all
    feed.close()
