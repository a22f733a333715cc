"""A projector following the topics goes on when the cluster node that holds the projection's slot
is stopped and comes back empty (no persistence, as a cache node replaced under a managed cluster):
while it is down the projector waits the outage out; when it is back its slot holds no offsets and no
epoch, so the projector positions itself from offset 0 and the node ends holding the whole
projection, equal to one made on a single Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from tests.integration.projections.checks import direct_snapshot, node_holds, until, waiting_out_an_outage
from tests.integration.projections.workload import produce, settled, workload
from tests.integration.redis_cluster_nodes import (
    ClusterNode,
    node_of_slot,
    three_node_cluster,
)
from turnledger.processors.topics import ensure_topics
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector
from turnledger.projections.settings import FollowSettings
from turnledger.redisconn.client import redis_client as build_client
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

PREFIX = "rs:"
SLOT = key_slot(b"rs:")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    with three_node_cluster(tmp_path_factory.mktemp("cluster-restart")) as nodes:
        yield nodes


async def test_a_projector_goes_on_when_the_slot_s_node_comes_back_empty(
    cluster: list[ClusterNode],
    kafka_bootstrap: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> None:
    owner = next(node for node in cluster if node.port == node_of_slot(cluster[0].port, SLOT))
    seed = next(node for node in cluster if node is not owner)
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    records = workload(4)
    parts = [records[: len(records) // 2], records[len(records) // 2 :]]

    async def reference(upto: int) -> dict[str, object]:
        return await direct_snapshot(
            redis_client, f"{redis_prefix}ref{upto}:", [r for p in parts[:upto] for r in p]
        )

    def holds(expected: dict[str, object]) -> Callable[[], Awaitable[bool]]:
        return node_holds(owner.port, "{" + PREFIX + "}", expected)

    client = build_client(f"redis+cluster://127.0.0.1:{seed.port}")
    stop = asyncio.Event()
    projector = Projector(client, kafka_bootstrap, topics, ProjectionKeys.of(PREFIX, client), batch_size=10)
    task = asyncio.create_task(projector.run_forever(stop, follow=FollowSettings(verify_every_s=0.5)))
    try:
        await produce(
            kafka_bootstrap, topics, parts[0], per_transaction=5, transactional_id=f"{topics.prefix}1"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(holds(await reference(1)), task, "the slot's node to hold the first half")

        owner.stop()
        await produce(
            kafka_bootstrap, topics, parts[1], per_transaction=5, transactional_id=f"{topics.prefix}2"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(lambda: waiting_out_an_outage(projector), task, "the projector to wait the outage out")

        owner.start()
        await until(holds(await reference(2)), task, "the node, back empty, to hold every record")
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await client.aclose()
