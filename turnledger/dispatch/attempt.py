"""The dispatch CAS, the send acceptance point: (conversationRevision, cancelGeneration, PREPARED).

An accepted attempt allocates the next generation and its idempotency key and gives the
attempt's lease to the worker that asked. A refusal is a decision the worker waits for,
with the reason of the first check that failed (`attempt_conflict`, in order).
"""

from __future__ import annotations

from turnledger.dispatch.request_rules import attempt_refusal
from turnledger.dispatch.state import ConversationState, OperationState
from turnledger.dispatch.step import Step
from turnledger.model.canonical import digest_of
from turnledger.model.events import DispatchAttempt, DispatchState
from turnledger.model.reasons import ReasonCode

S = DispatchState


def on_dispatch_attempt(step: Step, op: OperationState, event: DispatchAttempt) -> None:
    """The send acceptance point: CAS on (revision, cancelGeneration, PREPARED), for an attempt that
    keeps the attempt rules (`request_rules.py`; else INVALID_EVENT, the operation unchanged)."""
    refusal = attempt_refusal(event)
    if refusal is not None:
        step.reject(ReasonCode.INVALID_EVENT, refusal, operation_id=op.operation_id)
        return
    state = step.state
    conflict = attempt_conflict(state, op, event)
    if conflict is not None:
        reason, detail = conflict
        step.decide(op, op.state, accepted=False, reason=reason, detail=detail)
        if reason is ReasonCode.DEADLINE_EXCEEDED:
            step.cancel(op, reason, detail)
        return
    assert op.manifest is not None
    generation = op.attempt_generation + 1
    key = digest_of({"manifest": op.manifest.manifest_digest, "attemptGeneration": generation})
    step.transition(
        op,
        S.DISPATCHING,
        attempt_generation=generation,
        attempt_cancel_generation=state.cancel_generation,
        idempotency_key=key,
        response_handle=None,
        attempt_terminated=False,
        assembler=None,
        lease_owner=event.worker_id,
        lease_ms=event.lease_ms,
        lease_renewed_at_ms=step.at,
        resumable=False,
        replayable=event.replayable,
    )


def attempt_conflict(
    state: ConversationState, op: OperationState, event: DispatchAttempt
) -> tuple[ReasonCode, str] | None:
    revision = op.manifest.conversation_revision if op.manifest else -1
    busy = [other.operation_id for other in state.in_flight(except_id=op.operation_id)]
    checks: tuple[tuple[bool, ReasonCode, str], ...] = (
        (
            op.state not in (S.PREPARED, S.UNKNOWN),
            ReasonCode.CAS_STATE_MISMATCH,
            f"operation is {op.state}, not PREPARED",
        ),
        (
            event.occurred_at_ms >= op.request.deadline_at_ms,
            ReasonCode.DEADLINE_EXCEEDED,
            f"attempt at {event.occurred_at_ms}, after the operation's deadline {op.request.deadline_at_ms}",
        ),
        (
            event.expected_revision != revision or state.graph.revision != revision,
            ReasonCode.CAS_REVISION_MISMATCH,
            f"attempt expects revision {event.expected_revision}, manifest has {revision}, "
            f"conversation is at {state.graph.revision}",
        ),
        (
            event.expected_cancel_generation != state.cancel_generation,
            ReasonCode.CAS_CANCEL_GENERATION_MISMATCH,
            f"attempt expects cancel generation {event.expected_cancel_generation}, "
            f"conversation is at {state.cancel_generation}",
        ),
        (
            op.state == S.UNKNOWN and not op.attempt_terminated,
            ReasonCode.OLD_ATTEMPT_NOT_TERMINATED,
            f"generation {op.attempt_generation} is not confirmed terminated",
        ),
        (
            bool(busy),
            ReasonCode.CONVERSATION_BUSY,
            f"operations {busy} of this conversation may still produce output",
        ),
    )
    return next(((reason, detail) for failed, reason, detail in checks if failed), None)
