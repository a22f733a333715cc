"""The fold stamps a committed signature with the API that minted it, and the next request to another
API does not carry it (`adapters/signatures.py`): a Claude answer's thinking signature went to Gemini
as a `thoughtSignature` (Gemini: "Corrupted thought signature.", on every later request)."""

from __future__ import annotations

import orjson

from tests.unit.dispatch.test_provider_answers_commit import answered, next_request
from turnledger.model.events import CommittedTurn

ANTHROPIC_SIGNATURE = (
    "ErUBCkYIBxgCIkB1kZ3pL0w8cXq2mN7vR4tY9uI6oP3aS5dF8gH1jK2lZ0xC7vB4nM9qW6eR3tY8uI5oPEgw+k1a2s3d4f5g6h7j8k9"
)


def test_a_committed_signature_names_the_api_that_minted_it_and_an_unsigned_block_names_none() -> None:
    c = answered("anthropic_thinking_tool_use.sse")
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [(b.kind, b.signature, b.signed_by) for b in turn.blocks] == [
        ("thinking", ANTHROPIC_SIGNATURE, "anthropic-messages"),
        ("tool_call", None, None),
    ]


def test_a_gemini_call_signature_is_stamped_gemini() -> None:
    """Only the first of parallel calls is signed (provider-formats §1d)."""
    c = answered("gemini_parallel_calls.sse")
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [(b.kind, b.signed_by) for b in turn.blocks] == [
        ("text", None),
        ("tool_call", "gemini"),
        ("tool_call", None),
    ]
    assert (
        turn.blocks[1].signature == "EqcBCqQBiI26stc0kWdww0K1m3KXEfs5JiU5XicdSYnbRUzVU3zwoL2s05slknb31vHdlA=="
    )


def test_the_next_request_to_the_same_api_returns_the_signature() -> None:
    body = next_request(answered("anthropic_thinking_tool_use.sse"), "anthropic-messages")
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": body["messages"][1]["content"][0]["thinking"],
        "signature": ANTHROPIC_SIGNATURE,
    }


def test_the_next_request_to_another_api_leaves_the_claude_thinking_out() -> None:
    """Before: Gemini got `{"text": <thinking>, "thought": true, "thoughtSignature": <Claude's>}`, Bedrock
    a reasoningContent with Claude's signature."""
    gemini = next_request(answered("anthropic_thinking_tool_use.sse"), "gemini")
    assert ANTHROPIC_SIGNATURE not in orjson.dumps(gemini).decode()
    assert [list(part) for part in gemini["contents"][1]["parts"]] == [["functionCall"]]
    bedrock = next_request(answered("anthropic_thinking_tool_use.sse"), "bedrock-converse")
    assert ANTHROPIC_SIGNATURE not in orjson.dumps(bedrock).decode()
    assert [list(part) for part in bedrock["messages"][1]["content"]] == [["toolUse"]]
