"""A worker in a host application that shuts down by cancelling every task, as `asyncio.run` does
when its main coroutine raises or Ctrl-C arrives.

    python -m tests.integration._cancelled_worker_child BOOTSTRAP PREFIX

Prints `live` once the worker has caught up on its share of the manifests topic, then lets the
host's main coroutine fail; prints `closed` once `asyncio.run` has cancelled and awaited every task,
and exits 0. A worker whose shutdown waits on Kafka for ever never prints `closed`.
"""

from __future__ import annotations

import asyncio
import sys

from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_worker
from turnledger.gateway.worker import WorkerConfig


class HostShutdown(Exception):
    pass


async def host(bootstrap: str, prefix: str) -> None:
    stop, started = asyncio.Event(), asyncio.Event()
    routes = endpoints_for("http://127.0.0.1:9", {})
    worker = asyncio.create_task(
        run_worker(
            bootstrap, routes, stop=stop, prefix=prefix, config=WorkerConfig(worker_id="w-cancelled"),
            started=started,
        )
    )  # fmt: skip
    await asyncio.wait_for(started.wait(), 120)
    print("live", flush=True)
    raise HostShutdown(worker.get_name())


def main() -> int:
    bootstrap, prefix = sys.argv[1:3]
    try:
        asyncio.run(host(bootstrap, prefix))
    except HostShutdown:
        print("closed", flush=True)
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
