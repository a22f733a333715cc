"""`DispatchWorker.release` (a partition moved to another worker) and `close`: the operations' tasks stop
where they stand, promptly, and a task that will not stop cannot hold the consumer group up."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.unit.gateway.ledger import InMemoryLedger
from tests.unit.gateway.test_worker_liveness import _streaming, cluster
from turnledger.fake_provider import FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.model.events import DispatchDecision, DispatchState, StreamEnded

S = DispatchState
SLOW = FaultPlan(always=(Fault(FaultKind.SLOW, 200),))


async def test_released_operations_stop_where_they_stand_and_are_forgotten() -> None:
    async with cluster(plan=SLOW) as c:
        node = await c.start("worker-a")
        h = c.harness()
        for i in range(6):
            await h.converse(f"c{i}", "anthropic-messages@1", text="tell me a story", tools=False)
        await c.until(lambda: sum(d.state == S.STREAMING for d in c.ledger.of_type(DispatchDecision)) >= 6)
        worker = node.worker
        keys = set(worker._tasks)
        tasks = list(worker._tasks.values())
        assert len(keys) == 6
        await worker.release(keys)
        assert all(task.cancelled() for task in tasks)
        assert worker.busy == 0 and not keys & set(worker.board.latest)
        assert worker.stats.counts["released"] == 6
        assert not [e for e in c.ledger.ingress if isinstance(e, StreamEnded)]  # nothing said for them
        assert _streaming(c)()


async def test_a_task_that_ignores_its_cancel_is_named_and_does_not_hold_release_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done = asyncio.Event()

    async def stubborn() -> None:
        while not done.is_set():
            try:
                await done.wait()
            except asyncio.CancelledError:
                continue

    worker = DispatchWorker(
        sink=InMemoryLedger(),
        endpoints=endpoints_for("http://127.0.0.1:9", {}),
        config=WorkerConfig(stop_within_s=0.2),
    )
    key = ("c1", "op-1")
    task = worker._tasks[key] = asyncio.create_task(stubborn(), name="dispatch-c1/op-1")
    await asyncio.sleep(0)  # started: a task cancelled before its first step never runs
    try:
        with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
            await worker.release({key})
        assert [r.getMessage() for r in caplog.records] == [
            "1 tasks still running 0.2s after they were cancelled (their partition moved): dispatch-c1/op-1"
        ]
        assert not task.done()
    finally:  # a failed check must not leave a task that ignores the loop's own cancel at teardown
        done.set()
        await task
