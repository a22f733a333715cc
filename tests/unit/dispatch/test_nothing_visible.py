"""A complete answer with nothing visible (`lifecycle.NOTHING_VISIBLE`): only thinking, and text that is
blank at most. Before session 49 it committed, a turn each adapter rendered to nothing or to an
assistant message with nothing in it; only an answer with no block at all was COMMITTED EMPTY_RESPONSE.
Now each ends that way: nothing appended, the detail naming what the answer held, the previews of its
blank text retracted, the conversation free to dispatch again. At the output limit the same answer is
OUTPUT_LIMIT_REACHED (`test_assembler_guards.py`), so these run at every other stop that commits."""

from __future__ import annotations

from itertools import combinations

import pytest

from turnledger.dispatch.lifecycle import NOTHING_VISIBLE
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.events import DispatchState
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.assembler import KNOWN_KINDS, is_visible

from .scenario import (
    CommittedTurn,
    Conversation,
    DispatchDecision,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
    _DeltaMaker,
)

S = DispatchState
Block = tuple[str, tuple[str, ...], str | None]
"""A block of an answer: its kind ("thinking" or "text"), its content deltas, its signature."""

ONLY_THINKING = "the provider's complete answer holds only thinking: nothing visible enters the history"
ONLY_BLANK_TEXT = "the provider's complete answer holds only blank text: nothing visible enters the history"
THINKING_AND_BLANK_TEXT = (
    "the provider's complete answer holds only thinking and blank text: nothing visible enters the history"
)
NO_CONTENT = "the provider's complete answer has no content: nothing enters the history"


def answer(
    blocks: tuple[Block, ...], stop: StopReason, raw: str
) -> tuple[list[NormalizedDelta], list[NormalizedDelta]]:
    """The answer's deltas in two events: its start and blocks, then its stop (so the blocks' previews
    are shown before the answer ends)."""
    d = _DeltaMaker("msg_1", 1)
    body = [d(DeltaType.MESSAGE_START, -1)]
    content = {"thinking": DeltaType.THINKING_DELTA, "text": DeltaType.TEXT_DELTA}
    for index, (kind, parts, signature) in enumerate(blocks):
        body.append(d(DeltaType.BLOCK_START, index, block_kind=kind))
        body += [d(content[kind], index, text=part) for part in parts]
        if signature is not None:
            body.append(d(DeltaType.SIGNATURE, index, text=signature))
        body.append(d(DeltaType.BLOCK_STOP, index))
    return body, [d(DeltaType.MESSAGE_STOP, -1, stop_reason=stop, raw_stop_reason=raw)]


NOTHING_SHOWN = {
    "thinking": ((("thinking", ("Let me", " think"), None),), ONLY_THINKING, ""),
    "signed thinking": ((("thinking", ("Let me think",), "sig-0"),), ONLY_THINKING, ""),
    "two thinking blocks": (
        (("thinking", ("first",), "sig-0"), ("thinking", ("second",), "sig-1")),
        ONLY_THINKING,
        "",
    ),
    "thinking, empty text": ((("thinking", ("hm",), None), ("text", (), None)), THINKING_AND_BLANK_TEXT, ""),
    "thinking, empty signed text": (
        (("thinking", ("hm",), None), ("text", ("",), "sig-1")),
        THINKING_AND_BLANK_TEXT,
        "",
    ),
    "thinking, blank text": (
        (("thinking", ("hm",), "sig-0"), ("text", ("\n", " \t"), None)),
        THINKING_AND_BLANK_TEXT,
        "\n \t",
    ),
    "blank text": ((("text", ("\n\n",), None),), ONLY_BLANK_TEXT, "\n\n"),
    "no block": ((), NO_CONTENT, ""),
}
"""Answers with nothing visible: (blocks, the decision's detail, the text previewed). A blank text that
was previewed is retracted; an empty one shows nothing to retract."""
STOPS = [
    (StopReason.END_TURN, "end_turn"),
    (StopReason.STOP_SEQUENCE, "stop_sequence"),
    (StopReason.OTHER, "STOP"),
]


@pytest.mark.parametrize("stop", STOPS, ids=[raw for _, raw in STOPS])
@pytest.mark.parametrize("name", list(NOTHING_SHOWN))
def test_a_complete_answer_with_nothing_visible_commits_nothing_and_says_what_it_held(
    name: str, stop: tuple[StopReason, str]
) -> None:
    blocks, detail, shown = NOTHING_SHOWN[name]
    retracted = int(bool(shown))
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    body, end = answer(blocks, *stop)
    c.deltas(body)
    previews = c.of(PreviewUpdated)
    out = c.deltas(end)
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        S.COMMITTED,
        ReasonCode.EMPTY_RESPONSE,
        detail,
        True,
    )
    assert c.state.operations["op-1"].committed_revision is None
    assert [type(o).__name__ for o in out] == ["PreviewRetracted"] * retracted + ["DispatchDecision"]
    assert [r.reason for r in c.of(PreviewRetracted)] == [ReasonCode.EMPTY_RESPONSE] * retracted
    assert "".join(p.text for p in previews) == shown
    assert [t.turn_id for t in c.of(CommittedTurn)] == ["u1"]
    assert (c.state.graph.revision, c.state.turn_ids) == (1, ("u1",))
    assert (c.of(Quarantined), c.of(Rejected)) == ([], [])
    assert c.state.operations["op-1"].assembler is None
    c.request("op-2")
    assert c.state.operations["op-2"].state == S.PREPARED


SOMETHING_SHOWN = {
    "thinking, text": ((("thinking", ("hm",), "sig-0"), ("text", ("Rome",), None)), ["thinking", "text"]),
    "blank then visible text": ((("text", ("\n",), None), ("text", (" Rome",), None)), ["text", "text"]),
    "text with spaces around": ((("text", ("  Rome \n",), None),), ["text"]),
}


@pytest.mark.parametrize("name", list(SOMETHING_SHOWN))
def test_a_complete_answer_with_something_visible_commits_every_block(name: str) -> None:
    blocks, kinds = SOMETHING_SHOWN[name]
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    body, end = answer(blocks, StopReason.END_TURN, "end_turn")
    c.deltas(body)
    c.deltas(end)
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.state, decision.reason, decision.detail) == (S.COMMITTED, None, "")
    assert c.state.operations["op-1"].committed_revision == 2
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [b.kind for b in turn.blocks] == kinds
    assert c.of(PreviewRetracted) == []


def test_every_answer_with_nothing_visible_has_its_detail() -> None:
    """The kinds of an answer with nothing visible are any of the kinds that are never visible
    (thinking) or not always (text): the table has a detail for each such set, and for no other."""
    invisible = sorted(kind for kind in KNOWN_KINDS if not is_visible(kind, ""))
    assert invisible == ["text", "thinking"]
    sets = {frozenset(kinds) for n in range(len(invisible) + 1) for kinds in combinations(invisible, n)}
    assert set(NOTHING_VISIBLE) == sets


@pytest.mark.parametrize(
    ("kind", "text", "visible"),
    [
        ("tool_call", "", True),
        ("tool_call", '{"city": "Rome"}', True),
        ("text", "Rome", True),
        ("text", " \n R", True),
        ("text", "", False),
        ("text", " \n\t", False),
        ("thinking", "I see Rome", False),
        ("thinking", "", False),
    ],
)
def test_only_a_call_or_text_that_is_not_blank_is_visible(kind: str, text: str, visible: bool) -> None:
    assert is_visible(kind, text) is visible
