"""Real redis-servers in cluster mode for the integration tests: one node alone, or three that share
the 16,384 slots (formed with CLUSTER ADDSLOTSRANGE and CLUSTER MEET, as `redis-cli --cluster create`
does, without its prompt)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.integration.projections.checks import wait_for
from turnledger.devstack.ports import port_is_free
from turnledger.devstack.redis_server import redis_argv

CLUSTER_BUS_OFFSET = 10_000
"""A cluster node also listens on its port + 10,000 (the cluster bus), so its port must be 55,535 at most."""
SLOTS = 16_384


PORTS_PER_WORKER = 1_000
FIRST_PORT = 20_000
"""Each pytest-xdist worker takes its nodes' ports from a range of its own, from 20,000 up (their bus
ports from 30,000 up, below the OS's ephemeral ports, 32,768-60,999 here): a test that stops a node and
starts it again (`test_redis_cluster_restart.py`) leaves its port free meanwhile, and a cluster another
worker started then took it (CI, session 41: the node came back to a port another worker's node held,
which answered for it and then went away)."""


def _worker_ports() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    span = 65_536 - CLUSTER_BUS_OFFSET - FIRST_PORT
    start = FIRST_PORT + (index * PORTS_PER_WORKER) % span
    return range(start, min(start + PORTS_PER_WORKER, FIRST_PORT + span))


def cluster_port(taken: Sequence[int] = ()) -> int:
    """A free port a cluster node can take, with its bus port free too, from this worker's range: an
    ephemeral port from the OS (up to 60,999 here) made redis-server refuse to start about one run in
    five (its bus port would pass 65,535)."""
    for port in _worker_ports():
        if port not in taken and port_is_free(port) and port_is_free(port + CLUSTER_BUS_OFFSET):
            return port
    raise AssertionError("no free port pair for a Redis Cluster node")


def _served_by(port: int, password: str | None, pid: int) -> bool:
    """Does the redis-server of `pid` answer at `port` (not another process that holds the port)?"""
    with redis.Redis(port=port, password=password, socket_connect_timeout=1) as client:
        return int(client.info("server")["process_id"]) == pid


NODE_TIMEOUT_MS = 2_000
"""`cluster-node-timeout`: how long the others wait before they hold a silent node failed (15 s by
default), so that a stopped node's failure and its return are seen within a test's patience."""


class ClusterNode:
    """One redis-server with cluster mode on and no persistence: a restart keeps its identity and slots
    (`nodes.conf`) and comes back with no data, as a cache node replaced under a managed cluster does."""

    def __init__(self, workdir: Path, port: int, password: str | None = None) -> None:
        self.workdir, self.port, self.password = workdir, port, password
        self._server: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = redis_argv(binary, self.port, self.workdir, [], None)
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", str(self.workdir / "nodes.conf")]
        argv += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
        if self.password is not None:
            argv += ["--requirepass", self.password, "--masterauth", self.password]
        with open(self.workdir / "redis.log", "ab") as log:
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._server = server
        wait_for(
            lambda: server.poll() is None and _served_by(self.port, self.password, server.pid),
            f"cluster node {self.port}",
        )

    def stop(self) -> None:
        if self._server is not None:
            self._server.terminate()
            self._server.wait(timeout=30)
            self._server = None


@contextmanager
def cluster_node(workdir: Path, port: int, password: str | None = None) -> Iterator[int]:
    """One cluster-mode node, no slot assigned (and `requirepass` when a password is given), stopped on
    exit."""
    with nodes_of([ClusterNode(workdir, port, password)]) as (node,):
        yield node.port


@contextmanager
def nodes_of(nodes: Sequence[ClusterNode]) -> Iterator[Sequence[ClusterNode]]:
    """`nodes` started, and stopped on exit whatever happened."""
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def cluster_ok(port: int, nodes: int) -> bool:
    with redis.Redis(port=port) as client:
        info = client.cluster("info")
    return bool(info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == nodes)


@contextmanager
def three_node_cluster(workdir: Path) -> Iterator[list[ClusterNode]]:
    """Three primaries, each serving a third of the slots, every one knowing the others."""
    ports: list[int] = []
    for _ in range(3):
        ports.append(cluster_port(ports))
    with nodes_of([ClusterNode(workdir / f"node{i}", port) for i, port in enumerate(ports)]) as nodes:
        bounds = [0, SLOTS // 3, 2 * SLOTS // 3, SLOTS]
        for i, port in enumerate(ports):
            with redis.Redis(port=port) as client:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)
        with redis.Redis(port=ports[0]) as first:
            for port in ports[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        for port in ports:
            wait_for(lambda p=port: cluster_ok(p, len(ports)), f"node {port} to see the cluster ok")
        yield list(nodes)


def node_of_slot(port: int, slot: int) -> int:
    """The port of the primary that serves `slot`, as the node at `port` knows the slot map."""
    with redis.Redis(port=port) as client:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(primary[1])
    raise AssertionError(f"no node serves slot {slot}")


def node_id(port: int) -> str:
    with redis.Redis(port=port) as client:
        return str(client.execute_command("CLUSTER", "MYID").decode())


def replicating(port: int) -> bool:
    with redis.Redis(port=port) as client:
        info = client.info("replication")
    return bool(info["role"] == "slave" and info["master_link_status"] == "up")


@contextmanager
def replica_of(workdir: Path, ports: Sequence[int], primary: int) -> Iterator[int]:
    """One more node, a replica of the primary at `primary`, in sync when yielded."""
    with cluster_node(workdir, cluster_port(ports)) as port:
        with redis.Redis(port=ports[0]) as first:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        wait_for(lambda: cluster_ok(port, len(ports) + 1), f"node {port} to join the cluster")
        with redis.Redis(port=port) as replica:
            replica.execute_command("CLUSTER", "REPLICATE", node_id(primary))
        wait_for(lambda: replicating(port), f"node {port} to replicate {primary}")
        yield port
