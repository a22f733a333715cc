"""The following projector's loop (`follow.Follower._follow`): each fetch applied in one call and
reported, the applied offsets compared with Redis's every `verify_every_s` while idle, outages of
Kafka and Redis waited out with a backoff that starts again after a round that went through, pooled
connections dropped on a failover, every partition positioned again after an outage or an epoch change,
and what ends it. No Kafka, no Redis: `follow_fakes`."""

from __future__ import annotations

import logging

import pytest
from aiokafka.errors import KafkaConnectionError
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.unit.projections.follow_fakes import (
    A0,
    A1,
    B0,
    BOOTSTRAP,
    KEYS,
    REDIS_URL,
    FakeConsumer,
    FakeProjector,
    following,
    message,
    source,
)
from turnledger.errors import (
    KafkaUnavailableError,
    RedisAccessError,
    RedisFailoverError,
    RedisSentinelAccessError,
    RedisSentinelUnavailableError,
    RedisUnavailableError,
    TurnledgerError,
)
from turnledger.projections import follow
from turnledger.projections.applier import EpochChangedError
from turnledger.projections.follow import Follower
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import ProjectorStats, redis_outage
from turnledger.projections.settings import FollowSettings
from turnledger.redisconn import sentinel_probe
from turnledger.retry import Backoff

#: 1 s, 2 s, 4 s, 4 s ... exactly (no jitter)
BACKOFF = Backoff(initial_s=1.0, max_s=4.0, multiplier=2.0, jitter=0.0)
REFETCH = "positioned 2 partitions at their applied offsets + 1 (from Redis)"


async def follow_to_the_end(
    follower: Follower,
    consumer: FakeConsumer,
    projector: FakeProjector,
    reports: list[ProjectorStats] | None = None,
) -> ProjectorStats:
    stats = ProjectorStats()
    report = None if reports is None else reports.append
    await follower._follow(consumer.stop, report, stats, redis_outage(projector.redis))  # type: ignore[arg-type]
    return stats


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == follow.log.name]


def fetches(consumer: FakeConsumer) -> list[tuple[object, ...]]:
    return [call for call in consumer.calls if call[0] == "getmany"]


def kafka_outage_text(cause: BaseException) -> str:
    return str(KafkaUnavailableError(BOOTSTRAP, cause, action="fetch the projected topics"))


async def test_each_fetch_is_applied_in_one_call_then_known_and_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every partition of a fetch goes to one `apply`, in fetch order; `report` gets the run's stats
    after each batch, and the highest offset applied per partition is what the follower knows."""
    first = {A0: [message(A0, 4), message(A0, 5)], A1: [message(A1, 9)]}
    follower, consumer, projector, _ = following(
        monkeypatch, first, {A1: [message(A1, 10)]}, settings=FollowSettings(fetch_ms=250)
    )
    reports: list[ProjectorStats] = []
    stats = await follow_to_the_end(follower, consumer, projector, reports)
    assert projector.batches == [[source(A0, 4), source(A0, 5), source(A1, 9)], [source(A1, 10)]]
    assert reports == [stats, stats] and all(r is stats for r in reports)
    assert (stats.batches, stats.applied) == (2, 4)
    assert follower.known == {"a:0": 5, "a:1": 10}
    assert fetches(consumer) == [("getmany", 250, 7)] * 3, "the fetch wait and the projector's batch size"


async def test_without_a_report_the_batches_are_still_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    """`report` is optional: None is never called."""
    follower, consumer, projector, _ = following(monkeypatch, {B0: [message(B0, 0)]}, owned=(B0,))
    stats = await follow_to_the_end(follower, consumer, projector)
    assert (projector.batches, stats.batches, follower.known) == ([[source(B0, 0)]], 1, {"b:0": 0})


async def test_the_first_idle_round_compares_whatever_the_clock_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`time.monotonic()` counts from the machine's boot: on one up for less than `verify_every_s` the
    first comparison must not wait for the uptime to reach it (it did, from a `verified_at` of 0)."""
    follower, consumer, projector, _ = following(
        monkeypatch, {}, applied={"a:0": 3}, settings=FollowSettings(verify_every_s=30.0), now=2.0
    )
    follower.known = {"a:0": 3}
    await follow_to_the_end(follower, consumer, projector)
    assert (projector.redis.reads, follower.verified_at) == (1, 2.5)


async def test_idle_rounds_compare_with_redis_at_once_then_every_verify_every_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first idle round compares at once (nothing was verified yet), the next ones once
    `verify_every_s` has passed since the last comparison, not before. Each empty fetch takes 0.5 s."""
    follower, consumer, projector, _ = following(
        monkeypatch, *[{}] * 11, applied={"a:0": 3}, settings=FollowSettings(verify_every_s=5.0), now=5.0
    )
    follower.known = {"a:0": 3}
    await follow_to_the_end(follower, consumer, projector)
    # fetches end at 5.5 (compared), 6.0 ... 10.0 (not yet), 10.5 (5 s later: compared), 10.5 (stop)
    assert (projector.redis.reads, follower.verified_at) == (2, 10.5)
    assert len(fetches(consumer)) == 12 and follower.unpositioned == set()


async def test_offsets_that_went_back_while_idle_position_every_partition_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A failover that lost the last writes: the partitions are named, every owned one is paused and
    sought again from what Redis holds, and the offsets known are Redis's."""
    caplog.set_level(logging.INFO, logger=follow.log.name)
    follower, consumer, projector, glue = following(
        monkeypatch, {}, applied={"a:0": 3, "a:1": 1, "b:0": 0}, owned=(A0, A1, B0)
    )
    follower.known = {"a:0": 3, "a:1": 8, "b:0": 2}
    await follow_to_the_end(follower, consumer, projector)
    assert lines(caplog) == [
        "Redis holds older applied offsets than this projector applied for a:1, b:0: a failover lost the "
        "last writes, or Redis was emptied; positioning every partition again",
        "positioned 3 partitions at their applied offsets + 1 (from Redis)",
    ]
    assert sorted(call[1] for call in consumer.calls if call[0] == "pause") == [A0, A1, B0]
    assert sorted(call[1] for call in consumer.calls if call[0] == "resume") == [A0, A1, B0]
    assert glue.sought == [(consumer, [A0, A1, B0], {A0: 4, A1: 2, B0: 1})]
    assert (follower.known, follower.unpositioned, projector.epoch) == (
        {"a:0": 3, "a:1": 1, "b:0": 0},
        set(),
        "e1",
    )


@pytest.mark.parametrize(
    ("outage", "disconnects"),
    [
        (RedisUnavailableError(REDIS_URL, RedisConnectionError("Connection refused")), 0),
        (
            RedisFailoverError(
                REDIS_URL, RedisConnectionError("READONLY You can't write against a replica.")
            ),
            1,
        ),
    ],
)
async def test_a_redis_outage_is_waited_out_and_the_batch_fetched_again(
    outage: RedisUnavailableError,
    disconnects: int,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The outage is the readiness answer until a round goes through; then every partition is sought
    again from Redis and the batch that failed is applied as fetched again. Only a failover drops the pooled
    connections (they reach the demoted node)."""
    caplog.set_level(logging.INFO, logger=follow.log.name)
    batch = {A0: [message(A0, 4)]}
    follower, consumer, projector, glue = following(
        monkeypatch, batch, batch, applied={"a:0": 3}, settings=FollowSettings(outage=BACKOFF)
    )
    projector.failures = [outage]
    await follow_to_the_end(follower, consumer, projector)
    assert projector.batches == [[source(A0, 4)]]
    assert (glue.waits, glue.ready_in_wait) == ([1.0], [str(outage)])
    assert consumer.ready == [None, str(outage), None]
    assert projector.redis.connection_pool.disconnects == disconnects
    assert glue.sought == [(consumer, [A0, A1], {A0: 4})]
    assert lines(caplog) == [f"projector: {outage}; retrying in 1.0s (0.0s into the outage)", REFETCH]


async def test_the_backoff_grows_through_one_outage_and_starts_again_after_a_round_that_went_through(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka down three times in a row: waits of 1, 2 and 4 s, each line saying how long the outage has
    lasted; after an idle round that went through, the next outage waits 1 s again and readiness was
    None in between."""
    caplog.set_level(logging.WARNING, logger=follow.log.name)
    down = [KafkaConnectionError(f"down {n}") for n in range(4)]
    follower, consumer, projector, glue = following(
        monkeypatch, down[0], down[1], down[2], {}, down[3], settings=FollowSettings(outage=BACKOFF)
    )
    await follow_to_the_end(follower, consumer, projector)
    assert glue.waits == [1.0, 2.0, 4.0, 1.0]
    assert lines(caplog) == [
        f"projector: {kafka_outage_text(down[0])}; retrying in 1.0s (0.0s into the outage)",
        f"projector: {kafka_outage_text(down[1])}; retrying in 2.0s (1.0s into the outage)",
        f"projector: {kafka_outage_text(down[2])}; retrying in 4.0s (3.0s into the outage)",
        f"projector: {kafka_outage_text(down[3])}; retrying in 1.0s (0.0s into the outage)",
    ]
    outage = [kafka_outage_text(error) for error in down]
    assert consumer.ready == [None, outage[0], outage[1], outage[2], None, outage[3]]
    assert projector.redis.connection_pool.disconnects == 0


async def test_an_outage_that_lasts_max_outage_s_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits of 1 s and 2 s: the third failure comes 3 s into the outage, its limit."""
    down = [KafkaConnectionError(f"down {n}") for n in range(3)]
    follower, consumer, projector, glue = following(
        monkeypatch,
        *down,
        settings=FollowSettings(outage=Backoff(initial_s=1.0, max_s=4.0, jitter=0.0, max_outage_s=3.0)),
    )
    with pytest.raises(KafkaUnavailableError) as raised:
        await follow_to_the_end(follower, consumer, projector)
    assert (str(raised.value), raised.value.__cause__) == (kafka_outage_text(down[2]), down[2])
    assert glue.waits == [1.0, 2.0]


async def test_a_redis_outage_while_positioning_is_waited_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """redis-py's own error (the epoch read is not classified on its way): the follower names it as
    Redis's outage, and positions from the epoch it reads once Redis answers."""
    caplog.set_level(logging.WARNING, logger=follow.log.name)
    refused = RedisConnectionError("Error 111 connecting to cache.test:6390. Connection refused.")
    follower, consumer, projector, glue = following(
        monkeypatch, applied={"a:1": 6}, settings=FollowSettings(outage=BACKOFF)
    )
    follower.unpositioned = {A0, A1}
    glue.epochs = [refused, "e2"]
    await follow_to_the_end(follower, consumer, projector)
    assert glue.ensured == [(projector.redis, KEYS.offsets)] * 2
    assert projector.layouts_kept == 2  # before each epoch read: a node back empty lost the layout too
    assert (projector.epoch, glue.sought) == ("e2", [(consumer, [A0, A1], {A1: 7})])
    outage = str(RedisUnavailableError(REDIS_URL, refused))
    assert glue.ready_in_wait == [outage]
    assert lines(caplog) == [f"projector: {outage}; retrying in 1.0s (0.0s into the outage)"]


async def test_a_new_epoch_positions_every_partition_again_without_waiting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis came back empty: the batch is not applied onto it; the follower adopts the epoch Redis
    has now and fetches again from what Redis holds (nothing: from the beginning)."""
    caplog.set_level(logging.INFO, logger=follow.log.name)
    changed = EpochChangedError("e1")
    batch = {A1: [message(A1, 7)]}
    follower, consumer, projector, glue = following(monkeypatch, batch, {A1: [message(A1, 0)]})
    projector.epoch = "e1"
    projector.failures = [changed]
    glue.epochs = ["e2"]
    follower.known = {"a:1": 6}
    await follow_to_the_end(follower, consumer, projector)
    assert lines(caplog) == [f"{changed}: positioning every partition again", REFETCH]
    assert (projector.epoch, glue.sought, glue.waits) == ("e2", [(consumer, [A0, A1], {})], [])
    assert (projector.batches, follower.known) == ([[source(A1, 0)]], {"a:1": 0})
    assert consumer.ready == [None, None, None]


async def test_an_error_that_is_no_outage_ends_the_follow_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither Redis's nor Kafka's classifier names it: raised at once, the same object, no wait."""
    broken = ValueError("a record the planner cannot take")
    follower, consumer, projector, glue = following(monkeypatch, {A0: [message(A0, 0)]})
    projector.failures = [broken]
    with pytest.raises(ValueError) as raised:
        await follow_to_the_end(follower, consumer, projector)
    assert (raised.value, glue.waits) == (broken, [])


async def test_a_refusal_the_projector_classified_ends_the_follow_with_its_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Projector.apply` raises the `RedisAccessError` from redis-py's error: raised as it is."""
    wrong = AuthenticationError("invalid username-password pair")
    refused = RedisAccessError(REDIS_URL, "plaintext", wrong, "check REDIS_PASSWORD_FILE")
    refused.__cause__ = wrong
    follower, consumer, projector, glue = following(monkeypatch, {A0: [message(A0, 0)]})
    projector.failures = [refused]
    with pytest.raises(RedisAccessError) as raised:
        await follow_to_the_end(follower, consumer, projector)
    assert (raised.value, raised.value.__cause__, glue.waits) == (refused, wrong, [])


async def test_a_refusal_of_redis_while_positioning_is_raised_as_a_redis_access_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py's refused login while reading the epoch: a `RedisAccessError` from it, not a wait."""
    wrong = AuthenticationError("invalid username-password pair")
    follower, consumer, projector, glue = following(monkeypatch)
    follower.unpositioned = {A0}
    glue.epochs = [wrong]
    with pytest.raises(TurnledgerError) as raised:
        await follow_to_the_end(follower, consumer, projector)
    assert type(raised.value) is RedisAccessError and raised.value.__cause__ is wrong
    assert (glue.waits, fetches(consumer)) == ([], [])


SENTINEL_URL = "redis+sentinel://s1:26379/mymaster/0"


NONE_FOUND = MasterNotFoundError("No master found for 'mymaster'")
SENTINEL_OUTAGE = RedisSentinelUnavailableError(SENTINEL_URL, ["s1:26379"], "mymaster", NONE_FOUND, "none")


def asking_sentinels(
    monkeypatch: pytest.MonkeyPatch, follower: Follower, refusal: RedisSentinelAccessError | None
) -> list[tuple[object, BaseException, float]]:
    """`sentinel_probe.sentinel_refusal` answering `refusal`; what it was asked, and when (the follower's
    clock)."""
    asked: list[tuple[object, BaseException, float]] = []

    async def sentinel_refusal(client: object, exc: BaseException) -> RedisSentinelAccessError | None:
        asked.append((client, exc, follower.rechecks.clock()))
        return refusal

    monkeypatch.setattr(sentinel_probe, "sentinel_refusal", sentinel_refusal)
    return asked


@pytest.mark.parametrize("refused", [True, False], ids=["they refuse us", "they are down"])
async def test_sentinels_that_name_no_primary_are_asked_why(
    refused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sentinel_probe`: sentinels that refuse our login (a password changed under a running projector)
    end the follow at once, as a Redis that refuses it does; sentinels that are down are waited out."""
    login = AuthenticationError("Authentication required.")
    refusal = RedisSentinelAccessError(SENTINEL_URL, "mymaster", ["s1:26379 refused our login"], login, "fix")
    batch = {A0: [message(A0, 4)]}
    follower, consumer, projector, glue = following(
        monkeypatch, batch, batch, applied={"a:0": 3}, settings=FollowSettings(outage=BACKOFF)
    )
    asked = asking_sentinels(monkeypatch, follower, refusal if refused else None)
    projector.failures = [SENTINEL_OUTAGE]
    if refused:
        with pytest.raises(RedisSentinelAccessError) as raised:
            await follow_to_the_end(follower, consumer, projector)
        assert (raised.value, raised.value.__cause__, glue.waits) == (refusal, SENTINEL_OUTAGE, [])
    else:
        await follow_to_the_end(follower, consumer, projector)
        assert (glue.waits, glue.ready_in_wait, projector.batches) == (
            [1.0],
            [str(SENTINEL_OUTAGE)],
            [[source(A0, 4)]],
        )
    assert asked == [(projector.redis, NONE_FOUND, 100.0)]


@pytest.mark.parametrize(("every_s", "asked_at"), [(30.0, [100.0]), (3.0, [100.0, 103.0, 107.0])])
async def test_a_lasting_sentinel_outage_is_asked_why_at_its_first_sighting_then_every_recheck_every_s(
    monkeypatch: pytest.MonkeyPatch, every_s: float, asked_at: list[float]
) -> None:
    """Not at every retry: asking is a connection to every sentinel, for up to twice the probe's
    timeout. Retries at 100, 101, 103, 107 (waits of 1, 2, 4 s), then a batch that goes through."""
    monkeypatch.setattr(sentinel_probe, "RECHECK_EVERY_S", every_s)
    batch = {A0: [message(A0, 4)]}
    follower, consumer, projector, glue = following(
        monkeypatch, *[batch] * 5, applied={"a:0": 3}, settings=FollowSettings(outage=BACKOFF)
    )
    asked = asking_sentinels(monkeypatch, follower, None)
    projector.failures = [SENTINEL_OUTAGE] * 4
    await follow_to_the_end(follower, consumer, projector)
    assert (glue.waits, projector.batches) == ([1.0, 2.0, 4.0, 4.0], [[source(A0, 4)]])
    assert [when for _, _, when in asked] == asked_at


async def test_a_round_that_went_through_ends_the_outage_so_the_next_is_asked_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = {A0: [message(A0, 4)]}
    follower, consumer, projector, glue = following(
        monkeypatch, *[batch] * 4, applied={"a:0": 3}, settings=FollowSettings(outage=BACKOFF)
    )
    asked = asking_sentinels(monkeypatch, follower, None)
    projector.failures = [SENTINEL_OUTAGE, None, SENTINEL_OUTAGE]
    await follow_to_the_end(follower, consumer, projector)
    assert glue.waits == [1.0, 1.0]
    assert [when for _, _, when in asked] == [100.0, 101.0]


async def test_an_outage_that_is_no_sentinels_is_not_asked_about(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = {A0: [message(A0, 4)]}
    follower, consumer, projector, glue = following(
        monkeypatch, batch, batch, applied={"a:0": 3}, settings=FollowSettings(outage=BACKOFF)
    )
    asked = asking_sentinels(monkeypatch, follower, None)
    projector.failures = [RedisUnavailableError(REDIS_URL, RedisConnectionError("refused"))]
    await follow_to_the_end(follower, consumer, projector)
    assert (glue.waits, asked) == ([1.0], [])


async def test_a_split_projection_is_positioned_under_every_group_s_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each slot group's offsets hash has its epoch: all are read (in group order) before positioning,
    and the projector applies under them joined (`shards.group_epochs` splits them again)."""
    follower, consumer, projector, glue = following(
        monkeypatch, applied={"a:1": 6}, settings=FollowSettings(verify_every_s=1e9)
    )
    split = ProjectionKeys("tl:", one_slot=True, shards=3)
    projector.keys = split  # type: ignore[misc]
    follower.unpositioned = {A0, A1}
    follower.verified_at = 100.0  # compared just now, on the fakes' clock: no idle comparison follows
    glue.epochs = ["e1", "e2", "e3"]
    await follow_to_the_end(follower, consumer, projector)
    assert glue.ensured == [(projector.redis, group.offsets) for group in split.groups]
    assert [offsets for _, offsets in glue.ensured] == ["{tl:#0}offsets", "{tl:#1}offsets", "{tl:#2}offsets"]
    assert (projector.epoch, projector.layouts_kept) == ("e1,e2,e3", 1)
    assert glue.sought == [(consumer, [A0, A1], {A1: 7})]
