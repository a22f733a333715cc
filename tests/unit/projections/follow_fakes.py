"""Fakes of what `projections.follow.Follower` uses, so that its loop runs with no Kafka and no Redis.

`Clock` stands for the `time` module the follower reads (its waits advance it, nothing else does);
`FakeConsumer` plays a script of fetches, one step a `getmany`, and sets `stop` when the script is
done; `FakeRedis` holds the offsets hash and records pool disconnects; `FakeProjector` applies a
batch by recording it. `install` swaps the follower's module-level glue (positioning, waits, the
clock) for recording fakes and returns the record of what it was called with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from redis.asyncio import ConnectionPool

from turnledger.projections import follow
from turnledger.projections.follow import Follower
from turnledger.projections.keys import EPOCH_FIELD, ProjectionKeys
from turnledger.projections.projector import ProjectorStats
from turnledger.projections.settings import FollowSettings
from turnledger.records import SourceRecord

KEYS = ProjectionKeys("tl:")
BOOTSTRAP = "kafka.test:9092"
REDIS_URL = "redis://cache.test:6390/2"
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Clock:
    """`time.monotonic` and `time.perf_counter`, moved only by the fakes' waits."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now


class RecordingPool(ConnectionPool):
    def __init__(self) -> None:
        super().__init__(host="cache.test", port=6390, db=2)
        self.disconnects = 0

    async def disconnect(self, inuse_connections: bool = True) -> None:
        self.disconnects += 1


class FakeRedis:
    """The offsets hash (`applied`), read by HGETALL; its pool records disconnects."""

    def __init__(self, applied: dict[str, int] | None = None) -> None:
        self.applied = dict(applied or {})
        self.connection_pool = RecordingPool()
        self.reads = 0

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        assert key == KEYS.offsets
        self.reads += 1
        return {EPOCH_FIELD.encode(): b"e1", **{k.encode(): str(v).encode() for k, v in self.applied.items()}}


Step = (
    dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] | BaseException | Callable[[], Awaitable[None]]
)
"""One `getmany`: what it returns, what it raises, or what it runs first (a rebalance) before
returning nothing."""


@dataclass
class FakeConsumer:
    clock: Clock
    stop: asyncio.Event
    steps: list[Step] = field(default_factory=list)
    tps: set[TopicPartition] = field(default_factory=set)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    follower: Follower | None = None
    """When set, its readiness is recorded at every fetch (`ready`)."""
    ready: list[str | None] = field(default_factory=list)
    idle_s: float = 0.5
    """How long an empty fetch takes (its long poll)."""
    listener: follow._Rebalances | None = None

    def assignment(self) -> set[TopicPartition]:
        return set(self.tps)

    def pause(self, tp: TopicPartition) -> None:
        self.calls.append(("pause", tp))

    def resume(self, tp: TopicPartition) -> None:
        self.calls.append(("resume", tp))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("assign", partitions))
        self.tps = set(partitions)

    def subscribe(self, topics: list[str], *, listener: follow._Rebalances) -> None:
        self.calls.append(("subscribe", topics, listener))
        self.listener = listener

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        self.calls.append(("getmany", timeout_ms, max_records))
        if self.follower is not None:
            self.ready.append(self.follower.readiness())
        if not self.steps:
            self.stop.set()
            return {}
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            await step()
            step = {}
        if not step:
            self.clock.now += self.idle_s
        return step


def message(tp: TopicPartition, offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        timestamp=1_700_000_000_000 + offset,
        timestamp_type=0,
        key=b"k%d" % offset,
        value=b"v%d" % offset,
        checksum=None,
        serialized_key_size=2,
        serialized_value_size=2,
        headers=(),
    )


def source(tp: TopicPartition, offset: int) -> SourceRecord:
    """What `message(tp, offset)` is to the projector."""
    return SourceRecord(
        tp.topic, tp.partition, offset, b"k%d" % offset, b"v%d" % offset, 1_700_000_000_000 + offset
    )


class FakeApplier:
    def __init__(self) -> None:
        self.loads = 0

    async def load(self) -> str:
        self.loads += 1
        return "sha"


class FakeProjector:
    """What the follower asks of `Projector`: `apply` records each batch and moves the offsets in
    Redis, or raises the next of `failures` (None: apply that batch)."""

    bootstrap = BOOTSTRAP
    keys = KEYS
    batch_size = 7

    def __init__(self, redis: FakeRedis) -> None:
        self.redis = redis
        self.streams = {"a": "stream-a", "b": "stream-b"}
        self.epoch: str | None = None
        self.layouts_kept = 0
        self.applier = FakeApplier()
        self.batches: list[list[SourceRecord]] = []
        self.failures: list[BaseException | None] = []
        self.asked: list[list[TopicPartition]] = []

    async def prepare(self) -> None:
        await self.applier.load()

    async def keep_layout(self) -> None:
        self.layouts_kept += 1

    async def apply(self, raw: Sequence[SourceRecord], stats: ProjectorStats) -> None:
        if self.failures:
            failure = self.failures.pop(0)
            if failure is not None:
                raise failure
        self.batches.append(list(raw))
        for record in raw:  # the script moves the offsets with the batch
            field = f"{record.topic}:{record.partition}"
            self.redis.applied[field] = max(self.redis.applied.get(field, -1), record.offset)
        stats.batches += 1
        stats.applied += len(raw)

    async def start_positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        self.asked.append(list(partitions))
        positions = {}
        for tp in partitions:
            offset = self.redis.applied.get(f"{tp.topic}:{tp.partition}")
            if offset is not None:
                positions[tp] = offset + 1
        return positions


@dataclass
class Glue:
    """What the follower's module-level glue was called with."""

    epochs: list[str | BaseException] = field(default_factory=lambda: ["e1"])
    """What each `ensure_epoch` answers (the last one for ever); an exception is raised."""
    ensured: list[tuple[Any, str]] = field(default_factory=list)
    sought: list[tuple[Any, list[TopicPartition], dict[TopicPartition, int]]] = field(default_factory=list)
    waits: list[float | None] = field(default_factory=list)
    """The timeout of every wait between outage retries."""
    ready_in_wait: list[str | None] = field(default_factory=list)


def install(
    monkeypatch: pytest.MonkeyPatch, clock: Clock, stop: asyncio.Event, follower: Follower | None = None
) -> Glue:
    """Replace `ensure_epoch`, `seek_all`, the clock and the retry waits in `follow` by recording fakes.

    A retry wait takes its whole timeout on the clock, unless `stop` is already set; the 51st fails
    the test (a follower that retries what it should raise)."""
    glue = Glue()

    async def ensure_epoch(redis: Any, offsets_key: str) -> str:
        glue.ensured.append((redis, offsets_key))
        epoch: str | BaseException = glue.epochs.pop(0) if len(glue.epochs) > 1 else glue.epochs[0]
        if isinstance(epoch, BaseException):
            raise epoch
        return epoch

    async def seek_all(consumer: Any, tps: list[TopicPartition], start: dict[TopicPartition, int]) -> None:
        glue.sought.append((consumer, tps, dict(start)))

    async def wait_for(waited: Any, timeout: float | None) -> None:
        glue.waits.append(timeout)
        assert len(glue.waits) <= 50, "retrying for ever"
        if follower is not None:
            glue.ready_in_wait.append(follower.readiness())
        waited.close()
        if stop.is_set():
            return
        clock.now += timeout or 0.0
        raise TimeoutError

    monkeypatch.setattr(follow, "ensure_epoch", ensure_epoch)
    monkeypatch.setattr(follow, "seek_all", seek_all)
    monkeypatch.setattr(
        follow, "time", SimpleNamespace(monotonic=clock.monotonic, perf_counter=clock.perf_counter)
    )
    monkeypatch.setattr(follow, "asyncio", SimpleNamespace(wait_for=wait_for))
    return glue


def following(
    monkeypatch: pytest.MonkeyPatch,
    *steps: Step,
    applied: dict[str, int] | None = None,
    owned: tuple[TopicPartition, ...] = (A0, A1),
    settings: FollowSettings | None = None,
    now: float = 100.0,
) -> tuple[Follower, FakeConsumer, FakeProjector, Glue]:
    """A follower whose consumer owns `owned`, all positioned, and will fetch `steps`."""
    clock = Clock(now)
    redis = FakeRedis(applied)
    projector = FakeProjector(redis)
    follower = Follower(projector, settings or FollowSettings())  # type: ignore[arg-type]
    follower.rechecks.clock = clock.monotonic
    consumer = FakeConsumer(clock, asyncio.Event(), list(steps), set(owned), follower=follower)
    follower.consumer = consumer
    follower.assigned = True
    glue = install(monkeypatch, clock, consumer.stop, follower)
    return follower, consumer, projector, glue
