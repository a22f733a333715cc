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


TP = TopicPartition("in", 3)
OTHER = TopicPartition("in", 4)


class Message:
    def __init__(self, offset: int) -> None:
        self.topic, self.partition, self.offset = TP.topic, TP.partition, offset
        self.key, self.value, self.timestamp = f"k{offset}".encode(), f"v{offset}".encode(), 1_000 + offset


class ScriptedConsumer:
    """aiokafka's consumer as a feed uses it: each `getmany` answers the next of `answers` (records by
    partition, or an exception), and every call is written down."""

    def __init__(self, *answers: dict[TopicPartition, list[Message]] | BaseException) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[Any, ...]] = []
        self.assigned = {TP}
        self._subscription = type("Subscription", (), {"reassignment_in_progress": False})()

    async def getmany(self, *tps: TopicPartition, timeout_ms: int, max_records: int) -> Any:
        self.calls.append(("getmany", tps, timeout_ms, max_records))
        answer = self.answers.pop(0) if self.answers else {}
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def assignment(self) -> set[TopicPartition]:
        return self.assigned

    def pause(self, tp: TopicPartition) -> None:
        self.calls.append(("pause", tp))

    def resume(self, tp: TopicPartition) -> None:
        self.calls.append(("resume", tp))

    async def committed(self, tp: TopicPartition) -> int | None:
        self.calls.append(("committed", tp))
        return 41

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls.append(("beginning_offsets", tuple(tps)))
        return {tp: 5 for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        self.calls.append(("position", tp))
        return 0

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", tp, offset))


def _feed(consumer: ScriptedConsumer) -> PartitionFeed:
    return PartitionFeed(consumer, TP, asyncio.Event())  # type: ignore[arg-type]


def _offsets(records: list[Any]) -> list[tuple[str, int, int, bytes, bytes, int]]:
    return [(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp_ms) for r in records]


async def test_buffered_records_are_taken_at_once_and_only_the_feed_s_partition() -> None:
    consumer = ScriptedConsumer({TP: [Message(7), Message(8)], OTHER: [Message(99)]})
    feed = _feed(consumer)
    assert _offsets(await feed.fetch(250, 10)) == [
        ("in", 3, 7, b"k7", b"v7", 1_007), ("in", 3, 8, b"k8", b"v8", 1_008),
    ]  # fmt: skip
    assert consumer.calls == [("getmany", (TP,), 0, 10)]


async def test_nothing_buffered_waits_for_a_fetch_of_at_most_the_timeout() -> None:
    consumer = ScriptedConsumer({}, {TP: [Message(9)], OTHER: [Message(1)]}, {}, {OTHER: [Message(2)]})
    feed = _feed(consumer)
    assert _offsets(await feed.fetch(250, 4)) == [("in", 3, 9, b"k9", b"v9", 1_009)]
    assert await feed.fetch(30, 2) == []  # the wait brought only another partition's records
    assert consumer.calls == [
        ("getmany", (TP,), 0, 4), ("getmany", (TP,), 250, 4),
        ("getmany", (TP,), 0, 2), ("getmany", (TP,), 30, 2),
    ]  # fmt: skip
    waiter = feed._stopped
    assert waiter is not None and not waiter.done()  # one stop waiter, kept across fetches
    feed.close()
    await asyncio.sleep(0)
    assert feed._stopped is None and waiter.cancelled()
    feed.close()  # a second close is nothing


async def test_a_fetch_with_no_time_to_wait_returns_what_is_buffered_or_nothing() -> None:
    for timeout_ms in (0, -5):
        for buffered in ({}, {OTHER: [Message(1)]}):
            consumer = ScriptedConsumer(buffered)
            assert await _feed(consumer).fetch(timeout_ms, 3) == []
            assert consumer.calls == [("getmany", (TP,), 0, 3)]
    consumer = ScriptedConsumer({}, {TP: [Message(2)]})
    assert _offsets(await _feed(consumer).fetch(1, 3)) == [("in", 3, 2, b"k2", b"v2", 1_002)]
    assert consumer.calls == [("getmany", (TP,), 0, 3), ("getmany", (TP,), 1, 3)]


async def test_during_a_reassignment_only_the_waiting_fetch_is_asked() -> None:
    """`getmany` with no timeout can wait out a reassignment, so the buffered fast path is skipped."""
    consumer = ScriptedConsumer({TP: [Message(4)]})
    consumer._subscription.reassignment_in_progress = True  # type: ignore[attr-defined]
    assert _offsets(await _feed(consumer).fetch(0, 2)) == [("in", 3, 4, b"k4", b"v4", 1_004)]
    assert consumer.calls == [("getmany", (TP,), 0, 2)]


async def test_a_fetch_that_fails_after_the_stop_is_swallowed() -> None:
    """Stopping cancels the waiting fetch; whatever that fetch then raises is not the stop's business."""

    class FailsWhenCancelled(ScriptedConsumer):
        async def getmany(self, *tps: TopicPartition, timeout_ms: int, max_records: int) -> Any:
            self.calls.append(("getmany", tps, timeout_ms, max_records))
            if timeout_ms == 0:
                return {}
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise RuntimeError("connection closed while cancelling") from None
            return {}

    consumer, stop = FailsWhenCancelled(), asyncio.Event()
    feed = PartitionFeed(consumer, TP, stop)  # type: ignore[arg-type]
    fetch = asyncio.create_task(feed.fetch(60_000, 10))
    while len(consumer.calls) < 2:
        await asyncio.sleep(0)
    stop.set()
    assert await asyncio.wait_for(fetch, 5) == []
    feed.close()


async def test_pause_resume_committed_and_seek_address_the_feed_s_own_partition() -> None:
    consumer = ScriptedConsumer()
    feed = _feed(consumer)
    feed.pause()
    feed.resume()
    assert await feed.committed() == 41
    assert await feed.seek(12) == 12
    assert await feed.seek(None) == 5
    assert consumer.calls == [
        ("pause", TP), ("resume", TP), ("committed", TP),
        ("position", TP), ("seek", TP, 12),
        ("beginning_offsets", (TP,)), ("position", TP), ("seek", TP, 5),
    ]  # fmt: skip
    consumer.calls.clear()
    consumer.assigned = {OTHER}  # revoked: pausing or resuming it would raise in aiokafka
    feed.pause()
    feed.resume()
    assert consumer.calls == []
