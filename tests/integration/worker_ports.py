"""The ports of the services a test stops and starts again, per pytest-xdist worker.

A service restarted on its port (`devstack/restartable.py`) leaves the port free between its stop and
its start. Taken from the kernel's ephemeral ports (`free_port`), it could be handed meanwhile to
another worker's new service or to any outgoing connection on the machine; each worker takes these
from a range of its own below the ephemeral ports (32,768 up) and below the Redis Cluster nodes'
(`redis_cluster_nodes.py`, 20,000 up), so no one else takes them."""

from __future__ import annotations

import os

from turnledger.devstack.ports import PortPool

FIRST_PORT = 10_000
PORTS_PER_WORKER = 1_000
WORKERS = 10
"""Ranges for workers gw0 to gw9 (10,000 to 19,999); a worker past them shares gw(N mod 10)'s."""


def worker_range(worker: str | None = None) -> range:
    name = (worker if worker is not None else os.environ.get("PYTEST_XDIST_WORKER", "gw0")).removeprefix("gw")
    index = int(name) % WORKERS if name.isdigit() else 0
    start = FIRST_PORT + index * PORTS_PER_WORKER
    return range(start, start + PORTS_PER_WORKER)


RESTART_PORTS = PortPool(worker_range())
"""This worker's pool: pass `port=RESTART_PORTS.take` to `RestartableKafka` and `RestartableRedis`."""
