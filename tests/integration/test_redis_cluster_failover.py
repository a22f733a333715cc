"""A projector following the topics goes on through a Redis Cluster failover: the replica of the node
that holds the projection's slot takes over (`CLUSTER FAILOVER`, as a managed cluster does in a
maintenance window); the old primary, now a replica, answers the projector's writes with MOVED, which
redis-py's cluster client follows to the new primary; the new primary ends holding the whole
projection, equal to one made on a single Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack

import pytest
import redis
import redis.asyncio as aioredis
from redis.crc import key_slot

from tests.integration.projections.checks import direct_snapshot, node_holds, until, wait_for
from tests.integration.projections.workload import produce, settled, workload
from tests.integration.redis_cluster_nodes import node_of_slot, replica_of, three_node_cluster
from turnledger.processors.topics import ensure_topics
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector
from turnledger.projections.settings import FollowSettings
from turnledger.redisconn.client import redis_client as build_client
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

PREFIX = "tl:"
SLOT = key_slot(b"tl:")
"""The slot of every key of the projection (`{tl:}...`)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[int], int, int]]:
    """Three primaries and a replica of the one serving the projection's slot: (ports, primary, replica)."""
    workdir = tmp_path_factory.mktemp("cluster-failover")
    with ExitStack() as stack:
        ports = [node.port for node in stack.enter_context(three_node_cluster(workdir))]
        primary = node_of_slot(ports[0], SLOT)
        replica = stack.enter_context(replica_of(workdir / "replica", ports, primary))
        yield ports, primary, replica


def _role(port: int) -> str:
    with redis.Redis(port=port) as node:
        return str(node.info("replication")["role"])


async def test_a_projector_follows_through_a_cluster_failover(
    cluster: tuple[list[int], int, int],
    kafka_bootstrap: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> None:
    ports, primary, replica = cluster
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    records = workload(4)
    parts = [records[: len(records) // 2], records[len(records) // 2 :]]

    async def reference(upto: int) -> dict[str, object]:
        return await direct_snapshot(
            redis_client, f"{redis_prefix}ref{upto}:", [r for p in parts[:upto] for r in p]
        )

    def holds(port: int, expected: dict[str, object]) -> Callable[[], Awaitable[bool]]:
        return node_holds(port, "{" + PREFIX + "}", expected)

    client = build_client(f"redis+cluster://127.0.0.1:{ports[0]}")
    keys = ProjectionKeys.of(PREFIX, client)
    stop = asyncio.Event()
    task = asyncio.create_task(
        Projector(client, kafka_bootstrap, topics, keys, batch_size=10).run_forever(
            stop, follow=FollowSettings(verify_every_s=0.5)
        )
    )
    try:
        await produce(
            kafka_bootstrap, topics, parts[0], per_transaction=5, transactional_id=f"{topics.prefix}1"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(holds(primary, await reference(1)), task, "the primary to hold the first half")

        with redis.Redis(port=replica) as node:
            node.execute_command("CLUSTER", "FAILOVER")
        wait_for(lambda: _role(replica) == "master" and _role(primary) == "slave", "the replica to take over")
        wait_for(lambda: node_of_slot(ports[0], SLOT) == replica, "the cluster to name the new primary")

        await produce(
            kafka_bootstrap, topics, parts[1], per_transaction=5, transactional_id=f"{topics.prefix}2"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(holds(replica, await reference(2)), task, "the new primary to hold every record")
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await client.aclose()
