"""A complete answer with nothing visible through the worker, the real fold and the fake provider: the
fake thinks on every answer (`FakeProvider(thinking=True)`), and its scripted model answers a marked
question with its thinking alone, which each API streams with its own normal stop."""

from __future__ import annotations

import random

import pytest

from tests.unit.gateway.provider_harness import harness
from tests.unit.gateway.test_provider_failures_worker import config, posts
from turnledger.fake_provider import server as fake_server
from turnledger.fake_provider.model import Answer, Conversation, decide
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

ONLY_THINKING = "the provider's complete answer holds only thinking: nothing visible enters the history"
STREAMED = {
    "anthropic-messages@2": (["thinking"], ONLY_THINKING),
    "openai-chat@2": ([], "the provider's complete answer has no content: nothing enters the history"),
    "openai-responses@2": (["thinking"], ONLY_THINKING),
    "gemini@2": (
        ["text", "thinking"],
        "the provider's complete answer holds only thinking and blank text: "
        "nothing visible enters the history",
    ),
    "bedrock-converse@1": (["thinking"], ONLY_THINKING),
}
"""adapter → the kinds of the blocks the fake streams for its thinking alone, and the EMPTY_RESPONSE
detail: Chat streams no reasoning (an answer with no block), Gemini's last chunk carries the signature on
an empty text part."""


def thinking_only(conv: Conversation, rng: random.Random) -> Answer:
    """The scripted model's answer, its thinking alone when the user's latest words carry the marker."""
    answer = decide(conv, rng)
    return Answer(thinking=answer.thinking) if MARKER in conv.last_user_part else answer


@pytest.mark.parametrize("adapter", list(STREAMED))
async def test_an_answer_of_thinking_alone_commits_nothing_and_the_next_request_sends_none_of_it(
    adapter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One request, the operation COMMITTED EMPTY_RESPONSE at generation 1 (before, its thinking was the
    conversation's turn), no assistant turn, no call, no worker give-up; the conversation's next question
    is answered, and its request carries none of that thinking."""
    monkeypatch.setattr(fake_server, "decide", thinking_only)
    kinds, detail = STREAMED[adapter]
    async for h in harness(config=config(), thinking=True):
        await h.converse("c1", adapter, text=f"{MARKER}: what is the weather?", tools=False)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.reason, final.detail, final.attempt_generation) == (
            S.COMMITTED,
            ReasonCode.EMPTY_RESPONSE,
            detail,
            1,
        )
        assert not gave_up(final)
        [_] = posts(h)
        deltas = [
            d
            for e in h.ledger.ingress
            if isinstance(e, StreamDeltas) and e.operation_id == "op-1"
            for d in e.deltas
        ]
        assert sorted({d.block_kind or "" for d in deltas if d.type is DeltaType.BLOCK_START}) == kinds
        thought = "".join(
            "".join((d.text or "", *(d.following_texts or ())))  # a run: the head and its pieces
            for d in deltas
            if d.type is DeltaType.THINKING_DELTA
        )
        assert thought.startswith(THINKING.decode()) is bool(kinds)
        assert h.assistant_turns("c1") == []
        assert (h.ledger.of_type(ToolCallReady), h.ledger.of_type(PreviewRetracted)) == ([], [])
        assert h.ledger.of_type(PreviewUpdated) == []
        await h.converse("c1", adapter, op="op-2", text="and now?", tools=False)
        again = await h.settled("c1", "op-2")
        assert (again.state, again.reason, again.attempt_generation) == (S.COMMITTED, None, 1)
        _, second = posts(h)
        assert THINKING not in second.body
        assert [t.operation_id for t in h.assistant_turns("c1")] == ["op-2"]
