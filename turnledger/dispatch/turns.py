"""Conversation-level events: submitted turns (validated and committed as revisions) and cancels.

A committed turn moves the revision: no operation prepared for an earlier one can commit any
more (the canonical CAS checks the revision), so those are superseded at once (CANCELLED,
SUPERSEDED, previews retracted) and the next DispatchRequested proceeds at the new revision.
Operations WAITING for tool results are prepared again instead: the turn may be those results.
"""

from __future__ import annotations

from turnledger.dispatch.prepare import prepare
from turnledger.dispatch.step import Step, rejection_detail
from turnledger.dispatch.turn_size import turn_too_large
from turnledger.model.events import (
    CancelRequested,
    CommittedTurn,
    DispatchState,
    TurnSubmitted,
)
from turnledger.model.graph import Role
from turnledger.model.reasons import ReasonCode
from turnledger.sequence.builder import append, blocks_from_submission
from turnledger.sequence.validation import Invalid

S = DispatchState


SUBMITTABLE_ROLES = frozenset({Role.SYSTEM, Role.USER, Role.TOOL})
"""Assistant blocks enter history only through the canonical CAS of a dispatch."""

SUPERSEDED_BY_A_TURN = frozenset({S.PREPARED, S.PAUSED, S.DISPATCHING, S.SENT, S.STREAMING, S.UNKNOWN})
OPEN_STATES = frozenset(S) - {S.COMMITTED, S.REJECTED, S.CANCELLED}


def on_turn_submitted(step: Step, event: TurnSubmitted) -> None:
    state = step.state
    if event.turn_id in state.turn_ids:
        step.reject(ReasonCode.DUPLICATE_TURN, f"turn {event.turn_id} is already committed")
        return
    if event.expected_revision is not None and event.expected_revision != state.graph.revision:
        step.reject(
            ReasonCode.CAS_REVISION_MISMATCH,
            f"expected revision {event.expected_revision}, conversation is at {state.graph.revision}",
        )
        return
    foreign = [b.id for b in event.blocks if b.role not in SUBMITTABLE_ROLES]
    if foreign or not event.blocks:
        detail = f"blocks {foreign} are not system/user/tool" if foreign else "a turn needs blocks"
        step.reject(ReasonCode.INVALID_EVENT, detail)
        return
    blocks = blocks_from_submission(state.graph, event.turn_id, event.blocks)
    appended = append(state.graph, blocks, step.limits)
    if isinstance(appended, Invalid):
        for rejection in appended.rejections:
            step.reject(rejection.code, rejection_detail(rejection))
        return
    turn = CommittedTurn(
        conversation_id=state.conversation_id,
        revision=appended.revision,
        turn_id=event.turn_id,
        source_event_id=event.event_id,
        blocks=blocks,
        occurred_at_ms=event.occurred_at_ms,
    )
    too_large = turn_too_large(turn, step.limits, step.encoded)
    if too_large is not None:
        step.reject(ReasonCode.TURN_TOO_LARGE, too_large)
        return
    step.state = state.model_copy(update={"graph": appended, "turn_ids": (*state.turn_ids, event.turn_id)})
    step.outputs.append(turn)
    detail = f"turn {event.turn_id} moved the conversation to revision {appended.revision}"
    for op in list(step.state.operations.values()):
        if op.state in SUPERSEDED_BY_A_TURN:
            step.cancel(op, ReasonCode.SUPERSEDED, detail)
        elif op.state == S.WAITING:
            prepare(step, op)


def on_cancel(step: Step, event: CancelRequested) -> None:
    """Final for the client at once; a cancel also ends the pauses of what it cancels (all of them
    without an operation id). The conversation's next attempt still waits until a cancelled attempt
    is confirmed terminated."""
    state = step.state
    targets = [
        op
        for op in state.operations.values()
        if op.state in OPEN_STATES and (event.operation_id is None or op.operation_id == event.operation_id)
    ]
    if event.operation_id is not None and not targets:
        known = event.operation_id in state.operations
        reason = ReasonCode.ILLEGAL_TRANSITION if known else ReasonCode.UNKNOWN_OPERATION
        step.reject(reason, f"nothing to cancel for {event.operation_id}", operation_id=event.operation_id)
        return
    paused = {
        adapter: op_id
        for adapter, op_id in state.paused.items()
        if event.operation_id is not None and op_id != event.operation_id
    }
    step.state = state.model_copy(update={"cancel_generation": state.cancel_generation + 1, "paused": paused})
    cancel_reason = event.reason_code or (ReasonCode.WORKER_GAVE_UP if event.worker_gave_up else None)
    for op in targets:
        step.cancel(op, cancel_reason, event.reason or "cancelled", retract_reason=ReasonCode.AFTER_CANCEL)
