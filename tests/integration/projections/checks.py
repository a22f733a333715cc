"""What several projection tests check the same way: a projector through some Redis client ends with
the projection a direct projection of the same records makes (`round_trip`, `direct_snapshot`, a node
asked directly: `node_holds`), and waiting for a following projector without missing that it died."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import redis
import redis.asyncio as aioredis

from tests.integration.projections.workload import produce, settled, workload
from turnledger.model.base import Frozen
from turnledger.processors.topics import ensure_topics
from turnledger.projections.direct import project_records
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.snapshot import diff_snapshots, drop_prefix, snapshot
from turnledger.topology import Topics


async def round_trip(
    client: aioredis.Redis,
    reference: aioredis.Redis,
    bootstrap: str,
    topics: Topics,
    prefix: str,
    conversations: int,
) -> None:
    """Produce the workload of `conversations`, project it through `client` (`run_to_end`) under
    `prefix`live: and directly through `reference` under `prefix`ref:; the projections are equal and so
    is every conversation's history as `ProjectionReader` (serve, history) reads it from each."""
    await ensure_topics(bootstrap, topics, partitions=2)
    records = workload(conversations)
    await produce(
        bootstrap, topics, records, per_transaction=5, abort_every=0, transactional_id=topics.prefix
    )
    await settled(bootstrap, topics.outputs)
    await project_records(reference, ProjectionKeys(prefix + "ref:"), records)
    try:
        stats = await Projector(client, bootstrap, topics, ProjectionKeys(prefix + "live:")).run_to_end()
        assert stats.applied > 0 and stats.undecodable == 0
        live = await snapshot(client, prefix + "live:")
        assert live and diff_snapshots(live, await snapshot(reference, prefix + "ref:")) == []
        through, direct = (
            ProjectionReader(client, prefix + "live:"),
            ProjectionReader(reference, prefix + "ref:"),
        )
        for conv in [f"conv-{i}" for i in range(conversations)]:
            history = await through.history(conv)
            assert history and history == await direct.history(conv)
    finally:
        await drop_prefix(client, prefix + "live:")


async def until(
    condition: Callable[[], Awaitable[bool]],
    projector: asyncio.Task[object],
    what: str,
    timeout_s: float = 120,
) -> None:
    """Until `condition` holds; a projector that ended meanwhile fails the test with its error."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if projector.done():
            raise AssertionError(f"the projector ended while waiting for {what}") from projector.exception()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def waiting_out_an_outage(projector: Projector) -> bool:
    """A condition for `until`: the following projector is waiting an outage out."""
    follower = projector.follower
    return follower is not None and follower.outage is not None


async def direct_snapshot(
    redis: aioredis.Redis, prefix: str, records: Sequence[tuple[str, Frozen]]
) -> dict[str, object]:
    """The projection of `records` made directly under `prefix`: what a projector must end with."""
    keys = ProjectionKeys(prefix)
    await project_records(redis, keys, records)
    return await snapshot(redis, keys.base)


def node_holds(port: int, base: str, expected: dict[str, object]) -> Callable[[], Awaitable[bool]]:
    """A condition for `until`: the Redis node at `port`, asked directly, holds `expected` under `base`."""

    async def check() -> bool:
        node = aioredis.Redis(port=port)
        try:
            return diff_snapshots(await snapshot(node, base), expected) == []
        finally:
            await node.aclose()

    return check


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Until `condition` holds (a Redis error counts as not yet), from code that is not a coroutine."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
