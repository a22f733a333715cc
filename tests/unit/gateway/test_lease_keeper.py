"""The lease keeper renews quiet attempts it holds, and never one whose final event it appended."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from turnledger.gateway.board import DecisionBoard
from turnledger.gateway.client import WorkerEvents
from turnledger.gateway.lease_keeper import LeaseKeeper
from turnledger.gateway.worker_config import WorkerStats
from turnledger.model.events import DispatchDecision, DispatchState, IngressEvent, LeaseRenewed

S = DispatchState
KEYS = [("c1", "op-quiet"), ("c1", "op-settled"), ("c1", "op-elsewhere")]
WITHIN_S = 10.0
"""How long a renewal may take to come, on a loaded machine, before the test fails rather than hangs
(the lease is 60 ms: a renewal is due every 20)."""


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WITHIN_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WITHIN_S} s"
        await asyncio.sleep(0.01)


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
    await until(lambda: len(sink.events) >= 3)
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
    await until(
        lambda: any(
            isinstance(e, LeaseRenewed) and e.operation_id == "op-settled" for e in sink.events[count:]
        )
    )
    stopping.set()
    await task


def _decided(op: str, owner: str, state: DispatchState) -> DispatchDecision:
    return _streaming(op, owner).model_copy(update={"state": state})


async def test_one_pass_renews_what_it_holds_and_has_not_heard_from_and_counts_it() -> None:
    """A lease of 30 s: an attempt alive a moment ago is not due (a third of the lease is 10 s), one
    never heard from is; one decided final, held by another worker or not on the board is not ours."""
    board = DecisionBoard()
    board.apply_nowait(_streaming("op-due", "w1"))
    board.apply_nowait(_streaming("op-spoke", "w1"))
    board.apply_nowait(_decided("op-final", "w1", S.COMMITTED))
    board.apply_nowait(_streaming("op-theirs", "w2"))
    running = [("c1", op) for op in ("op-spoke", "op-final", "op-theirs", "op-unknown", "op-due")]
    sink, stats = _Sink(), WorkerStats()
    keeper = LeaseKeeper("w1", 30.0, board, WorkerEvents(sink, "w1"), stats, lambda: running)
    keeper.alive(("c1", "op-spoke"))
    stopping = asyncio.Event()
    task = asyncio.create_task(keeper.run(stopping))
    await until(lambda: len(sink.events) >= 1)
    stopping.set()
    await asyncio.wait_for(task, WITHIN_S)
    assert [(type(e), e.operation_id, e.attempt_generation, e.worker_id) for e in sink.events] == [  # type: ignore[attr-defined]
        (LeaseRenewed, "op-due", 1, "w1")
    ]
    assert stats.counts == {"lease_renewals": 1}
    assert keeper._signs_of_life.keys() == {("c1", "op-due"), ("c1", "op-spoke")}  # a renewal is one


def test_holds_is_a_decision_of_this_worker_that_may_still_produce_output() -> None:
    keeper = LeaseKeeper("w1", 30.0, DecisionBoard(), WorkerEvents(_Sink(), "w1"), WorkerStats(), list)
    assert keeper.holds(_streaming("op", "w1"))
    assert not keeper.holds(None)
    assert not keeper.holds(_streaming("op", "w2"))
    assert not keeper.holds(_decided("op", "w1", S.COMMITTED))


async def test_a_forgotten_attempt_is_neither_settled_nor_heard_from() -> None:
    board = DecisionBoard()
    board.apply_nowait(_streaming("op-a", "w1"))
    sink = _Sink()
    keeper = LeaseKeeper("w1", 30.0, board, WorkerEvents(sink, "w1"), WorkerStats(), lambda: [("c1", "op-a")])
    keeper.alive(("c1", "op-a"))
    keeper.settled(("c1", "op-a"))
    keeper.forget(("c1", "op-a"))
    assert keeper._signs_of_life == {} and keeper._settled == set()
    keeper.forget(("c1", "op-never"))  # forgetting what it never knew is nothing
    stopping = asyncio.Event()
    task = asyncio.create_task(keeper.run(stopping))
    await until(lambda: len(sink.events) >= 1)
    stopping.set()
    await asyncio.wait_for(task, WITHIN_S)
    assert [e.operation_id for e in sink.events] == ["op-a"]  # type: ignore[attr-defined]


async def test_an_attempt_is_renewed_once_quiet_for_a_third_of_the_lease_and_not_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the keeper's clock (binary fractions, so the sums are exact): a lease of 0.375 s makes an
    attempt due 0.125 s after its last sign of life, to the tick; each renewal is a sign of life."""
    from turnledger.gateway import lease_keeper

    clock = [64.0]
    monkeypatch.setattr(lease_keeper, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    waits: list[float] = []

    async def wait_for(awaitable: Any, timeout: float) -> Any:
        waits.append(timeout)
        return await asyncio.wait_for(awaitable, timeout)

    monkeypatch.setattr(lease_keeper, "asyncio", SimpleNamespace(wait_for=wait_for))
    board = DecisionBoard()
    board.apply_nowait(_streaming("op-a", "w1"))
    passes = [0]

    def running() -> list[tuple[str, str]]:
        passes[0] += 1
        return [("c1", "op-a")]

    sink = _Sink()
    keeper = LeaseKeeper("w1", 0.375, board, WorkerEvents(sink, "w1"), WorkerStats(), running)
    keeper.alive(("c1", "op-a"))
    stopping = asyncio.Event()
    task = asyncio.create_task(keeper.run(stopping))
    clock[0] = 64.109375  # 0.109375 s quiet: not yet
    await until(lambda: passes[0] >= 3)
    assert sink.events == []
    clock[0] = 64.125
    await until(lambda: len(sink.events) == 1)
    seen = passes[0]
    await until(lambda: passes[0] >= seen + 2)
    assert len(sink.events) == 1  # renewed at 64.125: next due at 64.25
    clock[0] = 64.25
    await until(lambda: len(sink.events) == 2)
    stopping.set()
    await asyncio.wait_for(task, WITHIN_S)
    assert set(waits) == {0.0625}  # between passes, half the quiet time: a renewal is never later


async def test_an_attempt_never_heard_from_is_due_at_once_whatever_the_clock_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from turnledger.gateway import lease_keeper

    monkeypatch.setattr(lease_keeper, "time", SimpleNamespace(monotonic=lambda: 0.5))
    board = DecisionBoard()
    board.apply_nowait(_streaming("op-a", "w1"))
    sink = _Sink()
    keeper = LeaseKeeper(
        "w1", 0.375, board, WorkerEvents(sink, "w1"), WorkerStats(), lambda: [("c1", "op-a")]
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(keeper.run(stopping))
    await until(lambda: len(sink.events) == 1)
    stopping.set()
    await asyncio.wait_for(task, WITHIN_S)
