"""A worker or a tool executor in a host application that shuts down by cancelling every task, as
`asyncio.run` does when its main coroutine raises or Ctrl-C arrives.

    python -m tests.integration._cancelled_worker_child worker|tool-executor BOOTSTRAP PREFIX

Prints `live` once the component has polled and its consumer group is Stable with it as its
member (so that stopping sends a LeaveGroup), then lets the host's main coroutine fail; prints
`closed` once `asyncio.run` has cancelled and awaited every task, and exits 0. A component whose
shutdown waits on Kafka for ever never prints `closed`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from tests.integration.test_worker_sharding import group_members
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_tool_executor, run_worker
from turnledger.gateway.worker import WorkerConfig


class HostShutdown(Exception):
    pass


def component(
    name: str, bootstrap: str, prefix: str, started: asyncio.Event
) -> tuple[Coroutine[Any, Any, None], str]:
    """The component's coroutine and its consumer group."""
    stop = asyncio.Event()
    if name == "worker":
        routes = endpoints_for("http://127.0.0.1:9", {})
        config = WorkerConfig(worker_id="w-cancelled")
        run = run_worker(bootstrap, routes, stop=stop, prefix=prefix, config=config, started=started)
        return run, f"{prefix}turnledger-workers"
    return run_tool_executor(
        bootstrap, stop=stop, prefix=prefix, started=started
    ), f"{prefix}turnledger-tool-executor"


async def host(name: str, bootstrap: str, prefix: str) -> None:
    started = asyncio.Event()
    run, group = component(name, bootstrap, prefix, started)
    running = asyncio.create_task(run)
    await asyncio.wait_for(started.wait(), 120)
    while await group_members(bootstrap, group) != 1:
        await asyncio.sleep(0.2)
    print("live", flush=True)
    raise HostShutdown(running.get_name())


def main() -> int:
    name, bootstrap, prefix = sys.argv[1:4]
    try:
        asyncio.run(host(name, bootstrap, prefix))
    except HostShutdown:
        print("closed", flush=True)
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
