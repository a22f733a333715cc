"""Broker settings as a broker reports them (DescribeConfigs): one partition's leader's, or a consumer
group's coordinator's."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from turnledger.errors import TurnledgerError
from turnledger.kafka.clients import close_client, start_client
from turnledger.kafka.connection import kafka_options

PARTITION_VERIFICATION = "transaction.partition.verification.enable"
"""KIP-890's produce verification: while on, a leader appends a transactional batch only if the
coordinator has the partition in the producer's ongoing transaction."""


class BrokerSettingUnreadable(TurnledgerError):
    """The leader answered DescribeConfigs with an error (an ACL that refuses it, say): the setting's
    value is unknown, which is not the same as not set."""


async def leader_setting(bootstrap: str, tp: TopicPartition, name: str) -> str | None:
    """The value of broker setting `name` on `tp`'s leader; None when there is no leader or the
    broker does not report it. Connection errors propagate; a DescribeConfigs refused raises
    `BrokerSettingUnreadable`."""
    admin = await _admin(bootstrap, [name])
    try:
        leader = (await admin._client.fetch_all_metadata()).leader_for_partition(tp)
        if leader is None or leader < 0:
            return None
        return (await _described(admin, leader, [name])).get(name)
    finally:
        await close_client(admin)


async def coordinator_settings(bootstrap: str, group_id: str, names: Sequence[str]) -> dict[str, str | None]:
    """The broker settings `names` that the coordinator of consumer group `group_id` (the broker that
    judges its members' JoinGroup) reports, by name; errors as `leader_setting`'s, and the coordinator
    lookup's (aiokafka's `KafkaError`s)."""
    admin = await _admin(bootstrap, names)
    try:
        return await _described(admin, await admin.find_coordinator(group_id), names)
    finally:
        await close_client(admin)


async def _admin(bootstrap: str, names: Sequence[str]) -> AIOKafkaAdminClient:
    setting = f"setting {names[0]}" if len(names) == 1 else f"settings {', '.join(names)}"
    return await start_client(
        lambda: AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options()),
        bootstrap=bootstrap,
        action=f"read the broker {setting}",
    )


async def _described(admin: AIOKafkaAdminClient, broker: int, names: Sequence[str]) -> dict[str, str | None]:
    """The settings `names` broker `broker` reports (one it does not report is absent), as text."""
    [response] = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, str(broker), dict.fromkeys(names))]
    )
    values: dict[str, str | None] = {}
    for code, message, _type, _name, entries in response.resources:
        if code != 0:
            said = f": {message}" if message else ""
            raise BrokerSettingUnreadable(
                f"broker {broker} refused to describe {', '.join(names)} (error code {code}{said})"
            )
        for entry in entries:
            if entry[0] in names:
                values.setdefault(entry[0], None if entry[1] is None else str(entry[1]))
    return values
