"""Leases and deadlines: how the fold, which never reads a clock, still lets every operation settle.

An accepted attempt belongs to the worker that won its CAS for `lease_ms` after its last sign
of life (any event of the attempt it appends, or a LeaseRenewed). Time arrives inside events:
a worker that believes a lease or a deadline has passed appends an ExpiryClaimed, and the
fold checks the claim's event time against the times it has seen. What an accepted claim
does is the table `ON_LEASE_EXPIRY`; a claim that finds nothing expired is refused with the
times that still hold, so the claimer knows when to look again.

Confirmation that an attempt is terminated (so a new generation, or the conversation's next
attempt, may start): the provider said it finished; the holder confirms its connection is
closed and the provider keeps nothing (AttemptTerminated, after cancelling a kept response
at the provider); or the lease expired on a plain stream, whose connection died with its
worker. A kept response (resumable by handle, or replayable by idempotency key) outlives a
dead worker: its attempt stays open for another worker to continue, until the deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from turnledger.dispatch.state import ACTIVE_STATES, FINAL_STATES, OperationState
from turnledger.dispatch.step import Step
from turnledger.model.events import DispatchState, ExpiryClaimed, LeaseRenewed
from turnledger.model.reasons import ReasonCode

S = DispatchState


def holds_lease(op: OperationState, worker_id: str) -> bool:
    """May `worker_id` act on the attempt? Its holder may, anyone once the lease expired. Leases and
    events from before leases existed have empty ids, which are not checked."""
    return not worker_id or not op.lease_owner or op.lease_owner == worker_id


def on_lease_renewed(step: Step, op: OperationState, event: LeaseRenewed) -> None:
    step.put(op, lease_renewed_at_ms=step.at)


def _expire_open(step: Step, op: OperationState) -> OperationState:
    """The holder is gone before the attempt settled: UNKNOWN and free for any worker; a plain
    stream is over with its worker, a kept response waits to be continued."""
    terminated = not op.kept_by_provider
    if terminated:
        op = step.retract(op, ReasonCode.LEASE_EXPIRED)
    kept = "" if terminated else "; the provider keeps the response"
    return step.transition(
        op,
        S.UNKNOWN,
        reason=ReasonCode.LEASE_EXPIRED,
        detail=f"lease of {op.lease_owner} expired{kept}",
        lease_owner=None,
        attempt_terminated=terminated,
    )


def _expire_cancelled(step: Step, op: OperationState) -> OperationState:
    """Nobody will read a cancelled attempt again: its lease expiry is its confirmation."""
    detail = f"lease of {op.lease_owner} expired: attempt {op.attempt_generation} counts as terminated"
    return step.transition(
        op,
        S.CANCELLED,
        reason=ReasonCode.LEASE_EXPIRED,
        detail=detail,
        lease_owner=None,
        attempt_terminated=True,
    )


ON_LEASE_EXPIRY: Mapping[DispatchState, Callable[[Step, OperationState], OperationState]] = {
    **dict.fromkeys((*ACTIVE_STATES, S.UNKNOWN), _expire_open),
    S.CANCELLED: _expire_cancelled,
}
"""What an expired lease does, by the state the operation is in (its attempt not yet terminated)."""


def lease_expired(op: OperationState, at_ms: int) -> bool:
    expires = op.lease_expires_at_ms
    return expires is not None and op.may_produce_output and at_ms >= expires


def deadline_passed(op: OperationState, at_ms: int) -> bool:
    return op.state not in FINAL_STATES and at_ms >= op.request.deadline_at_ms


def on_expiry_claimed(step: Step, op: OperationState, event: ExpiryClaimed) -> None:
    at = step.at
    expired, late = lease_expired(op, at), deadline_passed(op, at)
    if not expired and not late:
        held = f"lease of {op.lease_owner} until {op.lease_expires_at_ms}; " if op.may_produce_output else ""
        detail = f"{held}deadline {op.request.deadline_at_ms}; claim at {at} by {event.worker_id}"
        step.decide(op, op.state, accepted=False, reason=ReasonCode.LEASE_NOT_EXPIRED, detail=detail)
        return
    if expired:
        op = ON_LEASE_EXPIRY[op.state](step, op)
    if late:
        step.cancel(
            op, ReasonCode.DEADLINE_EXCEEDED, f"not final by its deadline {op.request.deadline_at_ms}"
        )
