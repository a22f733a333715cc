"""`ensure_topics` on the real broker: idempotent, and refuses topics the runtime cannot use."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from turnledger.errors import KafkaUnavailableError
from turnledger.processors.errors import TopicMismatchError
from turnledger.processors.topics import ensure_topics
from turnledger.topology import Topics

pytestmark = pytest.mark.integration


async def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    return {e[0]: e[1] for r in responses for res in r.resources for e in res[4]}


async def test_creates_all_topics_once_with_their_configs(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=3, previews_retention_ms=120_000)
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(list(topics.all))}
    finally:
        await admin.close()
    assert described == dict.fromkeys(topics.all, 3)
    assert (await _configs(kafka_bootstrap, topics.changelog))["cleanup.policy"] == "compact"
    assert (await _configs(kafka_bootstrap, topics.previews))["retention.ms"] == "120000"


async def test_partition_count_mismatch_is_refused(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    with pytest.raises(TopicMismatchError, match="has 2 partitions, expected 4"):
        await ensure_topics(kafka_bootstrap, topics, partitions=4)


async def test_uncompacted_changelog_is_refused(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topics.changelog, 1, 1, topic_configs={"cleanup.policy": "delete"})]
        )
    finally:
        await admin.close()
    with pytest.raises(TopicMismatchError, match="must be compacted"):
        await ensure_topics(kafka_bootstrap, topics, partitions=1)


async def test_unreachable_broker_is_a_typed_error() -> None:
    with pytest.raises(KafkaUnavailableError, match="turnledger dev up"):
        await ensure_topics("127.0.0.1:1", Topics("x."), partitions=1, timeout_s=2)
