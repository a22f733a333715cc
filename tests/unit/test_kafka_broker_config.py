"""Broker settings as a broker reports them (`kafka/broker_config.py`), asked of a fake admin client: one
setting of a partition's leader (the leader from the metadata), or several of a consumer group's
coordinator (found by FindCoordinator); one DescribeConfigs of that broker, the admin always closed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin.config_resource import ConfigResourceType
from aiokafka.errors import KafkaError

from turnledger.errors import KafkaUnavailableError, TurnledgerError
from turnledger.kafka import broker_config
from turnledger.kafka.broker_config import (
    PARTITION_VERIFICATION,
    BrokerSettingUnreadable,
    coordinator_settings,
    leader_setting,
)

TP = TopicPartition("turnledger.ingress", 3)
OTHER = ("log.retention.ms", "604800000", False, 5, False, [])


def entry(name: str, value: str | None) -> tuple[Any, ...]:
    return (name, value, False, 5, False, [])


class _Response:
    def __init__(self, resources: list[tuple[Any, ...]]) -> None:
        self.resources = resources


class _Metadata:
    def __init__(self, leaders: dict[TopicPartition, int]) -> None:
        self.leaders = leaders
        self.asked: list[TopicPartition] = []

    def leader_for_partition(self, tp: TopicPartition) -> int | None:
        self.asked.append(tp)
        return self.leaders.get(tp)


class _Admin:
    def __init__(self, cluster: _Cluster, **options: Any) -> None:
        self.cluster = cluster
        self.options = options
        self._client = self
        self.started = 0
        self.closed = 0
        self.described: list[list[dict[str, Any]]] = []

    async def start(self) -> None:
        self.started += 1
        if self.cluster.start_error is not None:
            raise self.cluster.start_error

    async def close(self) -> None:
        self.closed += 1

    async def fetch_all_metadata(self) -> _Metadata:
        return self.cluster.metadata

    async def find_coordinator(self, group_id: str) -> int:
        self.cluster.coordinators_asked.append(group_id)
        if self.cluster.coordinator_error is not None:
            raise self.cluster.coordinator_error
        return self.cluster.coordinator

    async def describe_configs(self, resources: list[Any]) -> list[_Response]:
        self.described.append([vars(r) for r in resources])
        if self.cluster.describe_error is not None:
            raise self.cluster.describe_error
        return [_Response(self.cluster.resources)]


class _Cluster:
    def __init__(self) -> None:
        self.metadata = _Metadata({TP: 2})
        self.resources: list[tuple[Any, ...]] = []
        self.start_error: BaseException | None = None
        self.describe_error: BaseException | None = None
        self.admins: list[_Admin] = []
        self.coordinator = 4
        self.coordinator_error: BaseException | None = None
        self.coordinators_asked: list[str] = []

    def admin(self, **options: Any) -> _Admin:
        admin = _Admin(self, **options)
        self.admins.append(admin)
        return admin

    def broker(self, broker_id: str, *entries: tuple[Any, ...]) -> None:
        self.resources.append((0, None, ConfigResourceType.BROKER.value, broker_id, list(entries)))


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> _Cluster:
    fake = _Cluster()
    monkeypatch.setattr(broker_config, "AIOKafkaAdminClient", fake.admin)
    monkeypatch.setattr(broker_config, "kafka_options", lambda: {"security_protocol": "SSL"})
    return fake


async def read(name: str = PARTITION_VERIFICATION, tp: TopicPartition = TP) -> str | None:
    return await asyncio.wait_for(leader_setting("k:9092", tp, name), 10)


def test_the_setting_is_kip_890_produce_verification() -> None:
    assert PARTITION_VERIFICATION == "transaction.partition.verification.enable"


async def test_the_setting_is_asked_of_the_leader_of_the_partition_and_returned_as_text(
    cluster: _Cluster,
) -> None:
    cluster.broker("2", OTHER, entry(PARTITION_VERIFICATION, "true"), entry("x", "false"))
    assert await read() == "true"
    [admin] = cluster.admins
    assert admin.options == {"bootstrap_servers": "k:9092", "security_protocol": "SSL"}
    assert cluster.metadata.asked == [TP]
    assert admin.described == [
        [{"resource_type": ConfigResourceType.BROKER, "name": "2", "configs": {PARTITION_VERIFICATION: None}}]
    ]
    assert (admin.started, admin.closed) == (1, 1)


async def test_any_setting_can_be_asked_by_name(cluster: _Cluster) -> None:
    cluster.broker("2", entry(PARTITION_VERIFICATION, "true"), OTHER)
    assert await read("log.retention.ms") == "604800000"
    assert cluster.admins[0].described[0][0]["configs"] == {"log.retention.ms": None}


async def test_the_setting_is_found_in_a_later_resource_of_the_response(cluster: _Cluster) -> None:
    cluster.broker("1", OTHER)
    cluster.broker("2", entry(PARTITION_VERIFICATION, "false"))
    assert await read() == "false"


async def test_a_value_that_is_not_text_is_returned_as_text(cluster: _Cluster) -> None:
    cluster.broker("2", (PARTITION_VERIFICATION, 1, False, 5, False, []))
    assert await read() == "1"


@pytest.mark.parametrize("leader", [None, -1, -7])
async def test_a_partition_without_a_leader_has_no_setting_and_no_broker_is_asked(
    cluster: _Cluster, leader: int | None
) -> None:
    cluster.metadata = _Metadata({} if leader is None else {TP: leader})
    cluster.broker("0", entry(PARTITION_VERIFICATION, "true"))
    assert await read() is None
    [admin] = cluster.admins
    assert cluster.metadata.asked == [TP]
    assert (admin.described, admin.closed) == ([], 1)


async def test_broker_zero_is_a_leader(cluster: _Cluster) -> None:
    cluster.metadata = _Metadata({TP: 0})
    cluster.broker("0", entry(PARTITION_VERIFICATION, "true"))
    assert await read() == "true"
    assert cluster.admins[0].described[0][0]["name"] == "0"


async def test_a_setting_without_a_value_is_none(cluster: _Cluster) -> None:
    cluster.broker("2", entry(PARTITION_VERIFICATION, None), OTHER)
    assert await read() is None


async def test_a_setting_the_broker_does_not_report_is_none(cluster: _Cluster) -> None:
    cluster.broker("2", OTHER)
    cluster.broker("3")
    assert await read() is None
    assert cluster.admins[0].closed == 1


async def test_an_unreachable_cluster_is_reported_with_the_setting_it_was_for(cluster: _Cluster) -> None:
    cluster.start_error = TimeoutError("no answer")
    with pytest.raises(KafkaUnavailableError) as caught:
        await read()
    assert str(caught.value) == (
        "Kafka is not reachable at 'k:9092' while trying to read the broker setting "
        "transaction.partition.verification.enable (TimeoutError: no answer). Start the local stack "
        "with `turnledger dev up` and export KAFKA_BOOTSTRAP_SERVERS, or set KAFKA_BOOTSTRAP_SERVERS "
        "(or --bootstrap) to a reachable broker list host:port[,host:port]."
    )
    [admin] = cluster.admins
    assert (admin.started, admin.closed, cluster.metadata.asked) == (1, 1, [])


async def test_an_error_while_describing_propagates_and_the_admin_is_closed(cluster: _Cluster) -> None:
    cluster.describe_error = KafkaError("describe failed")
    with pytest.raises(KafkaError) as caught:
        await read()
    assert caught.value is cluster.describe_error
    assert cluster.admins[0].closed == 1


@pytest.mark.parametrize(
    ("message", "said"),
    [("Cluster authorization failed.", ": Cluster authorization failed."), (None, ""), ("", "")],
    ids=["with the broker's message", "without", "empty"],
)
async def test_a_describe_the_broker_refuses_is_unreadable_not_unset(
    cluster: _Cluster, message: str | None, said: str
) -> None:
    cluster.resources.append((31, message, ConfigResourceType.BROKER.value, "2", []))
    with pytest.raises(BrokerSettingUnreadable) as caught:
        await read()
    assert str(caught.value) == (
        f"broker 2 refused to describe transaction.partition.verification.enable (error code 31{said})"
    )
    assert isinstance(caught.value, TurnledgerError)
    assert cluster.admins[0].closed == 1


MIN, MAX = "group.min.session.timeout.ms", "group.max.session.timeout.ms"


async def read_coordinator(group: str = "projectors") -> dict[str, str | None]:
    return await asyncio.wait_for(coordinator_settings("k:9092", group, (MIN, MAX)), 10)


async def test_the_settings_are_asked_of_the_group_s_coordinator_and_returned_by_name(
    cluster: _Cluster,
) -> None:
    cluster.broker("4", OTHER, entry(MIN, "6000"), entry(MAX, "1800000"))
    assert await read_coordinator() == {MIN: "6000", MAX: "1800000"}
    [admin] = cluster.admins
    assert admin.options == {"bootstrap_servers": "k:9092", "security_protocol": "SSL"}
    assert cluster.coordinators_asked == ["projectors"] and cluster.metadata.asked == []
    assert admin.described == [
        [{"resource_type": ConfigResourceType.BROKER, "name": "4", "configs": {MIN: None, MAX: None}}]
    ]
    assert (admin.started, admin.closed) == (1, 1)


async def test_a_setting_the_coordinator_does_not_report_is_absent_one_without_a_value_none(
    cluster: _Cluster,
) -> None:
    cluster.coordinator = 0
    cluster.broker("0", entry(MAX, None), OTHER)
    assert await read_coordinator() == {MAX: None}
    assert cluster.admins[0].described[0][0]["name"] == "0"


async def test_the_first_value_a_coordinator_reports_for_a_setting_is_kept(cluster: _Cluster) -> None:
    cluster.broker("4", entry(MIN, "1000"))
    cluster.broker("4", entry(MIN, "2000"), entry(MAX, "3000"))
    assert await read_coordinator() == {MIN: "1000", MAX: "3000"}


async def test_an_unreachable_cluster_is_reported_with_the_settings_it_was_for(cluster: _Cluster) -> None:
    cluster.start_error = TimeoutError("no answer")
    with pytest.raises(KafkaUnavailableError) as caught:
        await read_coordinator()
    assert str(caught.value).startswith(
        "Kafka is not reachable at 'k:9092' while trying to read the broker settings "
        f"{MIN}, {MAX} (TimeoutError: no answer). "
    )
    assert (cluster.admins[0].closed, cluster.coordinators_asked) == (1, [])


async def test_a_coordinator_that_cannot_be_found_propagates_and_the_admin_is_closed(
    cluster: _Cluster,
) -> None:
    cluster.coordinator_error = KafkaError("Unable to get coordinator id for projectors")
    with pytest.raises(KafkaError) as caught:
        await read_coordinator()
    assert caught.value is cluster.coordinator_error
    assert (cluster.admins[0].described, cluster.admins[0].closed) == ([], 1)


async def test_a_describe_the_coordinator_refuses_names_every_setting(cluster: _Cluster) -> None:
    cluster.resources.append((31, "Cluster authorization failed.", ConfigResourceType.BROKER.value, "4", []))
    with pytest.raises(BrokerSettingUnreadable) as caught:
        await read_coordinator()
    assert str(caught.value) == (
        f"broker 4 refused to describe {MIN}, {MAX} (error code 31: Cluster authorization failed.)"
    )
    assert cluster.admins[0].closed == 1
