"""The projector's follow mode (`run_forever`) on the real processor's outputs.

The follower starts on empty topics; the dispatch workload then arrives in two halves, each
folded by the real processor. It must apply what is produced after it started, and a stop
in the middle of the second half must leave Redis offsets that are exactly the last record
applied per partition, so a restart neither skips nor re-applies anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from tests.dispatch_workload import build
from tests.integration.projections.workload import settled
from tests.integration.replay.ingress_workload import run_processor
from tests.integration.test_processor_eos import produce, wait_for
from turnledger.codec import encode
from turnledger.kafka.reading import partitions_of, read_to_end, start_reader
from turnledger.processors.topics import ensure_topics
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector, ProjectorStats
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.snapshot import diff_snapshots, snapshot
from turnledger.replay.rebuild import project_fresh_fold
from turnledger.topology import PROJECTED_STREAMS, Topics

pytestmark = pytest.mark.integration


async def record_offsets(bootstrap: str, topics: list[str]) -> dict[str, list[int]]:
    """`topic:partition` -> offsets of its committed records (the projector records the last one)."""
    consumer = await start_reader(bootstrap)
    out: dict[str, list[int]] = {}
    try:
        async for batch in read_to_end(consumer, await partitions_of(consumer, bootstrap, topics)):
            for r in batch:
                out.setdefault(f"{r.topic}:{r.partition}", []).append(r.offset)
    finally:
        await consumer.stop()
    return out


async def last_record_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    return {tp: offsets[-1] for tp, offsets in (await record_offsets(bootstrap, topics)).items()}


async def test_follow_mode_applies_new_records_and_a_stop_leaves_offsets_consistent(
    kafka_bootstrap: str,
    topic_name: Callable[[str], str],
    redis_client: aioredis.Redis,
    redis_prefix: str,
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    projected = list(topics.by_topic(PROJECTED_STREAMS))
    events = build(copies=1, global_ops=True).events
    half = len(events) // 2
    keys = ProjectionKeys(redis_prefix + "live:")
    reader = ProjectionReader(redis_client, keys.prefix)

    seen: list[ProjectorStats] = []
    stop = asyncio.Event()
    first_half_applied = 0

    def report(stats: ProjectorStats) -> None:
        seen.append(stats)
        if first_half_applied and stats.applied > first_half_applied:
            stop.set()  # stop mid-stream, as soon as the second half starts arriving

    follower = asyncio.create_task(
        Projector(redis_client, kafka_bootstrap, topics, keys, batch_size=20).run_forever(stop, report)
    )
    try:
        await asyncio.sleep(1.0)  # let it start on empty topics
        assert not follower.done() and await reader.applied_offsets() == {}

        await produce(
            kafka_bootstrap, topics.ingress, [(e.conversation_id, encode(e)) for e in events[:half]]
        )
        await run_processor(kafka_bootstrap, topics, batch_max_records=25)
        await settled(kafka_bootstrap, topics.outputs)
        expected = await last_record_offsets(kafka_bootstrap, projected)
        assert expected

        async def caught_up() -> bool:
            if follower.done():
                follower.result()
                raise AssertionError("the follower stopped on its own")
            return await reader.applied_offsets() == expected

        await wait_for(caught_up, 30, "the follower to apply the first half")
        first_half_applied = seen[-1].applied
        assert seen[-1].skipped == 0

        await produce(
            kafka_bootstrap, topics.ingress, [(e.conversation_id, encode(e)) for e in events[half:]]
        )
        await run_processor(kafka_bootstrap, topics, batch_max_records=25)
        stats = await asyncio.wait_for(follower, 30)
    finally:
        stop.set()
        if not follower.done():
            await asyncio.wait_for(follower, 30)
    assert stats.applied > first_half_applied and stats.skipped == 0
    await settled(kafka_bootstrap, topics.outputs)

    # Stopped mid-stream: every applied offset is a record the follower applied, no further.
    stopped_at = await reader.applied_offsets()
    everything = await last_record_offsets(kafka_bootstrap, projected)
    assert all(stopped_at[tp] <= everything[tp] for tp in stopped_at)
    assert stopped_at != everything, "the stop came before the end of the second half"

    resumed = await Projector(redis_client, kafka_bootstrap, topics, keys, batch_size=50).run_to_end()
    assert resumed.skipped == 0, "a restart starts right after the applied offsets"
    total = stats.applied + resumed.applied
    assert total == sum(len(o) for o in (await record_offsets(kafka_bootstrap, projected)).values())
    assert await reader.applied_offsets() == everything

    fresh = ProjectionKeys(redis_prefix + "fresh:")
    await project_fresh_fold(redis_client, kafka_bootstrap, topics, fresh)
    assert (
        diff_snapshots(await snapshot(redis_client, keys.prefix), await snapshot(redis_client, fresh.prefix))
        == []
    )
