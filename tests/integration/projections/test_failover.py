"""The projector through a Redis failover that loses its last writes, as a managed Redis's is.

Two real redis-servers, A the primary and B its replica, behind one address (a proxy standing for a
managed primary endpoint). The projector follows the topics through that address. B stops
replicating after the first part of the records (it is promoted: what a replica that lagged holds
at a failover); the projector applies the second part on A alone; then the address moves to B and A is
demoted to B's replica, which throws A's second part away. The projector's open connection still
reaches A, whose answer to the next batch is READONLY. It must wait that out, connect again (to B),
position itself from B's offsets and apply the second part again, so that B ends holding exactly the
projection of every record: nothing lost, nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.integration.projections.checks import until
from tests.integration.projections.workload import produce, settled, workload
from tests.integration.switchable_proxy import SwitchableProxy
from tests.integration.worker_ports import RESTART_PORTS
from turnledger.devstack.restartable import RestartableRedis
from turnledger.processors.topics import ensure_topics
from turnledger.projections.direct import project_records
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector, applied_offsets
from turnledger.projections.snapshot import diff_snapshots, snapshot
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

PREFIX = "tl:"


async def test_a_failover_that_lost_the_last_batches_is_projected_again_in_full(
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    records = workload(6)
    first, second = len(records) // 3, 2 * len(records) // 3
    parts = [records[:first], records[first:second], records[second:]]
    keys = ProjectionKeys(PREFIX)

    async def reference(upto: int) -> dict[str, object]:
        """The projection of the first `upto` parts, made directly in the devstack's Redis."""
        ref = ProjectionKeys(f"{redis_prefix}ref{upto}:")
        await project_records(redis_client, ref, [r for part in parts[:upto] for r in part])
        return await snapshot(redis_client, ref.prefix)

    def holds(node: aioredis.Redis, expected: dict[str, object]) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return diff_snapshots(await snapshot(node, PREFIX), expected) == []

        return check

    with (
        RestartableRedis(tmp_path / "a", port=RESTART_PORTS.take) as a_server,
        RestartableRedis(tmp_path / "b", port=RESTART_PORTS.take) as b_server,
    ):
        a_server.start()
        b_server.start()
        a, b = aioredis.from_url(a_server.url), aioredis.from_url(b_server.url)
        proxy = SwitchableProxy(a_server.port)
        client = aioredis.from_url(f"redis://127.0.0.1:{await proxy.start()}/0")
        stop = asyncio.Event()
        task: asyncio.Task[object] | None = None
        try:
            await b.replicaof("127.0.0.1", a_server.port)
            await produce(
                kafka_bootstrap, topics, parts[0], per_transaction=5, transactional_id=f"{topics.prefix}1"
            )
            await settled(kafka_bootstrap, topics.outputs)
            task = asyncio.create_task(
                Projector(client, kafka_bootstrap, topics, keys, batch_size=10).run_forever(stop)
            )
            await until(holds(a, await reference(1)), task, "A to hold the first part")
            first_offsets = await applied_offsets(a, keys)

            async def b_caught_up() -> bool:
                return await applied_offsets(b, keys) == first_offsets

            await until(b_caught_up, task, "B to replicate the first part")
            await b.replicaof("NO", "ONE")

            await produce(
                kafka_bootstrap, topics, parts[1], per_transaction=5, transactional_id=f"{topics.prefix}2"
            )
            await settled(kafka_bootstrap, topics.outputs)
            await until(holds(a, await reference(2)), task, "A to hold the second part")
            assert await applied_offsets(b, keys) == first_offsets, "B must not have the second part"

            proxy.switch(b_server.port)
            await a.replicaof("127.0.0.1", b_server.port)
            await produce(
                kafka_bootstrap, topics, parts[2], per_transaction=5, transactional_id=f"{topics.prefix}3"
            )
            await settled(kafka_bootstrap, topics.outputs)
            everything = await reference(3)
            await until(holds(b, everything), task, "B to hold every record after the failover")
        finally:
            stop.set()
            if task is not None:
                await asyncio.wait_for(task, 60)
            await proxy.close()
            for node in (client, a, b):
                await node.aclose()
