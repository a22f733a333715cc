"""Two `turnledger project` processes in one consumer group: the partitions move between them (a
member joins, then one is SIGKILLed) while transactions keep arriving, and the projection ends up
equal, key by key, to the same records projected directly: no Redis write lost or applied twice
(a history list would show a duplicate, a counter a wrong sum)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.integration.projections.test_projector_follow import last_record_offsets
from tests.integration.projections.workload import produce, settled, workload
from tests.integration.test_processor_eos import Child, wait_for
from turnledger.model.base import Frozen
from turnledger.processors.topics import ensure_topics
from turnledger.projections.direct import project_records
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.snapshot import diff_snapshots, snapshot
from turnledger.topology import PROJECTED_STREAMS, Topics

pytestmark = pytest.mark.integration

ASSIGNED = re.compile(r"rebalance: (\d+) partitions assigned")


def projector(bootstrap: str, redis_url: str, topics: Topics, keys: str, group: str, log: Path) -> Child:
    args = [
        "project",
        "--bootstrap",
        bootstrap,
        "--redis-url",
        redis_url,
        "--topic-prefix",
        topics.prefix,
        "--key-prefix",
        keys,
        "--group-id",
        group,
        "--session-timeout-ms",
        "6000",
        "--heartbeat-interval-ms",
        "1000",
        "--batch-size",
        "7",
    ]
    return Child(args, log, module="turnledger.cli")


def last_assigned(child: Child) -> int:
    counts = ASSIGNED.findall(child.output())
    return int(counts[-1]) if counts else -1


@pytest.mark.slow
async def test_projector_moved_between_two_instances_applies_every_record_once(
    kafka_bootstrap: str,
    redis_url: str,
    topic_name: Callable[[str], str],
    redis_client: aioredis.Redis,
    redis_prefix: str,
    tmp_path: Path,
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    projected = list(topics.by_topic(PROJECTED_STREAMS))
    total = len(projected) * 3
    records = workload(18)  # 18 conversations, in order, one after the other
    per_wave = len(records) // 3
    waves: list[Sequence[tuple[str, Frozen]]] = [records[i * per_wave : (i + 1) * per_wave] for i in range(2)]
    waves.append(records[2 * per_wave :])
    live = ProjectionKeys(redis_prefix + "live:")
    reader = ProjectionReader(redis_client, live.prefix)
    group = f"{topics.prefix}projectors"

    async def produce_wave(n: int) -> None:
        await produce(
            kafka_bootstrap,
            topics,
            waves[n],
            per_transaction=5,
            abort_every=4,
            transactional_id=f"{topics.prefix}w{n}",
        )
        await settled(kafka_bootstrap, topics.outputs)

    async def all_applied(*members: Child) -> None:
        expected = await last_record_offsets(kafka_bootstrap, projected)

        async def done() -> bool:
            for m in members:
                assert m.proc.poll() is None, m.output()[-3000:]
            return await reader.applied_offsets() == expected

        await wait_for(done, 60, "every committed record to be applied")

    first = projector(kafka_bootstrap, redis_url, topics, live.prefix, group, tmp_path / "a.log")
    second: Child | None = None
    try:
        await wait_for(
            lambda: _true(last_assigned(first) == total), 60, "the first projector to own everything"
        )
        await produce_wave(0)
        await all_applied(first)

        second = projector(kafka_bootstrap, redis_url, topics, live.prefix, group, tmp_path / "b.log")

        async def shared() -> bool:
            a, b = last_assigned(first), last_assigned(second)  # type: ignore[arg-type]
            return a > 0 and b > 0 and a + b == total

        await wait_for(shared, 60, "the two projectors to share the partitions")
        await produce_wave(1)
        await all_applied(first, second)

        os.kill(first.proc.pid, signal.SIGKILL)
        assert await first.wait(10) == -signal.SIGKILL
        await produce_wave(2)  # arrives while the group still waits for the dead member's session
        await wait_for(lambda: _true(last_assigned(second) == total), 60, "the survivor to own everything")
        await all_applied(second)
        second.signal(signal.SIGTERM)
        assert await second.wait(30) == 0, second.output()[-3000:]
    finally:
        first.kill()
        if second is not None:
            second.kill()

    reference = ProjectionKeys(redis_prefix + "ref:")
    await project_records(redis_client, reference, records)
    assert (
        diff_snapshots(
            await snapshot(redis_client, live.prefix), await snapshot(redis_client, reference.prefix)
        )
        == []
    )


async def _true(value: bool) -> bool:
    return value
