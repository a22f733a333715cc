"""Every recorded answer of a complete stream (`tests/fixtures/streams`), parsed by its API's parser and
folded with a request for its API's adapter, commits once: no answer a provider really sends is refused
by the message-graph rules at the commit. A real Gemini 2.5 answer (`gemini_text_thought.sse`) did not:
its last chunk's empty text part carries a `thoughtSignature`, the parser puts it on the text block,
and the rules refused any text block with a signature (MALFORMED_BLOCK), so the operation went UNKNOWN
and every attempt after it met the same end."""

from __future__ import annotations

import orjson
import pytest

from tests.unit.dispatch.scenario import Conversation
from tests.unit.streaming.support import TOOLS, api_of, fixture, parse
from turnledger.model.events import (
    CommittedTurn,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    Quarantined,
    Rejected,
    StreamOutcome,
)

REQUESTS = {
    "anthropic-messages": ("anthropic-messages@2", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
    "openai-chat": ("openai-chat@2", "openai", "openai/gpt-4o@2024-08"),
    "openai-responses": ("openai-responses@2", "openai", "openai/gpt-4o@2024-08"),
    "gemini": ("gemini@2", "google", "google/gemini-2.5-flash@2025-06"),
}
COMPLETE = {
    "anthropic_text.sse": 1,
    "anthropic_thinking.sse": 2,
    "anthropic_tools_parallel.sse": 3,
    "gemini_parallel_calls.sse": 3,
    "gemini_text_thought.sse": 2,
    "openai_chat_text.sse": 1,
    "openai_chat_tools_parallel.sse": 2,
    "openai_responses_text.sse": 1,
    "openai_responses_tools.sse": 3,
}
"""Each fixture of an answer that ends with its final event, and the blocks it commits."""


def answered(name: str, op: str = "op-1") -> Conversation:
    adapter, provider, model = REQUESTS[api_of(name)]
    c = Conversation("c1")
    c.user("hello")
    c.apply(
        DispatchRequested(
            **c._common(),
            operation_id=op,
            adapter=adapter,
            provider=provider,
            model_revision=model,
            tools=tuple(TOOLS.values()),
            max_output_tokens=256,
        )
    )
    c.attempt(op)
    c.sent(op)
    deltas = parse(api_of(name), [fixture(name)])
    c.bind(op, handle=next(d.response_handle for d in deltas if d.response_handle))
    c.deltas(deltas, op)
    c.ended(StreamOutcome.COMPLETED, op)
    return c


@pytest.mark.parametrize("name", sorted(COMPLETE))
def test_a_complete_recorded_answer_commits_once(name: str) -> None:
    c = answered(name)
    assert (c.of(Quarantined), c.of(Rejected)) == ([], [])
    assert c.state.operations["op-1"].state == DispatchState.COMMITTED
    assistant = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [len(t.blocks) for t in assistant] == [COMPLETE[name]]


def test_the_gemini_text_signature_is_committed_and_sent_back_on_its_part() -> None:
    c = answered("gemini_text_thought.sse")
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [(b.kind, b.signature) for b in turn.blocks] == [
        ("thinking", None),
        ("text", "CiQBS3hu3z/CuRCQ7u7zKMu1W7R0NhA62Wol/NLCP9dhQbg="),
    ]
    c.user("and again")
    adapter, provider, model = REQUESTS["gemini"]
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-2", adapter=adapter, provider=provider, model_revision=model,
            tools=(), max_output_tokens=256,
        )
    )  # fmt: skip
    c.attempt("op-2")
    (manifest,) = [m.manifest for m in c.of(ManifestIssued) if m.manifest.operation_id == "op-2"]
    contents = orjson.loads(manifest.request_body)["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {
                "text": "Soft rain on the roof,\ngray café windows weep—\nthe kettle answers.",
                "thoughtSignature": "CiQBS3hu3z/CuRCQ7u7zKMu1W7R0NhA62Wol/NLCP9dhQbg=",
            }
        ],
    }
