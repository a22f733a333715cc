"""`Projector.apply` and what it stands on (`projections/projector.py`): records decoded or kept as
undecodable, one script call per slot group sent at once and guarded by the group's epoch, the records
each call applied handed to `on_applied` and counted (stats, live metrics) in group order, the marks
left out, a group's failure classified and raised after the others' applied records are counted, the
applied offsets and start positions read from Redis. No Redis: `projector_fakes.ScriptRedis` keeps the
script's offsets rule; what the script writes is tested on a real Redis in `tests/integration/projections`."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import REGISTRY
from pydantic import BaseModel
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.unit.projections.projector_fakes import Clock, ScriptRedis, offsets_of, raw
from turnledger.codec import CodecError, decode, encode
from turnledger.errors import RedisUnavailableError
from turnledger.model.events import PreviewRetracted, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.projections import projector as module
from turnledger.projections.applier import EpochChangedError
from turnledger.projections.keys import ProjectionKeys, shard_of
from turnledger.projections.plan import BatchPlan, DecodedRecord
from turnledger.projections.projector import (
    Projector,
    ProjectorStats,
    _count,
    applied_offsets,
    decode_record,
    redis_outage,
)
from turnledger.redisconn.refusals import classify
from turnledger.topology import Stream, Topics

TOPICS = Topics("t-")
REJ, PREV = TOPICS.rejections, TOPICS.previews
KEYS = ProjectionKeys("tl:")
SPLIT = ProjectionKeys("tl:", one_slot=True, shards=3)
URL = "redis://cache.test:6390/2"
GARBAGE = b"\xc3\x01not avro"


class Halt(BaseException):
    """Not an `Exception`: what `apply` must raise at once, as a cancellation."""


def rejected(conversation_id: str, offset: int, partition: int = 0) -> Any:
    record = Rejected(conversation_id=conversation_id, reason=ReasonCode.ORPHANED_RESULT, occurred_at_ms=1)
    return raw(REJ, offset, encode(record), partition)


def retracted(conversation_id: str, offset: int) -> Any:
    record = PreviewRetracted(
        conversation_id=conversation_id, operation_id="op-1", attempt_generation=1,
        reason=ReasonCode.STREAM_DISCONNECTED, occurred_at_ms=offset,
    )  # fmt: skip
    return raw(PREV, offset, encode(record))


def seen(batches: list[list[DecodedRecord]]) -> list[list[tuple[str, int, str | None]]]:
    """Each `on_applied` call as (stream, offset, conversation or None when undecodable)."""
    return [
        [(d.stream, d.offset, getattr(d.record, "conversation_id", None)) for d in batch] for batch in batches
    ]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Metrics:
    """The projector's live metrics now, to compare with later (`delta`)."""

    NAMES = [
        ("turnledger_projector_records_total", {"stream": s, "outcome": o})
        for s in ("rejections", "previews")
        for o in ("applied", "skipped")
    ] + [
        ("turnledger_projector_undecodable_records_total", {}),
        ("turnledger_projector_apply_seconds_count", {}),
        ("turnledger_projector_apply_seconds_sum", {}),
    ]

    def __init__(self) -> None:
        self.before = self.now()

    def now(self) -> list[float]:
        return [sample(name, **labels) for name, labels in self.NAMES]

    def delta(self) -> dict[str, float]:
        """What moved, as `rejections/applied`, `undecodable`, `seconds_count`, `seconds_sum`."""
        short = ["rejections/applied", "rejections/skipped", "previews/applied", "previews/skipped"]
        short += ["undecodable", "seconds_count", "seconds_sum"]
        moved = {k: round(b - a, 6) for k, a, b in zip(short, self.before, self.now(), strict=True)}
        return {k: v for k, v in moved.items() if v}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(module, "time", clock)
    return clock


def projector(redis: ScriptRedis, keys: ProjectionKeys = KEYS, **kw: Any) -> Projector:
    return Projector(redis, "kafka.test:9092", TOPICS, keys, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- decoding


def test_a_record_decodes_into_its_stream_and_coordinates() -> None:
    record = Rejected(conversation_id="c1", reason=ReasonCode.ORPHANED_RESULT)
    assert decode_record(Stream.REJECTIONS, raw(REJ, 7, encode(record), partition=3)) == DecodedRecord(
        Stream.REJECTIONS, REJ, 3, 7, record, None
    )


def test_a_record_without_a_value_is_kept_undecoded_and_said_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    assert decode_record(Stream.PREVIEWS, raw(PREV, 9, None, partition=2)) == DecodedRecord(
        Stream.PREVIEWS, PREV, 2, 9, None, "record without a value"
    )
    assert caplog.records == []


def test_an_undecodable_record_is_kept_with_the_codecs_words_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(CodecError) as refused:
        decode(GARBAGE)
    words = str(refused.value)
    caplog.set_level(logging.DEBUG)
    assert decode_record(Stream.COMMITTED, raw("t-c", 12, GARBAGE, partition=4)) == DecodedRecord(
        Stream.COMMITTED, "t-c", 4, 12, None, words
    )
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("turnledger.projections.projector", logging.WARNING, f"undecodable record t-c:4@12: {words}")
    ]


def test_a_model_that_is_no_turnledger_record_is_kept_undecoded(monkeypatch: pytest.MonkeyPatch) -> None:
    class Stranger(BaseModel):
        pass

    monkeypatch.setattr(module, "decode", lambda value: Stranger())
    assert decode_record(Stream.MANIFESTS, raw("t-m", 3, b"x", partition=1)) == DecodedRecord(
        Stream.MANIFESTS, "t-m", 1, 3, None, "decoded a Stranger, which is not a turnledger record"
    )


# ------------------------------------------------------------------------------------------ the stats


def test_stats_start_at_zero_each_with_its_own_streams() -> None:
    a, b = ProjectorStats(), ProjectorStats()
    assert (a.batches, a.applied, a.skipped, a.undecodable, a.seconds, a.by_stream) == (0, 0, 0, 0, 0.0, {})
    assert a.by_stream is not b.by_stream
    assert ProjectorStats(applied=3, skipped=4).records == 7


def test_the_live_counts_name_only_what_a_batch_had() -> None:
    """`_count` touches no series of an outcome that counts nothing (a series at 0 is still shown)."""
    fresh, other = f"s-{uuid.uuid4().hex}", f"s-{uuid.uuid4().hex}"
    one = DecodedRecord(fresh, "t", 0, 1, None, "bad")
    two = DecodedRecord(other, "t", 0, 2, None, "bad")
    undecodable = sample("turnledger_projector_undecodable_records_total")
    _count([one, two], [one])
    counted = {
        (stream, outcome): REGISTRY.get_sample_value(
            "turnledger_projector_records_total", {"stream": stream, "outcome": outcome}
        )
        for stream in (fresh, other)
        for outcome in ("applied", "skipped")
    }
    assert counted == {
        (fresh, "applied"): 1.0,
        (fresh, "skipped"): None,
        (other, "applied"): None,
        (other, "skipped"): 1.0,
    }
    assert sample("turnledger_projector_undecodable_records_total") == undecodable + 1
    _count([two], [])  # undecodable but skipped: counted once, when applied
    assert sample("turnledger_projector_undecodable_records_total") == undecodable + 1


# ------------------------------------------------------------------------------------- the projector


def test_a_projector_starts_unfollowing_with_its_planners_and_script() -> None:
    redis = ScriptRedis()
    made = projector(redis, SPLIT)
    assert made.redis is redis  # type: ignore[comparison-overlap]
    assert made.bootstrap == "kafka.test:9092" and made.keys is SPLIT
    assert made.streams == {
        TOPICS.committed: Stream.COMMITTED, TOPICS.manifests: Stream.MANIFESTS,
        TOPICS.quarantine: Stream.QUARANTINE, PREV: Stream.PREVIEWS, REJ: Stream.REJECTIONS,
    }  # fmt: skip
    assert [p.keys for p in made.planners] == list(SPLIT.groups)
    assert made.applier.redis is redis and made.applier._sha is None  # type: ignore[comparison-overlap]
    assert (made.batch_size, made.before_apply, made.on_applied) == (1000, None, None)
    assert (made.adopt_layout, made.follower, made.epoch) == (False, None, None)
    assert made.readiness() == "not following the topics"

    def hook(plan: BatchPlan) -> Any:
        raise AssertionError

    told = projector(redis, KEYS, batch_size=5, before_apply=hook, on_applied=print, adopt_layout=True)
    assert (told.batch_size, told.before_apply, told.on_applied, told.adopt_layout) == (5, hook, print, True)
    assert [p.keys for p in told.planners] == [KEYS]


async def test_a_batch_is_one_script_call_and_counts_what_it_applied(clock: Clock) -> None:
    redis = ScriptRedis(clock)
    redis.hold(KEYS.offsets, **{f"{REJ}_0": 4})
    applied: list[list[DecodedRecord]] = []
    made = projector(redis, on_applied=applied.append)
    stats = ProjectorStats(batches=2, applied=10, skipped=1, undecodable=1, by_stream={Stream.REJECTIONS: 5})
    metrics = Metrics()
    batch = [rejected("c1", 4), rejected("c2", 5), raw(REJ, 6, GARBAGE), retracted("c1", 0)]
    await made.apply(batch, stats)

    assert offsets_of(redis.calls) == [[f"{REJ}:0@4", f"{REJ}:0@5", f"{REJ}:0@6", f"{PREV}:0@0"]]
    assert [(call[0], call[3]) for call in redis.calls] == [(KEYS.offsets, ())]  # no epoch: unguarded
    assert seen(applied) == [[("rejections", 5, "c2"), ("rejections", 6, None), ("previews", 0, "c1")]]
    assert applied[0][1] == decode_record(Stream.REJECTIONS, batch[2])
    assert stats == ProjectorStats(
        batches=3, applied=13, skipped=2, undecodable=2, by_stream={Stream.REJECTIONS: 8, Stream.PREVIEWS: 1}
    )
    assert metrics.delta() == {
        "rejections/applied": 2, "rejections/skipped": 1, "previews/applied": 1, "undecodable": 1,
        "seconds_count": 1, "seconds_sum": 0.25,
    }  # fmt: skip

    metrics = Metrics()
    await made.apply(batch, stats)  # delivered again: all applied before
    assert seen(applied)[1:] == [[]]
    assert (stats.batches, stats.applied, stats.skipped, stats.undecodable) == (4, 13, 6, 3)
    assert stats.by_stream == {Stream.REJECTIONS: 11, Stream.PREVIEWS: 2}
    assert metrics.delta() == {
        "rejections/skipped": 3, "previews/skipped": 1, "seconds_count": 1, "seconds_sum": 0.25,
    }  # fmt: skip


async def test_without_on_applied_a_batch_is_counted_alone() -> None:
    redis = ScriptRedis()
    stats = ProjectorStats()
    await projector(redis).apply([rejected("c1", 0)], stats)
    assert (stats.batches, stats.applied, stats.by_stream) == (1, 1, {Stream.REJECTIONS: 1})


def by_group(*conversations: str) -> list[int]:
    return [shard_of(c, 3) for c in conversations]


async def split_projector(
    redis: ScriptRedis, applied: list[list[DecodedRecord]], epochs: tuple[str, ...] = ("e0", "e1", "e2")
) -> Projector:
    for group, epoch in zip(SPLIT.groups, epochs, strict=True):
        redis.hold(group.offsets, epoch)
    made = projector(redis, SPLIT, on_applied=applied.append)
    made.epoch = ",".join(epochs)
    return made


#: c1 and c4 live in group 2, c0 in group 0, c2 in group 1
SPLIT_BATCH = [
    rejected("c1", 10), rejected("c0", 11), rejected("c2", 12), rejected("c4", 13), raw(REJ, 14, GARBAGE),
]  # fmt: skip
#: what groups 0 and 2 apply of it, in that order
GROUPS_0_AND_2 = [
    ("rejections", 11, "c0"), ("rejections", 14, None), ("rejections", 10, "c1"), ("rejections", 13, "c4"),
]  # fmt: skip


async def test_a_split_projection_applies_one_call_per_group_each_under_its_epoch(clock: Clock) -> None:
    assert by_group("c0", "c2", "c1", "c4") == [0, 1, 2, 2]
    redis, applied = ScriptRedis(clock), list[list[DecodedRecord]]()
    made = await split_projector(redis, applied)
    stats, metrics = ProjectorStats(), Metrics()
    await made.apply(SPLIT_BATCH, stats)

    mark = f"{REJ}:0@14"  # every group moves to the batch's last offset
    guarded = [(g.offsets, (f"e{i}",)) for i, g in enumerate(SPLIT.groups)]
    assert [(call[0], call[3]) for call in redis.calls] == guarded
    assert offsets_of(redis.calls) == [
        [f"{REJ}:0@11", f"{REJ}:0@14", mark],
        [f"{REJ}:0@12", mark],
        [f"{REJ}:0@10", f"{REJ}:0@13", mark],
    ]
    # in group order, each group's in batch order; the marks are no records
    assert seen(applied) == [
        [("rejections", 11, "c0"), ("rejections", 14, None), ("rejections", 12, "c2"),
         ("rejections", 10, "c1"), ("rejections", 13, "c4")],
    ]  # fmt: skip
    assert (stats.batches, stats.applied, stats.skipped, stats.undecodable) == (1, 5, 0, 1)
    assert metrics.delta() == {
        "rejections/applied": 5,
        "undecodable": 1,
        "seconds_count": 3,
        "seconds_sum": 0.75,
    }
    assert [redis.applied(g.offsets) for g in SPLIT.groups] == [{f"{REJ}:0": 14}] * 3


async def test_what_other_groups_applied_is_counted_before_a_groups_failure_is_raised(clock: Clock) -> None:
    redis, applied = ScriptRedis(clock), list[list[DecodedRecord]]()
    made = await split_projector(redis, applied)
    gone = RedisConnectionError("Connection reset by peer")
    redis.failures[SPLIT.groups[1].offsets] = gone
    stats, metrics = earlier_stats(), Metrics()
    with pytest.raises(RedisUnavailableError) as raised:
        await made.apply(SPLIT_BATCH, stats)
    assert raised.value.__cause__ is gone
    assert str(raised.value) == str(classify(gone, redis))  # type: ignore[arg-type]
    assert URL in str(raised.value)
    assert seen(applied) == [GROUPS_0_AND_2]
    assert metrics.delta() == {
        "rejections/applied": 4, "rejections/skipped": 1, "undecodable": 1,
        "seconds_count": 2, "seconds_sum": 0.5,
    }  # fmt: skip
    assert stats == earlier_stats()  # the batch did not go through: it is delivered again
    assert len(redis.calls) == 3  # every group was sent its call


def earlier_stats() -> ProjectorStats:
    return ProjectorStats(batches=1, applied=2, skipped=3, undecodable=4, by_stream={Stream.PREVIEWS: 5})


async def test_of_several_failed_groups_the_first_groups_failure_is_raised_as_it_is() -> None:
    redis, applied = ScriptRedis(), list[list[DecodedRecord]]()
    made = await split_projector(redis, applied)
    first, second = ValueError("first"), ValueError("second")
    redis.failures[SPLIT.groups[0].offsets] = first
    redis.failures[SPLIT.groups[2].offsets] = second
    with pytest.raises(ValueError) as raised:
        await made.apply(SPLIT_BATCH, ProjectorStats())
    assert raised.value is first and raised.value.__cause__ is None
    assert seen(applied) == [[("rejections", 12, "c2")]]


async def test_a_group_whose_epoch_changed_applies_nothing_and_is_raised() -> None:
    redis, applied = ScriptRedis(), list[list[DecodedRecord]]()
    made = await split_projector(redis, applied)
    redis.hold(SPLIT.groups[0].offsets, "restarted")
    stats = ProjectorStats()
    with pytest.raises(EpochChangedError) as raised:
        await made.apply(SPLIT_BATCH, stats)
    assert str(raised.value) == str(EpochChangedError("e0"))
    assert redis.applied(SPLIT.groups[0].offsets) == {}
    assert seen(applied) == [[("rejections", 12, "c2"), ("rejections", 10, "c1"), ("rejections", 13, "c4")]]
    assert stats == ProjectorStats()


async def test_an_epoch_for_another_number_of_groups_is_refused_before_any_call() -> None:
    redis, applied = ScriptRedis(), list[list[DecodedRecord]]()
    made = await split_projector(redis, applied)
    made.epoch = "e0,e1"
    with pytest.raises(Exception, match="names 2 groups, the projection has 3"):
        await made.apply(SPLIT_BATCH, ProjectorStats())
    assert (redis.calls, applied) == ([], [])


async def test_a_group_stopped_by_what_is_no_exception_stops_the_batch_uncounted(clock: Clock) -> None:
    redis, applied = ScriptRedis(clock), list[list[DecodedRecord]]()
    made = await split_projector(redis, applied)
    redis.failures[SPLIT.groups[0].offsets] = ValueError("first")
    redis.failures[SPLIT.groups[1].offsets] = Halt()
    stats, metrics = ProjectorStats(), Metrics()
    with pytest.raises(Halt):
        await made.apply(SPLIT_BATCH, stats)
    assert (applied, stats) == ([], ProjectorStats())
    assert metrics.delta() == {"seconds_count": 1, "seconds_sum": 0.25}  # group 2's call, not counted


async def test_before_apply_sees_each_groups_plan_before_its_call_and_may_stop_it() -> None:
    redis, applied = ScriptRedis(), list[list[DecodedRecord]]()
    made = await split_projector(redis, applied)
    plans: list[BatchPlan] = []
    calls_before: list[int] = []

    class Crash(Exception):
        pass

    async def before(plan: BatchPlan) -> None:
        plans.append(plan)
        calls_before.append(len(redis.calls))
        if len(plans) == 2:
            raise Crash("killed before EVALSHA")

    made.before_apply = before
    with pytest.raises(Crash):
        await made.apply(SPLIT_BATCH, ProjectorStats())
    assert [plan.keys[0] for plan in plans] == [g.offsets for g in SPLIT.groups]
    assert calls_before == [0, 1, 1]  # each group's hook runs before its own call
    assert [call[0] for call in redis.calls] == [SPLIT.groups[0].offsets, SPLIT.groups[2].offsets]
    assert [call[2] for call in redis.calls] == [plans[0].groups, plans[2].groups]
    assert seen(applied) == [GROUPS_0_AND_2]


async def test_an_error_that_is_no_redis_failure_is_raised_as_it_is() -> None:
    redis = ScriptRedis()
    broken = TypeError("not a redis failure")
    redis.failures[KEYS.offsets] = broken
    with pytest.raises(TypeError) as raised:
        await projector(redis).apply([rejected("c1", 0)], ProjectorStats())
    assert raised.value is broken and raised.value.__cause__ is None


# ------------------------------------------------------------------------------- offsets and positions


class FailingRedis(ScriptRedis):
    def __init__(self, failure: BaseException) -> None:
        super().__init__()
        self.failure = failure

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        raise self.failure


async def test_the_applied_offsets_are_the_lowest_of_the_groups() -> None:
    redis = ScriptRedis()
    redis.hold(SPLIT.groups[0].offsets, "e0", a_0=4, a_1=9)
    redis.hold(SPLIT.groups[1].offsets, "e1", a_0=6, a_1=2)
    redis.hold(SPLIT.groups[2].offsets, "e2", a_0=5, a_1=3, b_0=1)
    assert await applied_offsets(redis, SPLIT) == {"a:0": 4, "a:1": 2}  # type: ignore[arg-type]


async def test_a_redis_that_cannot_be_read_is_an_outage_and_other_errors_are_raised_as_they_are() -> None:
    gone = RedisConnectionError("Connection refused")
    redis = FailingRedis(gone)
    with pytest.raises(RedisUnavailableError) as raised:
        await applied_offsets(redis, KEYS)  # type: ignore[arg-type]
    assert raised.value.__cause__ is gone
    assert str(raised.value) == str(classify(gone, redis))  # type: ignore[arg-type]
    assert str(raised.value) == str(redis_outage(redis)(gone))  # type: ignore[arg-type]
    broken = KeyError("not a redis failure")
    with pytest.raises(KeyError) as other:
        await applied_offsets(FailingRedis(broken), KEYS)  # type: ignore[arg-type]
    assert other.value is broken and other.value.__cause__ is None


async def test_partitions_start_after_their_applied_offset_or_at_the_beginning() -> None:
    redis = ScriptRedis()
    redis.hold(KEYS.offsets, "e0", a_0=0, a_1=7, c_0=3)
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    assert await projector(redis).start_positions([a0, a1, b0]) == {a0: 1, a1: 8}
    for i, group in enumerate(SPLIT.groups):  # split: after the lowest each group applied
        redis.hold(group.offsets, f"e{i}", a_0=4 + i, a_1=9 - i)
    assert await projector(redis, SPLIT).start_positions([a0, a1, b0]) == {a0: 5, a1: 8}
    with pytest.raises(RedisUnavailableError):
        await projector(FailingRedis(RedisConnectionError("Connection refused"))).start_positions([a0])
