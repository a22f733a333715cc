"""A Redis Cluster node is refused in one line, not crashed on: the projection's script writes the keys
of many conversations at once, which a cluster allows only within one hash slot, so turnledger
supports no cluster (ElastiCache Serverless, cluster-mode-enabled groups). Before, a cluster's
CLUSTERDOWN, MOVED or CROSSSLOT reply was a bare `ResponseError` traceback, at the first write.

A real redis-server in cluster mode, alone: with no slot assigned it answers CLUSTERDOWN; with every
slot its own it takes single keys and refuses the script's many (CROSSSLOT)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.integration.projections.workload import produce, settled, workload
from turnledger.devstack.ports import port_is_free
from turnledger.devstack.redis_server import redis_argv
from turnledger.processors.topics import ensure_topics
from turnledger.redisconn.refusals import CHECK_CLUSTER
from turnledger.topology import Topics

pytestmark = pytest.mark.integration


CLUSTER_BUS_OFFSET = 10_000
"""A cluster node also listens on its port + 10,000 (the cluster bus), so its port must be 55,535 at most."""


def cluster_port() -> int:
    """A free port a cluster node can take, with its bus port free too: an ephemeral port from the OS
    (up to 60,999 here) made redis-server refuse to start about one run in five."""
    for port in range(30_000, 65_536 - CLUSTER_BUS_OFFSET):
        if port_is_free(port) and port_is_free(port + CLUSTER_BUS_OFFSET):
            return port
    raise AssertionError("no free port pair for a Redis Cluster node")


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    binary = shutil.which("redis-server")
    assert binary is not None
    workdir = tmp_path_factory.mktemp("cluster-node")
    port = cluster_port()
    argv = redis_argv(binary, port, workdir, [], None)
    argv += ["--cluster-enabled", "yes", "--cluster-config-file", str(workdir / "nodes.conf")]
    with open(workdir / "redis.log", "wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with redis.Redis(port=port, socket_connect_timeout=1) as client:
                    if client.ping():
                        break
            except redis.ConnectionError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (workdir / "redis.log").read_text()
            time.sleep(0.05)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


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


def test_a_cluster_node_without_slots_is_refused_by_history(cluster_node: int) -> None:
    url = f"redis://127.0.0.1:{cluster_node}/0"
    _refused(_cli("history", "nobody", url=url), url, "ClusterDownError: Hash slot not served")


async def test_a_cluster_node_serving_every_slot_ends_the_projector_at_its_first_batch(
    cluster_node: int, kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    with redis.Redis(port=cluster_node) as client:
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 60
        while client.cluster("info")["cluster_state"] != "ok":
            assert time.monotonic() < deadline, "the node did not take its slots"
            time.sleep(0.05)
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    await produce(kafka_bootstrap, topics, workload(3), per_transaction=5, transactional_id=topics.prefix)
    await settled(kafka_bootstrap, topics.outputs)
    url = f"redis://127.0.0.1:{cluster_node}/0"
    run = _cli(
        "project", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix, "--static", url=url
    )
    _refused(run, url, "ClusterCrossSlotError: ")
