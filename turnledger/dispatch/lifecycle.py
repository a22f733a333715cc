"""An accepted attempt: sent, bound to its manifest, streamed, then committed through the canonical
CAS, or settled UNKNOWN (recovery, disconnect, incomplete response) until resumed, replayed or
terminated. Every event of the attempt is a sign of life of its lease holder (`leases.py`)."""

from __future__ import annotations

from turnledger.adapters.registry import get_adapter
from turnledger.dispatch.live_assemblers import tools_of
from turnledger.dispatch.responses import candidate_blocks_to_committed
from turnledger.dispatch.state import OperationState
from turnledger.dispatch.step import Step, rejection_detail
from turnledger.dispatch.turn_size import turn_too_large
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.model.events import (
    AttemptTerminated,
    CommittedTurn,
    DispatchSent,
    DispatchState,
    HandleBound,
    PreviewUpdated,
    RecoveryReported,
    ReplayStarted,
    ResumeStarted,
    StreamDeltas,
    StreamEnded,
    StreamOutcome,
    ToolCallReady,
)
from turnledger.model.graph import BlockKind
from turnledger.model.reasons import ReasonCode
from turnledger.sequence.builder import append
from turnledger.sequence.validation import Invalid
from turnledger.streaming.assembler import BlockAssembler, is_visible
from turnledger.streaming.outcomes import Complete, Incomplete

S = DispatchState


def on_sent(step: Step, op: OperationState, event: DispatchSent) -> None:
    step.transition(op, S.SENT, lease_renewed_at_ms=step.at)


def on_handle_bound(step: Step, op: OperationState, event: HandleBound) -> None:
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
    assembler = BlockAssembler(tools_of(op), limits=step.limits)
    step.state = step.state.model_copy(
        update={"handles": {**step.state.handles, event.response_handle: op.manifest.manifest_digest}}
    )
    step.transition(
        op,
        S.STREAMING,
        response_handle=event.response_handle,
        assembler=step.live.keep(assembler),
        resumable=event.resumable,
        lease_renewed_at_ms=step.at,
    )


_ENDS_STREAM = frozenset({DeltaType.MESSAGE_STOP, DeltaType.PROVIDER_ERROR})


def on_deltas(step: Step, op: OperationState, event: StreamDeltas) -> None:
    """Feed the attempt's assembler; previews are coalesced per event (one per block, the latest).

    Coalescing per ingress event rather than per processor batch keeps the outputs a
    function of the log alone, so a replay with other batch boundaries is byte-identical. A run
    (`streaming/runs.py`) is fed piece by piece, each as the delta it stands for, so an event with
    runs has the outputs of the same event with its runs expanded; a run of another handle or
    generation is quarantined as one record, as it arrived.
    A preview carries only the text appended since the block's previous preview, at its offset
    (`BlockAssembler.take_preview`), so an answer's preview bytes grow with its length. Each of its
    fields comes from a validated model with the same annotation (the state, the operation, the
    deltas' `int`s, the assembler's `str`), so it is built without validating again (`of_validated`).
    """
    assembler = step.live.restore(op, step.limits)
    assert assembler is not None
    through: dict[int, int] = {}
    updates: dict[int, str] = {}
    for delta in event.deltas:
        if delta.response_handle != op.response_handle or delta.generation != op.attempt_generation:
            step.quarantine(
                op.operation_id,
                delta.generation,
                ReasonCode.FOREIGN_HANDLE,
                f"delta of handle {delta.response_handle} generation {delta.generation}",
            )
            continue
        if delta.following_texts:  # a run: each piece as the delta it stands for
            for sequence, _status in assembler.feed_pieces(delta, updates):
                if updates:
                    for index in updates:
                        through[index] = sequence
                    updates.clear()
                if delta.type in _ENDS_STREAM:
                    finish(step, op.model_copy(update={"assembler": assembler.snapshot()}), assembler)
                    return
            continue
        assembler.feed_into(delta, updates)
        if updates:
            for index in updates:
                through[index] = delta.delta_sequence
            updates.clear()
        if delta.type in _ENDS_STREAM:
            finish(step, op.model_copy(update={"assembler": assembler.snapshot()}), assembler)
            return
    for index, sequence in sorted(through.items()):
        offset, text = assembler.take_preview(index)
        step.outputs.append(
            PreviewUpdated.of_validated(
                {
                    "conversation_id": step.state.conversation_id,
                    "operation_id": op.operation_id,
                    "attempt_generation": op.attempt_generation,
                    "block_index": index,
                    "text": text,
                    "through_sequence": sequence,
                    "occurred_at_ms": step.at,
                    "text_offset": offset,
                }
            )
        )
    step.put(op, assembler=step.live.keep(assembler), lease_renewed_at_ms=step.at)


SETTLED_BY = {ReasonCode.PROVIDER_REFUSED: S.CANCELLED, ReasonCode.OUTPUT_LIMIT_REACHED: S.CANCELLED}
"""Where an incomplete answer settles the operation, by its reason: a refusal, or an answer cut at the
output limit, ends it (the same request meets the same refusal, or the same limit with the same
budget, so no new generation is sent: the worker's HTTP refusals end the same way); anything else is
UNKNOWN, which a new generation may follow."""


NOTHING_VISIBLE = {
    frozenset(): "the provider's complete answer has no content: nothing enters the history",
    frozenset({"thinking"}): (
        "the provider's complete answer holds only thinking: nothing visible enters the history"
    ),
    frozenset({"text"}): (
        "the provider's complete answer holds only blank text: nothing visible enters the history"
    ),
    frozenset({"thinking", "text"}): (
        "the provider's complete answer holds only thinking and blank text: "
        "nothing visible enters the history"
    ),
}
"""The EMPTY_RESPONSE detail of a complete answer with nothing visible (`assembler.is_visible`: no tool
call, no text that is not blank), by the kinds of its blocks. It ends as an answer with no block always
did: COMMITTED, nothing appended, the previews of its blank text retracted; the conversation may
dispatch again. Committed, its thinking and blank text were a turn that renders to nothing, or to an
assistant message with nothing in it, in every later request (the adapters' renderers): Anthropic and
Bedrock leave out unsigned thinking and blank text (the user's turns around it merged into one message)
and send signed thinking as an assistant message of thinking alone; Gemini sends no unsigned thought
back (the user's turns merged) and the last chunk's signature as a model turn of one empty text part;
OpenAI Responses drops a reasoning item with nothing after it in its run (two user messages in a row);
OpenAI Chat sends no thinking (two user messages in a row) and blank text as an assistant message of
blank text. At the output limit the same answer is not complete (`OUTPUT_LIMIT_REACHED`, the assembler's
`_cut_by_the_limit`). Before session 49 only an answer with no block ended here; the rest committed."""


def finish(step: Step, op: OperationState, assembler: BlockAssembler) -> None:
    """The provider finished: commit through the canonical CAS, settle with why (`SETTLED_BY`), or, for
    an answer with nothing visible, commit nothing and say so (`NOTHING_VISIBLE`)."""
    outcome = assembler.finish()
    if isinstance(outcome, Incomplete):
        op = step.retract(op, outcome.reason)
        settled = SETTLED_BY.get(outcome.reason, S.UNKNOWN)
        step.transition(op, settled, reason=outcome.reason, detail=outcome.detail, attempt_terminated=True)
        return
    assert isinstance(outcome, Complete)
    if not any(is_visible(block.kind, block.text) for block in outcome.blocks):
        detail = NOTHING_VISIBLE[frozenset(block.kind for block in outcome.blocks)]
        op = step.retract(op, ReasonCode.EMPTY_RESPONSE)
        step.transition(
            op, S.COMMITTED, reason=ReasonCode.EMPTY_RESPONSE, detail=detail, attempt_terminated=True
        )
        return
    canonical_commit(step, op, outcome)


def canonical_commit(step: Step, op: OperationState, outcome: Complete) -> None:
    """The canonical CAS: only the active generation, at the manifest's revision, uncancelled."""
    state = step.state
    assert op.manifest is not None
    revision = op.manifest.conversation_revision
    if state.graph.revision != revision or state.cancel_generation != op.attempt_cancel_generation:
        detail = (
            f"conversation is at revision {state.graph.revision}, cancel generation {state.cancel_generation}"
        )
        refuse_commit(step, op, ReasonCode.CANONICAL_CAS_CONFLICT, detail)
        return
    turn_id = f"{op.operation_id}#{op.attempt_generation}"
    api = get_adapter(op.request.adapter).api
    blocks = candidate_blocks_to_committed(state.graph, turn_id, op.attempt_generation, outcome.blocks, api)
    appended = append(state.graph, blocks, step.limits)
    if isinstance(appended, Invalid):
        detail = "; ".join(rejection_detail(r) for r in appended.rejections)
        refuse_commit(step, op, appended.rejections[0].code, detail)
        return
    turn = CommittedTurn(
        conversation_id=state.conversation_id,
        revision=appended.revision,
        turn_id=turn_id,
        source_event_id=step.event.event_id,
        operation_id=op.operation_id,
        attempt_generation=op.attempt_generation,
        blocks=blocks,
        occurred_at_ms=step.at,
    )
    too_large = turn_too_large(turn, step.limits, step.encoded)
    if too_large is not None:
        refuse_commit(step, op, ReasonCode.TURN_TOO_LARGE, too_large)
        return
    step.state = state.model_copy(update={"graph": appended, "turn_ids": (*state.turn_ids, turn_id)})
    step.outputs.append(turn)
    reason, detail = commit_note(outcome)
    step.transition(
        op,
        S.COMMITTED,
        reason=reason,
        detail=detail,
        committed_revision=appended.revision,
        assembler=None,
        attempt_terminated=True,
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


COMMIT_NOTED_BY = {StopReason.MAX_TOKENS: ReasonCode.OUTPUT_LIMIT_REACHED}
"""A commit whose stop a client must know of, by stop reason: an answer cut by the output limit is
committed as far as it went (its text; a cut tool call never commits, see the assembler), and the
COMMITTED decision says so, as a provider's `finish_reason: "length"` does; any other stop commits
with no reason."""


def commit_note(outcome: Complete) -> tuple[ReasonCode | None, str]:
    """The COMMITTED decision's reason and detail for the answer's stop (`COMMIT_NOTED_BY`)."""
    reason = COMMIT_NOTED_BY.get(outcome.stop_reason)
    if reason is None:
        return None, ""
    stop = outcome.raw_stop_reason or outcome.stop_reason.value
    return reason, f"the answer was cut at the output limit ({stop}) and is committed as far as it went"


def refuse_commit(step: Step, op: OperationState, reason: ReasonCode, detail: str) -> None:
    """A complete response that may not become canonical: kept in quarantine, never in history."""
    step.quarantine(op.operation_id, op.attempt_generation, reason, detail)
    op = step.retract(op, reason)
    step.transition(op, S.UNKNOWN, reason=reason, detail=detail, attempt_terminated=True)


SETTLED_BEFORE_STREAM_END = frozenset({S.COMMITTED, S.UNKNOWN, S.CANCELLED})


def on_stream_ended(step: Step, op: OperationState, event: StreamEnded) -> None:
    if op.state in SETTLED_BEFORE_STREAM_END:
        return
    if event.outcome == StreamOutcome.DISCONNECTED:
        # The provider may still be generating: UNKNOWN until resumed or confirmed terminated.
        step.transition(
            op, S.UNKNOWN, reason=ReasonCode.STREAM_DISCONNECTED, detail=with_why(resumable(event), event)
        )
        return
    assembler = step.live.restore(op, step.limits)
    if assembler is None:
        reason = ReasonCode.MISSING_STOP
        if event.outcome == StreamOutcome.PROVIDER_ERROR:
            reason = ReasonCode.PROVIDER_ERROR
        step.transition(
            op,
            S.UNKNOWN,
            reason=reason,
            detail=with_why("stream ended before any delta", event),
            attempt_terminated=True,
        )
        return
    finish(step, op, assembler)


def resumable(event: StreamEnded) -> str:
    return "resumable" if event.resumable else "not resumable"


ENDED_DETAIL_CHARS = 300
"""At most this much of a StreamEnded's `detail` goes into the decision (the worker's are short)."""


def with_why(detail: str, event: StreamEnded) -> str:
    """`detail`, then what the worker said of the stream's end, when it said something: a decision
    of an older log (no detail) reads as it always did."""
    if not event.detail:
        return detail
    return f"{detail}: {event.detail[:ENDED_DETAIL_CHARS]}"


def on_recovery(step: Step, op: OperationState, event: RecoveryReported) -> None:
    step.transition(
        op,
        S.UNKNOWN,
        reason=ReasonCode.WORKER_RECOVERED,
        detail=f"worker {event.worker_id}",
        lease_renewed_at_ms=step.at,
    )


def on_resume(step: Step, op: OperationState, event: ResumeStarted) -> None:
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
    step.transition(
        op, S.STREAMING, lease_owner=event.worker_id or op.lease_owner, lease_renewed_at_ms=step.at
    )


def on_replay(step: Step, op: OperationState, event: ReplayStarted) -> None:
    """The same request is sent again with the generation's idempotency key: the provider reattaches
    to the response it keeps for the key. Its read starts over, so the candidates are dropped."""
    if op.attempt_terminated or not op.replayable:
        why = "is terminated" if op.attempt_terminated else "was sent to a provider that keeps no keys"
        step.reject(
            ReasonCode.ILLEGAL_TRANSITION,
            f"generation {op.attempt_generation} {why}; start a new attempt",
            operation_id=op.operation_id,
        )
        return
    op = step.retract(op, ReasonCode.STREAM_DISCONNECTED)
    step.transition(op, S.SENT, lease_owner=event.worker_id, lease_renewed_at_ms=step.at)


def on_terminated(step: Step, op: OperationState, event: AttemptTerminated) -> None:
    if op.state == S.CANCELLED:
        detail = f"cancelled attempt {op.attempt_generation} confirmed terminated"
        step.transition(
            op, S.CANCELLED, reason=ReasonCode.ATTEMPT_TERMINATED, detail=detail, attempt_terminated=True
        )
        return
    op = step.retract(op, ReasonCode.STREAM_DISCONNECTED)
    step.transition(op, S.UNKNOWN, attempt_terminated=True, reason=ReasonCode.STREAM_DISCONNECTED)
