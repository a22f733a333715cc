"""The worker's clock for the ledger: it claims expired leases and passed deadlines, adopts abandoned work.

The fold never reads a clock, so an operation whose worker is gone settles only when
someone appends an event whose time shows it. Every worker runs a sweeper over the
operations it sees (`DecisionBoard.open`); every decision carries the lease and deadline
times the fold holds, so the sweeper knows when to look again. What it does, by what the
latest decision of an operation says (`plan`):

| latest decision | action |
|---|---|
| an open attempt whose lease expired (not run here) | ExpiryClaimed |
| not final, past its deadline | ExpiryClaimed |
| UNKNOWN, lease free, after a LEASE_EXPIRED or quiet for `adopt_after_ms` | adopt: run it here |
| PREPARED, quiet for `adopt_after_ms`, not run here | adopt: run it here |

PREPARED counts whether its latest decision is the request or a CAS refused while the conversation
was busy (whose asker may be gone).

A claim is made once per decision (again after `adopt_after_ms` if nothing answers). The
fold refuses a claim whose lease was renewed meanwhile, with the new times; adopting is
safe because the ledger's CAS and lease checks decide who continues.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from turnledger.gateway.board import FINAL, DecisionBoard, OperationKey, may_produce_output
from turnledger.gateway.client import WorkerEvents, now_ms
from turnledger.model.events import DispatchDecision, DispatchState
from turnledger.model.reasons import ReasonCode

log = logging.getLogger(__name__)
S = DispatchState


@dataclass(frozen=True, slots=True)
class Claim:
    key: OperationKey
    generation: int


@dataclass(frozen=True, slots=True)
class Adopt:
    key: OperationKey


Action = Claim | Adopt


def claim_due_at(decision: DispatchDecision) -> int | None:
    """When the fold would accept a claim for this operation, or None when none ever will."""
    times = []
    if decision.state not in FINAL and decision.deadline_at_ms is not None:
        times.append(decision.deadline_at_ms)
    if (
        decision.lease_owner is not None
        and decision.lease_expires_at_ms is not None
        and may_produce_output(decision)
    ):
        times.append(decision.lease_expires_at_ms)
    return min(times) if times else None


def abandoned(decision: DispatchDecision, now: int, adopt_after_ms: int) -> bool:
    """Is this work nobody is doing (so this worker should)?"""
    quiet = now - decision.occurred_at_ms >= adopt_after_ms
    if decision.state == S.UNKNOWN and decision.lease_owner is None:
        return decision.reason == ReasonCode.LEASE_EXPIRED or quiet
    return decision.state == S.PREPARED and quiet  # accepted, or a refused CAS that left it PREPARED


class ExpirySweeper:
    def __init__(
        self,
        board: DecisionBoard,
        events: WorkerEvents,
        *,
        running: Callable[[OperationKey], bool],
        adopt: Callable[[OperationKey], None],
        grace_ms: int = 500,
        adopt_after_ms: int = 30_000,
        tick_s: float = 1.0,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.board = board
        self.events = events
        self._running = running
        self._adopt = adopt
        self.grace_ms = grace_ms
        self.adopt_after_ms = adopt_after_ms
        self.tick_s = tick_s
        self._clock = clock
        self._acted: dict[OperationKey, tuple[str, int]] = {}  # latest decision's source, when acted on

    def plan(self, now: int) -> list[Action]:
        actions: list[Action] = []
        for key in sorted(self.board.open):
            decision = self.board.latest[key]
            acted = self._acted.get(key)
            if (
                acted is not None
                and acted[0] == decision.source_event_id
                and now - acted[1] < self.adopt_after_ms
            ):
                continue
            if self._running(key):
                continue
            due = claim_due_at(decision)
            if due is not None and now >= due + self.grace_ms:
                actions.append(Claim(key, decision.attempt_generation))
            elif abandoned(decision, now, self.adopt_after_ms):
                actions.append(Adopt(key))
        return actions

    async def sweep(self) -> list[Action]:
        now = self._clock()
        actions = self.plan(now)
        for action in actions:
            self._acted[action.key] = (self.board.latest[action.key].source_event_id, now)
            if isinstance(action, Claim):
                log.info("%s/%s: claiming expiry of generation %d", *action.key, action.generation)
                await self.events.claim_expiry(*action.key, action.generation)
            else:
                log.info("%s/%s: adopting abandoned work", *action.key)
                self._adopt(action.key)
        for key in [k for k in self._acted if k not in self.board.open]:
            del self._acted[key]
        return actions

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.sweep()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.tick_s)
