"""The fold stamps a committed signature with the API that minted it, and the next request to another
API does not carry it (`adapters/signatures.py`): a Claude answer's thinking signature went to Gemini
as a `thoughtSignature` (Gemini: "Corrupted thought signature.", on every later request)."""

from __future__ import annotations

from typing import Any

import orjson

from tests.unit.adapters.conversations import Conversation, params_for
from tests.unit.dispatch.test_provider_answers_commit import answered, next_request
from turnledger.adapters.base import Rendered
from turnledger.adapters.registry import ADAPTERS
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
    assert [sorted(part) for part in gemini["contents"][1]["parts"]] == [["functionCall", "thoughtSignature"]]
    bedrock = next_request(answered("anthropic_thinking_tool_use.sse"), "bedrock-converse")
    assert ANTHROPIC_SIGNATURE not in orjson.dumps(bedrock).decode()
    assert [list(part) for part in bedrock["messages"][1]["content"]] == [["toolUse"]]


RS_ID = "rs_0b7d2e9f4c1a6b3e0168a1f1"
RS_CONTENT = "gAAAAABoofEr0x9Zq3vN5mK8pL2wR7tY4uI1oP6aS3dF9gH0jK5lZ8xC2vB7nM4qW1eR6tY3uI9o"


def test_a_responses_reasoning_item_commits_with_its_rs_id_and_is_sent_back_before_its_calls() -> None:
    """Its blocks are named `<op>#<gen>/bN`, and the adapter sends reasoning only under an `rs_` id, so
    the reasoning of every answer was left out of the next request (OpenAI: with manual context, pass
    reasoning items back; provider-formats §1b). The stream's item id is now kept on the block."""
    c = answered("openai_responses_tools.sse")
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [(b.kind, b.item_id, b.signed_by) for b in turn.blocks] == [
        ("thinking", RS_ID, "openai-responses"),
        ("tool_call", None, None),
        ("tool_call", None, None),
    ]
    items = next_request(c, "openai-responses")["input"]
    assert [item["type"] for item in items] == [
        "message", "reasoning", "function_call", "function_call",
        "function_call_output", "function_call_output",
    ]  # fmt: skip
    assert items[1] == {
        "type": "reasoning",
        "id": RS_ID,
        "summary": [
            {"type": "summary_text", "text": "**Planning lookups** Need weather and local time for Tokyo."}
        ],
        "encrypted_content": RS_CONTENT,
    }


def test_responses_reasoning_goes_to_no_other_api() -> None:
    for api in ("anthropic-messages", "gemini", "bedrock-converse"):
        body = orjson.dumps(next_request(answered("openai_responses_tools.sse"), api)).decode()
        assert RS_CONTENT not in body and RS_ID not in body


def test_a_claude_answers_first_call_goes_to_gemini_with_gemini_s_stand_in_for_a_signature() -> None:
    """Claude's tool_use carries no signature, so its call went to Gemini unsigned, and Gemini 3 refuses the
    first call of a step without one ("Function call is missing a thought_signature"); the turn's thinking,
    signed by Anthropic, says another API made it."""
    gemini = next_request(answered("anthropic_thinking_tool_use.sse"), "gemini")
    model_turn = gemini["contents"][1]
    assert model_turn["role"] == "model"
    assert [sorted(part) for part in model_turn["parts"]] == [["functionCall", "thoughtSignature"]]
    assert model_turn["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"


def test_parallel_calls_of_another_apis_answer_get_the_stand_in_on_the_first_only() -> None:
    c = Conversation("moved")
    c.next_turn().user("q")
    c.next_turn().thinking("plan", signature=SIGNATURE_OF_CLAUDE, signed_by="anthropic-messages")
    x = c.call("get_weather", {"city": "Oslo"}, "call-1")
    y = c.call("get_weather", {"city": "Rome"}, "call-2")
    c.next_turn().result(x, "4")
    c.result(y, "20")
    parts = _gemini_body(c)["contents"][1]["parts"]
    assert [part.get("thoughtSignature") for part in parts] == ["skip_thought_signature_validator", None]


def test_an_unsigned_call_of_an_answer_with_no_foreign_signature_is_sent_as_before() -> None:
    """A Gemini 2.5 answer without thinking has unsigned calls, as does a history submitted without
    signatures: nothing says another API made them, and their bytes do not change."""
    c = Conversation("plain")
    c.next_turn().user("q")
    x = c.call("get_weather", {"city": "Oslo"}, "call-1")
    c.next_turn().result(x, "4")
    parts = _gemini_body(c)["contents"][1]["parts"]
    assert parts == [{"functionCall": {"id": "call-1", "name": "get_weather", "args": {"city": "Oslo"}}}]


SIGNATURE_OF_CLAUDE = "RXJVQkNrWUlCeGdDSWtCMWtaM3BMMHc4"


def _gemini_body(c: Conversation) -> dict[str, Any]:
    adapter = ADAPTERS["gemini@2"]
    rendered = adapter.render(c.build(), params_for(adapter.provider))
    assert isinstance(rendered, Rendered)
    body: dict[str, Any] = orjson.loads(rendered.body)
    return body


def test_a_gemini_answer_whose_own_signature_is_on_its_text_keeps_its_unsigned_call_as_it_was() -> None:
    """Only a signature another API minted says another API made the answer: Gemini's own (here on the
    text, the call unsigned) does not."""
    c = Conversation("own")
    c.next_turn().user("q")
    c.next_turn().assistant("checking", signature="CiQBS3hu", signed_by="gemini")
    x = c.call("get_weather", {"city": "Oslo"}, "call-1")
    c.next_turn().result(x, "4")
    parts = _gemini_body(c)["contents"][1]["parts"]
    assert parts == [
        {"text": "checking", "thoughtSignature": "CiQBS3hu"},
        {"functionCall": {"id": "call-1", "name": "get_weather", "args": {"city": "Oslo"}}},
    ]
