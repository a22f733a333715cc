"""A worker's share of the manifests topic: each assigned partition read from its low watermark, caught up
into the board before any work is taken, its records observed once live, and the watermark committed is
the first offset of the oldest open operation (gateway/manifest_feed.py).

The feed runs against a fake consumer and a fake worker: no Kafka. `run`'s Kafka glue (start the consumer,
wait for the topic, ride out outages) is replaced by the fake."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tests.unit.gateway.decisions import decision, manifest_issued
from turnledger.codec import encode
from turnledger.gateway import manifest_feed
from turnledger.gateway.board import DecisionBoard, Observed, OperationKey
from turnledger.gateway.manifest_feed import ManifestFeed
from turnledger.gateway.worker_config import WorkerStats
from turnledger.kafka.clients import LEAVE_WITHIN_S
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchState, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.retry import NO_WAIT, StopRequested

S = DispatchState
TOPIC = "turnledger.manifests"
P0, P1, P2 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 2)
A, B, C = ("c1", "op-a"), ("c1", "op-b"), ("c1", "op-c")


#: what the codec says of the bytes `b"\x00garbage"`
UNDECODABLE = "missing the C3 01 single-object marker"


@dataclass
class Message:
    value: bytes | None
    offset: int


def msg(record: Frozen, offset: int) -> Message:
    return Message(encode(record), offset)


@dataclass
class FakeWorker:
    """What the feed asks of `DispatchWorker`, recorded in `calls`."""

    board: DecisionBoard = field(default_factory=DecisionBoard)
    stats: WorkerStats = field(default_factory=WorkerStats)
    live: bool = False
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    @dataclass
    class Config:
        worker_id: str = "w7"

    config: Config = field(default_factory=Config)

    async def observe(self, records: list[Observed]) -> None:
        self.calls.append(("observe", records))
        await self.board.apply(records)

    async def release(self, keys: set[OperationKey]) -> None:
        self.calls.append(("release", set(keys)))

    def take(self, keys: set[OperationKey]) -> None:
        self.calls.append(("take", set(keys)))

    async def go_live(self, only: set[OperationKey] | None = None) -> None:
        self.calls.append(("go_live", None if only is None else set(only)))
        self.live = True


@dataclass
class FakeConsumer:
    """An assigned share: `ends` per partition, `committed` offsets, a `positions` table that seeks set
    and fetches advance; every call recorded in `calls`."""

    ends: dict[TopicPartition, int] = field(default_factory=dict)
    committed_at: dict[TopicPartition, int] = field(default_factory=dict)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    fetches: list[dict[TopicPartition, list[Message]]] = field(default_factory=list)
    owned: set[TopicPartition] = field(default_factory=set)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    commit_error: BaseException | None = None
    commit_hangs: bool = False

    def assignment(self) -> set[TopicPartition]:
        return set(self.owned)

    def pause(self, tp: TopicPartition) -> None:
        self.calls.append(("pause", tp))

    def resume(self, tp: TopicPartition) -> None:
        self.calls.append(("resume", tp))

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls.append(("end_offsets", tps))
        return {tp: self.ends[tp] for tp in tps}

    async def committed(self, tp: TopicPartition) -> int | None:
        self.calls.append(("committed", tp))
        return self.committed_at.get(tp)

    async def position(self, tp: TopicPartition) -> int:
        self.calls.append(("position", tp))
        return self.positions.get(tp, 0)

    async def seek_to_beginning(self, tp: TopicPartition) -> None:
        self.calls.append(("seek_to_beginning", tp))
        self.positions[tp] = 0

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", tp, offset))
        self.positions[tp] = offset

    async def getmany(self, *, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Message]]:
        self.calls.append(("getmany", timeout_ms, max_records))
        await asyncio.sleep(0)  # a fetch yields to the loop, as Kafka's does
        fetched = self.fetches.pop(0) if self.fetches else {}
        for tp, messages in fetched.items():
            if messages:
                self.positions[tp] = messages[-1].offset + 1
        return fetched

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        if self.commit_hangs:
            await asyncio.Event().wait()
        if self.commit_error is not None:
            raise self.commit_error
        self.calls.append(("commit", offsets))

    def subscribe(self, topics: list[str], *, listener: object) -> None:
        self.calls.append(("subscribe", topics, type(listener).__name__, getattr(listener, "feed", None)))

    async def stop(self) -> None:
        self.calls.append(("stop",))


def make_feed(worker: FakeWorker, consumer: FakeConsumer | None = None, **kwargs: Any) -> ManifestFeed:
    feed = ManifestFeed(
        worker,  # type: ignore[arg-type]
        "kafka:9092",
        TOPIC,
        "workers",
        stop=asyncio.Event(),
        outage=NO_WAIT,
        **kwargs,
    )
    if consumer is not None:
        feed.consumer = consumer
    return feed


def of(calls: list[tuple[Any, ...]], *names: str) -> list[tuple[Any, ...]]:
    return [c for c in calls if c[0] in names]


def commits(consumer: FakeConsumer) -> list[dict[TopicPartition, int]]:
    return [{tp: o.offset for tp, o in c[1].items()} for c in of(consumer.calls, "commit")]


# -- membership -----------------------------------------------------------------------------------


async def test_assigned_partitions_are_paused_until_positioned(caplog: pytest.LogCaptureFixture) -> None:
    """A new share is paused (nothing fetched from where the group left it) and marked to be positioned."""
    consumer = FakeConsumer()
    feed = make_feed(FakeWorker(), consumer)
    with caplog.at_level(logging.INFO, logger=manifest_feed.__name__):
        feed.assigned({P1, P0})
    assert sorted(of(consumer.calls, "pause")) == [("pause", P0), ("pause", P1)]
    assert feed.unpositioned == {P0, P1} and feed._joined is True
    assert [r.getMessage() for r in caplog.records] == ["manifests: partitions [0, 1] assigned"]


async def test_shares_dealt_before_positioning_add_up_and_stay_the_feed_s_own() -> None:
    """Two assignments before the next step (two rebalances during one fetch) are both positioned; the
    set the group handed over is not the one the feed clears."""
    consumer = FakeConsumer()
    feed = make_feed(FakeWorker(), consumer)
    first, second = {P0}, {P1}
    feed.assigned(first)
    feed.assigned(second)
    assert feed.unpositioned == {P0, P1}
    feed.unpositioned.clear()
    assert (first, second) == ({P0}, {P1})


async def test_positioning_seeks_each_partition_to_its_watermark_and_records_the_end_to_catch_up_to(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A committed partition is read from its commit, one never committed from its beginning; each is
    resumed with the end it had when assigned as the point to catch up to. Unassigned ones are not."""
    consumer = FakeConsumer(ends={P0: 9, P1: 4}, committed_at={P1: 3}, owned={P0, P1})
    feed = make_feed(FakeWorker(), consumer, fetch_ms=55)
    feed.unpositioned = {P1, P0, P2}  # P2 was revoked again before it was positioned
    with caplog.at_level(logging.INFO, logger=manifest_feed.__name__):
        await feed._step()
    assert consumer.calls[:10] == [
        ("end_offsets", [P0, P1]),
        ("committed", P0),
        ("position", P0),  # the assignment's own reset settles before the seek
        ("seek_to_beginning", P0),
        ("resume", P0),
        ("committed", P1),
        ("position", P1),
        ("seek", P1, 3),
        ("resume", P1),
        ("getmany", 55, 2000),
    ]
    assert feed.catching_up == {P0: 9, P1: 4} and feed.unpositioned == set()
    assert [r.getMessage() for r in caplog.records] == [
        "manifests partition 0: from None, catching up to 9",
        "manifests partition 1: from 3, catching up to 4",
    ]
    await feed._step()
    assert of(consumer.calls, "end_offsets", "committed", "seek", "seek_to_beginning") == [
        ("end_offsets", [P0, P1]),
        ("committed", P0),
        ("seek_to_beginning", P0),
        ("committed", P1),
        ("seek", P1, 3),
    ]  # positioned once


async def test_a_catching_up_partition_fills_the_board_then_its_open_work_is_taken_once_live() -> None:
    """While a partition catches up, its records reach the board only (no attempt for a replayed
    PREPARED); at its end a live worker takes the operations seen there, and later records are
    observed (the live path)."""
    worker = FakeWorker(live=True)
    consumer = FakeConsumer(ends={P0: 2}, owned={P0})
    feed = make_feed(worker, consumer)
    feed._joined = True
    feed.unpositioned = {P0}
    prepared = decision("op-a", S.PREPARED, attempt_generation=0)
    consumer.fetches = [{P0: [msg(manifest_issued("op-a"), 0)]}, {P0: [msg(prepared, 1)]}]
    await feed._step()  # position 1 of 2: still catching up
    assert worker.calls == [] and feed.catching_up == {P0: 2}
    assert worker.board.manifests.keys() == {A}
    await feed._step()  # position 2: caught up
    assert worker.calls == [("take", {A})] and feed.catching_up == {}
    assert worker.board.latest[A] == prepared
    later = decision("op-b", S.PREPARED, attempt_generation=0)
    consumer.fetches = [{P0: [msg(later, 2)]}]
    await feed._step()
    assert worker.calls == [("take", {A}), ("observe", [later])]


async def test_the_worker_goes_live_once_every_assigned_partition_caught_up_with_their_operations() -> None:
    """Not live: the worker goes live only when the group dealt its share and every partition of it is
    positioned and caught up, with exactly the operations seen there; `on_live` follows."""
    worker = FakeWorker()
    consumer = FakeConsumer(ends={P0: 1, P1: 1}, owned={P0, P1})
    lived: list[bool] = []

    async def on_live() -> None:
        lived.append(worker.live)

    feed = make_feed(worker, consumer, on_live=on_live)
    await feed._step()  # not joined yet: never live
    assert worker.calls == [] and lived == []
    feed.assigned({P0, P1})
    consumer.fetches = [{P0: [msg(decision("op-a", S.STREAMING), 0)]}]
    await feed._step()  # P0 caught up, P1 not: not live, and not taken (not live)
    assert worker.calls == [] and feed.catching_up == {P1: 1}
    consumer.fetches = [{P1: [msg(decision("op-b", S.PREPARED, attempt_generation=0), 0)]}]
    await feed._step()
    assert worker.calls == [("go_live", {A, B})] and lived == [True]
    await feed._step()
    assert worker.calls == [("go_live", {A, B})] and lived == [True]  # once


async def test_a_worker_dealt_no_partition_goes_live_with_nothing() -> None:
    """More workers than partitions: a worker dealt nothing is live (it waits for a share), with no
    operation; without `on_live` that is all."""
    worker = FakeWorker()
    feed = make_feed(worker, FakeConsumer())
    feed.assigned(set())
    await feed._step()
    assert worker.calls == [("go_live", set())]


async def test_a_partition_assigned_during_a_fetch_keeps_the_worker_from_going_live() -> None:
    """A rebalance can deal a partition while the fetch waits: not positioned yet, it is not caught up
    either, so the worker is not live until it is; and nothing is committed for it meanwhile."""
    worker = FakeWorker()
    consumer = FakeConsumer(ends={P0: 0, P1: 0}, owned={P0}, positions={P0: 0, P1: 6})
    feed = make_feed(worker, consumer, commit_every_s=0.0)
    feed.assigned({P0})

    async def getmany(*, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Message]]:
        consumer.owned.add(P1)
        feed.assigned({P1})
        return {}

    consumer.getmany = getmany  # type: ignore[method-assign]
    await feed._step()
    assert worker.calls == [] and feed.unpositioned == {P1}
    assert commits(consumer) == [{P0: 0}]


async def test_records_are_counted_decoded_and_keyed_by_their_first_offset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every message counts as read; tombstones, undecodable records (a warning naming the offset) and
    records of other topics are skipped; each operation's first offset is kept, not its last."""
    worker = FakeWorker(live=True)
    consumer = FakeConsumer(owned={P0})
    feed = make_feed(worker, consumer)
    first, second = decision("op-a", S.DISPATCHING), decision("op-a", S.STREAMING)
    rejected = Rejected(conversation_id="c1", operation_id="op-a", reason=ReasonCode.LEASE_EXPIRED)
    consumer.fetches = [
        {
            P0: [
                Message(None, 3),
                msg(first, 4),
                Message(b"\x00garbage", 5),
                msg(rejected, 6),
                msg(manifest_issued("op-b"), 7),
                msg(second, 8),
            ]
        }
    ]
    with caplog.at_level(logging.WARNING, logger=manifest_feed.__name__):
        await feed._step()
    assert worker.calls == [("observe", [first, manifest_issued("op-b"), second])]
    assert feed.records_read == 6 and worker.stats.counts["manifest_records_read"] == 6
    assert feed.keys == {P0: {A, B}} and feed.first_offsets == {P0: {A: 4, B: 7}}
    [warning] = caplog.records
    assert warning.getMessage() == f"{TOPIC}: undecodable record at offset 5: {UNDECODABLE}"
    consumer.fetches = [{P0: [Message(None, 9), Message(None, 10)], P1: [Message(None, 0)]}]
    await feed._step()
    assert feed.records_read == 9 and worker.stats.counts["manifest_records_read"] == 9


async def test_an_undecodable_message_without_an_offset_is_named_by_a_question_mark(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`_decoded` reads any message object: one without an offset is logged at offset `?`."""
    feed = make_feed(FakeWorker())

    @dataclass
    class Bare:
        value: bytes

    with caplog.at_level(logging.WARNING, logger=manifest_feed.__name__):
        assert feed._decoded(Bare(b"\x00garbage")) is None
        assert feed._decoded(object()) is None
    [warning] = caplog.records
    assert warning.getMessage() == f"{TOPIC}: undecodable record at offset ?: {UNDECODABLE}"


async def test_a_settled_operation_leaves_the_watermark_and_an_open_one_holds_it() -> None:
    """The committed offset is the first offset of the oldest open operation: a settled one (final and
    not open on the board) no longer holds it, one with only a manifest so far still does."""
    worker = FakeWorker(live=True)
    consumer = FakeConsumer(owned={P0})
    feed = make_feed(worker, consumer, commit_every_s=0.0)
    consumer.fetches = [
        {
            P0: [
                msg(manifest_issued("op-c"), 10),  # a manifest, no decision yet: open
                msg(decision("op-a", S.STREAMING), 11),
                msg(decision("op-b", S.STREAMING), 12),
                msg(decision("op-a", S.COMMITTED, attempt_terminated=True), 13),
            ]
        }
    ]
    await feed._step()
    assert feed.first_offsets == {P0: {B: 12, C: 10}} and feed.keys == {P0: {A, B, C}}
    assert commits(consumer) == [{P0: 10}]
    consumer.fetches = [{P0: [msg(decision("op-c", S.STREAMING), 14)]}]
    await feed._step()
    assert commits(consumer)[-1] == {P0: 10}
    consumer.fetches = [
        {P0: [msg(decision("op-c", S.COMMITTED, attempt_terminated=True), 15)]},
    ]
    await feed._step()
    assert commits(consumer)[-1] == {P0: 12}
    consumer.fetches = [{P0: [msg(decision("op-b", S.CANCELLED, attempt_terminated=True), 16)]}]
    await feed._step()
    assert feed.first_offsets == {P0: {}} and commits(consumer)[-1] == {P0: 17}  # none open: the position


async def test_commits_wait_for_the_interval_and_skip_partitions_not_positioned() -> None:
    """A commit every `commit_every_s` at most; a partition still catching up (or not positioned) keeps
    what it had committed, and with nothing to commit no commit is sent."""
    consumer = FakeConsumer(owned={P0, P1}, positions={P0: 7, P1: 3})
    feed = make_feed(FakeWorker(live=True), consumer, commit_every_s=3600.0)
    feed.catching_up = {P1: 9}
    await feed._step()  # the first step commits
    assert commits(consumer) == [{P0: 7}]
    consumer.positions[P0] = 8
    await feed._step()
    assert commits(consumer) == [{P0: 7}]  # the interval has not passed
    feed.catching_up = {}
    feed.unpositioned = {P0, P1}
    consumer.owned = set()
    await feed._commit({P0, P1})
    assert commits(consumer) == [{P0: 7}]
    last = feed._last_commit
    assert last is not None
    await feed._commit(set())
    assert feed._last_commit == last  # nothing asked: nothing done
    feed.consumer = None
    await feed._commit({P0})
    assert feed._last_commit == last


async def test_the_first_step_commits_whatever_the_clock_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """`time.monotonic()` counts from the machine's boot: on one up for less than `commit_every_s` the
    first commit must not wait for the uptime to reach it (it did, from a `_last_commit` of 0)."""
    monkeypatch.setattr(manifest_feed, "time", SimpleNamespace(monotonic=lambda: 0.5))
    consumer = FakeConsumer(owned={P0}, positions={P0: 4})
    feed = make_feed(FakeWorker(live=True), consumer, commit_every_s=5.0)
    assert feed._last_commit is None
    await feed._step()
    assert commits(consumer) == [{P0: 4}] and feed._last_commit == 0.5


async def test_a_commit_is_due_once_commit_every_s_has_passed_to_the_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the feed's clock: the first step commits; a step exactly `commit_every_s` after the last
    commit commits again, one a moment sooner does not."""
    now = [1.5]
    monkeypatch.setattr(manifest_feed, "time", SimpleNamespace(monotonic=lambda: now[0]))
    consumer = FakeConsumer(owned={P0}, positions={P0: 4})
    feed = make_feed(FakeWorker(live=True), consumer, commit_every_s=1.0)
    await feed._step()
    assert commits(consumer) == [{P0: 4}] and feed._last_commit == 1.5
    now[0] = 2.25
    await feed._step()
    assert commits(consumer) == [{P0: 4}]
    now[0] = 2.5
    await feed._step()
    assert commits(consumer) == [{P0: 4}, {P0: 4}]


async def test_partitions_not_positioned_do_not_keep_the_others_from_committing() -> None:
    """Each partition of a commit is judged on its own: those catching up or not positioned are left
    out, every other one is committed, in whatever order the set gives them."""
    skipped = [TopicPartition(TOPIC, p) for p in range(0, 20, 2)]
    committed = [TopicPartition(TOPIC, p) for p in range(1, 20, 2)]
    consumer = FakeConsumer(owned=set(skipped + committed), positions={tp: tp.partition for tp in committed})
    feed = make_feed(FakeWorker(), consumer)
    feed.catching_up = {tp: 99 for tp in skipped[:5]}
    feed.unpositioned = set(skipped[5:])
    await feed._commit(set(skipped + committed))
    assert commits(consumer) == [{tp: tp.partition for tp in committed}]


async def test_commits_are_offsets_with_empty_metadata() -> None:
    """What is committed is an `OffsetAndMetadata` with no metadata."""
    consumer = FakeConsumer(owned={P0}, positions={P0: 5})
    feed = make_feed(FakeWorker(), consumer)
    await feed._commit({P0})
    assert of(consumer.calls, "commit") == [("commit", {P0: OffsetAndMetadata(5, "")})]


async def test_a_revoked_partition_commits_its_watermark_and_its_operations_are_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Revoked: the watermark is committed, then the worker releases exactly that partition's operations
    and the feed forgets the partition; a partition kept is untouched."""
    worker = FakeWorker(live=True)
    consumer = FakeConsumer(owned={P0, P1}, positions={P0: 20, P1: 30})
    feed = make_feed(worker, consumer)
    feed.keys.update({P0: {A, B}, P1: {C}})
    feed.first_offsets.update({P0: {A: 12}, P1: {C: 25}})
    feed.catching_up = {P1: 40}
    feed.unpositioned = {P1}
    with caplog.at_level(logging.INFO, logger=manifest_feed.__name__):
        await feed.release({P0})
    assert commits(consumer) == [{P0: 12}]
    assert worker.calls == [("release", {A, B})]
    assert dict(feed.keys) == {P1: {C}} and dict(feed.first_offsets) == {P1: {C: 25}}
    assert feed.catching_up == {P1: 40} and feed.unpositioned == {P1}
    assert [r.getMessage() for r in caplog.records] == ["manifests: partitions [0] revoked"]
    await feed.release({P1})  # still catching up: nothing committed for it
    assert commits(consumer) == [{P0: 12}]
    assert worker.calls == [("release", {A, B}), ("release", {C})]
    assert dict(feed.keys) == {} and feed.catching_up == {} and feed.unpositioned == set()


async def test_a_revoked_partition_with_no_operation_seen_releases_nothing() -> None:
    """A partition revoked before any of its records was read releases an empty set of operations."""
    worker = FakeWorker()
    feed = make_feed(worker, FakeConsumer(owned={P2}))
    await feed.release({P2})
    assert worker.calls == [("release", set())]


async def test_a_failed_commit_does_not_stop_a_release(caplog: pytest.LogCaptureFixture) -> None:
    """The partition moves anyway: its operations are released even if the commit fails."""
    worker = FakeWorker()
    consumer = FakeConsumer(owned={P0}, commit_error=RuntimeError("coordinator moved"))
    feed = make_feed(worker, consumer)
    feed.keys[P0] = {A}
    await feed.release({P0})
    assert worker.calls == [("release", {A})]


async def test_revoking_nothing_does_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """An empty revocation (every rebalance starts with one) neither logs nor commits nor releases."""
    worker = FakeWorker()
    consumer = FakeConsumer(owned={P0}, positions={P0: 3})
    feed = make_feed(worker, consumer)
    feed._last_commit = 0.0
    with caplog.at_level(logging.INFO, logger=manifest_feed.__name__):
        await feed.release(set())
    assert worker.calls == [] and consumer.calls == [] and caplog.records == [] and feed._last_commit == 0.0


async def test_the_rebalance_listener_hands_the_group_s_moves_to_the_feed() -> None:
    """The consumer's rebalance callbacks: revoked → `release`, assigned → `assigned`."""
    worker = FakeWorker()
    consumer = FakeConsumer()
    feed = make_feed(worker, consumer)
    feed.keys[P0] = {A}
    listener = manifest_feed._Rebalances(feed)
    await listener.on_partitions_assigned({P1})
    assert feed.unpositioned == {P1} and ("pause", P1) in consumer.calls
    await listener.on_partitions_revoked({P0})
    assert worker.calls == [("release", {A})]


# -- the consumer's life ----------------------------------------------------------------------------


async def test_the_consumer_joins_the_group_as_this_worker_with_the_feed_s_timings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group member is a read-committed consumer of the feed's group, named after the worker, built by
    `group_member_consumer` (whose consumer says a refused session timeout in one line)."""
    made: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def group_member_consumer(*args: Any, **kwargs: Any) -> str:
        made.append((args, kwargs))
        return "consumer"

    monkeypatch.setattr(manifest_feed, "group_member_consumer", group_member_consumer)
    feed = make_feed(FakeWorker(), session_timeout_ms=6000, heartbeat_interval_ms=2000, fetch_ms=150)
    assert feed._new_consumer() == "consumer"
    assert made == [
        (
            ("kafka:9092",),
            {
                "group_id": "workers",
                "client_id": "w7-manifests",
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 2000,
                "fetch_max_wait_ms": 150,
            },
        )
    ]


def test_the_feed_s_defaults() -> None:
    """The defaults a worker runs with: a 10 s session, 3 s heartbeats, a commit a second, 200 ms fetches."""
    feed = make_feed(FakeWorker())
    assert (feed.session_timeout_ms, feed.heartbeat_interval_ms, feed.commit_every_s, feed.fetch_ms) == (
        10_000,
        3_000,
        1.0,
        200,
    )
    assert feed.leave_step_s == LEAVE_WITHIN_S and feed.on_live is None
    assert feed.records_read == 0 and feed.consumer is None and feed._joined is False


@dataclass
class Glue:
    """`turnledger.kafka`'s glue as `run` calls it, recorded: the reader's start, the steps until `stop`
    (no outage handling: each step is awaited in turn) and the consumer's close (it stops the fake)."""

    consumer: FakeConsumer
    started: list[tuple[Callable[[], object], dict[str, Any]]] = field(default_factory=list)
    stepped: list[dict[str, Any]] = field(default_factory=list)
    closed: list[tuple[object, float | None]] = field(default_factory=list)
    refuse_start: bool = False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("start_topic_reader", "step_until_stopped", "close_client"):
            monkeypatch.setattr(manifest_feed, name, getattr(self, name))

    async def start_topic_reader(self, make: Callable[[], object], **kwargs: Any) -> FakeConsumer:
        self.started.append((make, kwargs))
        if self.refuse_start:
            raise StopRequested
        return self.consumer

    async def step_until_stopped(self, step: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        self.stepped.append(kwargs)
        while not kwargs["stop"].is_set():
            await step()

    async def close_client(self, client: FakeConsumer, within_s: float | None = None) -> None:
        self.closed.append((client, within_s))
        await client.stop()


async def test_run_subscribes_steps_until_stopped_then_commits_and_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run` starts this worker's group member for the feed's topic, subscribes the feed's listener,
    steps until `stop`, then commits the share's watermarks and stops the consumer within
    `leave_step_s`."""
    worker = FakeWorker(live=True)
    consumer = FakeConsumer(owned={P0}, positions={P0: 8})
    feed = make_feed(worker, None, commit_every_s=3600.0, leave_step_s=2.5)
    glue = Glue(consumer)
    glue.install(monkeypatch)

    async def observe(records: list[Observed]) -> None:
        worker.calls.append(("observe", records))
        feed.stop.set()

    worker.observe = observe  # type: ignore[method-assign]
    consumer.fetches = [{P0: [msg(decision("op-a", S.STREAMING), 7)]}]
    feed._last_commit = time.monotonic()  # the steps commit nothing: the one commit is the leave's
    async with asyncio.timeout(5):
        await feed.run()
    [(make, kwargs)] = glue.started
    where = {"bootstrap": "kafka:9092", "topic": TOPIC, "backoff": NO_WAIT, "stop": feed.stop}
    assert make == feed._new_consumer and kwargs == where and glue.stepped == [where]
    assert consumer.calls[0] == ("subscribe", [TOPIC], "_Rebalances", feed)
    assert of(consumer.calls, "commit", "stop") == [("commit", {P0: OffsetAndMetadata(7, "")}), ("stop",)]
    assert glue.closed == [(consumer, 2.5)]


async def test_run_ends_quietly_when_stopped_while_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stop` before the consumer started (StopRequested): `run` returns, with nothing to leave."""
    feed = make_feed(FakeWorker())
    glue = Glue(FakeConsumer(), refuse_start=True)
    glue.install(monkeypatch)
    await feed.run()
    assert feed.consumer is None and glue.closed == [] and glue.stepped == []


async def test_leaving_gives_a_hanging_commit_leave_step_s_then_stops_the_consumer() -> None:
    """A last commit that never answers is abandoned after `leave_step_s`; the consumer still stops."""
    consumer = FakeConsumer(owned={P0}, positions={P0: 2}, commit_hangs=True)
    feed = make_feed(FakeWorker(), consumer, leave_step_s=0.05)
    async with asyncio.timeout(5):
        await feed._leave(consumer)
    assert of(consumer.calls, "commit", "stop") == [("stop",)]


async def test_leaving_stops_the_consumer_even_if_the_last_commit_fails() -> None:
    """A failed last commit costs the next owner a few records read again; the consumer still stops."""
    consumer = FakeConsumer(owned={P0}, positions={P0: 2}, commit_error=RuntimeError("gone"))
    feed = make_feed(FakeWorker(), consumer)
    await feed._leave(consumer)
    assert of(consumer.calls, "commit", "stop") == [("stop",)]


async def test_a_partition_revoked_while_its_position_is_awaited_is_left_alone() -> None:
    """aiokafka runs the rebalance callback while `_caught_up` awaits a position: the partition it
    revokes leaves `catching_up` mid-walk. The walk used to iterate the dict itself (RuntimeError:
    dictionary changed size) and to ask the position of a partition no longer assigned (aiokafka's
    IllegalStateError): either ended the manifest feed, which is not an outage it waits out."""
    worker = FakeWorker(live=True)
    consumer = FakeConsumer(owned={P0, P1}, positions={P0: 5, P1: 9})
    feed = make_feed(worker, consumer)
    feed.catching_up = {P0: 5, P1: 9}
    feed.keys = {P0: {A}, P1: {B}}
    asked: list[TopicPartition] = []

    async def position(tp: TopicPartition) -> int:
        asked.append(tp)
        if tp == P0:  # the group revokes P1 while P0's position is awaited
            consumer.owned.discard(P1)
            await feed.release({P1})
        return consumer.positions[tp]

    consumer.position = position  # type: ignore[method-assign]
    await feed._caught_up()
    assert asked == [P0] and feed.catching_up == {}
    assert of(worker.calls, "take", "release") == [("release", {B}), ("take", {A})]
