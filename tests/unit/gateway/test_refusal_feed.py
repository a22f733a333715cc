"""A worker learns of the fold's refusals of its conversations' events exactly once and in order, from where
each partition ended when it started; everything else on the topic is skipped (gateway/refusal_feed.py).

The feed runs against a fake consumer: no Kafka. `run` itself (start the consumer, wait for the topic,
ride out outages) is the Kafka glue of `turnledger.kafka.clients` and is driven here with that glue
replaced by the fake."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError

from tests.unit.gateway.decisions import decision
from turnledger.codec import encode
from turnledger.errors import KafkaUnavailableError
from turnledger.gateway import refusal_feed
from turnledger.gateway.board import DecisionBoard
from turnledger.gateway.refusal_feed import RefusalFeed
from turnledger.model.events import DispatchState, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.retry import NO_WAIT, Backoff, StopRequested

TOPIC = "turnledger.rejections"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@dataclass
class Message:
    key: bytes | None
    value: bytes | None
    offset: int = 0


@dataclass
class FakeConsumer:
    """Partitions 1 and 0 of the topic; `fetches` are returned by `getmany` in turn, then nothing."""

    fetches: list[dict[TopicPartition, list[Message]]] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    feed: RefusalFeed | None = None

    def partitions_for_topic(self, topic: str) -> set[int]:
        self.calls.append(("partitions_for_topic", topic))
        return {1, 0}

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("assign", partitions))

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self.calls.append(("seek_to_end", partitions))

    async def position(self, tp: TopicPartition) -> int:
        assert self.feed is not None
        self.calls.append(("position", tp, self.feed.positioned.is_set()))
        return 0

    async def getmany(self, *, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Message]]:
        self.calls.append(("getmany", timeout_ms, max_records))
        await asyncio.sleep(0)  # a fetch yields to the loop, as Kafka's does
        return self.fetches.pop(0) if self.fetches else {}

    async def stop(self) -> None:
        self.calls.append(("stop",))


#: what the codec says of the bytes `b"\x00garbage"`
UNDECODABLE = "missing the C3 01 single-object marker"


def rejected(conv: str, op: str, event_id: str, reason: ReasonCode = ReasonCode.LEASE_EXPIRED) -> Rejected:
    return Rejected(conversation_id=conv, operation_id=op, reason=reason, event_id=event_id, detail=event_id)


def board_following(*conversations: str) -> DecisionBoard:
    board = DecisionBoard()
    for conv in conversations:
        board.apply_nowait(decision("op-1", DispatchState.STREAMING, conversation_id=conv))
    return board


class Delivered:
    def __init__(self) -> None:
        self.batches: list[list[Rejected]] = []

    async def __call__(self, refusals: list[Rejected]) -> None:
        self.batches.append(refusals)


def make_feed(
    board: DecisionBoard, deliver: Callable[[list[Rejected]], Awaitable[None]], fetch_ms: int = 200
) -> RefusalFeed:
    return RefusalFeed(
        board,
        deliver,
        "kafka:9092",
        TOPIC,
        stop=asyncio.Event(),
        outage=NO_WAIT,
        client_id="w1-refusals",
        fetch_ms=fetch_ms,
    )


def message(record: Rejected | Any, offset: int = 0) -> Message:
    return Message(str(record.conversation_id).encode(), encode(record), offset)


async def test_every_partition_is_read_from_its_end_and_positioned_is_set_after_the_ends_are_known() -> None:
    """All partitions, assigned (no group), each at its end, the ends resolved before `positioned`."""
    feed = make_feed(board_following(), Delivered())
    consumer = FakeConsumer(feed=feed)
    await feed._position(consumer)
    assert consumer.calls == [
        ("partitions_for_topic", TOPIC),
        ("assign", [P0, P1]),
        ("seek_to_end", (P0, P1)),
        ("position", P0, False),
        ("position", P1, False),
    ]
    assert feed.positioned.is_set()


async def test_refusals_of_followed_conversations_are_delivered_once_in_order_and_counted() -> None:
    """One fetch, two partitions: the board's conversations' rejections, in partition then offset
    order, in one delivery; everything else on the topic is skipped."""
    deliver = Delivered()
    feed = make_feed(board_following("c1", "c2"), deliver, fetch_ms=75)
    first, second, third = (
        rejected("c1", "op-1", "e1"),
        rejected("c2", "op-1", "e2"),
        rejected("c1", "op-1", "e3"),
    )
    consumer = FakeConsumer(
        fetches=[
            {
                P0: [
                    message(first, 0),
                    message(rejected("c9", "op-1", "e-other"), 1),  # not this worker's conversation
                    Message(None, encode(first), 2),  # no key
                    Message(b"c1", None, 3),  # a tombstone
                    message(decision("op-1", DispatchState.COMMITTED), 4),  # not a rejection
                    message(third, 5),
                ],
                P1: [message(second, 0)],
            },
            {},
        ],
        feed=feed,
    )
    await feed._step(consumer)
    assert deliver.batches == [[first, third, second]] and feed.delivered == 3
    await feed._step(consumer)
    assert deliver.batches == [[first, third, second]] and feed.delivered == 3  # nothing new: no delivery
    assert consumer.calls == [("getmany", 75, 2000), ("getmany", 75, 2000)]
    fourth = rejected("c2", "op-1", "e4")
    consumer.fetches = [{P1: [message(fourth, 1)]}]
    await feed._step(consumer)
    assert deliver.batches == [[first, third, second], [fourth]] and feed.delivered == 4


async def test_an_undecodable_record_is_logged_and_the_records_after_it_still_delivered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A followed conversation's record that does not decode is a warning naming its offset, never
    the end of the fetch."""
    deliver = Delivered()
    feed = make_feed(board_following("c1"), deliver)
    after = rejected("c1", "op-1", "e2")
    consumer = FakeConsumer(
        fetches=[{P0: [Message(b"c1", b"\x00garbage", 41), message(after, 42)]}], feed=feed
    )
    with caplog.at_level(logging.WARNING, logger=refusal_feed.__name__):
        await feed._step(consumer)
    assert deliver.batches == [[after]] and feed.delivered == 1
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    assert warning.getMessage() == f"{TOPIC}: undecodable record at offset 41: {UNDECODABLE}"


async def test_records_of_conversations_not_followed_are_not_decoded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A record of another worker's conversation costs a key comparison: it is not even decoded (no
    warning for its bad bytes), and a key that is not UTF-8 is just a key no conversation has."""
    deliver = Delivered()
    feed = make_feed(board_following("c1"), deliver)
    consumer = FakeConsumer(
        fetches=[{P0: [Message(b"c9", b"\x00garbage", 1), Message(b"\xff\xfe", b"\x00garbage", 2)]}],
        feed=feed,
    )
    with caplog.at_level(logging.DEBUG, logger=refusal_feed.__name__):
        await feed._step(consumer)
    assert deliver.batches == [] and feed.delivered == 0 and caplog.records == []


async def test_a_key_that_is_not_utf_8_is_read_with_replacement_characters() -> None:
    """A key's bytes that are not UTF-8 become U+FFFD, so a conversation so named is still followed."""
    deliver = Delivered()
    feed = make_feed(board_following("c\ufffd"), deliver)
    refusal = rejected("c\ufffd", "op-1", "e1")
    consumer = FakeConsumer(fetches=[{P0: [Message(b"c\xff", encode(refusal), 0)]}], feed=feed)
    await feed._step(consumer)
    assert deliver.batches == [[refusal]]


def test_the_feed_fetches_for_at_most_200_ms_by_default() -> None:
    """A fetch waits at most 200 ms for records unless the worker says otherwise; nothing is delivered
    yet and the partitions are not positioned."""
    feed = RefusalFeed(
        board_following(),
        Delivered(),
        "kafka:9092",
        TOPIC,
        stop=asyncio.Event(),
        outage=NO_WAIT,
        client_id="w1",
    )
    assert feed.fetch_ms == 200 and feed.delivered == 0 and not feed.positioned.is_set()


# -- following: the feed as a task for the duration of a block --------------------------------------


async def no_other_tasks() -> bool:
    """After one turn of the loop (a cancelled task ends there), is this test's task the only one?"""
    await asyncio.sleep(0)
    return asyncio.all_tasks() == {asyncio.current_task()}


async def test_following_yields_true_once_positioned_and_cancels_the_feed_after_the_block(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The block is entered once every partition is positioned, and leaving it stops the feed (its task
    cancelled and awaited), with nothing logged for a cancelled feed."""
    feed = make_feed(board_following(), Delivered())
    seen: list[str] = []

    async def run() -> None:
        feed.positioned.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    feed.run = run  # type: ignore[method-assign]
    async with asyncio.timeout(5):
        async with feed.following() as ready:
            assert ready is True and seen == []
    assert seen == ["cancelled"] and await no_other_tasks()  # the done callbacks ran too
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_following_yields_false_when_the_feed_stops_before_it_is_positioned() -> None:
    """`stop` set before the partitions were known: False, and no task is left behind."""
    feed = make_feed(board_following(), Delivered())

    async def run() -> None:
        return None

    feed.run = run  # type: ignore[method-assign]
    async with asyncio.timeout(5):
        async with feed.following() as ready:
            assert ready is False
    assert await no_other_tasks()


async def test_following_yields_false_when_the_feed_ended_even_if_positioned() -> None:
    """A feed that positioned itself but has already ended follows nothing: False."""
    feed = make_feed(board_following(), Delivered())

    async def run() -> None:
        feed.positioned.set()

    feed.run = run  # type: ignore[method-assign]
    async with asyncio.timeout(5):
        async with feed.following() as ready:
            assert ready is False
    assert await no_other_tasks()


async def test_a_feed_that_fails_is_logged_by_name_and_following_yields_false(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An error ends the feed: logged once with the task's name and the error, and the block is entered
    with False (leaving it does not raise the feed's error)."""
    feed = make_feed(board_following(), Delivered())

    async def run() -> None:
        raise RuntimeError("boom")

    feed.run = run  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        async with asyncio.timeout(5):
            async with feed.following() as ready:
                assert ready is False
        await asyncio.sleep(0)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.getMessage()) for r in errors] == [
        (
            refusal_feed.__name__,
            "w1-refusals-feed stopped: RuntimeError('boom'); waits for refused events run to their timeouts",
        )
    ]


# -- run: the fake consumer in place of Kafka's ---------------------------------------------------


@dataclass
class Glue:
    """`turnledger.kafka`'s glue as `run` calls it, recorded: the reader's start, the partitions' wait,
    the steps until `stop` (no outage handling: each step is awaited in turn) and the consumer's close."""

    consumer: FakeConsumer
    made: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    started: list[dict[str, Any]] = field(default_factory=list)
    waited: list[tuple[Any, ...]] = field(default_factory=list)
    stepped: list[dict[str, Any]] = field(default_factory=list)
    closed: list[object] = field(default_factory=list)
    refuse_start: bool = False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in (
            "read_committed_consumer",
            "start_topic_reader",
            "wait_for_partitions",
            "step_until_stopped",
            "close_client",
        ):
            monkeypatch.setattr(refusal_feed, name, getattr(self, name))

    def read_committed_consumer(self, *args: Any, **kwargs: Any) -> FakeConsumer:
        self.made.append((args, kwargs))
        return self.consumer

    async def start_topic_reader(self, make: Callable[[], FakeConsumer], **kwargs: Any) -> FakeConsumer:
        self.started.append(kwargs)
        if self.refuse_start:
            raise StopRequested
        return make()

    async def wait_for_partitions(self, *args: Any) -> list[TopicPartition]:
        self.waited.append(args)
        return [P0, P1]

    async def step_until_stopped(self, step: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        self.stepped.append(kwargs)
        while not kwargs["stop"].is_set():
            await step()

    async def close_client(self, client: object) -> None:
        self.closed.append(client)


async def test_run_positions_then_delivers_until_stopped_and_closes_its_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run` starts a read-committed reader without a group, named by the feed's client id, for the
    feed's topic, positions every partition, fetches until `stop`, and closes the consumer."""
    deliver = Delivered()
    feed = make_feed(board_following("c1"), deliver, fetch_ms=30)
    refusal = rejected("c1", "op-1", "e1")
    consumer = FakeConsumer(fetches=[{P0: [message(refusal)]}], feed=feed)
    glue = Glue(consumer)
    glue.install(monkeypatch)

    async def delivered(refusals: list[Rejected]) -> None:
        await deliver(refusals)
        feed.stop.set()

    feed.deliver = delivered
    async with asyncio.timeout(5):
        await feed.run()
    assert glue.made == [(("kafka:9092",), {"client_id": "w1-refusals", "fetch_max_wait_ms": 30})]
    where = {"bootstrap": "kafka:9092", "topic": TOPIC, "backoff": NO_WAIT, "stop": feed.stop}
    assert glue.started == [where] and glue.stepped == [where]
    assert glue.waited == [(consumer, "kafka:9092", TOPIC)]
    assert deliver.batches == [[refusal]] and feed.positioned.is_set()
    assert consumer.calls[-1] == ("getmany", 30, 2000) and glue.closed == [consumer]


async def test_run_ends_quietly_when_stopped_while_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stop` while the reader is starting (StopRequested) ends `run` without an error, and with no
    consumer there is nothing to close."""
    feed = make_feed(board_following(), Delivered())
    glue = Glue(FakeConsumer(feed=feed), refuse_start=True)
    glue.install(monkeypatch)
    await feed.run()
    assert not feed.positioned.is_set() and glue.closed == [] and glue.stepped == []


def positioning_outage(
    monkeypatch: pytest.MonkeyPatch, outage: Backoff, then: Callable[[RefusalFeed], None] = lambda feed: None
) -> tuple[RefusalFeed, FakeConsumer, Glue]:
    """A feed whose first look for its partitions meets a lost connection (`then` runs as it does)."""
    feed = RefusalFeed(
        board_following("c1"), Delivered(), "kafka:9092", TOPIC, stop=asyncio.Event(), outage=outage,
        client_id="w1-refusals",
    )  # fmt: skip
    consumer = FakeConsumer(feed=feed)
    glue = Glue(consumer)
    glue.install(monkeypatch)
    outages: list[BaseException] = [KafkaConnectionError("gone")]

    async def wait_for_partitions(*args: Any) -> list[TopicPartition]:
        glue.waited.append(args)
        if outages:
            then(feed)
            raise outages.pop(0)
        return [P0, P1]

    async def step_until_stopped(step: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        kwargs["stop"].set()

    monkeypatch.setattr(refusal_feed, "wait_for_partitions", wait_for_partitions)
    monkeypatch.setattr(refusal_feed, "step_until_stopped", step_until_stopped)
    return feed, consumer, glue


async def test_an_outage_while_positioning_is_ridden_out_as_the_feed_s_outage_backoff_says(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The partitions and their ends are asked again once Kafka answers: the feed is positioned, not
    stopped by the outage."""
    feed, consumer, glue = positioning_outage(monkeypatch, Backoff(initial_s=0.001, max_s=0.001, jitter=0))
    caplog.set_level(logging.WARNING, "turnledger.retry")
    async with asyncio.timeout(5):
        await feed.run()
    assert feed.positioned.is_set() and glue.waited == [(consumer, "kafka:9092", TOPIC)] * 2
    [line] = [r.getMessage() for r in caplog.records]
    action = f"position on the ends of {TOPIC!r}"
    assert line.startswith(f"waiting for Kafka at kafka:9092 to {action} (attempt 1, ")
    assert (
        f"Kafka is not reachable at 'kafka:9092' while trying to {action} (KafkaConnectionError: gone)"
        in line
    )
    assert glue.closed == [consumer]


async def test_an_outage_while_positioning_without_a_wait_ends_the_feed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed, consumer, glue = positioning_outage(monkeypatch, NO_WAIT)
    with pytest.raises(KafkaUnavailableError):
        async with asyncio.timeout(5):
            await feed.run()
    assert not feed.positioned.is_set() and len(glue.waited) == 1 and glue.closed == [consumer]


async def test_a_stop_while_waiting_out_a_positioning_outage_ends_the_feed_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = Backoff(initial_s=30, max_s=30, jitter=0)
    feed, consumer, glue = positioning_outage(monkeypatch, slow, then=lambda feed: feed.stop.set())
    async with asyncio.timeout(5):
        await feed.run()
    assert not feed.positioned.is_set() and len(glue.waited) == 1 and glue.closed == [consumer]
