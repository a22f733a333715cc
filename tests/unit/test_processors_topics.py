"""`processors/topics.py` without a broker: `ensure_topics` against a scripted admin client (what it
creates and with which settings, which answers it tolerates, which existing topics it refuses),
`_wait_for_leaders` on a clock that moves only when it sleeps, and `topic_configs`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.protocol.admin import (
    CreateTopicsResponse_v0,
    CreateTopicsResponse_v1,
    DescribeConfigsResponse_v1,
)

from turnledger.errors import KafkaAccessError, KafkaUnavailableError
from turnledger.kafka.kerberos import KdcUnavailable
from turnledger.processors import topics as topics_module
from turnledger.processors.errors import TopicMismatchError
from turnledger.processors.topics import _wait_for_leaders, ensure_topics, topic_configs
from turnledger.topology import Topics

BOOTSTRAP = "b1:9092"
TOPICS = Topics("t.")
OPTIONS = {"security_protocol": "SSL", "client_id": "from-the-settings"}


def _topic(name: str, *leaders: int, error_code: int = 0) -> dict[str, Any]:
    """One topic of `describe_topics`, shaped as aiokafka's `MetadataResponse.to_object()` gives it."""
    return {
        "error_code": error_code,
        "topic": name,
        "is_internal": False,
        "partitions": [
            {"error_code": 0, "partition": p, "leader": leader, "replicas": [leader], "isr": [leader]}
            for p, leader in enumerate(leaders)
        ],
    }


def _led(partitions: int = 3, counts: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Every topic of `TOPICS` with a leader (broker 0) on each partition."""
    counts = counts or {}
    return [_topic(name, *[0] * counts.get(name, partitions)) for name in TOPICS.all]


def _answer(codes: dict[str, int] | None = None) -> CreateTopicsResponse_v1:
    """`create_topics`' answer: 0 (created) for each topic, or its code in `codes`."""
    codes = codes or {}
    return CreateTopicsResponse_v1(topic_errors=[(name, codes.get(name, 0), None) for name in TOPICS.all])


EXISTING = _answer(dict.fromkeys(TOPICS.all, 36))


class Admin:
    """aiokafka's admin client as `ensure_topics` uses it: each `describe_topics` answers the next of
    `described`, the changelog's configs are `changelog_configs`, and every call is written down."""

    def __init__(
        self,
        created: Any = None,
        described: list[list[dict[str, Any]]] | None = None,
        changelog_configs: list[tuple[str, str]] | None = None,
        start_error: BaseException | None = None,
        config_error: tuple[int, str | None] = (0, None),
    ) -> None:
        self.created = _answer() if created is None else created
        self.described = [_led()] if described is None else described
        self.changelog_configs = (
            [("cleanup.policy", "compact")] if changelog_configs is None else changelog_configs
        )
        self.config_error = config_error
        self.start_error = start_error
        self.kwargs: dict[str, Any] = {}
        self.calls: list[str] = []
        self.new_topics: list[NewTopic] = []
        self.timeout_ms: int | None = None
        self.describe_asked: list[list[str]] = []
        self.config_resources: list[ConfigResource] = []

    async def start(self) -> None:
        self.calls.append("start")
        if self.start_error is not None:
            raise self.start_error

    async def create_topics(self, new_topics: list[NewTopic], timeout_ms: int | None = None) -> Any:
        self.calls.append("create_topics")
        self.new_topics, self.timeout_ms = new_topics, timeout_ms
        return self.created

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        self.calls.append("describe_topics")
        self.describe_asked.append(topics)
        if not self.described:
            raise AssertionError("described more often than scripted")
        return self.described.pop(0)

    async def describe_configs(self, resources: list[ConfigResource]) -> list[DescribeConfigsResponse_v1]:
        self.calls.append("describe_configs")
        self.config_resources = resources
        entries: list[tuple[Any, ...]] = [(n, v, False, 5, False, []) for n, v in self.changelog_configs]
        resource = (*self.config_error, ConfigResourceType.TOPIC.value, TOPICS.changelog, entries)
        return [DescribeConfigsResponse_v1(throttle_time_ms=0, resources=[resource])]

    async def close(self) -> None:
        self.calls.append("close")


class Clock:
    """`topics.asyncio` on a clock that moves only when the module sleeps, by the seconds it asks for."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __getattr__(self, name: str) -> object:
        return getattr(asyncio, name)

    def get_running_loop(self) -> Clock:
        return self

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(topics_module, "asyncio", clock)
    return clock


def _install(monkeypatch: pytest.MonkeyPatch, admin: Admin) -> Admin:
    def build(**kwargs: Any) -> Admin:
        admin.kwargs = kwargs
        return admin

    monkeypatch.setattr(topics_module, "AIOKafkaAdminClient", build)
    monkeypatch.setattr(topics_module, "kafka_options", lambda: dict(OPTIONS))
    return admin


async def _ensure(partitions: int = 3, **kwargs: Any) -> None:
    await asyncio.wait_for(ensure_topics(BOOTSTRAP, TOPICS, partitions, **kwargs), 10)


def _fields(topic: NewTopic) -> tuple[Any, ...]:
    return (
        topic.name,
        topic.num_partitions,
        topic.replication_factor,
        topic.replica_assignments,
        topic.topic_configs,
    )


# --------------------------------------------------------------------------------------------- topic_configs


def test_topic_configs_name_only_the_rows_with_settings_and_take_the_previews_retention() -> None:
    assert topic_configs(Topics("p."), 120_000) == {
        "p.turnledger.previews": {"retention.ms": "120000"},
        "p.turnledger.changelog": {"cleanup.policy": "compact"},
    }


# -------------------------------------------------------------------------------------------------- creating


async def test_every_topic_is_created_with_its_settings_and_the_timeouts_in_ms(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    admin = _install(monkeypatch, Admin())
    with caplog.at_level(logging.INFO, logger=topics_module.__name__):
        await _ensure(3, replication=2, previews_retention_ms=120_000, timeout_s=2.5)

    assert admin.kwargs == {"bootstrap_servers": BOOTSTRAP, "request_timeout_ms": 2500, **OPTIONS}
    assert admin.calls == ["start", "create_topics", "describe_topics", "close"]
    assert [_fields(t) for t in admin.new_topics] == [
        ("t.turnledger.ingress", 3, 2, {}, {}),
        ("t.turnledger.committed", 3, 2, {}, {}),
        ("t.turnledger.manifests", 3, 2, {}, {}),
        ("t.turnledger.tool-calls", 3, 2, {}, {}),
        ("t.turnledger.quarantine", 3, 2, {}, {}),
        ("t.turnledger.previews", 3, 2, {}, {"retention.ms": "120000"}),
        ("t.turnledger.rejections", 3, 2, {}, {}),
        ("t.turnledger.changelog", 3, 2, {}, {"cleanup.policy": "compact"}),
    ]
    assert admin.timeout_ms == 2500
    assert admin.describe_asked == [list(TOPICS.all)]
    assert [r.getMessage() for r in caplog.records] == [
        f"created topics {list(TOPICS.all)} (3 partitions, replication 2)"
    ]


async def test_the_defaults_are_replication_1_an_hour_of_previews_and_30_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin = _install(monkeypatch, Admin())
    await _ensure(3)

    assert admin.kwargs["request_timeout_ms"] == admin.timeout_ms == 30_000
    assert {t.replication_factor for t in admin.new_topics} == {1}
    assert admin.new_topics[5].topic_configs == {"retention.ms": "3600000"}


async def test_topics_that_exist_already_are_not_an_error_and_not_logged_as_created(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    admin = _install(monkeypatch, Admin(created=EXISTING))
    with caplog.at_level(logging.INFO, logger=topics_module.__name__):
        await _ensure(3)

    assert admin.calls == ["start", "create_topics", "describe_topics", "describe_configs", "close"]
    assert caplog.records == []


async def test_only_the_topics_created_now_are_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    codes = dict.fromkeys(TOPICS.all, 36)
    codes[TOPICS.previews] = 0
    _install(monkeypatch, Admin(created=_answer(codes), described=[_led(4)]))
    with caplog.at_level(logging.INFO, logger=topics_module.__name__):
        await _ensure(4)

    assert [r.getMessage() for r in caplog.records] == [
        "created topics ['t.turnledger.previews'] (4 partitions, replication 1)"
    ]


async def test_another_error_code_raises_with_the_brokers_message(monkeypatch: pytest.MonkeyPatch) -> None:
    created = CreateTopicsResponse_v1(
        topic_errors=[
            (TOPICS.ingress, 0, None),
            (TOPICS.committed, 36, "Topic 't.turnledger.committed' already exists."),
            (TOPICS.manifests, 37, "Number of partitions must be larger than 0."),
        ]
    )
    admin = _install(monkeypatch, Admin(created=created))
    with pytest.raises(KafkaError) as raised:
        await _ensure(3)

    assert raised.type is KafkaError
    assert raised.value.args == (
        "creating topic 't.turnledger.manifests' failed with error code 37: "
        "Number of partitions must be larger than 0.",
    )
    assert admin.calls == ["start", "create_topics", "close"]


@pytest.mark.parametrize(
    "created",
    [
        pytest.param(
            CreateTopicsResponse_v0(topic_errors=[(TOPICS.ingress, 36), (TOPICS.committed, 29)]), id="v0"
        ),
        pytest.param(
            CreateTopicsResponse_v1(topic_errors=[(TOPICS.ingress, 36, None), (TOPICS.committed, 29, None)]),
            id="v1, no message",
        ),
        pytest.param(
            CreateTopicsResponse_v1(topic_errors=[(TOPICS.ingress, 36, ""), (TOPICS.committed, 29, "")]),
            id="v1, an empty message",
        ),
    ],
)
async def test_an_error_code_the_broker_sent_no_message_with_is_named_alone(
    monkeypatch: pytest.MonkeyPatch, created: Any
) -> None:
    admin = _install(monkeypatch, Admin(created=created))
    with pytest.raises(KafkaError) as raised:
        await _ensure(3)

    assert raised.type is KafkaError
    assert raised.value.args == ("creating topic 't.turnledger.committed' failed with error code 29",)
    assert admin.calls == ["start", "create_topics", "close"]


# -------------------------------------------------------------------------------------------- reaching Kafka


async def test_a_cluster_that_cannot_be_reached_is_unavailable_with_the_clients_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = KafkaConnectionError("Unable to bootstrap from [('b1', 9092)]")
    diagnosed: list[str] = []

    async def diagnose(bootstrap: str) -> None:
        diagnosed.append(bootstrap)

    monkeypatch.setattr(topics_module, "diagnose", diagnose)
    admin = _install(monkeypatch, Admin(start_error=refused))
    with pytest.raises(KafkaUnavailableError) as raised:
        await _ensure(3)

    assert str(raised.value) == (
        "Kafka is not reachable at 'b1:9092' (KafkaConnectionError: Unable to bootstrap from "
        "[('b1', 9092)]). Start the local stack with `turnledger dev up` and export "
        "KAFKA_BOOTSTRAP_SERVERS, or set KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) to a reachable broker "
        "list host:port[,host:port]."
    )
    assert raised.value.cause is refused and raised.value.__cause__ is refused
    assert diagnosed == [BOOTSTRAP]
    assert admin.calls == ["start"]


async def test_a_cluster_behind_a_kdc_that_is_down_names_the_kdc(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = KafkaConnectionError("Unable to bootstrap from [('b1', 9092)]")
    kdc_down = KdcUnavailable("no KDC of EXAMPLE.COM answered")

    async def diagnose(bootstrap: str) -> KdcUnavailable:
        return kdc_down

    monkeypatch.setattr(topics_module, "diagnose", diagnose)
    _install(monkeypatch, Admin(start_error=refused))
    with pytest.raises(KafkaUnavailableError) as raised:
        await _ensure(3)

    assert str(raised.value) == (
        "Kafka is not reachable at 'b1:9092' (KdcUnavailable: no KDC of EXAMPLE.COM answered). "
        + KdcUnavailable.outage_fix
    )
    assert raised.value.cause is kdc_down and raised.value.__cause__ is refused


async def test_a_cluster_that_refuses_our_credentials_is_an_access_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    access = KafkaAccessError(BOOTSTRAP, "SASL_SSL", KafkaConnectionError("bad login"), "Fix it.")

    async def diagnose(bootstrap: str) -> None:
        raise access

    monkeypatch.setattr(topics_module, "diagnose", diagnose)
    _install(monkeypatch, Admin(start_error=KafkaConnectionError("Unable to bootstrap")))
    with pytest.raises(KafkaAccessError) as raised:
        await _ensure(3)

    assert raised.value is access


# ------------------------------------------------------------------------------------------- existing topics


@pytest.mark.parametrize("stream", ["ingress", "changelog"])
async def test_an_ingress_or_changelog_with_another_partition_count_is_refused(
    monkeypatch: pytest.MonkeyPatch, stream: str
) -> None:
    name = getattr(TOPICS, stream)
    admin = _install(monkeypatch, Admin(created=EXISTING, described=[_led(3, {name: 2})]))
    with pytest.raises(TopicMismatchError) as raised:
        await _ensure(3)

    assert str(raised.value) == (
        f"topic {name!r} has 2 partitions, expected 3: ingress and changelog must have the same partition "
        "count (the changelog of input partition p is partition p). Use --partitions that match, or "
        "recreate the topics."
    )
    assert admin.calls == ["start", "create_topics", "describe_topics", "close"]


async def test_another_topic_may_have_another_partition_count(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _install(monkeypatch, Admin(created=EXISTING, described=[_led(3, {TOPICS.committed: 5})]))
    await _ensure(3)

    assert admin.calls[-1] == "close"


async def test_a_changelog_created_now_is_not_checked_for_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = dict.fromkeys(TOPICS.all, 36)
    codes[TOPICS.changelog] = 0
    admin = _install(
        monkeypatch, Admin(created=_answer(codes), changelog_configs=[("cleanup.policy", "delete")])
    )
    await _ensure(3)

    assert "describe_configs" not in admin.calls


async def test_an_existing_changelog_is_asked_for_all_its_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = dict.fromkeys(TOPICS.all, 0)
    codes[TOPICS.changelog] = 36
    admin = _install(monkeypatch, Admin(created=_answer(codes)))
    await _ensure(3)

    [resource] = admin.config_resources
    assert (resource.resource_type, resource.name, resource.configs) == (
        ConfigResourceType.TOPIC,
        TOPICS.changelog,
        None,
    )
    assert admin.calls == ["start", "create_topics", "describe_topics", "describe_configs", "close"]


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
async def test_an_existing_compacted_changelog_is_accepted(
    monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    configs = [("retention.ms", "604800000"), ("cleanup.policy", policy), ("segment.ms", "delete")]
    admin = _install(monkeypatch, Admin(created=EXISTING, changelog_configs=configs))
    await _ensure(3)

    assert admin.calls[-2:] == ["describe_configs", "close"]


async def test_an_existing_changelog_that_is_not_compacted_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configs = [("retention.ms", "604800000"), ("cleanup.policy", "delete")]
    admin = _install(monkeypatch, Admin(created=EXISTING, changelog_configs=configs))
    with pytest.raises(TopicMismatchError) as raised:
        await _ensure(3)

    assert str(raised.value) == (
        "changelog topic 't.turnledger.changelog' has cleanup.policy='delete'; it must be compacted "
        "(cleanup.policy=compact), or restored state would lose conversations after retention."
    )
    assert admin.calls[-2:] == ["describe_configs", "close"]


@pytest.mark.parametrize(
    ("config_error", "said"),
    [((29, "Topic authorization failed."), ": Topic authorization failed."), ((29, None), "")],
    ids=["with the broker's message", "without"],
)
async def test_a_changelog_whose_configs_cannot_be_read_is_refused(
    monkeypatch: pytest.MonkeyPatch, config_error: tuple[int, str | None], said: str
) -> None:
    admin = _install(monkeypatch, Admin(created=EXISTING, changelog_configs=[], config_error=config_error))
    with pytest.raises(TopicMismatchError) as raised:
        await _ensure(3)

    assert str(raised.value) == (
        f"could not read the configs of changelog topic 't.turnledger.changelog' (error code 29{said}), so "
        "it cannot be checked to be compacted: allow this client DescribeConfigs on the topic."
    )
    assert admin.calls[-2:] == ["describe_configs", "close"]


async def test_a_changelog_without_a_cleanup_policy_reported_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configs = [("retention.ms", "604800000"), ("segment.ms", "compact")]
    admin = _install(monkeypatch, Admin(created=EXISTING, changelog_configs=configs))
    with pytest.raises(TopicMismatchError) as raised:
        await _ensure(3)

    assert str(raised.value) == (
        "changelog topic 't.turnledger.changelog': the broker reported no cleanup.policy, so it cannot be "
        "checked to be compacted (cleanup.policy=compact)."
    )
    assert admin.calls[-2:] == ["describe_configs", "close"]


# --------------------------------------------------------------------------------------- waiting for leaders


async def _wait(admin: Admin, timeout_s: float = 30.0) -> Any:
    return await asyncio.wait_for(_wait_for_leaders(admin, ("b", "a"), timeout_s), 10)


@pytest.mark.parametrize(
    "not_ready",
    [
        pytest.param([_topic("a", 0, -1), _topic("b", 1)], id="a partition without a leader"),
        pytest.param([_topic("a", 0, 0, error_code=5), _topic("b", 1)], id="a topic with an error code"),
        pytest.param([_topic("a"), _topic("b", 1)], id="a topic without partitions"),
        pytest.param([_topic("b", 1)], id="a topic missing"),
    ],
)
async def test_the_wait_goes_on_until_every_partition_of_every_topic_has_a_leader(
    clock: Clock, not_ready: list[dict[str, Any]]
) -> None:
    admin = Admin(described=[not_ready, not_ready, [_topic("a", 0, 0), _topic("b", 1)]])

    assert await _wait(admin) == {"a": 2, "b": 1}
    assert admin.describe_asked == [["b", "a"]] * 3
    assert clock.sleeps == [0.1, 0.1]


async def test_at_the_deadline_itself_it_looks_once_more(clock: Clock) -> None:
    waiting = [_topic("a", -1), _topic("b", 0)]
    admin = Admin(described=[waiting, waiting, waiting, [_topic("a", 0), _topic("b", 0)]])

    assert await _wait(admin, timeout_s=0.2) == {"a": 1, "b": 1}
    assert clock.sleeps == [0.1, 0.1, 0.1]


async def test_past_the_deadline_it_gives_up(clock: Clock) -> None:
    waiting = [_topic("a", -1), _topic("b", 0)]
    admin = Admin(described=[waiting] * 4)
    with pytest.raises(KafkaError) as raised:
        await _wait(admin, timeout_s=0.25)

    assert raised.type is KafkaError
    assert raised.value.args == ("topics ['a', 'b'] did not get partition leaders within 0.25s",)
    assert clock.sleeps == [0.1, 0.1, 0.1]


async def test_past_the_deadline_the_topics_last_seen_with_an_error_are_named_with_it(clock: Clock) -> None:
    erring = [_topic("a", 0, error_code=29), _topic("b", error_code=3), _topic("c", -1)]
    admin = Admin(described=[[_topic("a", 0, error_code=5), _topic("b", 0), _topic("c", 0)], erring, erring])
    with pytest.raises(KafkaError) as raised:
        await asyncio.wait_for(_wait_for_leaders(admin, ("a", "b", "c"), 0.15), 10)

    assert raised.value.args == (
        "topics ['a', 'b', 'c'] did not get partition leaders within 0.15s; "
        "a: error code 29; b: error code 3",
    )


async def test_ensure_topics_waits_with_its_timeout_and_closes_the_client_when_it_gives_up(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    waiting = _led(3, {TOPICS.changelog: 0})
    admin = _install(monkeypatch, Admin(described=[waiting] * 6))
    with pytest.raises(KafkaError) as raised:
        await _ensure(3, timeout_s=0.45)

    assert raised.value.args == (f"topics {sorted(TOPICS.all)} did not get partition leaders within 0.45s",)
    assert admin.calls == ["start", "create_topics", *["describe_topics"] * 6, "close"]
