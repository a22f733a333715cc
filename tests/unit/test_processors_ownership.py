"""Who owns which partition (`processors/ownership.py`) without a broker: the static list checked against
the topic, the group's rebalance listener driving the host, the consumers each ownership builds, and the
keepalive that keeps a member whose partitions are all restoring in its group. The same ownership
against the real broker and group coordinator: tests/integration/test_ownership.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import GroupAuthorizationFailedError, KafkaConnectionError
from prometheus_client import REGISTRY

from tests.unit.partition_fakes import BOOTSTRAP, GROUP, INGRESS, config
from tests.unit.recorded_asyncio import RecordedAsyncio, record_asyncio
from turnledger.errors import ProcessorError
from turnledger.processors import ownership
from turnledger.processors.config import GroupSettings
from turnledger.processors.ownership import (
    NEVER_ASSIGNED,
    GroupOwnership,
    StaticOwnership,
    owned_partitions,
    request_rejoin,
)
from turnledger.retry import Backoff

OUTAGE = Backoff(initial_s=0.5, max_s=2, jitter=0)


class Host:
    """A `PartitionHost` that records what the ownership asked of it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def acquire(self, partitions: Sequence[int]) -> None:
        self.calls.append(("acquire", list(partitions)))

    async def release(self, partitions: Sequence[int]) -> None:
        await asyncio.sleep(0)
        self.calls.append(("release", list(partitions)))

    def keep_only(self, partitions: Sequence[int]) -> None:
        self.calls.append(("keep_only", list(partitions)))

    def fail(self, exc: BaseException) -> None:
        self.calls.append(("fail", exc))


class Coordinator:
    def __init__(self) -> None:
        self.rejoins = 0

    def request_rejoin(self) -> None:
        self.rejoins += 1


class Consumer:
    """What the ownerships use of an AIOKafkaConsumer: assignment, pause, subscribe, getmany."""

    def __init__(self, fetches: Sequence[BaseException | None] = ()) -> None:
        self.assigned: list[TopicPartition] = []
        self.paused: list[TopicPartition] = []
        self.subscribed: list[tuple[list[str], Any]] = []
        self.fetches = list(fetches)
        """What each `getmany` does in turn: raise, or (None) return nothing; then wait for ever."""
        self.getmany_calls: list[tuple[tuple[TopicPartition, ...], int]] = []
        self._coordinator = Coordinator()

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = list(tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, tp: TopicPartition) -> None:
        self.paused.append(tp)

    def subscribe(self, topics: list[str], *, listener: Any) -> None:
        self.subscribed.append((topics, listener))

    async def getmany(self, *tps: TopicPartition, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
        self.getmany_calls.append((tps, timeout_ms))
        if not self.fetches:
            await asyncio.Event().wait()
        outcome = self.fetches.pop(0)
        if outcome is not None:
            raise outcome
        return {}


class Described:
    """`describe_partitions` answering `partitions`, recording what it was asked."""

    def __init__(self, partitions: list[int]) -> None:
        self.partitions = partitions
        self.asked: list[tuple[str, str, Backoff, asyncio.Event | None]] = []

    async def __call__(
        self, bootstrap: str, topic: str, *, backoff: Backoff, stop: asyncio.Event | None = None
    ) -> list[int]:
        self.asked.append((bootstrap, topic, backoff, stop))
        return list(self.partitions)


def described(monkeypatch: pytest.MonkeyPatch, partitions: list[int]) -> Described:
    fake = Described(partitions)
    monkeypatch.setattr(ownership, "describe_partitions", fake)
    return fake


def _tp(partition: int, topic: str = INGRESS) -> TopicPartition:
    return TopicPartition(topic, partition)


# ------------------------------------------------------------------------------------ owned_partitions


async def test_no_partitions_asked_for_means_every_partition_of_the_input_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = described(monkeypatch, [0, 1, 2])
    stop = asyncio.Event()
    assert await owned_partitions(config(outage=OUTAGE), None, stop) == [0, 1, 2]
    assert asked.asked == [(BOOTSTRAP, INGRESS, OUTAGE, stop)]


async def test_the_partitions_asked_for_come_back_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = described(monkeypatch, [0, 1, 2, 3])
    assert await owned_partitions(config(), [3, 0, 2]) == [0, 2, 3]
    assert asked.asked[0][3] is None


async def test_a_missing_input_topic_says_how_to_create_it(monkeypatch: pytest.MonkeyPatch) -> None:
    described(monkeypatch, [])
    with pytest.raises(ProcessorError) as raised:
        await owned_partitions(config(), [0])
    assert str(raised.value) == (
        f"input topic {INGRESS!r} does not exist on {BOOTSTRAP}; create the topics first "
        "(`turnledger process --create-topics N`, or ensure_topics())"
    )


async def test_partitions_the_topic_does_not_have_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    described(monkeypatch, [0, 1])
    with pytest.raises(ProcessorError) as raised:
        await owned_partitions(config(), [5, 1, 3])
    assert str(raised.value) == f"partitions [3, 5] do not exist: {INGRESS!r} has partitions 0..1"


# ------------------------------------------------------------------------------------ the consumers


class Built:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, bootstrap: str, **options: Any) -> str:
        self.calls.append((bootstrap, options))
        return "consumer"


def test_a_static_owner_s_consumer_only_stores_offsets_under_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = Built()
    monkeypatch.setattr(ownership, "read_committed_consumer", built)
    static = StaticOwnership(config(app_id="billing", group_id="billing-offsets"), [1])
    assert static.consumer() == "consumer"  # type: ignore[comparison-overlap]
    assert built.calls == [(BOOTSTRAP, {"group_id": "billing-offsets", "client_id": "billing"})]
    assert (static.requested, static.partitions, StaticOwnership(config()).requested) == ([1], [], None)


def test_a_group_member_s_consumer_carries_the_group_settings_and_the_sticky_assignor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Built by `group_member_consumer`, whose consumer says a refused session timeout in one line."""
    built = Built()
    monkeypatch.setattr(ownership, "group_member_consumer", built)
    group = GroupSettings(session_timeout_ms=7_000, heartbeat_interval_ms=900, rebalance_timeout_ms=12_000)
    GroupOwnership(config(app_id="billing", group=group)).consumer()
    assert built.calls == [
        (
            BOOTSTRAP,
            {
                "group_id": "billing",
                "client_id": "billing",
                "session_timeout_ms": 7_000,
                "heartbeat_interval_ms": 900,
                "rebalance_timeout_ms": 12_000,
                "partition_assignment_strategy": (StickyPartitionAssignor,),
            },
        )
    ]


def test_the_ends_when_idle_flags() -> None:
    """A static process ends once its partitions are all fenced; a group member stays in its group."""
    assert (StaticOwnership.ends_when_idle, GroupOwnership.ends_when_idle) == (True, False)


# ------------------------------------------------------------------------------------ static ownership


async def test_a_static_owner_assigns_its_partitions_paused_and_hands_them_to_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Paused: a partition's records are fetched only once its processor has restored and sought."""
    asked = described(monkeypatch, [0, 1, 2, 3])
    static, consumer, host, stop = StaticOwnership(config(), [3, 1]), Consumer(), Host(), asyncio.Event()
    await static.start(host, consumer, stop)  # type: ignore[arg-type]
    assert (static.partitions, consumer.assigned, sorted(consumer.paused)) == (
        [1, 3],
        [_tp(1), _tp(3)],
        [_tp(1), _tp(3)],
    )
    assert host.calls == [("acquire", [1, 3])] and asked.asked == [
        (BOOTSTRAP, INGRESS, config().outage, stop)
    ]
    static.fenced(consumer, 1)  # type: ignore[arg-type]
    await static.close()
    assert (host.calls, consumer._coordinator.rejoins) == ([("acquire", [1, 3])], 0)


async def test_a_static_owner_of_partitions_that_do_not_exist_hands_nothing_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    described(monkeypatch, [0])
    consumer, host = Consumer(), Host()
    with pytest.raises(ProcessorError, match=r"^partitions \[4\] do not exist"):
        await StaticOwnership(config(), [4]).start(host, consumer, asyncio.Event())  # type: ignore[arg-type]
    assert (consumer.assigned, host.calls) == ([], [])


# ------------------------------------------------------------------------------------ the group


def _rebalances() -> float:
    return REGISTRY.get_sample_value("turnledger_processor_rebalances_total") or 0.0


async def test_a_revocation_releases_only_the_input_topic_s_partitions_sorted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = Host()
    listener = ownership._Rebalances(host, INGRESS)
    caplog.set_level(logging.INFO, "turnledger.processors.ownership")
    await listener.on_partitions_revoked({_tp(2), _tp(0), _tp(1, "other")})
    await listener.on_partitions_revoked({_tp(3, "other")})
    assert host.calls == [("release", [0, 2]), ("release", [])]
    assert [r.getMessage() for r in caplog.records] == [
        "rebalance: partitions [0, 2] revoked; committing their open batches"
    ]


async def test_an_assignment_drops_the_state_not_given_back_then_starts_the_partitions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = Host()
    listener = ownership._Rebalances(host, INGRESS)
    before = _rebalances()
    caplog.set_level(logging.INFO, "turnledger.processors.ownership")
    await listener.on_partitions_assigned({_tp(4), _tp(1), _tp(0, "other")})
    await listener.on_partitions_assigned(set())
    assert host.calls == [("keep_only", [1, 4]), ("acquire", [1, 4]), ("keep_only", []), ("acquire", [])]
    assert [r.getMessage() for r in caplog.records] == [
        "rebalance: partitions [1, 4] assigned",
        "rebalance: partitions [] assigned",
    ]
    assert _rebalances() == before + 2


class Waited:
    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str], Backoff, asyncio.Event | None]] = []

    async def __call__(
        self, bootstrap: str, topics: Sequence[str], *, backoff: Backoff, stop: asyncio.Event | None = None
    ) -> None:
        self.asked.append((bootstrap, list(topics), backoff, stop))


async def _until(condition: Any) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0)

    await asyncio.wait_for(poll(), timeout=30)


async def test_a_member_waits_for_its_topic_subscribes_with_its_listener_and_keeps_a_fetch_in_flight(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    waited = Waited()
    monkeypatch.setattr(ownership, "wait_for_topics", waited)
    group, consumer, host, stop = GroupOwnership(config(outage=OUTAGE)), Consumer(), Host(), asyncio.Event()
    caplog.set_level(logging.INFO, "turnledger.processors.ownership")
    await group.start(host, consumer, stop)  # type: ignore[arg-type]
    assert waited.asked == [(BOOTSTRAP, [INGRESS], OUTAGE, stop)]
    [(topics, listener)] = consumer.subscribed
    assert (topics, type(listener), listener.host, listener.topic) == (
        [INGRESS],
        ownership._Rebalances,
        host,
        INGRESS,
    )
    assert [r.getMessage() for r in caplog.records] == [f"joining consumer group {GROUP!r} for {INGRESS!r}"]
    keepalive = group._keepalive
    assert keepalive is not None and keepalive.get_name() == "group-keepalive"
    await _until(lambda: consumer.getmany_calls or host.calls)
    assert consumer.getmany_calls == [((NEVER_ASSIGNED,), 1000)] and host.calls == []
    await group.close()
    assert keepalive.cancelled() and group._keepalive is None
    await group.close()  # closing twice is no error


async def test_a_member_s_keepalive_tells_its_host_what_waiting_cannot_fix(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ownership, "wait_for_topics", Waited())
    refused = GroupAuthorizationFailedError()
    group, consumer, host = (
        GroupOwnership(config()),
        Consumer([KafkaConnectionError("gone"), refused]),
        Host(),
    )
    caplog.set_level(logging.WARNING, "turnledger.processors.ownership")
    await group.start(host, consumer, asyncio.Event())  # type: ignore[arg-type]
    assert group._keepalive is not None
    await asyncio.wait_for(group._keepalive, timeout=30)
    assert host.calls == [("fail", refused)] and sleeps.slept == [1] and len(consumer.getmany_calls) == 2
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith(
        f"consumer group: Kafka is not reachable at {BOOTSTRAP!r} while trying to stay in"
    )


async def test_a_member_stopped_before_its_keepalive_ran_fetches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ownership, "wait_for_topics", Waited())
    group, consumer, host, stop = GroupOwnership(config()), Consumer(), Host(), asyncio.Event()
    stop.set()
    await group.start(host, consumer, stop)  # type: ignore[arg-type]
    keepalive = group._keepalive
    assert keepalive is not None
    await asyncio.wait_for(keepalive, timeout=30)
    assert (keepalive.exception(), consumer.getmany_calls, host.calls) == (None, [], [])


async def test_a_member_that_never_started_closes_with_nothing_to_cancel() -> None:
    group = GroupOwnership(config())
    await group.close()
    assert group._keepalive is None


async def test_a_fenced_member_warns_and_asks_its_group_to_rejoin(caplog: pytest.LogCaptureFixture) -> None:
    consumer = Consumer()
    caplog.set_level(logging.WARNING, "turnledger.processors.ownership")
    GroupOwnership(config()).fenced(consumer, 3)  # type: ignore[arg-type]
    assert consumer._coordinator.rejoins == 1
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "partition 3: fenced although assigned here (this process was paused past its session "
            "timeout, or a transaction timed out in an outage); asking the group to confirm ownership",
        )
    ]


def test_a_rejoin_of_a_consumer_without_a_coordinator_or_its_method_is_a_no_op() -> None:
    class Bare:
        pass

    class OldCoordinator:
        pass

    bare, old = Bare(), Bare()
    old._coordinator = OldCoordinator()  # type: ignore[attr-defined]
    request_rejoin(bare)  # type: ignore[arg-type]
    request_rejoin(old)  # type: ignore[arg-type]
    consumer = Consumer()
    request_rejoin(consumer)  # type: ignore[arg-type]
    assert consumer._coordinator.rejoins == 1


# ------------------------------------------------------------------------------------ the keepalive


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> RecordedAsyncio:
    return record_asyncio(monkeypatch, ownership)


def _keepalive(consumer: Consumer, stop: asyncio.Event, host: Host) -> Coroutine[Any, Any, None]:
    return ownership._keep_member_active(consumer, BOOTSTRAP, stop, host.fail)  # type: ignore[arg-type]


async def test_the_keepalive_rides_out_outages_a_second_apart_and_fails_the_host_on_anything_else(
    sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    refused = GroupAuthorizationFailedError()
    consumer, host = Consumer([KafkaConnectionError("gone"), None, TimeoutError(), refused]), Host()
    caplog.set_level(logging.WARNING, "turnledger.processors.ownership")
    await asyncio.wait_for(_keepalive(consumer, asyncio.Event(), host), timeout=30)
    assert host.calls == [("fail", refused)] and sleeps.slept == [1, 1]
    assert consumer.getmany_calls == [((NEVER_ASSIGNED,), 1000)] * 4
    said = (
        f"consumer group: Kafka is not reachable at {BOOTSTRAP!r} while trying to stay in the consumer group"
    )
    assert [(r.levelno, r.getMessage().split(". Start")[0]) for r in caplog.records] == [
        (logging.WARNING, f"{said} (KafkaConnectionError: gone)"),
        (logging.WARNING, f"{said} (TimeoutError)"),
    ]
    assert all(r.getMessage().endswith("; fetching again in 1s") for r in caplog.records)


async def test_the_keepalive_ends_when_stopped_and_passes_cancellation_on(sleeps: RecordedAsyncio) -> None:
    stop, host = asyncio.Event(), Host()
    stop.set()
    consumer = Consumer([None])
    await asyncio.wait_for(_keepalive(consumer, stop, host), timeout=30)
    assert (consumer.getmany_calls, host.calls) == ([], [])

    class Cancelled(Consumer):
        async def getmany(self, *tps: TopicPartition, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await _keepalive(Cancelled(), asyncio.Event(), host)
    assert (host.calls, sleeps.slept) == ([], [])


async def test_the_keepalive_fetches_again_after_an_empty_fetch_until_stopped(
    sleeps: RecordedAsyncio,
) -> None:
    stop, host = asyncio.Event(), Host()

    class StopsAfterThree(Consumer):
        async def getmany(self, *tps: TopicPartition, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
            self.getmany_calls.append((tps, timeout_ms))
            if len(self.getmany_calls) == 3:
                stop.set()
            return {}

    consumer = StopsAfterThree()
    await asyncio.wait_for(_keepalive(consumer, stop, host), timeout=30)
    assert len(consumer.getmany_calls) == 3 and (host.calls, sleeps.slept) == ([], [])
