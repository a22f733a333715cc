"""DispatchRequested: build, validate, render and admit the sequence; PREPARED with a manifest, or why not.

Pauses are the conversation's, per adapter (the spec: "if the old adapter does not recognize a
new block kind, pause the conversation instead of degrading to string concatenation"): an
adapter that cannot render the graph pauses the conversation for itself, and every later
dispatch with it is refused at once (REJECTED, CONVERSATION_PAUSED) instead of waiting. A
dispatch with an adapter that renders it (an upgrade) ends the pause: the paused operations
are cancelled (PAUSE_ENDED). A cancel ends it too (turns.py).
"""

from __future__ import annotations

from turnledger.adapters.admission import Admitted, OverBudget, admit
from turnledger.adapters.base import (
    DispatchParams,
    InvalidModelRevisionError,
    UnknownAdapterError,
    UnsupportedKind,
    parse_model_revision,
)
from turnledger.adapters.registry import get_adapter
from turnledger.dispatch.manifest_blocks import manifest_refs
from turnledger.dispatch.request_rules import request_refusal
from turnledger.dispatch.state import ManifestSeal, OperationState
from turnledger.dispatch.step import Step
from turnledger.model.events import (
    DispatchRequested,
    DispatchState,
    ManifestIssued,
)
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.model.self_encoded import SelfEncoded
from turnledger.model.tools import toolset_digest
from turnledger.sequence.builder import sequence_of
from turnledger.sequence.validation import Valid, Waiting

S = DispatchState


def on_dispatch_requested(step: Step, event: DispatchRequested) -> None:
    if event.operation_id in step.state.operations:
        step.reject(
            ReasonCode.DUPLICATE_OPERATION,
            f"operation {event.operation_id} already exists",
            operation_id=event.operation_id,
        )
        return
    refusal = request_refusal(event)
    if refusal is not None:
        step.reject(ReasonCode.INVALID_EVENT, refusal, operation_id=event.operation_id)
        return
    op = OperationState(operation_id=event.operation_id, state=S.WAITING, request=event)
    prepare(step, op, new=True)


def prepare(step: Step, op: OperationState, *, new: bool = False) -> None:
    """Build, validate, render and admit the current sequence: PREPARED, or why not."""
    previous = None if new else op.state
    request = op.request
    try:
        adapter = get_adapter(request.adapter)
    except UnknownAdapterError as exc:
        settle(step, op, previous, S.REJECTED, ReasonCode.UNKNOWN_ADAPTER, str(exc))
        return
    paused_by = step.state.paused.get(adapter.adapter_id)
    if paused_by is not None and paused_by != op.operation_id:
        detail = (
            f"the conversation is paused for {adapter.adapter_id} since operation {paused_by}: "
            "dispatch with an adapter that renders it, or cancel"
        )
        settle(step, op, previous, S.REJECTED, ReasonCode.CONVERSATION_PAUSED, detail)
        return
    outcome = sequence_of(step.state.graph, edges=False)  # the request is the blocks: no edges
    if isinstance(outcome, Waiting):
        if previous != S.WAITING:
            detail = f"pending tool calls {list(outcome.pending_call_ids)}"
            settle(step, op, previous, S.WAITING, None, detail)
        return
    # `sequence_of` returns Valid or Waiting only: history is validated when it is appended
    # (turns.py, the canonical CAS), so an invalid graph never reaches a dispatch.
    assert isinstance(outcome, Valid)
    sequence = outcome.sequence
    if not sequence.blocks:
        settle(step, op, previous, S.REJECTED, ReasonCode.EMPTY_SEQUENCE, "the conversation has no blocks")
        return
    try:
        parse_model_revision(request.model_revision)
    except InvalidModelRevisionError as exc:
        # Rendering names the model on the wire and would raise: a request's own field, not a bug.
        settle(step, op, previous, S.REJECTED, ReasonCode.UNKNOWN_MODEL, str(exc))
        return
    params = DispatchParams.of_request(request)
    rendered = adapter.render(sequence, params, step.renders)
    if isinstance(rendered, UnsupportedKind):
        detail = f"{adapter.adapter_id} does not know kind {rendered.kind!r} (block {rendered.block_id})"
        paused = {**step.state.paused, adapter.adapter_id: op.operation_id}
        step.state = step.state.model_copy(update={"paused": paused})
        settle(step, op, previous, S.PAUSED, ReasonCode.UNSUPPORTED_KIND, detail)
        return
    admission = admit(adapter, rendered, params, step.models)
    if isinstance(admission, OverBudget):
        detail = f"{admission.input_tokens} input tokens exceed the budget of {admission.limit}"
        settle(step, op, previous, S.REJECTED, ReasonCode.TOKEN_BUDGET_EXCEEDED, detail)
        return
    if not isinstance(admission, Admitted):
        settle(step, op, previous, S.REJECTED, ReasonCode.UNKNOWN_MODEL, f"model {request.model_revision}")
        return
    refs = manifest_refs(step.state.conversation_id, sequence.blocks, step.listings)
    listed = refs if type(refs) is SelfEncoded else None
    manifest = DispatchManifest(
        operation_id=op.operation_id,
        conversation_id=step.state.conversation_id,
        conversation_revision=sequence.conversation_revision,
        cancel_generation=step.state.cancel_generation,
        sequence_digest=sequence.sequence_digest,
        blocks=refs if listed is None else (),
        adapter=adapter.adapter_id,
        adapter_digest=adapter.digest,
        provider=adapter.provider,
        model_revision=request.model_revision,
        toolset_digest=toolset_digest(request.tools),
        max_output_tokens=request.max_output_tokens,
        policy=dict(request.policy),
        request_digest=rendered.request_digest,
        request_body=rendered.body.decode("utf-8"),
        input_tokens=admission.input_tokens,
    ).sealed(listed)
    step.outputs.append(ManifestIssued(manifest=manifest, occurred_at_ms=step.at))
    seal = ManifestSeal.of(manifest)
    op = op.model_copy(update={"manifest": seal, "prepared_revision": sequence.conversation_revision})
    settle(step, op, previous, S.PREPARED, None, "")
    end_pauses(step, f"operation {op.operation_id} renders the conversation with {adapter.adapter_id}")


def end_pauses(step: Step, detail: str) -> None:
    """An adapter rendered the graph: the pauses end and their operations are cancelled."""
    paused = step.state.paused
    if not paused:
        return
    step.state = step.state.model_copy(update={"paused": {}})
    for op_id in paused.values():
        op = step.state.operations.get(op_id)
        if op is not None and op.state == S.PAUSED:
            step.cancel(op, ReasonCode.PAUSE_ENDED, detail)


def settle(
    step: Step,
    op: OperationState,
    previous: DispatchState | None,
    new_state: DispatchState,
    reason: ReasonCode | None,
    detail: str,
) -> None:
    op = step.put(op, state=new_state)
    accepted = new_state in (S.PREPARED, S.WAITING)
    step.decide(op, previous, accepted=accepted, reason=reason, detail=detail)
