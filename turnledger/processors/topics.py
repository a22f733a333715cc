"""Idempotent creation of the topics of `turnledger.topology`, and checks of the ones that exist.

Ingress and changelog must have the same partition count (see `topology`): a mismatch
would restore the wrong state, so `ensure_topics` refuses to run against one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, KafkaError

from turnledger.errors import KafkaUnavailableError
from turnledger.kafka.connection import diagnose, kafka_options
from turnledger.processors.errors import TopicMismatchError
from turnledger.topology import DEFAULT_PREVIEWS_RETENTION_MS, TOPOLOGY, Stream, Topics, topic_settings

log = logging.getLogger(__name__)

TOPIC_ALREADY_EXISTS = 36


def topic_configs(topics: Topics, previews_retention_ms: int) -> dict[str, dict[str, str]]:
    """Per physical topic, the configs of its row in `TOPOLOGY` (with the previews' retention given)."""
    retention = {Stream.PREVIEWS: previews_retention_ms}
    return {
        topics.name(spec.stream): settings
        for spec in TOPOLOGY
        if (settings := topic_settings(spec, retention))
    }


async def ensure_topics(
    bootstrap: str,
    topics: Topics,
    partitions: int,
    replication: int = 1,
    *,
    previews_retention_ms: int = DEFAULT_PREVIEWS_RETENTION_MS,
    timeout_s: float = 30.0,
) -> None:
    """Create every topic of `topics` that does not exist yet; verify the ones that do.

    Raises `TopicMismatchError` when an existing ingress or changelog topic has another
    partition count than `partitions`, or the changelog is not compacted; raises
    `KafkaUnavailableError` when the cluster cannot be reached.
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000), **kafka_options()
    )
    try:
        await admin.start()
    except KafkaConnectionError as exc:
        # a refused login or certificate: KafkaAccessError; a KDC down: the outage's cause
        raise KafkaUnavailableError(bootstrap, await diagnose(bootstrap) or exc) from exc
    try:
        configs = topic_configs(topics, previews_retention_ms)
        new = [
            NewTopic(name, partitions, replication, topic_configs=configs.get(name, {}))
            for name in topics.all
        ]
        response = await admin.create_topics(new, timeout_ms=int(timeout_s * 1000))
        created = []
        for name, code, *rest in response.topic_errors:
            if code == 0:
                created.append(name)
            elif code != TOPIC_ALREADY_EXISTS:
                raise KafkaError(f"creating topic {name!r} failed with error code {code}{_said(rest)}")
        if created:
            log.info("created topics %s (%d partitions, replication %d)", created, partitions, replication)
        counts = await _wait_for_leaders(admin, topics.all, timeout_s)
        for name in (topics.ingress, topics.changelog):
            if counts[name] != partitions:
                raise TopicMismatchError(
                    f"topic {name!r} has {counts[name]} partitions, expected {partitions}: ingress and "
                    "changelog must have the same partition count (the changelog of input partition p is "
                    "partition p). Use --partitions that match, or recreate the topics."
                )
        if topics.changelog not in created:
            await _check_compacted(admin, topics.changelog)
    finally:
        await admin.close()


async def _wait_for_leaders(
    admin: AIOKafkaAdminClient, names: tuple[str, ...], timeout_s: float
) -> Mapping[str, int]:
    """New topics take a moment to reach every broker's metadata; wait until each partition has a leader."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        described = await admin.describe_topics(list(names))
        counts: dict[str, int] = {}
        errors: dict[str, int] = {}
        ready = True
        for topic in described:
            parts = topic["partitions"]
            if topic["error_code"] != 0:
                errors[topic["topic"]] = topic["error_code"]
            if topic["error_code"] != 0 or not parts or any(p["leader"] < 0 for p in parts):
                ready = False
            counts[topic["topic"]] = len(parts)
        if ready and all(n in counts for n in names):
            return counts
        if asyncio.get_running_loop().time() > deadline:
            seen = "".join(f"; {name}: error code {code}" for name, code in sorted(errors.items()))
            raise KafkaError(
                f"topics {sorted(names)} did not get partition leaders within {timeout_s}s{seen}"
            )
        await asyncio.sleep(0.1)


def _said(rest: list[object]) -> str:
    """The broker's error message after an error code, when it sent one."""
    return f": {rest[0]}" if rest and rest[0] else ""


async def _check_compacted(admin: AIOKafkaAdminClient, changelog: str) -> None:
    """Refuse a changelog that is not compacted, and one whose cleanup policy cannot be read: either
    way the check cannot vouch that restored state keeps every conversation."""
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, changelog)])
    policies: list[object] = []
    for response in responses:
        for code, *rest, _type, _name, entries in response.resources:
            if code != 0:
                raise TopicMismatchError(
                    f"could not read the configs of changelog topic {changelog!r} (error code {code}"
                    f"{_said(rest)}), so it cannot be checked to be compacted: allow this client "
                    "DescribeConfigs on the topic."
                )
            policies += [entry[1] for entry in entries if entry[0] == "cleanup.policy"]
    if not policies:
        raise TopicMismatchError(
            f"changelog topic {changelog!r}: the broker reported no cleanup.policy, so it cannot be "
            "checked to be compacted (cleanup.policy=compact)."
        )
    for policy in policies:
        if "compact" not in str(policy):
            raise TopicMismatchError(
                f"changelog topic {changelog!r} has cleanup.policy={policy!r}; it must be "
                "compacted (cleanup.policy=compact), or restored state would lose conversations "
                "after retention."
            )
