"""The pure per-conversation fold: one ingress event in, the next state and outputs out.

The dispatch state machine is the table `OPERATION_TRANSITIONS`: for each event that
addresses an operation, the states it may arrive in. An event outside its row is a
typed rejection (ILLEGAL_TRANSITION) and leaves the state unchanged. Events of a
non-active attempt never reach a handler: stream deltas become quarantine records,
transitions become STALE_GENERATION rejections.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from turnledger.adapters.admission import Admitted, OverBudget, admit
from turnledger.adapters.base import DispatchParams, UnknownAdapterError, UnsupportedKind
from turnledger.adapters.registry import get_adapter
from turnledger.dispatch.responses import candidate_blocks_to_committed
from turnledger.dispatch.state import ConversationState, OperationState
from turnledger.model.base import Frozen
from turnledger.model.canonical import digest_of
from turnledger.model.deltas import DeltaType
from turnledger.model.events import (
    AttemptTerminated,
    CancelRequested,
    CommittedTurn,
    DispatchAttempt,
    DispatchDecision,
    DispatchRequested,
    DispatchSent,
    DispatchState,
    HandleBound,
    IngressEvent,
    ManifestIssued,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    RecoveryReported,
    Rejected,
    ResumeStarted,
    StreamDeltas,
    StreamEnded,
    StreamOutcome,
    ToolCallReady,
    TurnSubmitted,
)
from turnledger.model.graph import BlockKind, Role
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.sequence.builder import append, blocks_from_submission, sequence_of
from turnledger.sequence.outcome import Invalid, Valid, Waiting
from turnledger.streaming.assembler import BlockAssembler
from turnledger.streaming.outcomes import Complete, Incomplete

S = DispatchState

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
    AttemptTerminated: frozenset({S.UNKNOWN, S.DISPATCHING, S.SENT, S.STREAMING}),
}
"""Which states each operation event may arrive in. Everything else is ILLEGAL_TRANSITION."""

SUBMITTABLE_ROLES = frozenset({Role.SYSTEM, Role.USER, Role.TOOL})
"""Assistant blocks enter history only through the canonical CAS of a dispatch."""

OutputRecord = Frozen


@dataclass
class FoldResult:
    state: ConversationState
    outputs: list[OutputRecord] = field(default_factory=list)


@dataclass
class _Step:
    """The working set of one event: the event, the evolving state, the outputs so far."""

    event: IngressEvent
    state: ConversationState
    outputs: list[OutputRecord] = field(default_factory=list)

    @property
    def at(self) -> int:
        return self.event.occurred_at_ms

    def reject(self, reason: ReasonCode, detail: str, operation_id: str | None = None) -> None:
        self.outputs.append(
            Rejected(
                conversation_id=self.state.conversation_id,
                operation_id=operation_id,
                reason=reason,
                detail=detail,
                event_type=type(self.event).__name__,
                event_id=self.event.event_id,
                occurred_at_ms=self.at,
            )
        )

    def quarantine(self, op_id: str, generation: int, reason: ReasonCode, detail: str = "") -> None:
        self.outputs.append(
            Quarantined(
                conversation_id=self.state.conversation_id,
                operation_id=op_id,
                attempt_generation=generation,
                reason=reason,
                event_type=type(self.event).__name__,
                event_id=self.event.event_id,
                detail=detail,
                occurred_at_ms=self.at,
            )
        )

    def put(self, op: OperationState, **updates: Any) -> OperationState:
        """Store `op` (with `updates` and this event's time) in the state: one copy of the operation."""
        op = op.model_copy(update={**updates, "updated_at_ms": self.at})
        self.state = self.state.with_operation(op)
        return op

    def transition(
        self,
        op: OperationState,
        new_state: DispatchState,
        *,
        accepted: bool = True,
        reason: ReasonCode | None = None,
        detail: str = "",
        **updates: Any,
    ) -> OperationState:
        previous = op.state
        op = self.put(op, state=new_state, **updates)
        self.decide(op, previous, accepted=accepted, reason=reason, detail=detail)
        return op

    def decide(
        self,
        op: OperationState,
        previous: DispatchState | None,
        *,
        accepted: bool = True,
        reason: ReasonCode | None = None,
        detail: str = "",
    ) -> None:
        self.outputs.append(
            DispatchDecision(
                conversation_id=self.state.conversation_id,
                operation_id=op.operation_id,
                state=op.state,
                previous_state=previous,
                accepted=accepted,
                reason=reason,
                detail=detail,
                conversation_revision=self.state.graph.revision,
                cancel_generation=self.state.cancel_generation,
                attempt_generation=op.attempt_generation,
                idempotency_key=op.idempotency_key,
                manifest_digest=op.manifest.manifest_digest if op.manifest else None,
                response_handle=op.response_handle,
                source_event_id=self.event.event_id,
                occurred_at_ms=self.at,
            )
        )

    def retract(self, op: OperationState, reason: ReasonCode) -> OperationState:
        """Drop the attempt's candidates; announce the retraction of its previews if it had any."""
        if op.assembler is not None and _had_previews(op):
            self.outputs.append(
                PreviewRetracted(
                    conversation_id=self.state.conversation_id,
                    operation_id=op.operation_id,
                    attempt_generation=op.attempt_generation,
                    reason=reason,
                    occurred_at_ms=self.at,
                )
            )
        return op.model_copy(update={"assembler": None})


def _had_previews(op: OperationState) -> bool:
    assembler = _restore_assembler(op)
    return assembler is not None and bool(assembler.previews())


def _tools_of(op: OperationState) -> dict[str, Any]:
    return {t.name: t for t in op.request.tools}


_LIVE_ASSEMBLERS: OrderedDict[int, tuple[dict[str, Any], BlockAssembler]] = OrderedDict()
_LIVE_ASSEMBLERS_MAX = 10_000


def _restore_assembler(op: OperationState) -> BlockAssembler | None:
    """The attempt's assembler: the live object its snapshot was taken from if there is one, else
    a restore from the snapshot (equal by construction: `restore(snapshot())` equals the original).

    Saves a restore and a re-snapshot of every earlier delta per StreamDeltas event. A live
    assembler is handed out once (popped) since the caller mutates it: any later use of the same
    snapshot, e.g. a batch re-folded after an aborted transaction, restores from the snapshot.
    """
    if op.assembler is None:
        return None
    live = _LIVE_ASSEMBLERS.pop(id(op.assembler), None)
    if live is not None and live[0] is op.assembler:
        return live[1]
    return BlockAssembler.restore(op.assembler, _tools_of(op))


def _keep_live(assembler: BlockAssembler) -> dict[str, Any]:
    """Snapshot an assembler that is not touched again, and remember it for `_restore_assembler`."""
    snapshot = assembler.snapshot()
    _LIVE_ASSEMBLERS[id(snapshot)] = (snapshot, assembler)
    while len(_LIVE_ASSEMBLERS) > _LIVE_ASSEMBLERS_MAX:
        _LIVE_ASSEMBLERS.popitem(last=False)
    return snapshot


# ---------------------------------------------------------------- turns


def _on_turn_submitted(step: _Step, event: TurnSubmitted) -> None:
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
    appended = append(state.graph, blocks)
    if isinstance(appended, Invalid):
        for rejection in appended.rejections:
            step.reject(rejection.code, _rejection_detail(rejection))
        return
    step.state = state.model_copy(update={"graph": appended, "turn_ids": (*state.turn_ids, event.turn_id)})
    step.outputs.append(
        CommittedTurn(
            conversation_id=state.conversation_id,
            revision=appended.revision,
            turn_id=event.turn_id,
            source_event_id=event.event_id,
            blocks=blocks,
            occurred_at_ms=event.occurred_at_ms,
        )
    )
    for op in list(step.state.operations.values()):
        if op.state == S.WAITING:
            _prepare(step, op)


def _rejection_detail(rejection: Any) -> str:
    where = " ".join(
        f"{name}={value}"
        for name, value in (("block", rejection.block_id), ("call", rejection.call_id))
        if value
    )
    return f"{rejection.detail} ({where})" if where else str(rejection.detail)


# ---------------------------------------------------------------- dispatch request


def _on_dispatch_requested(step: _Step, event: DispatchRequested) -> None:
    if event.operation_id in step.state.operations:
        step.reject(
            ReasonCode.DUPLICATE_OPERATION,
            f"operation {event.operation_id} already exists",
            operation_id=event.operation_id,
        )
        return
    op = OperationState(operation_id=event.operation_id, state=S.WAITING, request=event)
    _prepare(step, op, new=True)


def _prepare(step: _Step, op: OperationState, *, new: bool = False) -> None:
    """Build, validate, render and admit the current sequence: PREPARED, or why not."""
    previous = None if new else op.state
    request = op.request
    try:
        adapter = get_adapter(request.adapter)
    except UnknownAdapterError as exc:
        _settle(step, op, previous, S.REJECTED, ReasonCode.UNKNOWN_ADAPTER, str(exc))
        return
    outcome = sequence_of(step.state.graph)
    if isinstance(outcome, Waiting):
        if previous != S.WAITING:
            detail = f"pending tool calls {list(outcome.pending_call_ids)}"
            _settle(step, op, previous, S.WAITING, None, detail)
        return
    if isinstance(outcome, Invalid):  # unreachable while history is validated on append
        rejection = outcome.rejections[0]
        _settle(step, op, previous, S.REJECTED, rejection.code, _rejection_detail(rejection))
        return
    assert isinstance(outcome, Valid)
    sequence = outcome.sequence
    if not sequence.blocks:
        _settle(step, op, previous, S.REJECTED, ReasonCode.EMPTY_SEQUENCE, "the conversation has no blocks")
        return
    params = DispatchParams.of_request(request)
    rendered = adapter.render(sequence, params)
    if isinstance(rendered, UnsupportedKind):
        detail = f"{adapter.adapter_id} does not know kind {rendered.kind!r} (block {rendered.block_id})"
        _settle(step, op, previous, S.PAUSED, ReasonCode.UNSUPPORTED_KIND, detail)
        return
    admission = admit(adapter, rendered, params)
    if isinstance(admission, OverBudget):
        detail = f"{admission.input_tokens} input tokens exceed the budget of {admission.limit}"
        _settle(step, op, previous, S.REJECTED, ReasonCode.TOKEN_BUDGET_EXCEEDED, detail)
        return
    if not isinstance(admission, Admitted):
        _settle(step, op, previous, S.REJECTED, ReasonCode.UNKNOWN_MODEL, f"model {request.model_revision}")
        return
    manifest = DispatchManifest(
        operation_id=op.operation_id,
        conversation_id=step.state.conversation_id,
        conversation_revision=sequence.conversation_revision,
        cancel_generation=step.state.cancel_generation,
        sequence_digest=sequence.sequence_digest,
        blocks=sequence.block_refs(),
        adapter=adapter.adapter_id,
        adapter_digest=adapter.digest,
        provider=adapter.provider,
        model_revision=request.model_revision,
        toolset_digest=digest_of([t.to_json_dict() for t in request.tools]),
        max_output_tokens=request.max_output_tokens,
        policy=dict(request.policy),
        request_digest=rendered.request_digest,
        request_body=rendered.body.decode("utf-8"),
        input_tokens=admission.input_tokens,
    ).sealed()
    step.outputs.append(ManifestIssued(manifest=manifest, occurred_at_ms=step.at))
    op = op.model_copy(update={"manifest": manifest, "prepared_revision": sequence.conversation_revision})
    _settle(step, op, previous, S.PREPARED, None, "")


def _settle(
    step: _Step,
    op: OperationState,
    previous: DispatchState | None,
    new_state: DispatchState,
    reason: ReasonCode | None,
    detail: str,
) -> None:
    op = step.put(op, state=new_state)
    accepted = new_state in (S.PREPARED, S.WAITING)
    step.decide(op, previous, accepted=accepted, reason=reason, detail=detail)


# ---------------------------------------------------------------- the dispatch CAS


def _on_dispatch_attempt(step: _Step, op: OperationState, event: DispatchAttempt) -> None:
    """The send acceptance point: CAS on (revision, cancelGeneration, PREPARED)."""
    state = step.state
    conflict = _attempt_conflict(state, op, event)
    if conflict is not None:
        reason, detail = conflict
        step.decide(op, op.state, accepted=False, reason=reason, detail=detail)
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
    )


def _attempt_conflict(
    state: ConversationState, op: OperationState, event: DispatchAttempt
) -> tuple[ReasonCode, str] | None:
    revision = op.manifest.conversation_revision if op.manifest else -1
    checks: tuple[tuple[bool, ReasonCode, str], ...] = (
        (
            op.state not in (S.PREPARED, S.UNKNOWN),
            ReasonCode.CAS_STATE_MISMATCH,
            f"operation is {op.state}, not PREPARED",
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
            bool(state.in_flight(except_id=op.operation_id)),
            ReasonCode.CAS_STATE_MISMATCH,
            "another operation of this conversation is in flight",
        ),
    )
    return next(((reason, detail) for failed, reason, detail in checks if failed), None)


# ---------------------------------------------------------------- attempt lifecycle


def _on_sent(step: _Step, op: OperationState, event: DispatchSent) -> None:
    step.transition(op, S.SENT)


def _on_handle_bound(step: _Step, op: OperationState, event: HandleBound) -> None:
    assert op.manifest is not None
    bound_to = step.state.handles.get(event.response_handle)
    if event.manifest_digest != op.manifest.manifest_digest or (
        bound_to is not None and bound_to != op.manifest.manifest_digest
    ):
        step.reject(
            ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST,
            f"handle {event.response_handle} is bound to "
            f"{bound_to or event.manifest_digest}, not {op.manifest.manifest_digest}",
            operation_id=op.operation_id,
        )
        return
    assembler = BlockAssembler(_tools_of(op))
    step.state = step.state.model_copy(
        update={"handles": {**step.state.handles, event.response_handle: op.manifest.manifest_digest}}
    )
    step.transition(op, S.STREAMING, response_handle=event.response_handle, assembler=_keep_live(assembler))


def _on_deltas(step: _Step, op: OperationState, event: StreamDeltas) -> None:
    """Feed the attempt's assembler; previews are coalesced per event (one per block, the latest).

    Coalescing per ingress event rather than per processor batch keeps the outputs a
    function of the log alone, so a replay with other batch boundaries is byte-identical.
    """
    assembler = _restore_assembler(op)
    assert assembler is not None
    previews: dict[int, tuple[str, int]] = {}
    for delta in event.deltas:
        if delta.response_handle != op.response_handle or delta.generation != op.attempt_generation:
            step.quarantine(
                op.operation_id,
                delta.generation,
                ReasonCode.FOREIGN_HANDLE,
                f"delta of handle {delta.response_handle} generation {delta.generation}",
            )
            continue
        fed = assembler.feed(delta)
        for index, text in fed.preview_updates.items():
            previews[index] = (text, delta.delta_sequence)
        if delta.type in (DeltaType.MESSAGE_STOP, DeltaType.PROVIDER_ERROR):
            _finish(step, op.model_copy(update={"assembler": assembler.snapshot()}), assembler)
            return
    for index, (text, through) in sorted(previews.items()):
        step.outputs.append(
            PreviewUpdated(
                conversation_id=step.state.conversation_id,
                operation_id=op.operation_id,
                attempt_generation=op.attempt_generation,
                block_index=index,
                text=text,
                through_sequence=through,
                occurred_at_ms=step.at,
            )
        )
    step.put(op, assembler=_keep_live(assembler))


def _finish(step: _Step, op: OperationState, assembler: BlockAssembler) -> None:
    """The provider finished: commit through the canonical CAS, or settle UNKNOWN with why."""
    outcome = assembler.finish()
    if isinstance(outcome, Incomplete):
        op = step.retract(op, outcome.reason)
        step.transition(op, S.UNKNOWN, reason=outcome.reason, detail=outcome.detail, attempt_terminated=True)
        return
    assert isinstance(outcome, Complete)
    _canonical_commit(step, op, outcome)


def _canonical_commit(step: _Step, op: OperationState, outcome: Complete) -> None:
    """The canonical CAS: only the active generation, at the manifest's revision, uncancelled."""
    state = step.state
    assert op.manifest is not None
    revision = op.manifest.conversation_revision
    if state.graph.revision != revision or state.cancel_generation != op.attempt_cancel_generation:
        detail = (
            f"conversation is at revision {state.graph.revision}, cancel generation {state.cancel_generation}"
        )
        _refuse_commit(step, op, ReasonCode.CANONICAL_CAS_CONFLICT, detail)
        return
    turn_id = f"{op.operation_id}#{op.attempt_generation}"
    blocks = candidate_blocks_to_committed(state.graph, turn_id, op.attempt_generation, outcome.blocks)
    appended = append(state.graph, blocks)
    if isinstance(appended, Invalid):
        detail = "; ".join(_rejection_detail(r) for r in appended.rejections)
        _refuse_commit(step, op, appended.rejections[0].code, detail)
        return
    step.state = state.model_copy(update={"graph": appended, "turn_ids": (*state.turn_ids, turn_id)})
    step.outputs.append(
        CommittedTurn(
            conversation_id=state.conversation_id,
            revision=appended.revision,
            turn_id=turn_id,
            source_event_id=step.event.event_id,
            operation_id=op.operation_id,
            attempt_generation=op.attempt_generation,
            blocks=blocks,
            occurred_at_ms=step.at,
        )
    )
    step.transition(
        op, S.COMMITTED, committed_revision=appended.revision, assembler=None, attempt_terminated=True
    )
    for block in blocks:
        if block.kind == BlockKind.TOOL_CALL:
            assert block.call_id and block.tool_name and block.arguments is not None and block.argument_digest
            step.outputs.append(
                ToolCallReady(
                    conversation_id=state.conversation_id,
                    revision=appended.revision,
                    operation_id=op.operation_id,
                    attempt_generation=op.attempt_generation,
                    block_id=block.id,
                    call_id=block.call_id,
                    tool_name=block.tool_name,
                    arguments=block.arguments,
                    argument_digest=block.argument_digest,
                    schema_digest=block.schema_digest,
                    occurred_at_ms=step.at,
                )
            )


def _refuse_commit(step: _Step, op: OperationState, reason: ReasonCode, detail: str) -> None:
    """A complete response that may not become canonical: kept in quarantine, never in history."""
    step.quarantine(op.operation_id, op.attempt_generation, reason, detail)
    op = step.retract(op, reason)
    step.transition(op, S.UNKNOWN, reason=reason, detail=detail, attempt_terminated=True)


SETTLED_BEFORE_STREAM_END = frozenset({S.COMMITTED, S.UNKNOWN, S.CANCELLED})


def _on_stream_ended(step: _Step, op: OperationState, event: StreamEnded) -> None:
    if op.state in SETTLED_BEFORE_STREAM_END:
        return
    if event.outcome == StreamOutcome.DISCONNECTED:
        # The provider may still be generating: UNKNOWN until resumed or confirmed terminated.
        step.transition(op, S.UNKNOWN, reason=ReasonCode.STREAM_DISCONNECTED, detail=_resumable(event))
        return
    assembler = _restore_assembler(op)
    if assembler is None:
        reason = ReasonCode.MISSING_STOP
        if event.outcome == StreamOutcome.PROVIDER_ERROR:
            reason = ReasonCode.PROVIDER_ERROR
        step.transition(
            op, S.UNKNOWN, reason=reason, detail="stream ended before any delta", attempt_terminated=True
        )
        return
    _finish(step, op, assembler)


def _resumable(event: StreamEnded) -> str:
    return "resumable" if event.resumable else "not resumable"


def _on_recovery(step: _Step, op: OperationState, event: RecoveryReported) -> None:
    step.transition(op, S.UNKNOWN, reason=ReasonCode.WORKER_RECOVERED, detail=f"worker {event.worker_id}")


def _on_resume(step: _Step, op: OperationState, event: ResumeStarted) -> None:
    if op.attempt_terminated:
        step.reject(
            ReasonCode.ILLEGAL_TRANSITION,
            f"generation {op.attempt_generation} is terminated; start a new attempt",
            operation_id=op.operation_id,
        )
        return
    if op.response_handle is None or event.response_handle != op.response_handle:
        step.reject(
            ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST,
            f"resume with handle {event.response_handle}, attempt is bound to {op.response_handle}",
            operation_id=op.operation_id,
        )
        return
    step.transition(op, S.STREAMING)


def _on_terminated(step: _Step, op: OperationState, event: AttemptTerminated) -> None:
    op = step.retract(op, ReasonCode.STREAM_DISCONNECTED)
    step.transition(op, S.UNKNOWN, attempt_terminated=True, reason=ReasonCode.STREAM_DISCONNECTED)


# ---------------------------------------------------------------- cancel


def _on_cancel(step: _Step, event: CancelRequested) -> None:
    state = step.state
    targets = [
        op
        for op in state.operations.values()
        if op.state not in (S.COMMITTED, S.REJECTED, S.CANCELLED)
        and (event.operation_id is None or op.operation_id == event.operation_id)
    ]
    if event.operation_id is not None and not targets:
        known = event.operation_id in state.operations
        reason = ReasonCode.ILLEGAL_TRANSITION if known else ReasonCode.UNKNOWN_OPERATION
        step.reject(reason, f"nothing to cancel for {event.operation_id}", operation_id=event.operation_id)
        return
    step.state = state.model_copy(update={"cancel_generation": state.cancel_generation + 1})
    for op in targets:
        op = step.retract(op, ReasonCode.AFTER_CANCEL)
        step.transition(op, S.CANCELLED, detail=event.reason or "cancelled")


# ---------------------------------------------------------------- the table


OperationHandler = Callable[[_Step, OperationState, Any], None]

OPERATION_HANDLERS: Mapping[type[IngressEvent], OperationHandler] = {
    DispatchAttempt: _on_dispatch_attempt,
    DispatchSent: _on_sent,
    HandleBound: _on_handle_bound,
    StreamDeltas: _on_deltas,
    StreamEnded: _on_stream_ended,
    RecoveryReported: _on_recovery,
    ResumeStarted: _on_resume,
    AttemptTerminated: _on_terminated,
}

CONVERSATION_HANDLERS: Mapping[type[IngressEvent], Callable[[_Step, Any], None]] = {
    TurnSubmitted: _on_turn_submitted,
    DispatchRequested: _on_dispatch_requested,
    CancelRequested: _on_cancel,
}

LATE_BLOCK_REASONS: Mapping[DispatchState, ReasonCode] = {
    S.COMMITTED: ReasonCode.AFTER_COMMIT,
    S.CANCELLED: ReasonCode.AFTER_CANCEL,
}


def fold(state: ConversationState, event: IngressEvent) -> FoldResult:
    """Apply one ingress event. Never raises for a well-typed event: refusals are outputs."""
    step = _Step(event=event, state=state)
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
                f"{len(event.deltas)} deltas while {op.state}",
            )
        else:
            step.reject(
                ReasonCode.ILLEGAL_TRANSITION,
                f"{type(event).__name__} not allowed in state {op.state}",
                operation_id=op_id,
            )
        return FoldResult(step.state, step.outputs)
    handler(step, op, event)
    return FoldResult(step.state, step.outputs)


def _is_stale(step: _Step, op: OperationState, event: IngressEvent) -> bool:
    """Events of a generation other than the active one: deltas to quarantine, the rest rejected."""
    generation = getattr(event, "attempt_generation", None)
    if generation is None or generation == op.attempt_generation:
        return False
    if isinstance(event, StreamDeltas):
        step.quarantine(
            op.operation_id,
            generation,
            ReasonCode.STALE_GENERATION,
            f"{len(event.deltas)} deltas of generation {generation}, active is {op.attempt_generation}",
        )
    else:
        step.reject(
            ReasonCode.STALE_GENERATION,
            f"{type(event).__name__} for generation {generation}, active is {op.attempt_generation}",
            operation_id=op.operation_id,
        )
    return True
