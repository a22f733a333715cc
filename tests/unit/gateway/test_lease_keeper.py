"""The lease keeper renews quiet attempts it holds, and never one whose final event it appended."""

from __future__ import annotations

import asyncio
from typing import Any

from turnledger.gateway.board import DecisionBoard
from turnledger.gateway.client import WorkerEvents
from turnledger.gateway.lease_keeper import LeaseKeeper
from turnledger.gateway.worker_config import WorkerStats
from turnledger.model.events import DispatchDecision, DispatchState, IngressEvent, LeaseRenewed

S = DispatchState
KEYS = [("c1", "op-quiet"), ("c1", "op-settled"), ("c1", "op-elsewhere")]


class _Sink:
    def __init__(self) -> None:
        self.events: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)


def _streaming(op: str, owner: str) -> DispatchDecision:
    fields: dict[str, Any] = {
        "conversation_id": "c1",
        "operation_id": op,
        "state": S.STREAMING,
        "conversation_revision": 1,
        "cancel_generation": 0,
        "attempt_generation": 1,
        "source_event_id": f"src-{op}",
        "occurred_at_ms": 1_000,
        "lease_owner": owner,
        "lease_expires_at_ms": 4_000,
    }
    return DispatchDecision(**fields)


async def test_only_quiet_held_unsettled_attempts_are_renewed() -> None:
    board = DecisionBoard()
    for op, owner in (("op-quiet", "w1"), ("op-settled", "w1"), ("op-elsewhere", "w2")):
        board.apply_nowait(_streaming(op, owner))
    sink = _Sink()
    keeper = LeaseKeeper("w1", 0.06, board, WorkerEvents(sink, "w1"), WorkerStats(), lambda: KEYS)
    for key in KEYS:
        keeper.alive(key)
    keeper.settled(("c1", "op-settled"))
    stopping = asyncio.Event()
    task = asyncio.create_task(keeper.run(stopping))
    while len(sink.events) < 3:
        await asyncio.sleep(0.01)
    stopping.set()
    await task
    renewed = {(e.conversation_id, e.operation_id) for e in sink.events if isinstance(e, LeaseRenewed)}
    assert renewed == {("c1", "op-quiet")}
    assert all(isinstance(e, LeaseRenewed) and e.attempt_generation == 1 for e in sink.events)
    # a new sign of life (the next attempt) ends the settled mark
    keeper.alive(("c1", "op-settled"))
    count = len(sink.events)
    stopping.clear()
    task = asyncio.create_task(keeper.run(stopping))
    while not any(
        isinstance(e, LeaseRenewed) and e.operation_id == "op-settled" for e in sink.events[count:]
    ):
        await asyncio.sleep(0.01)
    stopping.set()
    await task
