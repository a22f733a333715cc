"""The gates of `dispatch/fold.py` that mutation testing found undefended: the exact record each gate
writes (unknown operation, stale generation, illegal transition, late deltas, lease not held), that a
refused event leaves the state as it was, and that the caller's model registry and live assemblers are
the ones the fold uses."""

from __future__ import annotations

from typing import Any

from turnledger.adapters.admission import ModelInfo, ModelRegistry
from turnledger.dispatch.fold import fold
from turnledger.dispatch.live_assemblers import LiveAssemblers
from turnledger.model.events import DispatchRequested, DispatchState
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.assembler import BlockAssembler

from .scenario import MODEL, WEATHER, Conversation, DispatchDecision, Quarantined, Rejected, text_stream

S = DispatchState


def _record(out: list[Any]) -> tuple[Any, ...]:
    """The one record a refused event writes, without its time and source coordinates."""
    assert len(out) == 1, out
    r = out[0]
    if isinstance(r, Quarantined):
        return ("quarantined", r.operation_id, r.attempt_generation, r.reason, r.detail, r.event_type)
    assert isinstance(r, Rejected)
    return ("rejected", r.operation_id, r.reason, r.detail, r.event_type)


def _refused(c: Conversation, apply: Any) -> tuple[Any, ...]:
    """Apply a refused event: it writes one record and leaves the state exactly as it was."""
    before = c.state
    record = _record(apply())
    assert c.state == before
    return record


def test_every_gate_writes_its_exact_record_and_leaves_the_state_unchanged() -> None:
    c = Conversation()
    c.user("hi")
    assert _refused(c, lambda: c.sent(op="op-9")) == (
        "rejected",
        "op-9",
        ReasonCode.UNKNOWN_OPERATION,
        "no operation op-9",
        "DispatchSent",
    )
    c.dispatch_to_streaming()
    assert _refused(c, lambda: c.sent(gen=1)) == (
        "rejected",
        "op-1",
        ReasonCode.ILLEGAL_TRANSITION,
        "DispatchSent not allowed in state STREAMING",
        "DispatchSent",
    )
    assert _refused(c, lambda: c.sent(gen=2)) == (
        "rejected",
        "op-1",
        ReasonCode.STALE_GENERATION,
        "DispatchSent for generation 2, active is 1",
        "DispatchSent",
    )
    assert _refused(c, lambda: c.deltas(text_stream(["a"])[:2], gen=2)) == (
        "quarantined",
        "op-1",
        2,
        ReasonCode.STALE_GENERATION,
        "2 deltas of generation 2, active is 1",
        "StreamDeltas",
    )
    assert _refused(c, lambda: c.recovered(worker="w9")) == (
        "rejected",
        "op-1",
        ReasonCode.LEASE_NOT_HELD,
        "RecoveryReported from w9; the lease is w1's until 31006",
        "RecoveryReported",
    )
    c.deltas(text_stream(["a", "b"]))
    assert c.state.operations["op-1"].state == S.COMMITTED
    assert _refused(c, lambda: c.deltas(text_stream(["late"])[:3])) == (
        "quarantined",
        "op-1",
        1,
        ReasonCode.AFTER_COMMIT,
        "3 deltas while COMMITTED",
        "StreamDeltas",
    )


def test_deltas_before_the_handle_are_an_illegal_transition_and_after_a_cancel_are_late() -> None:
    c = Conversation()
    c.user("hi")
    c.request()
    c.attempt()
    c.sent()
    assert _refused(c, lambda: c.deltas(text_stream(["a"])[:2])) == (
        "quarantined",
        "op-1",
        1,
        ReasonCode.ILLEGAL_TRANSITION,
        "2 deltas while SENT",
        "StreamDeltas",
    )
    c.bind()
    c.cancel("op-1")
    assert _refused(c, lambda: c.deltas(text_stream(["a"])[:1])) == (
        "quarantined",
        "op-1",
        1,
        ReasonCode.AFTER_CANCEL,
        "1 deltas while CANCELLED",
        "StreamDeltas",
    )


def test_the_lease_holder_and_anyone_without_a_worker_id_may_act_on_the_attempt() -> None:
    c = Conversation()
    c.user("hi")
    c.dispatch_to_streaming()
    c.renew(worker="w1")
    assert c.state.operations["op-1"].lease_renewed_at_ms == 1006
    c.renew(worker="")
    assert c.state.operations["op-1"].lease_renewed_at_ms == 1007
    assert c.of(Rejected) == []


def _request(c: Conversation) -> DispatchRequested:
    return DispatchRequested(
        **c._common(),
        operation_id="op-1",
        adapter="anthropic-messages@1",
        provider="anthropic",
        model_revision=MODEL,
        tools=(WEATHER,),
        max_output_tokens=256,
    )


def _decision(out: list[Any]) -> tuple[Any, ...]:
    [d] = [o for o in out if isinstance(o, DispatchDecision)]
    return d.state, d.accepted, d.reason, d.detail


def test_admission_counts_against_the_registry_the_caller_passes() -> None:
    c = Conversation()
    c.user("hi")
    small = ModelRegistry({"anthropic/claude-sonnet-4": ModelInfo(context_window=300, provider="anthropic")})
    out = fold(c.state, _request(c), models=small).outputs
    state, accepted, reason, detail = _decision(out)
    assert (state, accepted, reason) == (S.REJECTED, False, ReasonCode.TOKEN_BUDGET_EXCEEDED)
    assert detail.endswith(" input tokens exceed the budget of 44")
    out = fold(c.state, _request(c), models=ModelRegistry({})).outputs
    assert _decision(out) == (S.REJECTED, False, ReasonCode.UNKNOWN_MODEL, f"model {MODEL}")
    out = fold(c.state, _request(c)).outputs  # the built-in registry knows the model
    assert _decision(out)[:3] == (S.PREPARED, True, None)


class _Spy(LiveAssemblers):
    def __init__(self) -> None:
        super().__init__()
        self.kept = 0

    def keep(self, assembler: BlockAssembler) -> dict[str, Any]:
        self.kept += 1
        return super().keep(assembler)


def test_the_fold_keeps_live_assemblers_in_the_cache_the_caller_passes() -> None:
    c = Conversation()
    c.user("hi")
    c.dispatch_to_streaming()
    live = _Spy()
    result = fold(c.state, _deltas(c, text_stream(["a", "b"])[:3]), live=live)
    assert live.kept == 1
    assert [type(o).__name__ for o in result.outputs] == ["PreviewUpdated"]


def _deltas(c: Conversation, deltas: list[Any]) -> Any:
    from turnledger.model.events import StreamDeltas

    return StreamDeltas(**c._common(), operation_id="op-1", attempt_generation=1, deltas=tuple(deltas))
