"""Guards of `dispatch/turns.py` that mutation testing found undefended: the turn CAS on
expectedRevision, duplicate turns, submittable roles, and what a cancel refuses or records."""

from __future__ import annotations

from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.events import CancelRequested, DispatchState, SubmittedBlock, TurnSubmitted
from turnledger.model.reasons import ReasonCode

from .scenario import CommittedTurn, Conversation, DispatchDecision, PreviewRetracted, Rejected, text_stream

S = DispatchState


def _turn(c: Conversation, turn_id: str, *blocks: SubmittedBlock, expected: int | None = None) -> None:
    c.apply(TurnSubmitted(**c._common(), turn_id=turn_id, blocks=blocks, expected_revision=expected))


def _user(block_id: str, role: str = "user") -> SubmittedBlock:
    return SubmittedBlock(id=block_id, role=role, kind="text", trust_label="user", text="hi")


def _rejection(c: Conversation) -> tuple[ReasonCode, str, str]:
    last = c.of(Rejected)[-1]
    return last.reason, last.detail, last.event_type


def test_a_turn_expecting_another_revision_is_refused_and_the_right_one_commits() -> None:
    c = Conversation()
    c.user("first")
    _turn(c, "t2", _user("t2-b0"), expected=0)
    assert _rejection(c) == (
        ReasonCode.CAS_REVISION_MISMATCH,
        "expected revision 0, conversation is at 1",
        "TurnSubmitted",
    )
    assert [t.revision for t in c.of(CommittedTurn)] == [1]
    _turn(c, "t2", _user("t2-b0"), expected=1)
    assert [t.revision for t in c.of(CommittedTurn)] == [1, 2]
    assert len(c.of(Rejected)) == 1


def test_a_turn_id_already_committed_is_refused_as_a_duplicate() -> None:
    c = Conversation()
    c.user("first", turn_id="t1")
    c.user("again", turn_id="t1")
    assert _rejection(c) == (ReasonCode.DUPLICATE_TURN, "turn t1 is already committed", "TurnSubmitted")
    assert [t.turn_id for t in c.of(CommittedTurn)] == ["t1"]


def test_only_system_user_and_tool_blocks_may_be_submitted_and_a_turn_needs_blocks() -> None:
    c = Conversation()
    _turn(c, "t1", _user("t1-b0"), _user("t1-b1", role="assistant"))
    assert _rejection(c) == (
        ReasonCode.INVALID_EVENT,
        "blocks ['t1-b1'] are not system/user/tool",
        "TurnSubmitted",
    )
    _turn(c, "t2")
    assert _rejection(c) == (ReasonCode.INVALID_EVENT, "a turn needs blocks", "TurnSubmitted")
    assert c.of(CommittedTurn) == []


def test_a_cancel_with_nothing_to_cancel_says_whether_the_operation_exists() -> None:
    c = Conversation()
    c.user("hi")
    c.request("op-1")
    c.cancel("op-1")
    c.cancel("op-1")  # already final
    assert _rejection(c) == (ReasonCode.ILLEGAL_TRANSITION, "nothing to cancel for op-1", "CancelRequested")
    assert c.of(Rejected)[-1].operation_id == "op-1"
    c.cancel("op-9")
    assert _rejection(c) == (ReasonCode.UNKNOWN_OPERATION, "nothing to cancel for op-9", "CancelRequested")


def test_a_cancel_without_a_reason_says_cancelled_and_a_give_up_retracts_as_after_cancel() -> None:
    c = Conversation()
    c.user("hi")
    c.request("op-1")
    c.apply(CancelRequested(**c._common(), operation_id="op-1", reason=""))
    cancelled = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (cancelled.reason, cancelled.detail) == (None, "cancelled")

    c.request("op-2")
    c.dispatch_to_streaming("op-2")
    c.deltas(text_stream(["It is ", "sunny"])[:3], op="op-2")
    c.apply(
        CancelRequested(**c._common(), operation_id="op-2", reason="worker gave up: x", worker_gave_up=True)
    )
    gave_up = [d for d in c.of(DispatchDecision) if d.operation_id == "op-2"][-1]
    assert (gave_up.reason, gave_up.detail) == (ReasonCode.WORKER_GAVE_UP, "worker gave up: x")
    assert [(r.operation_id, r.reason) for r in c.of(PreviewRetracted)] == [("op-2", ReasonCode.AFTER_CANCEL)]


def _snippet(c: Conversation) -> None:
    """A block kind the legacy adapter `anthropic-messages@0` cannot render: its dispatches pause."""
    block = SubmittedBlock(
        id="s1-b0", role="user", kind="retrieved_snippet", trust_label="retrieved", text="doc"
    )
    c.apply(TurnSubmitted(**c._common(), turn_id="s1", blocks=(block,)))


def test_a_cancel_of_another_operation_leaves_the_pause_and_a_cancel_of_all_ends_it() -> None:
    c = Conversation()
    c.user("hello")
    _snippet(c)
    c.request("op-1")  # the current adapter renders the graph: PREPARED
    c.request("op-2", adapter="anthropic-messages@0")  # paused, while op-1 stays PREPARED
    assert c.state.paused == {"anthropic-messages@0": "op-2"}
    c.cancel("op-1")
    assert c.state.operations["op-2"].state == S.PAUSED
    assert c.state.paused == {"anthropic-messages@0": "op-2"}
    c.request("op-3", adapter="anthropic-messages@0")
    refused = [d for d in c.of(DispatchDecision) if d.operation_id == "op-3"]
    assert [(d.state, d.reason) for d in refused] == [(S.REJECTED, ReasonCode.CONVERSATION_PAUSED)]

    c.cancel()  # every open operation: the pause ends with the one it holds
    assert (c.state.operations["op-2"].state, c.state.paused) == (S.CANCELLED, {})
    c.request("op-4", adapter="anthropic-messages@0")  # nothing holds the conversation: it pauses anew
    assert (c.state.operations["op-4"].state, c.state.paused) == (S.PAUSED, {"anthropic-messages@0": "op-4"})


def test_a_submitted_blank_text_is_refused_by_role_and_kind_and_nothing_commits() -> None:
    """Anthropic and Bedrock refuse a blank text block with a 400: once committed it would be in
    every later request of the conversation."""
    c = Conversation()
    c.user(" \n\t")
    system = SubmittedBlock(id="s", role="system", kind="text", trust_label="operator", text="")
    snippet = SubmittedBlock(id="d", role="user", kind="retrieved_snippet", trust_label="retrieved", text=" ")
    _turn(c, "t2", system)
    _turn(c, "t3", _user("t3-b0"), snippet)
    details = [(r.reason, r.detail) for r in c.of(Rejected)]
    assert details == [
        (ReasonCode.MALFORMED_BLOCK, "text of the user text block is blank (block=u1-b0)"),
        (ReasonCode.MALFORMED_BLOCK, "text of the system text block is blank (block=s)"),
        (ReasonCode.MALFORMED_BLOCK, "text of the user retrieved_snippet block is blank (block=d)"),
    ]
    assert c.of(CommittedTurn) == []


def test_a_streamed_answer_with_empty_text_blocks_commits_them_as_they_came() -> None:
    """Assistant text is exempt from the blank-text rule: it is what the provider said (a text block
    may stop without a delta, or with only whitespace)."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["Paris."], stop=False)
    d = stream[-1]
    after = d.delta_sequence + 1

    def more(type_: DeltaType, index: int, **fields: object) -> NormalizedDelta:
        return d.model_copy(update={"type": type_, "block_index": index, "delta_sequence": after + len(tail),
                                    "text": None, **fields})  # fmt: skip

    tail: list[NormalizedDelta] = []
    for delta in (
        (DeltaType.BLOCK_START, 1, {"block_kind": "text"}),
        (DeltaType.TEXT_DELTA, 1, {"text": "\n\n"}),
        (DeltaType.BLOCK_STOP, 1, {}),
        (DeltaType.BLOCK_START, 2, {"block_kind": "text"}),
        (DeltaType.BLOCK_STOP, 2, {}),
        (DeltaType.MESSAGE_STOP, -1, {"stop_reason": StopReason.END_TURN, "raw_stop_reason": "STOP"}),
    ):
        tail.append(more(delta[0], delta[1], **delta[2]))
    c.deltas([*stream, *tail])
    assert c.of(Rejected) == []
    answer = c.of(CommittedTurn)[-1]
    assert [(b.role, b.kind, b.text, b.signature) for b in answer.blocks] == [
        ("assistant", "text", "Paris.", None),
        ("assistant", "text", "\n\n", None),
        ("assistant", "text", "", None),
    ]
    assert c.state.operations["op-1"].state == S.COMMITTED
