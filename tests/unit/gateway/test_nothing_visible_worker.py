"""A complete answer with nothing visible through the worker, the real fold and the fake provider: the
fake answers a marked question with its `thinking_only` fault (thinking alone, made up where the request
asked for none), which each API streams with its own normal stop; OpenAI Chat, which streams no
reasoning, answers blank text."""

from __future__ import annotations

import pytest

from tests.unit.gateway.provider_harness import harness
from tests.unit.gateway.test_provider_failures_worker import config, posts
from turnledger.fake_provider import Fault, FaultKind, FaultPlan, FaultRecord
from turnledger.gateway.worker import gave_up
from turnledger.model.deltas import DeltaType
from turnledger.model.events import (
    DispatchState,
    PreviewRetracted,
    PreviewUpdated,
    StreamDeltas,
    ToolCallReady,
)
from turnledger.model.reasons import ReasonCode

S = DispatchState
MARKER = "THINK ONLY"
THINKING = b"Considering the request; "
"""How the fake's thinking begins (`fake_provider/model.py`)."""
THINKING_ONLY = Fault(FaultKind.THINKING_ONLY)
PLAN = FaultPlan(by_last_user_marker={MARKER: (THINKING_ONLY,)})
"""The answer to the marked question, retries included, and to no later turn."""

ONLY_THINKING = "the provider's complete answer holds only thinking: nothing visible enters the history"
STREAMED = {
    "anthropic-messages@2": (["thinking"], ONLY_THINKING),
    "openai-chat@2": (
        ["text"],
        "the provider's complete answer holds only blank text: nothing visible enters the history",
    ),
    "openai-responses@2": (["thinking"], ONLY_THINKING),
    "gemini@2": (
        ["text", "thinking"],
        "the provider's complete answer holds only thinking and blank text: "
        "nothing visible enters the history",
    ),
    "bedrock-converse@1": (["thinking"], ONLY_THINKING),
}
"""adapter → the kinds of the blocks the fake streams for its thinking alone, and the EMPTY_RESPONSE
detail: Chat streams no reasoning (blank text instead), Gemini ends its thought parts with an empty text
part."""
PREVIEWS = {"openai-chat@2": ([], [("op-1", ReasonCode.EMPTY_RESPONSE)])}
"""adapter → the previews of op-1 shown and retracted, where any: Chat's blank text shows none, and the
fold retracts its text block's previews all the same."""


@pytest.mark.parametrize("adapter", list(STREAMED))
async def test_an_answer_of_thinking_alone_commits_nothing_and_the_next_request_sends_none_of_it(
    adapter: str,
) -> None:
    """Tools offered, the fake not thinking by default: one request, its fault recorded, the operation
    COMMITTED EMPTY_RESPONSE at generation 1 (before session 49, its thinking was the conversation's
    turn), no assistant turn, no call, no worker give-up, Chat's blank text retracted; the
    conversation's next question is answered, unfaulted, and its request carries none of that thinking."""
    kinds, detail = STREAMED[adapter]
    async for h in harness(PLAN, config=config()):
        await h.converse("c1", adapter, text=f"{MARKER}: what is the weather?")
        final = await h.settled("c1", "op-1")
        assert (final.state, final.reason, final.detail, final.attempt_generation) == (
            S.COMMITTED,
            ReasonCode.EMPTY_RESPONSE,
            detail,
            1,
        )
        assert not gave_up(final)
        [first] = posts(h)
        deltas = [
            d
            for e in h.ledger.ingress
            if isinstance(e, StreamDeltas) and e.operation_id == "op-1"
            for d in e.deltas
        ]
        assert sorted({d.block_kind or "" for d in deltas if d.type is DeltaType.BLOCK_START}) == kinds
        streamed = {
            kind: "".join(
                "".join((d.text or "", *(d.following_texts or ())))  # a run: the head and its pieces
                for d in deltas
                if d.type is kind
            )
            for kind in (DeltaType.THINKING_DELTA, DeltaType.TEXT_DELTA)
        }
        assert streamed[DeltaType.THINKING_DELTA].startswith(THINKING.decode()) is ("thinking" in kinds)
        assert streamed[DeltaType.TEXT_DELTA] == ("\n\n" if adapter.startswith("openai-chat") else "")
        assert h.assistant_turns("c1") == []
        assert h.ledger.of_type(ToolCallReady) == []
        shown = [(p.operation_id, p.text) for p in h.ledger.of_type(PreviewUpdated)]
        retracted = [(r.operation_id, r.reason) for r in h.ledger.of_type(PreviewRetracted)]
        assert (shown, retracted) == PREVIEWS.get(adapter, ([], []))
        await h.converse("c1", adapter, op="op-2", text="and now?", tools=False)
        again = await h.settled("c1", "op-2")
        assert (again.state, again.reason, again.attempt_generation) == (S.COMMITTED, None, 1)
        _, second = posts(h)
        assert h.fp.fault_log == [FaultRecord(first.request_id, THINKING_ONLY)]
        assert THINKING not in second.body
        assert [t.operation_id for t in h.assistant_turns("c1")] == ["op-2"]
