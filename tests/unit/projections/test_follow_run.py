"""How a following projector starts, owns its partitions and stops (`follow.Follower.run`): the script
loaded and the consumer started while Redis and Kafka are waited for, every partition assigned when
alone or the group's share through the rebalance listener, positioning, readiness, and the consumer
closed on the way out (a group member leaving within `LEAVE_WITHIN_S`). No Kafka, no Redis: the Kafka
glue `run` calls is replaced by recording fakes (`follow_fakes` for the rest)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.unit.projections.follow_fakes import (
    A0,
    A1,
    B0,
    BOOTSTRAP,
    REDIS_URL,
    Clock,
    FakeConsumer,
    FakeProjector,
    FakeRedis,
    Step,
    following,
    install,
    message,
    source,
)
from turnledger.errors import (
    KafkaUnavailableError,
    RedisSentinelAccessError,
    RedisSentinelUnavailableError,
    RedisUnavailableError,
)
from turnledger.kafka.clients import LEAVE_WITHIN_S
from turnledger.observability import runtime_metrics as live
from turnledger.projections import follow
from turnledger.projections.follow import Follower, _Rebalances
from turnledger.projections.projector import ProjectorStats
from turnledger.projections.settings import FollowSettings
from turnledger.redisconn import sentinel_probe
from turnledger.retry import Backoff, Classify, StopRequested

BACKOFF = Backoff(initial_s=1.0, max_s=4.0, jitter=0.0)
NOT_STARTED = "the consumer has not started (waiting for Kafka or Redis)"
HINT = "the processor creates them: `turnledger process --create-topics N`"


@dataclass
class KafkaGlue:
    """What `run` asked of the Kafka glue (and `ride_out`), in order, with the readiness at each call."""

    clock: Clock
    stop: asyncio.Event
    steps: list[Step]
    partitions: list[TopicPartition] = field(default_factory=lambda: [A0, A1, B0])
    follower: Follower | None = None
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    classifiers: list[Classify] = field(default_factory=list)
    ready: list[str | None] = field(default_factory=list)
    consumer: FakeConsumer | None = None
    load_stops: bool = False
    """The first `ride_out` (the script's load) raises StopRequested, as when `stop` is set meanwhile."""

    def record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        self.ready.append(None if self.follower is None else self.follower.readiness())


def install_kafka(monkeypatch: pytest.MonkeyPatch, glue: KafkaGlue) -> None:
    def consumer_made_by(name: str) -> Callable[..., FakeConsumer]:
        def made(*args: Any, **kwargs: Any) -> FakeConsumer:
            glue.record(name, *args, **kwargs)
            glue.consumer = FakeConsumer(glue.clock, glue.stop, glue.steps, follower=glue.follower)
            return glue.consumer

        return made

    async def start_client(make: Any, **kwargs: Any) -> FakeConsumer:
        glue.record("start_client", make, **kwargs)
        glue.clock.now += 1.5  # starting takes a while
        client: FakeConsumer = make()
        return client

    async def close_client(client: object, within_s: float | None = None) -> None:
        glue.record("close_client", client, within_s)

    async def wait_for_topics(bootstrap: str, topics: list[str], **kwargs: Any) -> None:
        glue.record("wait_for_topics", bootstrap, topics, **kwargs)

    async def ride_out(attempt: Any, *, classify: Classify, **kwargs: Any) -> Any:
        glue.record("ride_out", **kwargs)
        glue.classifiers.append(classify)
        if glue.load_stops:
            raise StopRequested("stop requested while waiting for a dependency")
        return await attempt()

    async def partitions_of(consumer: object, bootstrap: str, topics: object) -> list[TopicPartition]:
        glue.record("partitions_of", consumer, bootstrap, topics)
        return list(glue.partitions)

    for name, fake in [
        ("read_committed_consumer", consumer_made_by("read_committed_consumer")),
        ("group_member_consumer", consumer_made_by("group_member_consumer")),
        ("start_client", start_client),
        ("close_client", close_client),
        ("wait_for_topics", wait_for_topics),
        ("ride_out", ride_out),
        ("partitions_of", partitions_of),
    ]:
        monkeypatch.setattr(follow, name, fake)


def starting(
    monkeypatch: pytest.MonkeyPatch,
    settings: FollowSettings,
    *steps: Step,
    applied: dict[str, int] | None = None,
) -> tuple[Follower, FakeProjector, KafkaGlue, Any]:
    clock, stop = Clock(100.0), asyncio.Event()
    projector = FakeProjector(FakeRedis(applied))
    follower = Follower(projector, settings)  # type: ignore[arg-type]
    kafka = KafkaGlue(clock, stop, list(steps), follower=follower)
    install_kafka(monkeypatch, kafka)
    return follower, projector, kafka, install(monkeypatch, clock, stop, follower)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == follow.log.name]


async def test_alone_it_owns_every_partition_rides_out_redis_and_closes_without_waiting_to_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole start, in order, with what each step is given; then a Redis outage at the first
    positioning, one batch, and the consumer closed. `stats.seconds` is the run's wall time."""
    settings = FollowSettings(fetch_ms=250, outage=BACKOFF)
    follower, projector, kafka, glue = starting(
        monkeypatch, settings, {A0: [message(A0, 4)]}, applied={"a:0": 3}
    )
    refused = RedisConnectionError("Connection refused")
    glue.epochs = [refused, "e1"]
    reports: list[ProjectorStats] = []
    stats = await follower.run(kafka.stop, reports.append)
    consumer = kafka.consumer
    assert consumer is not None
    assert [(name, args, kwargs) for name, args, kwargs in kafka.calls if name != "start_client"] == [
        (
            "ride_out",
            (),
            {
                "waiting_for": f"Redis at {REDIS_URL} to load the projection script",
                "backoff": BACKOFF,
                "stop": kafka.stop,
            },
        ),
        (
            "read_committed_consumer",
            (BOOTSTRAP,),
            {
                "group_id": None,
                "client_id": "turnledger-projector",
                "fetch_max_wait_ms": 250,
                "max_partition_fetch_bytes": 4 * 1024 * 1024,
            },
        ),
        ("wait_for_topics", (BOOTSTRAP, ["a", "b"]), {"backoff": BACKOFF, "stop": kafka.stop, "hint": HINT}),
        (
            "ride_out",
            (),
            {
                "waiting_for": f"Kafka at {BOOTSTRAP} to list the projected topics",
                "backoff": BACKOFF,
                "stop": kafka.stop,
            },
        ),
        ("partitions_of", (consumer, BOOTSTRAP, projector.streams), {}),
        ("close_client", (consumer, None), {}),
    ]
    name, (make,), kwargs = kafka.calls[1]
    assert (name, make, kwargs) == (
        "start_client",
        follower._new_consumer,
        {
            "bootstrap": BOOTSTRAP,
            "action": "project the output topics",
            "backoff": BACKOFF,
            "stop": kafka.stop,
        },
    )
    assert projector.applier.loads == 1
    assert kafka.ready[:2] == [NOT_STARTED, NOT_STARTED] and kafka.ready[-1] is None
    assert consumer.calls[0] == ("assign", [A0, A1, B0])
    names = ["pause"] * 6 + ["resume"] * 3 + ["getmany"] * 2  # owned, then again after the outage
    assert [call[0] for call in consumer.calls[1:]] == names
    assert sorted(call[1] for call in consumer.calls[1:4]) == [A0, A1, B0]
    assert glue.sought == [(consumer, [A0, A1, B0], {A0: 4})]
    assert glue.ready_in_wait == [str(RedisUnavailableError(REDIS_URL, refused))]
    assert projector.batches == [[source(A0, 4)]] and reports == [stats]
    assert (stats.batches, stats.seconds) == (1, 2.5), "1.5 s to start, 1 s waiting for Redis"


async def test_the_waits_name_what_they_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The classifiers the start hands `ride_out`: Redis's for the script, Kafka's for the partitions."""
    follower, _, kafka, _ = starting(monkeypatch, FollowSettings())
    await follower.run(kafka.stop, None)
    redis_down, kafka_down = RedisConnectionError("Connection refused"), KafkaConnectionError("gone")
    load, partitions = kafka.classifiers
    assert str(load(redis_down)) == str(RedisUnavailableError(REDIS_URL, redis_down))
    listed = KafkaUnavailableError(BOOTSTRAP, kafka_down, action="list the projected topics")
    assert str(partitions(kafka_down)) == str(listed)


async def test_in_a_group_it_follows_the_partitions_the_rebalances_assign_and_leaves_within_leave_within_s(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer joins the group with its session settings and the follower's listener; nothing is
    ready until an assignment, which is counted, logged and paused until positioned from Redis."""
    caplog.set_level(logging.INFO, logger=follow.log.name)
    settings = FollowSettings(group_id="projectors", session_timeout_ms=6000, heartbeat_interval_ms=2000)
    steps: list[Step] = []
    follower, projector, kafka, glue = starting(monkeypatch, settings, applied={"a:1": 5})
    assigned_ready: list[str | None] = []

    async def assign() -> None:
        assert kafka.consumer is not None and kafka.consumer.listener is not None
        kafka.consumer.tps = {A0, A1}
        await kafka.consumer.listener.on_partitions_assigned({A1, A0})
        assigned_ready.append(follower.readiness())

    steps = [assign, {A1: [message(A1, 6)]}]
    kafka.steps.extend(steps)
    rebalances = live.PROJECTOR_REBALANCES._value.get()
    await follower.run(kafka.stop, None)
    consumer = kafka.consumer
    assert consumer is not None and consumer.listener is not None
    assert [call for call in kafka.calls if call[0].endswith("_consumer")] == [
        (
            "group_member_consumer",
            (BOOTSTRAP,),
            {
                "group_id": "projectors",
                "client_id": "turnledger-projector",
                "fetch_max_wait_ms": 500,
                "max_partition_fetch_bytes": 4 * 1024 * 1024,
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 2000,
            },
        )
    ]
    assert consumer.calls[0] == ("subscribe", ["a", "b"], consumer.listener)
    assert consumer.listener.follower is follower
    assert live.PROJECTOR_REBALANCES._value.get() == rebalances + 1
    assert consumer.ready == ["no partition assignment yet", None, None]
    assert assigned_ready == ["2 partitions not positioned at their applied offsets yet"]
    assert glue.sought == [(consumer, [A0, A1], {A1: 6})]
    assert projector.batches == [[source(A1, 6)]]
    assert kafka.calls[-1] == ("close_client", (consumer, LEAVE_WITHIN_S), {})
    assert lines(caplog) == [
        "joining consumer group 'projectors' for 2 topics",
        "rebalance: 2 partitions assigned: a-0, a-1",
        "positioned 2 partitions at their applied offsets + 1 (from Redis)",
    ]


async def test_a_stop_while_waiting_for_redis_returns_the_stats_with_nothing_to_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`StopRequested` from a wait is the way out, not an error; no consumer was made, none is closed."""
    follower, _, kafka, _ = starting(monkeypatch, FollowSettings())
    kafka.load_stops = True
    stats = await follower.run(kafka.stop, None)
    assert (stats.batches, stats.seconds) == (0, 0.0)
    assert [name for name, _, _ in kafka.calls] == ["ride_out"]
    assert follower.readiness() == NOT_STARTED


async def test_an_error_that_ends_the_follow_still_closes_the_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The error leaves `run` as it is, after the consumer was closed (alone: without a leave timeout)."""
    broken = ValueError("a record the planner cannot take")
    follower, projector, kafka, _ = starting(monkeypatch, FollowSettings(), {A0: [message(A0, 0)]})
    projector.failures = [broken]
    with pytest.raises(ValueError) as raised:
        await follower.run(kafka.stop, None)
    assert raised.value is broken
    assert kafka.calls[-1] == ("close_client", (kafka.consumer, None), {})


def test_readiness_says_what_the_follower_waits_for() -> None:
    """`/readyz`'s words, in their order: the consumer, an assignment, an outage, positioning."""
    follower = Follower(FakeProjector(FakeRedis()), FollowSettings())  # type: ignore[arg-type]
    assert follower.readiness() == NOT_STARTED
    follower.consumer = FakeConsumer(Clock(0.0), asyncio.Event())
    assert follower.readiness() == "no partition assignment yet"
    follower.assigned = True
    follower.unpositioned = {A0, B0}
    follower.outage = "Kafka is not reachable"
    assert follower.readiness() == "Kafka is not reachable"
    follower.outage = None
    assert follower.readiness() == "2 partitions not positioned at their applied offsets yet"
    follower.unpositioned = set()
    assert follower.readiness() is None


def test_a_new_follower_knows_no_offset_and_has_verified_nothing() -> None:
    """Nothing started, assigned or known; nothing verified: its first idle round compares at once."""
    follower = Follower(FakeProjector(FakeRedis()), FollowSettings())  # type: ignore[arg-type]
    state = (follower.consumer, follower.unpositioned, follower.assigned, follower.outage, follower.known)
    assert state == (None, set(), False, None, {})
    assert follower.verified_at is None


def test_partitions_to_position_are_paused_and_added_to_those_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second call adds to those still waiting; it never drops them."""
    follower, consumer, _, _ = following(monkeypatch)
    follower.unpositioned = {A0}
    follower.to_position({A1, B0})
    assert follower.unpositioned == {A0, A1, B0}
    assert sorted(call[1] for call in consumer.calls if call[0] == "pause") == [A1, B0]


async def test_only_the_partitions_still_owned_are_positioned(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """B0 was revoked while it waited: it is neither sought nor read from Redis, and is dropped at the
    next positioning; A0, positioned already, keeps what the follower knows of it."""
    caplog.set_level(logging.INFO, logger=follow.log.name)
    follower, consumer, projector, glue = following(monkeypatch, applied={"a:0": 20, "a:1": 8})
    follower.known = {"a:0": 21, "a:1": 30}
    follower.unpositioned = {A1, B0}
    glue.epochs = ["e7"]
    await follower._position()
    assert (projector.asked, glue.sought) == ([[A1]], [(consumer, [A1], {A1: 9})])
    assert [call for call in consumer.calls if call[0] == "resume"] == [("resume", A1)]
    assert (projector.epoch, follower.known, follower.unpositioned) == ("e7", {"a:0": 21, "a:1": 8}, {B0})
    assert lines(caplog) == ["positioned 1 partitions at their applied offsets + 1 (from Redis)"]
    await follower._position()
    assert (follower.unpositioned, len(glue.ensured), len(glue.sought)) == (set(), 1, 1)


async def test_a_revocation_forgets_the_partitions_and_says_so_only_when_there_are_some(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A revoked partition is neither known nor waiting any more, even one never known; an empty
    revocation (every rebalance starts with one) logs nothing."""
    caplog.set_level(logging.INFO, logger=follow.log.name)
    follower, _, _, _ = following(monkeypatch, owned=(A0, A1, B0))
    follower.known = {"a:0": 9, "b:0": 3}
    follower.unpositioned = {A0, B0}
    listener = _Rebalances(follower)
    await listener.on_partitions_revoked(set())
    await listener.on_partitions_revoked({A1, B0})
    assert (follower.known, follower.unpositioned) == ({"a:0": 9}, {A0}), "a:1 was never known"
    assert lines(caplog) == ["rebalance: 2 partitions revoked"]


SENTINEL_URL = "redis+sentinel://s1:26379/mymaster/0"


NONE_FOUND = MasterNotFoundError("No master found for 'mymaster'")
OUTAGE = RedisSentinelUnavailableError(SENTINEL_URL, ["s1:26379"], "mymaster", NONE_FOUND, "none")


class _Loading(NamedTuple):
    """A follower whose script load meets the sentinel outage three times, and what it asked them."""

    follower: Follower
    projector: FakeProjector
    failures: list[BaseException]
    asked: list[tuple[object, BaseException]]


def _loading(
    monkeypatch: pytest.MonkeyPatch,
    *,
    diagnosed: RedisSentinelUnavailableError | None = None,
    refusal: RedisSentinelAccessError | None = None,
) -> _Loading:
    projector = FakeProjector(FakeRedis())
    fast = Backoff(initial_s=0.001, max_s=0.001, jitter=0.0)
    follower = Follower(projector, FollowSettings(outage=fast), diagnosed)  # type: ignore[arg-type]
    failures: list[BaseException] = [OUTAGE] * 3
    asked: list[tuple[object, BaseException]] = []

    async def prepare() -> None:
        if failures:
            raise failures.pop(0)
        await projector.applier.load()

    async def sentinel_refusal(client: object, exc: BaseException) -> RedisSentinelAccessError | None:
        asked.append((client, exc))
        return refusal

    monkeypatch.setattr(projector, "prepare", prepare)
    monkeypatch.setattr(sentinel_probe, "sentinel_refusal", sentinel_refusal)
    return _Loading(follower, projector, failures, asked)


@pytest.mark.parametrize("refused", [True, False], ids=["they refuse us", "they are down"])
async def test_sentinels_that_name_no_primary_while_the_script_loads_are_asked_why_once(
    monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    """The load waits out Redis (`ride_out`) right after `diagnose`: sentinels that refuse us by then end
    the start at once; sentinels that are down are asked at the outage's first sighting, not at each
    retry (`sentinel_probe.Rechecks`), and the load goes on once Redis answers."""
    login = AuthenticationError("Authentication required.")
    refusal = RedisSentinelAccessError(SENTINEL_URL, "mymaster", ["s1:26379 refused our login"], login, "fix")
    load = _loading(monkeypatch, refusal=refusal if refused else None)
    if refused:
        with pytest.raises(RedisSentinelAccessError) as raised:
            await load.follower._load_script(asyncio.Event())
        assert (raised.value, raised.value.__cause__) == (refusal, OUTAGE)
        assert (len(load.failures), load.projector.applier.loads) == (2, 0)
    else:
        await load.follower._load_script(asyncio.Event())
        assert (len(load.failures), load.projector.applier.loads) == (0, 1)
    assert load.asked == [(load.projector.redis, NONE_FOUND)]


async def test_sentinels_diagnose_asked_at_the_start_are_not_asked_again_while_the_script_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`turnledger project` asked them why in `diagnose` just before (`Projector.run_forever`'s `diagnosed`):
    the load waits the outage out without asking them again within `RECHECK_EVERY_S`."""
    load = _loading(monkeypatch, diagnosed=OUTAGE)
    await load.follower._load_script(asyncio.Event())
    assert (len(load.failures), load.projector.applier.loads, load.asked) == (0, 1, [])
