"""One test per guard of the send CAS and the canonical CAS, each with the exact outcome the guard gives.

Every test here was checked by removing its guard by hand (and by `make mutation`): with the guard gone,
the test fails. Issue 17 found these guards undefended: the canonical CAS's revision and cancel
generation checks, handle reuse, the resume handle, retracting previews on cancel, and "another
operation of this conversation is in flight".
"""

from __future__ import annotations

import pytest

from turnledger.codec import decode, encode
from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.step import rejection_detail
from turnledger.model.canonical import digest_of
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.model.events import (
    DispatchState,
    StreamOutcome,
    SubmittedBlock,
    TurnSubmitted,
)
from turnledger.model.limits import AVRO_LONG_MAX
from turnledger.model.reasons import ReasonCode
from turnledger.sequence.builder import append, blocks_from_submission
from turnledger.sequence.validation import Rejection

from .scenario import (
    CommittedTurn,
    Conversation,
    DispatchDecision,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
    ToolCallReady,
    text_stream,
    tool_stream,
)

S = DispatchState


def _last_decision(c: Conversation, op: str = "op-1") -> DispatchDecision:
    return [d for d in c.of(DispatchDecision) if d.operation_id == op][-1]


def _moved_on(state: ConversationState, text: str) -> ConversationState:
    """The conversation one user turn later, with its operations as they were (no supersession).

    A state restored from a changelog written before user turns superseded open operations holds
    exactly this: a streaming attempt at an older revision. The canonical CAS must refuse it."""
    block = SubmittedBlock(id="late-b0", role="user", kind="text", trust_label="user", text=text)
    appended = append(state.graph, blocks_from_submission(state.graph, "late", (block,)))
    assert not hasattr(appended, "rejections")
    return state.model_copy(update={"graph": appended, "turn_ids": (*state.turn_ids, "late")})


# ---------------------------------------------------------------- the canonical CAS


def test_canonical_cas_refuses_an_answer_for_an_older_revision() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["stale ", "answer"])
    c.deltas(stream[:3])
    c.state = _moved_on(c.state, "actually, never mind")
    assert c.state.graph.revision == 2
    out = c.deltas(stream[3:])
    assert [type(o).__name__ for o in out] == ["Quarantined", "PreviewRetracted", "DispatchDecision"]
    quarantined, retracted, decision = out
    assert isinstance(quarantined, Quarantined) and quarantined.reason == ReasonCode.CANONICAL_CAS_CONFLICT
    assert quarantined.detail == "conversation is at revision 2, cancel generation 0"
    assert isinstance(retracted, PreviewRetracted) and retracted.reason == ReasonCode.CANONICAL_CAS_CONFLICT
    assert isinstance(decision, DispatchDecision)
    assert (decision.state, decision.reason, decision.attempt_terminated) == (
        S.UNKNOWN,
        ReasonCode.CANONICAL_CAS_CONFLICT,
        True,
    )
    assert [t.turn_id for t in c.of(CommittedTurn)] == ["u1"]
    assert c.state.graph.revision == 2 and c.state.turn_ids == ("u1", "late")


def test_canonical_cas_refuses_an_answer_after_the_conversation_cancel_generation_moved() -> None:
    """A cancel naming another operation still moves the conversation's cancel generation: the attempt
    streaming under the old generation may not become canonical (spec: CAS on revision and generation)."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.request("op-2")
    assert c.state.operations["op-2"].state == S.PREPARED
    stream = text_stream(["answer"])
    c.deltas(stream[:3])
    c.cancel("op-2")
    assert c.state.cancel_generation == 1 and c.state.operations["op-1"].state == S.STREAMING
    out = c.deltas(stream[3:])
    assert [type(o).__name__ for o in out] == ["Quarantined", "PreviewRetracted", "DispatchDecision"]
    assert out[0].reason == ReasonCode.CANONICAL_CAS_CONFLICT
    assert out[0].detail == "conversation is at revision 1, cancel generation 1"
    assert (out[2].state, out[2].reason) == (S.UNKNOWN, ReasonCode.CANONICAL_CAS_CONFLICT)
    assert len(c.of(CommittedTurn)) == 1


def test_canonical_cas_commits_at_the_manifest_revision_and_generation() -> None:
    """The control: the same stream, nothing moved, commits revision 2."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["answer"]))
    assert [(t.turn_id, t.revision) for t in c.of(CommittedTurn)] == [("u1", 1), ("op-1#1", 2)]
    assert c.of(Quarantined) == []


# ---------------------------------------------------------------- handles


def test_a_handle_already_bound_to_another_manifest_cannot_be_bound_again() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming(handle="msg_1")
    c.deltas(text_stream(["one"], handle="msg_1"))
    c.user("and again")
    c.request("op-2")
    c.attempt("op-2")
    c.sent("op-2")
    before = c.state
    out = c.bind("op-2", handle="msg_1")
    assert [type(o).__name__ for o in out] == ["Rejected"]
    rejected = out[0]
    assert isinstance(rejected, Rejected)
    assert (rejected.reason, rejected.operation_id) == (ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST, "op-2")
    assert rejected.detail == (
        f"handle msg_1 is bound to {c.manifest_digest('op-1')}, not {c.manifest_digest('op-2')}"
    )
    assert c.state == before and c.state.operations["op-2"].state == S.SENT
    c.bind("op-2", handle="msg_2")
    assert c.state.operations["op-2"].state == S.STREAMING
    assert c.state.handles == {"msg_1": c.manifest_digest("op-1"), "msg_2": c.manifest_digest("op-2")}


def test_the_same_handle_may_be_bound_again_to_its_own_manifest() -> None:
    """A replayed attempt reattaches to the response its key names: same handle, same manifest."""
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt(replayable=True)
    c.sent()
    c.bind(handle="msg_1")
    c.deltas(text_stream(["par"], stop=False)[:3])
    c.recovered()
    c.replay()
    assert c.state.operations["op-1"].state == S.SENT
    out = c.bind(handle="msg_1")
    assert [type(o).__name__ for o in out] == ["DispatchDecision"]
    assert c.state.operations["op-1"].state == S.STREAMING


def test_resume_with_another_handle_is_rejected() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming(handle="msg_1")
    stream = text_stream(["one ", "two"])
    c.deltas(stream[:3])
    c.recovered()
    before = c.state
    out = c.resume(handle="msg_9")
    assert [(type(o).__name__, o.reason) for o in out] == [
        ("Rejected", ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST)
    ]
    assert out[0].detail == "resume with handle msg_9, attempt is bound to msg_1"
    assert c.state == before and c.state.operations["op-1"].state == S.UNKNOWN
    c.resume(handle="msg_1")
    assert c.state.operations["op-1"].state == S.STREAMING


def test_resume_of_an_attempt_that_never_bound_a_handle_is_rejected() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt()
    c.sent()
    c.recovered()
    assert c.state.operations["op-1"].response_handle is None
    out = c.resume(handle="msg_1")
    assert [(type(o).__name__, o.reason) for o in out] == [
        ("Rejected", ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST)
    ]
    assert out[0].detail == "resume with handle msg_1, attempt is bound to None"
    assert c.state.operations["op-1"].state == S.UNKNOWN


def test_resume_of_a_terminated_attempt_is_rejected() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["x"])[:3])
    c.recovered()
    c.terminated()
    out = c.resume()
    assert [(type(o).__name__, o.reason) for o in out] == [("Rejected", ReasonCode.ILLEGAL_TRANSITION)]
    assert out[0].detail == "generation 1 is terminated; start a new attempt"


# ---------------------------------------------------------------- previews on cancel and supersession


def test_cancel_retracts_the_previews_of_the_cancelled_attempt() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["partial"])[:3])
    assert [p.text for p in c.of(PreviewUpdated)] == ["partial"]
    out = c.cancel()
    assert [type(o).__name__ for o in out] == ["PreviewRetracted", "DispatchDecision"]
    retracted = out[0]
    assert isinstance(retracted, PreviewRetracted)
    assert (retracted.operation_id, retracted.attempt_generation, retracted.reason) == (
        "op-1",
        1,
        ReasonCode.AFTER_CANCEL,
    )
    assert c.state.operations["op-1"].assembler is None


def test_a_user_turn_retracts_the_previews_of_the_attempt_it_supersedes() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["partial"])[:3])
    out = c.user("wait")
    assert [type(o).__name__ for o in out] == ["CommittedTurn", "PreviewRetracted", "DispatchDecision"]
    assert out[1].reason == ReasonCode.SUPERSEDED
    assert (out[2].state, out[2].reason) == (S.CANCELLED, ReasonCode.SUPERSEDED)


def test_cancel_without_previews_retracts_nothing() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    out = c.cancel()
    assert [type(o).__name__ for o in out] == ["DispatchDecision"]


# ---------------------------------------------------------------- one operation in flight


def test_an_attempt_while_another_operation_streams_is_conversation_busy() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.request("op-2")
    out = c.attempt("op-2")
    decision = out[-1]
    assert isinstance(decision, DispatchDecision)
    assert (decision.operation_id, decision.state, decision.accepted, decision.reason) == (
        "op-2",
        S.PREPARED,
        False,
        ReasonCode.CONVERSATION_BUSY,
    )
    assert decision.detail == "operations ['op-1'] of this conversation may still produce output"
    assert c.state.operations["op-2"].attempt_generation == 0


def test_a_cancelled_attempt_keeps_the_conversation_busy_until_confirmed_terminated() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.cancel("op-1")
    c.request("op-2")
    c.attempt("op-2")
    assert _last_decision(c, "op-2").reason == ReasonCode.CONVERSATION_BUSY
    c.terminated("op-1")
    assert _last_decision(c, "op-1").reason == ReasonCode.ATTEMPT_TERMINATED
    c.attempt("op-2")
    decision = _last_decision(c, "op-2")
    assert (decision.state, decision.accepted, decision.reason) == (S.DISPATCHING, True, None)


def test_a_disconnected_attempt_keeps_the_conversation_busy() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.ended(StreamOutcome.DISCONNECTED)
    c.request("op-2")
    c.attempt("op-2")
    assert _last_decision(c, "op-2").reason == ReasonCode.CONVERSATION_BUSY


# ---------------------------------------------------------------- what each refusal and resumption records


def _rejected(out: list) -> Rejected:
    assert [type(o).__name__ for o in out] == ["Rejected"]
    return out[0]


def test_resume_and_replay_refusals_name_the_operation_and_why() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.recovered()
    c.terminated()
    resumed = _rejected(c.resume())
    assert (resumed.operation_id, resumed.reason, resumed.event_type) == (
        "op-1",
        ReasonCode.ILLEGAL_TRANSITION,
        "ResumeStarted",
    )
    replayed = _rejected(c.replay())
    assert (replayed.operation_id, replayed.reason, replayed.detail) == (
        "op-1",
        ReasonCode.ILLEGAL_TRANSITION,
        "generation 1 is terminated; start a new attempt",
    )
    other = Conversation()
    other.user("hello")
    other.dispatch_to_streaming()
    other.recovered()
    wrong = _rejected(other.resume(handle="msg_9"))
    assert wrong.operation_id == "op-1"
    unkeyed = _rejected(other.replay())
    assert (unkeyed.operation_id, unkeyed.reason, unkeyed.detail) == (
        "op-1",
        ReasonCode.ILLEGAL_TRANSITION,
        "generation 1 was sent to a provider that keeps no keys; start a new attempt",
    )


def test_resume_and_replay_renew_the_lease_for_the_worker_that_takes_over() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.recovered()
    c.advance(10_000)
    c.resume(worker="w1")  # only the lease holder may resume while its lease runs (leases.py)
    op = c.state.operations["op-1"]
    decision = _last_decision(c)
    assert decision.state == S.STREAMING and decision.occurred_at_ms > 11_000
    assert (op.lease_owner, op.lease_renewed_at_ms) == ("w1", decision.occurred_at_ms)
    assert decision.lease_expires_at_ms == decision.occurred_at_ms + 30_000

    r = Conversation()
    r.user("hello")
    r.request()
    r.attempt(replayable=True)
    r.sent()
    r.bind()
    r.recovered()
    r.advance(10_000)
    r.replay(worker="w1")
    op = r.state.operations["op-1"]
    decision = _last_decision(r)
    assert decision.occurred_at_ms > 11_000
    assert (decision.state, op.lease_owner, op.lease_renewed_at_ms) == (S.SENT, "w1", decision.occurred_at_ms)


def test_resume_without_a_worker_keeps_the_lease_holder() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.recovered()
    c.resume(worker="")
    assert c.state.operations["op-1"].lease_owner == "w1"


def test_a_disconnect_records_whether_the_stream_is_resumable() -> None:
    for resumable, detail in ((True, "resumable"), (False, "not resumable")):
        c = Conversation()
        c.user("hello")
        c.dispatch_to_streaming()
        c.ended(StreamOutcome.DISCONNECTED, resumable=resumable)
        decision = _last_decision(c)
        assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
            S.UNKNOWN,
            ReasonCode.STREAM_DISCONNECTED,
            detail,
            False,
        )


def test_a_refused_commit_records_why_on_the_decision() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.request("op-2")
    c.cancel("op-2")
    c.deltas(text_stream(["answer"]))
    decision = _last_decision(c)
    assert decision.detail == "conversation is at revision 1, cancel generation 1"


def test_a_stream_that_ends_before_its_handle_is_terminated_unknown_with_why() -> None:
    for outcome, reason in (
        (StreamOutcome.COMPLETED, ReasonCode.MISSING_STOP),
        (StreamOutcome.PROVIDER_ERROR, ReasonCode.PROVIDER_ERROR),
    ):
        c = Conversation()
        c.user("hello")
        c.request()
        c.attempt()
        c.sent()
        out = c.ended(outcome)
        assert [type(o).__name__ for o in out] == ["DispatchDecision"]
        decision = out[0]
        assert (decision.previous_state, decision.state, decision.reason, decision.detail) == (
            S.SENT,
            S.UNKNOWN,
            reason,
            "stream ended before any delta",
        )
        assert decision.attempt_terminated is True and decision.lease_owner is None
        assert c.state.operations["op-1"].attempt_terminated is True


@pytest.mark.parametrize(
    ("outcome", "resumable", "before"),
    [
        (StreamOutcome.PROVIDER_ERROR, False, "stream ended before any delta"),
        (StreamOutcome.COMPLETED, False, "stream ended before any delta"),
        (StreamOutcome.DISCONNECTED, True, "resumable"),
        (StreamOutcome.DISCONNECTED, False, "not resumable"),
    ],
)
def test_the_workers_word_on_a_streams_end_is_in_the_decision_bounded(
    outcome: StreamOutcome, resumable: bool, before: str
) -> None:
    """The worker says why a stream ended (`StreamEnded.detail`, e.g. the status and error type of an
    answer that never streamed); the decision said only "stream ended before any delta". An older
    StreamEnded without it decides as it did; a long one is cut at ENDED_DETAIL_CHARS."""
    for detail, expected in [
        (None, before),
        ("HTTP 503 overloaded_error", f"{before}: HTTP 503 overloaded_error"),
        ("x" * 400, f"{before}: {'x' * 300}"),
    ]:
        c = Conversation()
        c.user("hello")
        c.request()
        c.attempt()
        c.sent()
        (decision,) = c.ended(outcome, resumable=resumable, detail=detail)
        assert isinstance(decision, DispatchDecision)
        assert (decision.state, decision.detail) == (S.UNKNOWN, expected)


def test_a_recovery_names_the_worker_and_renews_its_lease() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.advance(5_000)
    c.recovered(worker="w1")
    decision = _last_decision(c)
    assert (decision.state, decision.reason, decision.detail) == (
        S.UNKNOWN,
        ReasonCode.WORKER_RECOVERED,
        "worker w1",
    )
    assert c.state.operations["op-1"].lease_renewed_at_ms == decision.occurred_at_ms > 6_000


def test_terminations_record_what_they_confirm() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.cancel()
    c.terminated()
    decision = _last_decision(c)
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        S.CANCELLED,
        ReasonCode.ATTEMPT_TERMINATED,
        "cancelled attempt 1 confirmed terminated",
        True,
    )
    u = Conversation()
    u.user("hello")
    u.dispatch_to_streaming()
    u.recovered()
    u.terminated()
    decision = _last_decision(u)
    assert (decision.state, decision.reason, decision.attempt_terminated) == (
        S.UNKNOWN,
        ReasonCode.STREAM_DISCONNECTED,
        True,
    )


def test_rejections_of_the_validator_name_the_block_and_the_call() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    args = '{"city": "Paris"}'
    c.deltas(tool_stream([("call_1", "get_weather", [args])]))
    orphan = _rejected(c.tool_results(("call_9", "get_weather", args)))
    assert (orphan.reason, orphan.detail) == (
        ReasonCode.ORPHANED_RESULT,
        "no earlier call 'call_9' (block=t3-r0 call=call_9)",
    )
    block = SubmittedBlock(id="u1-b0", role="user", kind="text", trust_label="user", text="again")
    reused = _rejected(c.apply(TurnSubmitted(**c._common(), turn_id="x", blocks=(block,))))
    assert reused.detail == "block id 'u1-b0' already used (block=u1-b0)"
    assert rejection_detail(Rejection(ReasonCode.MALFORMED_BLOCK, "a turn needs at least one block")) == (
        "a turn needs at least one block"
    )


# ---------------------------------------------------------------- every field of the records a step writes


def test_a_rejection_quarantine_and_retraction_carry_the_conversation_event_and_time() -> None:
    c = Conversation("conv-9")
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["part"])
    c.deltas(stream[:3])
    out = c.cancel("op-404")  # event e7
    assert out == [
        Rejected(
            conversation_id="conv-9",
            operation_id="op-404",
            reason=ReasonCode.UNKNOWN_OPERATION,
            detail="nothing to cancel for op-404",
            event_type="CancelRequested",
            event_id="e7",
            occurred_at_ms=1007,
        )
    ]
    retracted = c.cancel()[0]  # e8
    assert retracted == PreviewRetracted(
        conversation_id="conv-9",
        operation_id="op-1",
        attempt_generation=1,
        reason=ReasonCode.AFTER_CANCEL,
        occurred_at_ms=1008,
    )
    assert c.deltas(stream[3:]) == [  # e9
        Quarantined(
            conversation_id="conv-9",
            operation_id="op-1",
            attempt_generation=1,
            reason=ReasonCode.AFTER_CANCEL,
            event_type="StreamDeltas",
            event_id="e9",
            detail="2 deltas while CANCELLED",
            occurred_at_ms=1009,
        )
    ]


# ------------------------------------------------ the send CAS: what an accepted attempt resets


def test_a_refused_attempt_records_the_state_it_found() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    out = c.attempt(revision=0)
    assert [type(o).__name__ for o in out] == ["DispatchDecision"]
    assert (out[0].previous_state, out[0].state, out[0].accepted) == (S.PREPARED, S.PREPARED, False)


def test_an_attempt_exactly_at_the_deadline_is_too_late() -> None:
    c = Conversation()
    c.user("hello")
    c.request(settle_within_ms=1_000)
    deadline = c.state.operations["op-1"].request.deadline_at_ms
    c.advance(deadline - c.state.operations["op-1"].request.occurred_at_ms - 1)
    out = c.attempt()
    assert out[0].occurred_at_ms == deadline
    assert (out[0].accepted, out[0].reason) == (False, ReasonCode.DEADLINE_EXCEEDED)
    assert c.state.operations["op-1"].state == S.CANCELLED

    early = Conversation()
    early.user("hello")
    early.request(settle_within_ms=1_000)
    deadline = early.state.operations["op-1"].request.deadline_at_ms
    early.advance(deadline - early.state.operations["op-1"].request.occurred_at_ms - 2)
    out = early.attempt()
    assert out[0].occurred_at_ms == deadline - 1 and out[0].state == S.DISPATCHING


def test_a_new_generation_starts_clean() -> None:
    """Generation 2 of an operation whose generation 1 was bound, resumable and terminated: no handle,
    not terminated, not resumable, the lease renewed now, and the cancel generation of the conversation."""
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt()
    c.sent()
    c.bind(handle="msg_1", resumable=True)
    c.recovered()
    c.terminated()
    c.advance(1_000)
    out = c.attempt(worker="w2", lease_ms=20_000)
    decision = out[-1]
    op = c.state.operations["op-1"]
    assert (decision.state, decision.attempt_generation, decision.response_handle) == (S.DISPATCHING, 2, None)
    assert (decision.attempt_terminated, op.attempt_terminated, op.resumable, op.assembler) == (
        False,
        False,
        False,
        None,
    )
    assert (op.lease_owner, op.lease_ms, op.lease_renewed_at_ms) == ("w2", 20_000, decision.occurred_at_ms)
    assert decision.lease_expires_at_ms == decision.occurred_at_ms + 20_000


def test_an_attempt_after_a_cancel_carries_the_new_cancel_generation_and_can_commit() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.cancel()
    c.terminated()
    c.request("op-2")
    c.attempt("op-2")
    assert c.state.operations["op-2"].attempt_cancel_generation == 1 == c.state.cancel_generation
    c.sent("op-2")
    c.bind("op-2", handle="msg_2")
    c.deltas(text_stream(["answer"], handle="msg_2"), op="op-2")
    assert [t.turn_id for t in c.of(CommittedTurn)] == ["u1", "op-2#1"]


def test_the_validator_refuses_an_answer_that_reuses_a_call_id_of_the_history() -> None:
    """The canonical CAS's second half: the answer at the right revision must still extend a valid graph."""
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    args = '{"city": "Paris"}'
    c.deltas(tool_stream([("call_1", "get_weather", [args])]))
    c.tool_results(("call_1", "get_weather", args))
    c.request("op-2")
    c.attempt("op-2")
    c.sent("op-2")
    c.bind("op-2", handle="msg_2")
    out = c.deltas(tool_stream([("call_1", "get_weather", [args])], handle="msg_2"), op="op-2")
    assert [type(o).__name__ for o in out] == ["Quarantined", "DispatchDecision"]
    quarantined, decision = out
    assert (quarantined.operation_id, quarantined.reason, quarantined.detail) == (
        "op-2",
        ReasonCode.DUPLICATE_CALL_ID,
        "call id 'call_1' already emitted (block=op-2#1/b0 call=call_1)",
    )
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        S.UNKNOWN,
        ReasonCode.DUPLICATE_CALL_ID,
        quarantined.detail,
        True,
    )
    assert [t.turn_id for t in c.of(CommittedTurn)] == ["u1", "op-1#1", "t3"]


def test_every_validator_rejection_of_a_refused_answer_is_in_its_detail() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    paris, rome = '{"city": "Paris"}', '{"city": "Rome"}'
    c.deltas(tool_stream([("call_1", "get_weather", [paris]), ("call_2", "get_weather", [rome])]))
    c.tool_results(("call_1", "get_weather", paris), ("call_2", "get_weather", rome))
    c.request("op-2")
    c.attempt("op-2")
    c.sent("op-2")
    c.bind("op-2", handle="msg_2")
    stream = tool_stream(
        [("call_1", "get_weather", [paris]), ("call_2", "get_weather", [rome])], handle="msg_2"
    )
    quarantined = c.deltas(stream, op="op-2")[0]
    assert quarantined.detail == (
        "call id 'call_1' already emitted (block=op-2#1/b0 call=call_1); "
        "call id 'call_2' already emitted (block=op-2#1/b1 call=call_2)"
    )


def test_a_ready_tool_call_carries_the_committed_block_exactly() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call_1", "get_weather", ['{"city":', ' "Paris"}'])]))
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    (block,) = turn.blocks
    (ready,) = c.of(ToolCallReady)
    assert block.schema_digest is not None and block.argument_digest is not None
    assert (ready.block_id, ready.call_id, ready.tool_name, ready.arguments) == (
        block.id,
        "call_1",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert (ready.argument_digest, ready.schema_digest, ready.revision) == (
        block.argument_digest,
        block.schema_digest,
        turn.revision,
    )


def test_an_incomplete_answer_records_the_assembler_reason_and_detail() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call_1", "get_weather", ['{"city": "Par'])], stop_reason=StopReason.TOOL_USE))
    decision = _last_decision(c)
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        S.UNKNOWN,
        ReasonCode.TRUNCATED_ARGUMENTS,
        "tool block 0: cut at 13: Unterminated string starting at at 9",
        True,
    )


def test_arguments_cut_at_the_output_limit_end_the_operation_and_say_what_to_do() -> None:
    """They settled UNKNOWN TRUNCATED_ARGUMENTS, and the worker sent the same request with the same
    budget again, to meet the same limit, until it gave up; now the operation ends at once."""
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call_1", "get_weather", ['{"city": "Par'])], stop_reason=StopReason.MAX_TOKENS))
    decision = _last_decision(c)
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        S.CANCELLED,
        ReasonCode.OUTPUT_LIMIT_REACHED,
        "tool block 0 at max_tokens: cut at 13: Unterminated string starting at at 9; raise maxOutputTokens",
        True,
    )
    assert [r.reason for r in c.of(PreviewRetracted)] == []  # a call is never previewed
    assert [t.turn_id for t in c.of(CommittedTurn)] == ["u1"]


def test_an_empty_complete_answer_commits_nothing_and_says_so() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    start, *_, stop = text_stream([])
    c.deltas([start, stop.model_copy(update={"delta_sequence": 1})])
    assert stop.type is DeltaType.MESSAGE_STOP
    decision = _last_decision(c)
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        S.COMMITTED,
        ReasonCode.EMPTY_RESPONSE,
        "the provider's complete answer has no content: nothing enters the history",
        True,
    )
    assert c.state.operations["op-1"].assembler is None
    assert [t.turn_id for t in c.of(CommittedTurn)] == ["u1"]


def test_sent_renews_the_lease() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt()
    c.advance(7_000)
    c.sent()
    decision = _last_decision(c)
    assert decision.state == S.SENT and decision.occurred_at_ms > 8_000
    assert c.state.operations["op-1"].lease_renewed_at_ms == decision.occurred_at_ms
    assert decision.lease_expires_at_ms == decision.occurred_at_ms + 30_000


def test_a_delta_of_another_handle_is_quarantined_with_its_handle_and_generation() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    out = c.deltas(text_stream(["x"], handle="msg_other", gen=1)[:1])
    assert [(type(o).__name__, o.reason, o.detail) for o in out] == [
        ("Quarantined", ReasonCode.FOREIGN_HANDLE, "delta of handle msg_other generation 1")
    ]


def test_an_answer_that_ends_incomplete_in_the_event_of_its_text_still_retracts_its_previews() -> None:
    """The previews of that event are never published (the attempt finished first), but the retraction is
    decided on the assembler as it stands at the end, text included: conservative, never a stale preview."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["cut"])
    out = c.deltas([*stream[:3], stream[-1].model_copy(update={"delta_sequence": 3})])  # no block stop
    assert [type(o).__name__ for o in out] == ["PreviewRetracted", "DispatchDecision"]
    assert c.of(PreviewUpdated) == []
    assert (out[1].state, out[1].attempt_terminated) == (S.UNKNOWN, True)


def test_a_decision_carries_the_attempt_key_and_the_manifest_digest() -> None:
    """What the worker reads off the manifests topic: the idempotency key it sends with, the manifest."""
    c = Conversation()
    c.user("hello")
    c.request()
    prepared = _last_decision(c)
    digest = c.manifest_digest()
    assert (prepared.manifest_digest, prepared.idempotency_key, prepared.detail) == (digest, None, "")
    c.attempt()
    accepted = _last_decision(c)
    key = digest_of({"manifest": digest, "attemptGeneration": 1})
    assert (accepted.manifest_digest, accepted.idempotency_key, accepted.detail) == (digest, key, "")
    c.sent()
    sent = _last_decision(c)
    assert (sent.state, sent.manifest_digest, sent.idempotency_key, sent.detail) == (S.SENT, digest, key, "")


@pytest.mark.parametrize(
    ("lease_ms", "detail"),
    [
        (0, "leaseMs must be at least 1, not 0"),
        (-30_000, "leaseMs must be at least 1, not -30000"),
        (AVRO_LONG_MAX, f"the lease's end (occurredAtMs {{at}} + leaseMs) is past {AVRO_LONG_MAX}"),
    ],
)
@pytest.mark.parametrize("second", [False, True], ids=["prepared", "dispatching"])
def test_an_attempt_with_a_lease_that_cannot_hold_is_refused_and_changes_nothing(
    lease_ms: int, detail: str, second: bool
) -> None:
    """Before, a lease of 0 or below was granted already expired (any claim took the attempt at once),
    and one ending past the Avro long raised encoding the decision (FOLD_FAILED). Refused before the
    CAS is looked at: INVALID_EVENT, not CAS_STATE_MISMATCH, for an attempt of a DISPATCHING operation."""
    c = Conversation()
    c.user("hello")
    c.request()
    if second:
        c.attempt()
    before, decisions = c.state, len(c.of(DispatchDecision))
    [rejected] = c.attempt(worker="w2", lease_ms=lease_ms)
    assert isinstance(rejected, Rejected)
    assert (rejected.reason, rejected.operation_id, rejected.event_type) == (
        ReasonCode.INVALID_EVENT,
        "op-1",
        "DispatchAttempt",
    )
    assert rejected.detail == detail.format(at=rejected.occurred_at_ms)
    assert c.state == before and len(c.of(DispatchDecision)) == decisions


def test_an_attempt_with_a_lease_at_each_bound_is_accepted() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    [decision] = c.attempt(lease_ms=1)
    assert (decision.state, decision.lease_expires_at_ms) == (S.DISPATCHING, decision.occurred_at_ms + 1)
    c.claim()
    c.terminated(worker="w2")
    at = c._common()["occurred_at_ms"] + 1  # the next event's time
    [decision] = c.attempt(lease_ms=AVRO_LONG_MAX - at)
    assert (decision.state, decision.attempt_generation, decision.lease_expires_at_ms) == (
        S.DISPATCHING,
        2,
        AVRO_LONG_MAX,
    )
    assert c.of(Rejected) == []


def test_an_attempt_of_an_unknown_operation_is_refused_as_unknown_whatever_its_lease() -> None:
    c = Conversation()
    c.user("hello")
    [rejected] = c.attempt(op="op-9", lease_ms=0)
    assert (rejected.reason, rejected.detail) == (ReasonCode.UNKNOWN_OPERATION, "no operation op-9")


def test_a_lease_ending_at_the_largest_long_renewed_later_still_ends_there() -> None:
    """Before, the next event of the attempt put its end 1 ms past the Avro long, and the decision
    failed to encode (FOLD_FAILED)."""
    c = Conversation()
    c.user("hello")
    c.request()
    at = c._common()["occurred_at_ms"] + 1
    c.attempt(lease_ms=AVRO_LONG_MAX - at)
    [sent] = c.sent()
    assert isinstance(sent, DispatchDecision)
    assert (sent.state, sent.lease_expires_at_ms) == (S.SENT, AVRO_LONG_MAX)
    assert decode(encode(sent)) == sent
