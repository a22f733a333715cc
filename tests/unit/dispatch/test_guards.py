"""One test per guard of the send CAS and the canonical CAS, each with the exact outcome the guard gives.

Every test here was checked by removing its guard by hand (and by `make mutation`): with the guard gone,
the test fails. Issue 17 found these guards undefended: the canonical CAS's revision and cancel
generation checks, handle reuse, the resume handle, retracting previews on cancel, and "another
operation of this conversation is in flight".
"""

from __future__ import annotations

from turnledger.dispatch.state import ConversationState
from turnledger.model.events import DispatchState, StreamOutcome, SubmittedBlock
from turnledger.model.reasons import ReasonCode
from turnledger.sequence.builder import append, blocks_from_submission

from .scenario import (
    CommittedTurn,
    Conversation,
    DispatchDecision,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
    text_stream,
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
