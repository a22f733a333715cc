"""One broker setting, as the leader of a partition reports it (DescribeConfigs)."""

from __future__ import annotations

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
    admin = await start_client(
        lambda: AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options()),
        bootstrap=bootstrap,
        action=f"read the broker setting {name}",
    )
    try:
        leader = (await admin._client.fetch_all_metadata()).leader_for_partition(tp)
        if leader is None or leader < 0:
            return None
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(leader), {name: None})]
        )
        for code, message, _type, _name, entries in response.resources:
            if code != 0:
                said = f": {message}" if message else ""
                raise BrokerSettingUnreadable(
                    f"broker {leader} refused to describe {name} (error code {code}{said})"
                )
            for entry in entries:
                if entry[0] == name:
                    return None if entry[1] is None else str(entry[1])
        return None
    finally:
        await close_client(admin)
