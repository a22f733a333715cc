"""A worker's task cancelled while it waits on the board stops there, whatever the board did meanwhile.

`DispatchWorker.release` (a partition moved away) and `close` cancel the operations' tasks and wait
for them; the consumer group's rebalance waits for that. A wait that swallowed the cancellation let
its task run on blind (its partition's records no longer arrive), so it held the rebalance for the
60 s of `settle_timeout_s` and then gave the operation up in the ledger. CPython 3.11's
`asyncio.wait_for` does swallow it when the awaited condition came true in the loop iterations
between its inner task finishing and the waiter's resumption; these tests cancel at each of those
iterations (a cancel that comes after the wait has returned has nothing to stop)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.unit.gateway.decisions import decision
from turnledger.gateway.board import DecisionBoard
from turnledger.model.events import DispatchDecision, DispatchState

S = DispatchState
KEY = ("c1", "op-1")


def _decision(state: DispatchState, source: str, **fields: Any) -> DispatchDecision:
    return decision("op-1", state, source_event_id=source, **fields)


WAITS: dict[str, tuple[Callable[[DecisionBoard], Awaitable[object]], DispatchDecision]] = {
    "cas_answer": (
        lambda board: board.cas_answer("attempt-1", 30),
        _decision(S.DISPATCHING, "attempt-1", previous_state=S.PREPARED),
    ),
    "settled": (
        lambda board: board.settled(KEY, 1, {"ended-1"}, 30),
        _decision(S.COMMITTED, "ended-1"),
    ),
    "state_after": (
        lambda board: board.state_after(KEY, "terminated-1", 30),
        _decision(S.UNKNOWN, "terminated-1", attempt_terminated=True),
    ),
    "wait_until": (
        lambda board: board.wait_until(lambda: KEY in board.latest, 30),
        _decision(S.PREPARED, "requested-1"),
    ),
}


@pytest.mark.parametrize("turns", range(8))
@pytest.mark.parametrize("wait", sorted(WAITS))
async def test_a_wait_cancelled_just_after_its_answer_arrived_is_cancelled(wait: str, turns: int) -> None:
    board = DecisionBoard()
    waiting, answer = WAITS[wait]
    task = asyncio.ensure_future(waiting(board))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not task.done()
    await board.apply([answer])
    for _ in range(turns):
        await asyncio.sleep(0)
    if not task.cancel():
        assert task.result() is not None  # it had finished before the cancel: nothing to stop
        return
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
