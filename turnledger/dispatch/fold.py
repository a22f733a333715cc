"""The pure per-conversation fold: one ingress event in, the next state and outputs out.

The dispatch state machine is the table `OPERATION_TRANSITIONS`: for each event that
addresses an operation, the states it may arrive in. An event outside its row is a
typed rejection (ILLEGAL_TRANSITION) and leaves the state unchanged. Events of a
non-active attempt never reach a handler: stream deltas become quarantine records,
transitions become STALE_GENERATION rejections. Events in `LEASE_HOLDER_EVENTS` must come
from the worker holding the attempt's lease, or from anyone once it expired
(LEASE_NOT_HELD otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from turnledger.adapters.admission import ModelRegistry, builtin_registry
from turnledger.adapters.prefix import RenderCache
from turnledger.dispatch.attempt import on_dispatch_attempt
from turnledger.dispatch.leases import holds_lease, on_expiry_claimed, on_lease_renewed
from turnledger.dispatch.lifecycle import (
    on_deltas,
    on_handle_bound,
    on_recovery,
    on_replay,
    on_resume,
    on_sent,
    on_stream_ended,
    on_terminated,
)
from turnledger.dispatch.live_assemblers import LiveAssemblers
from turnledger.dispatch.manifest_blocks import ListingCache
from turnledger.dispatch.prepare import on_dispatch_requested
from turnledger.dispatch.state import ConversationState, OperationState
from turnledger.dispatch.step import FoldResult, Step
from turnledger.dispatch.turn_size import EncodedRecords
from turnledger.dispatch.turns import on_cancel, on_turn_submitted
from turnledger.model.events import (
    AttemptTerminated,
    CancelRequested,
    DispatchAttempt,
    DispatchRequested,
    DispatchSent,
    DispatchState,
    ExpiryClaimed,
    HandleBound,
    IngressEvent,
    LeaseRenewed,
    RecoveryReported,
    ReplayStarted,
    ResumeStarted,
    StreamDeltas,
    StreamEnded,
    TurnSubmitted,
)
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.runs import delta_count

S = DispatchState
_OPEN_ATTEMPT = frozenset({S.DISPATCHING, S.SENT, S.STREAMING, S.UNKNOWN, S.CANCELLED})

OPERATION_TRANSITIONS: Mapping[type[IngressEvent], frozenset[DispatchState]] = {
    # Every state: the CAS itself answers with an accept/conflict decision the worker waits for.
    DispatchAttempt: frozenset(DispatchState),
    DispatchSent: frozenset({S.DISPATCHING}),
    HandleBound: frozenset({S.SENT}),
    StreamDeltas: frozenset({S.STREAMING}),
    # A worker reports the end of every stream; after the fold has settled the attempt it is a no-op.
    StreamEnded: frozenset({S.STREAMING, S.SENT, S.COMMITTED, S.UNKNOWN, S.CANCELLED}),
    RecoveryReported: frozenset({S.DISPATCHING, S.SENT, S.STREAMING}),
    ResumeStarted: frozenset({S.UNKNOWN}),
    ReplayStarted: frozenset({S.UNKNOWN}),
    # a cancelled attempt still has to be confirmed terminated before the conversation's next one
    AttemptTerminated: _OPEN_ATTEMPT,
    LeaseRenewed: _OPEN_ATTEMPT,
    # every state a lease or a deadline can still settle
    ExpiryClaimed: frozenset(DispatchState) - {S.COMMITTED, S.REJECTED},
}
"""Which states each operation event may arrive in. Everything else is ILLEGAL_TRANSITION."""


OperationHandler = Callable[[Step, OperationState, Any], None]

OPERATION_HANDLERS: Mapping[type[IngressEvent], OperationHandler] = {
    DispatchAttempt: on_dispatch_attempt,
    DispatchSent: on_sent,
    HandleBound: on_handle_bound,
    StreamDeltas: on_deltas,
    StreamEnded: on_stream_ended,
    RecoveryReported: on_recovery,
    ResumeStarted: on_resume,
    ReplayStarted: on_replay,
    AttemptTerminated: on_terminated,
    LeaseRenewed: on_lease_renewed,
    ExpiryClaimed: on_expiry_claimed,
}

LEASE_HOLDER_EVENTS: frozenset[type[IngressEvent]] = frozenset(
    {RecoveryReported, ResumeStarted, ReplayStarted, AttemptTerminated, LeaseRenewed}
)
"""Events only the lease holder may append while its lease holds (their `worker_id` is checked)."""

CONVERSATION_HANDLERS: Mapping[type[IngressEvent], Callable[[Step, Any], None]] = {
    TurnSubmitted: on_turn_submitted,
    DispatchRequested: on_dispatch_requested,
    CancelRequested: on_cancel,
}

LATE_BLOCK_REASONS: Mapping[DispatchState, ReasonCode] = {
    S.COMMITTED: ReasonCode.AFTER_COMMIT,
    S.CANCELLED: ReasonCode.AFTER_CANCEL,
}


def fold(
    state: ConversationState,
    event: IngressEvent,
    live: LiveAssemblers | None = None,
    models: ModelRegistry | None = None,
    limits: Limits = DEFAULT_LIMITS,
    renders: RenderCache | None = None,
    encoded: EncodedRecords | None = None,
    listings: ListingCache | None = None,
) -> FoldResult:
    """Apply one ingress event. Never raises for a well-typed event: refusals are outputs.

    `live` is the caller's cache of live assemblers (the outputs do not depend on it); `models` the
    registry admission uses (the built-in one when None); `limits` the size limits (model/limits.py);
    `renders` the caller's cache of rendered prefixes (adapters/prefix.py; no output depends on it);
    `encoded` keeps the bytes of records the fold encodes (a turn's size check) for the caller;
    `listings` the caller's cache of manifest block listings (dispatch/manifest_blocks.py; no output
    depends on it)."""
    step = Step(
        event=event,
        state=state,
        live=live or LiveAssemblers(),
        models=models or builtin_registry(),
        limits=limits,
        renders=renders,
        encoded=encoded,
        listings=listings,
    )
    conversation_handler = CONVERSATION_HANDLERS.get(type(event))
    if conversation_handler is not None:
        conversation_handler(step, event)
        return FoldResult(step.state, step.outputs)
    handler = OPERATION_HANDLERS[type(event)]
    op_id: str = event.operation_id  # type: ignore[attr-defined]
    op = state.operations.get(op_id)
    if op is None:
        step.reject(ReasonCode.UNKNOWN_OPERATION, f"no operation {op_id}", operation_id=op_id)
        return FoldResult(step.state, step.outputs)
    if _is_stale(step, op, event):
        return FoldResult(step.state, step.outputs)
    if op.state not in OPERATION_TRANSITIONS[type(event)]:
        if isinstance(event, StreamDeltas):
            step.quarantine(
                op_id,
                event.attempt_generation,
                LATE_BLOCK_REASONS.get(op.state, ReasonCode.ILLEGAL_TRANSITION),
                f"{delta_count(event.deltas)} deltas while {op.state}",
            )
        else:
            step.reject(
                ReasonCode.ILLEGAL_TRANSITION,
                f"{type(event).__name__} not allowed in state {op.state}",
                operation_id=op_id,
            )
        return FoldResult(step.state, step.outputs)
    if type(event) in LEASE_HOLDER_EVENTS and not holds_lease(op, event.worker_id):  # type: ignore[attr-defined]
        step.reject(
            ReasonCode.LEASE_NOT_HELD,
            f"{type(event).__name__} from {event.worker_id}; the lease is {op.lease_owner}'s "  # type: ignore[attr-defined]
            f"until {op.lease_expires_at_ms}",
            operation_id=op_id,
        )
        return FoldResult(step.state, step.outputs)
    handler(step, op, event)
    return FoldResult(step.state, step.outputs)


def _is_stale(step: Step, op: OperationState, event: IngressEvent) -> bool:
    """Events of a generation other than the active one: deltas to quarantine, the rest rejected."""
    generation = getattr(event, "attempt_generation", None)
    if generation is None or generation == op.attempt_generation:
        return False
    if isinstance(event, StreamDeltas):
        count = delta_count(event.deltas)
        step.quarantine(
            op.operation_id,
            generation,
            ReasonCode.STALE_GENERATION,
            f"{count} deltas of generation {generation}, active is {op.attempt_generation}",
        )
    else:
        step.reject(
            ReasonCode.STALE_GENERATION,
            f"{type(event).__name__} for generation {generation}, active is {op.attempt_generation}",
            operation_id=op.operation_id,
        )
    return True
