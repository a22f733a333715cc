"""A Redis Cluster node named by a single-node URL (`redis://`) is refused in one line that says to name
the cluster (`redis+cluster://`, tests/integration/test_redis_cluster.py), not crashed on: a client of
one node cannot follow MOVED replies, and the keys of a single-node projection are not in one slot.
Before, a cluster's CLUSTERDOWN, MOVED or CROSSSLOT reply was a bare `ResponseError` traceback, at the
first write.

A real redis-server in cluster mode, alone: with no slot assigned it answers CLUSTERDOWN; with every
slot its own it takes single keys and refuses the script's many (CROSSSLOT)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.integration.projections.workload import produce, settled, workload
from tests.integration.redis_cluster_nodes import cluster_node, cluster_port
from turnledger.processors.topics import ensure_topics
from turnledger.redisconn.refusals import CHECK_CLUSTER
from turnledger.topology import Topics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster_node_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with cluster_node(tmp_path_factory.mktemp("cluster-node"), cluster_port()) as port:
        yield port


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_")}
    return subprocess.run(
        [sys.executable, "-m", "turnledger.cli", *args],
        env={**env, "REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _refused(run: subprocess.CompletedProcess[str], url: str, reply: str) -> None:
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"turnledger: Redis at {url!r} refused the connection (plaintext, no login): {reply}"
    )
    assert last.endswith(f". {CHECK_CLUSTER}")


def test_a_cluster_node_without_slots_is_refused_by_history(cluster_node_port: int) -> None:
    url = f"redis://127.0.0.1:{cluster_node_port}/0"
    _refused(_cli("history", "nobody", url=url), url, "ClusterDownError: Hash slot not served")


async def test_a_cluster_node_serving_every_slot_ends_the_projector_at_its_first_batch(
    cluster_node_port: int, kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    with redis.Redis(port=cluster_node_port) as client:
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 60
        while client.cluster("info")["cluster_state"] != "ok":
            assert time.monotonic() < deadline, "the node did not take its slots"
            time.sleep(0.05)
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    await produce(kafka_bootstrap, topics, workload(3), per_transaction=5, transactional_id=topics.prefix)
    await settled(kafka_bootstrap, topics.outputs)
    url = f"redis://127.0.0.1:{cluster_node_port}/0"
    run = _cli(
        "project", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix, "--static", url=url
    )
    _refused(run, url, "ClusterCrossSlotError: ")
