"""How a projector starts and runs (`projections/projector.py`): `prepare` loads the script and records,
checks or adopts how the projection is split; `run_to_end` reads every projected topic from where
Redis stands (or where it is told) to the end under the epochs it read, one call per batch, and closes
its consumer whatever happens; `run_forever` hands the projector to a `Follower`; readiness is the
follower's. No Kafka, no Redis: the Kafka glue `run_to_end` calls is replaced by recording fakes,
Redis by `projector_fakes.ScriptRedis`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition

from tests.unit.projections.projector_fakes import SHA, Clock, ScriptRedis, offsets_of, raw
from tests.unit.projections.test_projector import PREV, REJ, SPLIT, projector, rejected, retracted
from tests.unit.test_kafka_reading import Log
from turnledger.errors import RedisUnavailableError
from turnledger.kafka.reading import read_to_end
from turnledger.projections import follow, keys
from turnledger.projections import projector as module
from turnledger.projections.keys import EPOCH_FIELD, ProjectionKeys
from turnledger.projections.projector import ProjectorStats
from turnledger.projections.settings import FollowSettings
from turnledger.projections.shards import ProjectionLayoutError
from turnledger.records import SourceRecord
from turnledger.retry import Backoff

BOOTSTRAP = "kafka.test:9092"
R0, P0 = TopicPartition(REJ, 0), TopicPartition(PREV, 0)


class Consumer:
    """What `start_reader` started (the fakes only pass it around)."""


@dataclass
class KafkaGlue:
    clock: Clock
    batches: list[list[SourceRecord]]
    partitions: list[TopicPartition] = field(default_factory=lambda: [R0, P0])
    failure: BaseException | None = None
    """Raised by `read_to_end` after its batches."""
    consumer: Consumer = field(default_factory=Consumer)
    calls: list[tuple[Any, ...]] = field(default_factory=list)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(module, "time", clock)
    return clock


def install(monkeypatch: pytest.MonkeyPatch, glue: KafkaGlue) -> None:
    async def start_reader(*args: Any, **kwargs: Any) -> Consumer:
        glue.calls.append(("start_reader", args, kwargs))
        glue.clock.now += 2.0  # starting takes a while
        return glue.consumer

    async def partitions_of(*args: Any) -> list[TopicPartition]:
        glue.calls.append(("partitions_of", *args))
        return list(glue.partitions)

    async def read_to_end(*args: Any) -> AsyncIterator[list[SourceRecord]]:
        glue.calls.append(("read_to_end", *args))
        for batch in glue.batches:
            yield batch
        if glue.failure is not None:
            raise glue.failure

    async def close_client(*args: Any, **kwargs: Any) -> None:
        glue.calls.append(("close_client", args, kwargs))

    for name, fake in [
        ("start_reader", start_reader),
        ("partitions_of", partitions_of),
        ("read_to_end", read_to_end),
        ("close_client", close_client),
    ]:
        monkeypatch.setattr(module, name, fake)


@pytest.fixture
def cluster_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `ScriptRedis` counts as a cluster's client (`discover` makes one-slot keys for it)."""
    monkeypatch.setattr(keys, "is_cluster", lambda client: isinstance(client, ScriptRedis))


# ------------------------------------------------------------------------------------------- prepare


async def test_prepare_loads_the_script_and_records_how_the_projection_is_split() -> None:
    redis = ScriptRedis()
    made = projector(redis, SPLIT)
    await made.prepare()
    assert (redis.loads, made.applier._sha, redis.strings) == (1, SHA, {"{tl:}layout": b"3"})
    assert made.keys is SPLIT
    redis.strings.clear()  # a node that held it came back empty
    await made.keep_layout()
    assert redis.strings == {"{tl:}layout": b"3"}
    assert redis.loads == 1


async def test_a_projector_split_otherwise_than_redis_holds_it_is_refused_unless_it_adopts_it() -> None:
    redis = ScriptRedis()
    redis.strings["tl:layout"] = b"3"
    made = projector(redis)
    with pytest.raises(ProjectionLayoutError) as refused:
        await made.prepare()
    assert str(refused.value) == str(ProjectionLayoutError("tl:", 3, 1))
    assert redis.loads == 1  # the script first
    with pytest.raises(ProjectionLayoutError):
        await made.keep_layout()


@pytest.mark.usefixtures("cluster_client")
async def test_an_adopting_projector_takes_the_split_redis_holds() -> None:
    redis = ScriptRedis()
    redis.strings["{gw:}layout"] = b"3"
    made = projector(redis, ProjectionKeys("gw:", one_slot=True, shards=2), adopt_layout=True)
    await made.prepare()
    held = ProjectionKeys("gw:", one_slot=True, shards=3)
    assert made.keys == held and made.keys.groups == held.groups
    assert [p.keys for p in made.planners] == list(held.groups)
    assert (redis.loads, redis.strings) == (1, {"{gw:}layout": b"3"})

    # as Redis holds it already: nothing is replaced
    adopted, planners = made.keys, made.planners
    await made.prepare()
    assert made.keys is adopted and made.planners is planners

    # an empty Redis holds one group: adopted, and no layout written
    empty = ScriptRedis()
    made = projector(empty, SPLIT, adopt_layout=True)
    await made.prepare()
    one = ProjectionKeys("tl:", one_slot=True)
    assert (made.keys, [p.keys for p in made.planners], empty.strings) == (one, [one], {})


# ---------------------------------------------------------------------------------------- run_to_end


async def test_run_to_end_reads_every_projected_topic_from_redis_under_the_epoch_it_read(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    redis = ScriptRedis(clock)
    redis.hold("tl:offsets", "e7", **{f"{REJ}_0": 4})
    glue = KafkaGlue(clock, [[rejected("c1", 5), rejected("c2", 6)], [retracted("c1", 0)]])
    install(monkeypatch, glue)
    made = projector(redis, batch_size=5)
    stats = await made.run_to_end()

    consumer = glue.consumer
    assert glue.calls == [
        ("start_reader", (BOOTSTRAP,), {"action": "project the output topics"}),
        ("partitions_of", consumer, BOOTSTRAP, made.streams),
        ("read_to_end", consumer, [R0, P0], {R0: 5}, 5, None),
        ("close_client", (consumer,), {}),
    ]
    assert (redis.loads, made.epoch) == (1, "e7")
    assert [call[3] for call in redis.calls] == [("e7",), ("e7",)]
    assert offsets_of(redis.calls) == [[f"{REJ}:0@5", f"{REJ}:0@6"], [f"{PREV}:0@0"]]
    assert (stats.batches, stats.applied, stats.skipped) == (2, 3, 0)
    assert stats.seconds == 2.5  # the reader's start and the two script calls


async def test_run_to_end_starts_where_it_is_told_and_makes_the_epochs_of_an_empty_redis(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    redis = ScriptRedis(clock)
    for group in SPLIT.groups:
        redis.hold(group.offsets, None, **{f"{REJ}_0": 9})
    glue = KafkaGlue(clock, [[rejected("c0", 3)]])
    install(monkeypatch, glue)
    made = projector(redis, SPLIT)
    start = {R0: 0}
    stats = await made.run_to_end(start)

    assert glue.calls[2] == ("read_to_end", glue.consumer, [R0, P0], {R0: 0}, 1000, None)
    tokens = [redis.hashes[g.offsets][EPOCH_FIELD.encode()].decode() for g in SPLIT.groups]
    assert len(set(tokens)) == 3 and all(len(t) == 16 for t in tokens)
    assert made.epoch == ",".join(tokens)
    assert [call[3] for call in redis.calls] == [(t,) for t in tokens]
    assert (stats.batches, stats.applied, stats.skipped) == (1, 0, 1)  # applied before
    assert stats.seconds == 2.75


async def test_run_to_end_tells_the_offsets_applied_of_the_lag_when_it_began(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    """Over the real `read_to_end` on a consumer in memory: Redis has applied the rejections up to 4,
    so the lag is 2 of them (5, 6) and 3 previews (0-2); each count is told once its batches are
    applied, and the last is the lag: caught up."""
    redis = ScriptRedis(clock)
    redis.hold("tl:offsets", "e7", **{f"{REJ}_0": 4})
    glue = KafkaGlue(clock, [])
    install(monkeypatch, glue)
    monkeypatch.setattr(module, "read_to_end", read_to_end)
    consumer = Log({R0: [3, 4, 5, 6], P0: [0, 1, 2]}, {R0: 3, P0: 0}, per_fetch=2)
    glue.consumer = consumer  # type: ignore[assignment]
    told: list[tuple[int, int, int]] = []
    stats = await projector(redis).run_to_end(
        progress=lambda done, total: told.append((done, total, len(redis.calls)))
    )
    assert told == [(0, 5, 0), (4, 5, 2), (5, 5, 3)]
    assert offsets_of(redis.calls) == [
        [f"{PREV}:0@0", f"{PREV}:0@1"], [f"{REJ}:0@5", f"{REJ}:0@6"], [f"{PREV}:0@2"],
    ]  # fmt: skip
    assert (stats.batches, stats.applied) == (3, 5)


async def test_run_to_end_closes_its_consumer_when_a_read_fails(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    redis = ScriptRedis(clock)
    broken = RuntimeError("the broker went away")
    glue = KafkaGlue(clock, [[rejected("c1", 0)]], failure=broken)
    install(monkeypatch, glue)
    with pytest.raises(RuntimeError) as raised:
        await projector(redis).run_to_end()
    assert raised.value is broken
    assert glue.calls[-1] == ("close_client", (glue.consumer,), {})
    assert redis.applied("tl:offsets") == {f"{REJ}:0": 0}


async def test_run_to_end_closes_its_consumer_when_a_batch_fails(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    redis = ScriptRedis(clock)
    glue = KafkaGlue(clock, [[raw(REJ, 0, b"x")], [rejected("c1", 1)]])
    install(monkeypatch, glue)
    made = projector(redis)
    broken = ValueError("no script")
    redis.failures["tl:offsets"] = broken
    with pytest.raises(ValueError) as raised:
        await made.run_to_end()
    assert raised.value is broken
    assert [c[0] for c in glue.calls] == ["start_reader", "partitions_of", "read_to_end", "close_client"]
    assert len(redis.calls) == 1


# ------------------------------------------------------------------------------------------ following


class FakeFollower:
    made: list[FakeFollower] = []

    def __init__(self, projector: Any, settings: FollowSettings, diagnosed: Any) -> None:
        self.projector, self.settings, self.diagnosed = projector, settings, diagnosed
        self.ran: tuple[Any, ...] = ()
        self.stats = ProjectorStats(batches=4)
        FakeFollower.made.append(self)

    async def run(self, stop: asyncio.Event, report: Any) -> ProjectorStats:
        self.ran = (stop, report)
        return self.stats

    def readiness(self) -> str | None:
        return "positioning 2 partitions"


async def test_run_forever_hands_the_projector_to_a_follower(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "Follower", FakeFollower)
    FakeFollower.made = []
    made = projector(ScriptRedis())
    stats = await made.run_forever()
    [follower] = FakeFollower.made
    assert made.follower is follower  # type: ignore[comparison-overlap]
    assert follower.projector is made and stats is follower.stats
    assert (follower.settings, follower.diagnosed) == (FollowSettings(), None)
    stop, report = follower.ran
    assert isinstance(stop, asyncio.Event) and not stop.is_set() and report is None
    assert made.readiness() == "positioning 2 partitions"

    told_stop = asyncio.Event()
    settings = FollowSettings(group_id="projectors", outage=Backoff(initial_s=2.0))
    reports: list[ProjectorStats] = []
    outage = RedisUnavailableError("redis://r:1/0", ConnectionError("refused"))
    await made.run_forever(told_stop, reports.append, follow=settings, diagnosed=outage)
    follower = FakeFollower.made[-1]
    assert made.follower is follower and follower.settings is settings and follower.diagnosed is outage
    assert follower.ran == (told_stop, reports.append)
