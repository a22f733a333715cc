"""`turnledger project` with a session timeout below the broker's group.min.session.timeout.ms (the
devstack keeps Kafka's 6000): the broker refuses the JoinGroup, and the command ends in one line naming
the flag, the value and the coordinator's range, exit 2, no traceback (`kafka/group_member.py`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.integration.test_processor_eos import Child
from turnledger.processors.topics import ensure_topics
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

WITHIN_S = 90
"""Seconds the command may take to say it: a start, one refused JoinGroup, one DescribeConfigs and the
consumer's close take a few."""


async def test_project_with_a_session_timeout_the_broker_refuses_exits_2_in_one_line(
    kafka_bootstrap: str,
    redis_url: str,
    topic_name: Callable[[str], str],
    redis_client: aioredis.Redis,
    redis_prefix: str,
    tmp_path: Path,
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=1)
    group = f"{topics.prefix}projectors"
    args = [
        "project",
        "--bootstrap",
        kafka_bootstrap,
        "--redis-url",
        redis_url,
        "--topic-prefix",
        topics.prefix,
        "--key-prefix",
        redis_prefix,
        "--group-id",
        group,
        "--session-timeout-ms",
        "1000",
        "--heartbeat-interval-ms",
        "300",
    ]
    child = Child(args, tmp_path / "project.log", module="turnledger.cli")
    try:
        status = await child.wait(WITHIN_S)
    finally:
        child.kill()
    output = child.output()
    assert status == 2, output[-3000:]
    assert (
        f"turnledger: Kafka at {kafka_bootstrap!r} refused --session-timeout-ms 1000 for consumer group "
        f"{group!r} (InvalidSessionTimeoutError): the group's coordinator takes 6000 to 1800000 ms "
        "(group.min.session.timeout.ms to group.max.session.timeout.ms). Pass a --session-timeout-ms in "
        "that range, or change those broker settings."
    ) in output.splitlines(), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
