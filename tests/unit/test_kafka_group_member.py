"""`kafka/group_member.py` without a broker: a session timeout the broker refuses (aiokafka's
`InvalidSessionTimeoutError`) is said as `SessionTimeoutRefusedError`, naming the flag, the value and the
broker settings, with the coordinator's range when it can be read and never failing for want of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import InvalidSessionTimeoutError, KafkaConnectionError, UnknownMemberIdError

from turnledger.errors import KafkaAccessError, KafkaSettingsError, KafkaUnavailableError, described_cause
from turnledger.kafka import clients, group_member
from turnledger.kafka.broker_config import BrokerSettingUnreadable
from turnledger.kafka.group_member import (
    MAX_SETTING,
    MIN_SETTING,
    GroupMemberConsumer,
    SessionTimeoutRefusedError,
    broker_session_range,
    group_member_consumer,
)

BOOTSTRAP = "kafka.test:9092"
TP = TopicPartition("t", 0)

WITH_RANGE = (
    "Kafka at 'kafka.test:9092' refused --session-timeout-ms 1000 for consumer group 'projectors' "
    "(InvalidSessionTimeoutError): the group's coordinator takes 6000 to 1800000 ms "
    "(group.min.session.timeout.ms to group.max.session.timeout.ms). Pass a --session-timeout-ms in that "
    "range, or change those broker settings."
)
WITHOUT_RANGE = (
    "Kafka at 'kafka.test:9092' refused --session-timeout-ms 1000 for consumer group 'projectors' "
    "(InvalidSessionTimeoutError): the broker takes group.min.session.timeout.ms to "
    "group.max.session.timeout.ms (6000 to 1800000 ms unless set otherwise). Pass a --session-timeout-ms "
    "in that range, or change those broker settings."
)


def test_the_refusal_names_the_flag_the_value_the_group_and_the_coordinator_s_range() -> None:
    refused = SessionTimeoutRefusedError(BOOTSTRAP, "projectors", 1000, (6000, 1_800_000))
    assert str(refused) == WITH_RANGE
    assert (refused.bootstrap, refused.group_id, refused.session_timeout_ms, refused.broker_range) == (
        BOOTSTRAP,
        "projectors",
        1000,
        (6000, 1_800_000),
    )


def test_without_the_range_the_refusal_names_the_settings_and_kafka_s_defaults() -> None:
    assert str(SessionTimeoutRefusedError(BOOTSTRAP, "projectors", 1000, None)) == WITHOUT_RANGE


def test_the_refusal_is_a_kafka_setting_said_in_one_line_and_not_waited_out() -> None:
    """`turnledger.cli.main` says every `KafkaSettingsError` in one line, exit 2."""
    refused = SessionTimeoutRefusedError(BOOTSTRAP, "g", 1, None)
    assert isinstance(refused, KafkaSettingsError) and not refused.retriable
    assert "\n" not in str(refused)


class Coordinator:
    """`coordinator_settings` as the refusal asks it: what it answers or raises, and what it was asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answer: dict[str, str | None] | BaseException = {MIN_SETTING: "6000", MAX_SETTING: "1800000"}
        self.delay_s = 0.0
        self.asked: list[tuple[str, str, tuple[str, ...]]] = []
        monkeypatch.setattr(group_member, "coordinator_settings", self.settings)

    async def settings(self, bootstrap: str, group_id: str, names: tuple[str, ...]) -> dict[str, str | None]:
        self.asked.append((bootstrap, group_id, names))
        await asyncio.sleep(self.delay_s)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.fixture
def coordinator(monkeypatch: pytest.MonkeyPatch) -> Coordinator:
    return Coordinator(monkeypatch)


async def test_the_range_is_the_coordinator_s_two_settings(coordinator: Coordinator) -> None:
    assert await broker_session_range(BOOTSTRAP, "projectors") == (6000, 1_800_000)
    assert coordinator.asked == [(BOOTSTRAP, "projectors", (MIN_SETTING, MAX_SETTING))]


NOT_REPORTED = f"LookupError: the coordinator did not report {MIN_SETTING}"


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (
            BrokerSettingUnreadable("broker 4 refused to describe them (error code 31)"),
            "BrokerSettingUnreadable: broker 4 refused to describe them (error code 31)",
        ),
        (KafkaUnavailableError(BOOTSTRAP, TimeoutError("no answer")), None),
        (
            KafkaAccessError(BOOTSTRAP, "SASL_SSL", KafkaConnectionError("refused"), "check the password"),
            None,
        ),
        (
            KafkaConnectionError("Unable to get coordinator id for projectors"),
            "KafkaConnectionError: Unable to get coordinator id for projectors",
        ),
        ({MAX_SETTING: "1800000"}, NOT_REPORTED),
        ({MIN_SETTING: None, MAX_SETTING: "1800000"}, NOT_REPORTED),
        (
            {MIN_SETTING: "6000", MAX_SETTING: "lots"},
            "ValueError: invalid literal for int() with base 10: 'lots'",
        ),
    ],
    ids=[
        "describe-refused",
        "unreachable",
        "login-refused",
        "no-coordinator",
        "missing",
        "none",
        "not-a-number",
    ],
)
async def test_a_range_that_cannot_be_read_is_none_and_logged_never_raised(
    coordinator: Coordinator,
    caplog: pytest.LogCaptureFixture,
    answer: dict[str, str | None] | BaseException,
    cause: str | None,
) -> None:
    """The line says why, as `described_cause` words the failure (None: the error's own wording, pinned by
    its module's tests)."""
    coordinator.answer = answer
    caplog.set_level("INFO", logger=group_member.log.name)
    assert await broker_session_range(BOOTSTRAP, "projectors") is None
    if cause is None:
        assert isinstance(answer, BaseException)
        cause = described_cause(answer)
    [line] = caplog.records
    assert line.getMessage() == f"could not read {MIN_SETTING} and {MAX_SETTING} of the broker: {cause}"


async def test_a_coordinator_slower_than_the_bound_leaves_the_range_out(
    coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_member, "RANGE_WITHIN_S", 0.05)
    coordinator.delay_s = 10
    assert await asyncio.wait_for(broker_session_range(BOOTSTRAP, "projectors"), 5) is None


def test_the_range_is_waited_for_five_seconds_at_most() -> None:
    assert group_member.RANGE_WITHIN_S == 5.0


class Fetches:
    """aiokafka's own `getmany`, under the member's: raises `error`, else returns `records`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.error: BaseException | None = None
        self.records: dict[TopicPartition, list[Any]] = {TP: ["r"]}
        self.calls: list[tuple[tuple[TopicPartition, ...], int, int | None]] = []

        async def getmany(
            consumer: AIOKafkaConsumer, *partitions: TopicPartition, timeout_ms: int, max_records: int | None
        ) -> dict[TopicPartition, list[Any]]:
            self.calls.append((partitions, timeout_ms, max_records))
            if self.error is not None:
                raise self.error
            return self.records

        monkeypatch.setattr(AIOKafkaConsumer, "getmany", getmany)


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> Fetches:
    return Fetches(monkeypatch)


@pytest.fixture
async def members() -> AsyncIterator[list[GroupMemberConsumer]]:
    """The consumers a test made (never started), closed after it."""
    made: list[GroupMemberConsumer] = []
    yield made
    for consumer in made:
        await consumer.stop()


@pytest.fixture
def member(members: list[GroupMemberConsumer]) -> Callable[..., GroupMemberConsumer]:
    def make(session_timeout_ms: int = 1000) -> GroupMemberConsumer:
        consumer = GroupMemberConsumer(
            bootstrap_servers=BOOTSTRAP, group_id="projectors", session_timeout_ms=session_timeout_ms
        )
        members.append(consumer)
        return consumer

    return make


async def test_a_refused_session_timeout_is_raised_as_the_refusal_with_the_coordinator_s_range(
    fetches: Fetches, coordinator: Coordinator, member: Callable[..., GroupMemberConsumer]
) -> None:
    refused = InvalidSessionTimeoutError()
    fetches.error = refused
    consumer = member()
    with pytest.raises(SessionTimeoutRefusedError) as caught:
        await consumer.getmany(timeout_ms=250, max_records=7)
    assert str(caught.value) == WITH_RANGE
    assert caught.value.__cause__ is refused
    assert fetches.calls == [((), 250, 7)]
    assert coordinator.asked == [(BOOTSTRAP, "projectors", (MIN_SETTING, MAX_SETTING))]


async def test_a_refused_describe_does_not_hide_the_refusal(
    fetches: Fetches, coordinator: Coordinator, member: Callable[..., GroupMemberConsumer]
) -> None:
    fetches.error = InvalidSessionTimeoutError()
    coordinator.answer = BrokerSettingUnreadable("broker 4 refused to describe them (error code 31)")
    with pytest.raises(SessionTimeoutRefusedError) as caught:
        await member().getmany(TP, timeout_ms=1000)
    assert str(caught.value) == WITHOUT_RANGE


async def test_other_errors_and_the_records_pass_through_untouched(
    fetches: Fetches, coordinator: Coordinator, member: Callable[..., GroupMemberConsumer]
) -> None:
    consumer = member()
    assert await consumer.getmany(TP, timeout_ms=1000) == {TP: ["r"]}
    assert fetches.calls == [((TP,), 1000, None)]
    fetches.error = other = UnknownMemberIdError()
    with pytest.raises(UnknownMemberIdError) as caught:
        await consumer.getmany()
    assert caught.value is other
    assert fetches.calls[1] == ((), 0, None)
    assert coordinator.asked == []


async def test_the_member_s_consumer_joins_its_group_with_its_session_timeout(
    member: Callable[..., GroupMemberConsumer],
) -> None:
    consumer = member(6500)
    assert (
        consumer._client._bootstrap_servers,
        consumer._group_id,
        consumer._session_timeout_ms,
        consumer.member,
    ) == (
        BOOTSTRAP,
        "projectors",
        6500,
        (BOOTSTRAP, "projectors", 6500),
    )


class Recorded:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_a_member_s_consumer_is_a_read_committed_consumer_of_the_member_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    security = {"security_protocol": "SSL"}
    monkeypatch.setattr(clients, "kafka_options", lambda: dict(security))
    built: list[type[Any]] = []

    def read_committed_consumer(bootstrap: str, *, consumer: type[Any], **options: Any) -> Any:
        built.append(consumer)
        return clients.read_committed_consumer(bootstrap, consumer=Recorded, **options)

    monkeypatch.setattr(group_member, "read_committed_consumer", read_committed_consumer)
    made = group_member_consumer(
        BOOTSTRAP, group_id="g", session_timeout_ms=7000, client_id="c", heartbeat_interval_ms=900
    )
    assert built == [GroupMemberConsumer]
    assert made.kwargs == {
        "bootstrap_servers": BOOTSTRAP,
        "group_id": "g",
        "client_id": "c",
        "session_timeout_ms": 7000,
        "heartbeat_interval_ms": 900,
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        **security,
    }
