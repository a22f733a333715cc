"""The fake Anthropic refuses a request that turns thinking on in a tool loop whose first assistant
message does not start with a thinking block, with the API's 400 and the message's index
(`fake_provider/anthropic_messages.py`, `unthought_loop`)."""

from __future__ import annotations

import asyncio
from typing import Any

import botocore.exceptions
import pytest

from tests.unit.fake_provider.test_sdk_clients import _bedrock_client
from tests.unit.fake_provider.test_signatures import ANTHROPIC_ASK, SEED, _converse, anthropic_history, post
from turnledger.fake_provider import FakeProvider, bedrock
from turnledger.fake_provider.anthropic_messages import LOOP_WITHOUT_THINKING, unthought_loop
from turnledger.fake_provider.errors import BadRequestError

pytestmark = pytest.mark.timeout(60)

REFUSAL_1 = (
    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When "
    "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
    "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
    "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
"""Word for word as OpenRouterTeam/ai-sdk-provider#162 and anthropics/claude-code#1183 quote it."""

ON = {"type": "enabled", "budget_tokens": 1024}
THOUGHT = {"type": "thinking", "thinking": "t", "signature": "s"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"}]}
ASK = {"role": "user", "content": "weather?"}


def request(*messages: dict[str, Any], thinking: Any = ON) -> dict[str, Any]:
    return {"thinking": thinking, "messages": list(messages)}


def said(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def refused_at(index: int, found: str, body: dict[str, Any]) -> bool:
    refusal = unthought_loop(body)
    return refusal is not None and refusal.message == LOOP_WITHOUT_THINKING.format(index=index, found=found)


async def test_an_answer_sent_back_without_its_thinking_is_refused_with_the_api_s_words() -> None:
    async with FakeProvider(seed=7) as fp:
        answer = (await post(fp, "/v1/messages", ANTHROPIC_ASK)).json()
        assert [b["type"] for b in answer["content"]][:2] == ["thinking", "tool_use"]
        assert (await post(fp, "/v1/messages", anthropic_history(answer))).status_code == 200
        stripped = anthropic_history({"content": answer["content"][1:]})
        refused = await post(fp, "/v1/messages", stripped)
        assert refused.status_code == 400
        assert refused.json() == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": REFUSAL_1},
        }
        adaptive = await post(fp, "/v1/messages", {**stripped, "thinking": {"type": "adaptive"}})
        assert (adaptive.status_code, adaptive.json()["error"]["message"]) == (400, REFUSAL_1)
        for off in ({"type": "disabled"}, None):
            taken = await post(fp, "/v1/messages", {**stripped, "thinking": off})
            assert taken.status_code == 200, taken.text


async def test_a_fake_that_thinks_by_default_takes_a_loop_whose_request_did_not_ask() -> None:
    """`FakeProvider(thinking=True)`: its answers think; the rule is the request's."""
    async with FakeProvider(seed=7, thinking=True) as fp:
        body = {k: v for k, v in ANTHROPIC_ASK.items() if k != "thinking"}
        answer = (await post(fp, "/v1/messages", body)).json()
        assert answer["content"][0]["type"] == "thinking"
        stripped = {
            k: v for k, v in anthropic_history({"content": answer["content"][1:]}).items() if k != "thinking"
        }
        taken = await post(fp, "/v1/messages", stripped)
        assert taken.status_code == 200 and taken.json()["content"][0]["type"] == "thinking"


def test_the_loop_s_first_assistant_message_must_think_not_its_later_steps() -> None:
    assert unthought_loop(request(ASK, said(THOUGHT, CALL), RESULT, said(CALL), RESULT)) is None
    assert refused_at(1, "tool_use", request(ASK, said(CALL), RESULT, said(THOUGHT, CALL), RESULT))


def test_the_loop_starts_after_the_last_user_message_without_a_result() -> None:
    earlier = (ASK, said(CALL), RESULT, said({"type": "text", "text": "4C"}), ASK)
    assert unthought_loop(request(*earlier, said(THOUGHT, CALL), RESULT)) is None
    assert refused_at(5, "text", request(*earlier, said({"type": "text", "text": "hm"}, CALL), RESULT))
    with_text = {"role": "user", "content": [*RESULT["content"], {"type": "text", "text": "hurry"}]}
    assert refused_at(1, "tool_use", request(ASK, said(CALL), with_text))


def test_what_is_not_a_loop_or_starts_with_thinking_is_taken() -> None:
    redacted = {"type": "redacted_thinking", "data": "x"}
    assert unthought_loop(request(ASK, said(redacted, CALL), RESULT)) is None
    assert unthought_loop(request(ASK, said(CALL), RESULT, ASK)) is None
    assert unthought_loop(request(ASK, said(CALL), RESULT, said(CALL))) is None
    assert unthought_loop(request(RESULT)) is None
    assert unthought_loop(request()) is None
    assert unthought_loop(request(ASK, said(CALL), {**RESULT, "role": "assistant"})) is None
    assert unthought_loop(request(ASK, said(CALL), RESULT, thinking={"type": "disabled"})) is None
    assert unthought_loop(request(ASK, said(CALL), RESULT, thinking="enabled")) is None
    assert unthought_loop({"messages": [ASK, said(CALL), RESULT]}) is None


def test_an_assistant_message_of_plain_text_or_nothing_is_found_text() -> None:
    assert refused_at(1, "text", request(ASK, {"role": "assistant", "content": "hi"}, RESULT))
    assert refused_at(1, "text", request(ASK, {"role": "assistant", "content": []}, RESULT))
    assert refused_at(1, "text", request(ASK, {"role": "assistant", "content": ["x"]}, RESULT))


def test_a_message_that_is_not_an_object_ends_the_walk() -> None:
    assert unthought_loop(request("junk", RESULT)) is None  # type: ignore[arg-type]
    assert refused_at(1, "tool_use", request("junk", said(CALL), RESULT))  # type: ignore[arg-type]


# Bedrock: the same rule, Claude's words in a ValidationException (anomalyco/opencode#3077,
# langchain-ai/langchain-aws#844: "The model returned the following errors: messages.1.content.0.type:
# Expected `thinking` or `redacted_thinking`, but found `tool_use`. ...").

BEDROCK_REFUSAL_1 = "The model returned the following errors: " + REFUSAL_1
REASONING = {"reasoningContent": {"reasoningText": {"text": "t", "signature": "s"}}}
TOOL_USE = {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {}}}
TOOL_RESULT = {
    "role": "user",
    "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "4"}]}}],
}
QUESTION = {"role": "user", "content": [{"text": "weather?"}]}


def converse(*messages: Any, thinking: Any = ON) -> dict[str, Any]:
    return {"additionalModelRequestFields": {"thinking": thinking}, "messages": list(messages)}


def bedrock_refused_at(index: int, found: str, body: dict[str, Any]) -> bool:
    with pytest.raises(BadRequestError) as refused:
        bedrock.parse(body)
    expected = "The model returned the following errors: " + LOOP_WITHOUT_THINKING.format(
        index=index, found=found
    )
    return (refused.value.message, refused.value.status) == (expected, 400)


def test_bedrock_refuses_a_thinking_loop_that_did_not_open_with_reasoning() -> None:
    refusal = bedrock.unthought_loop(converse(QUESTION, said(TOOL_USE), TOOL_RESULT))
    assert refusal is not None and refusal.message == BEDROCK_REFUSAL_1
    assert bedrock_refused_at(1, "tool_use", converse(QUESTION, said(TOOL_USE), TOOL_RESULT))
    assert bedrock_refused_at(1, "text", converse(QUESTION, said({"text": "hm"}, TOOL_USE), TOOL_RESULT))
    assert bedrock_refused_at(1, "text", converse(QUESTION, said(), TOOL_RESULT))
    assert bedrock_refused_at(1, "text", converse(QUESTION, said("x"), TOOL_RESULT))  # type: ignore[arg-type]
    adaptive = converse(QUESTION, said(TOOL_USE), TOOL_RESULT, thinking={"type": "adaptive"})
    assert bedrock_refused_at(1, "tool_use", adaptive)
    later = converse(QUESTION, said(TOOL_USE), TOOL_RESULT, said(REASONING, TOOL_USE), TOOL_RESULT)
    assert bedrock_refused_at(1, "tool_use", later)


def test_bedrock_takes_a_loop_opened_with_reasoning_and_what_is_no_loop_or_does_not_think() -> None:
    taken = [
        converse(QUESTION, said(REASONING, TOOL_USE), TOOL_RESULT, said(TOOL_USE), TOOL_RESULT),
        converse(QUESTION, said(TOOL_USE), TOOL_RESULT, said({"text": "4C"}), QUESTION),
        converse(QUESTION, said(TOOL_USE), TOOL_RESULT, thinking={"type": "disabled"}),
        converse(QUESTION, said(TOOL_USE), TOOL_RESULT, thinking="enabled"),
        {"messages": [QUESTION, said(TOOL_USE), TOOL_RESULT]},
        {"additionalModelRequestFields": "thinking", "messages": [QUESTION, said(TOOL_USE), TOOL_RESULT]},
    ]
    assert [bedrock.parse(body).thinking for body in taken] == [True, True, False, False, False, False]
    assert [bedrock.unthought_loop(body) for body in taken[:2]] == [None, None]


def test_bedrock_names_the_first_block_by_claude_s_type() -> None:
    assert [bedrock._first_type(c) for c in ([REASONING], [TOOL_USE], [{"text": "x"}], [{"image": {}}])] == [
        "thinking",
        "tool_use",
        "text",
        "text",
    ]
    assert [bedrock._first_type(c) for c in ([], None, ["x"], [{}])] == ["text"] * 4
    assert bedrock._holds_result(TOOL_RESULT) and not bedrock._holds_result(QUESTION)
    assert not bedrock._holds_result({"content": "x"}) and not bedrock._holds_result("x")


async def test_bedrock_refuses_an_answer_sent_back_without_its_reasoning_over_http() -> None:
    async with FakeProvider(seed=SEED) as fp:
        client = _bedrock_client(fp.base_url, fp.keys.aws_access_key_id, fp.keys.aws_secret_access_key)
        ask = [{"role": "user", "content": [{"text": "weather in Oslo?"}]}]
        content = (await asyncio.to_thread(_converse, client, ask))["output"]["message"]["content"]
        assert "reasoningContent" in content[0]
        results = [{"toolResult": {"toolUseId": b["toolUse"]["toolUseId"], "content": [{"text": "4"}]}}
                   for b in content if "toolUse" in b]  # fmt: skip
        stripped = [*ask, {"role": "assistant", "content": content[1:]}, {"role": "user", "content": results}]
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            await asyncio.to_thread(_converse, client, stripped)
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        first = next(iter(content[1]))
        found = {"text": "text", "toolUse": "tool_use"}[first]
        assert refused.value.response["Error"] == {
            "Code": "ValidationException",
            "Message": "The model returned the following errors: "
            + LOOP_WITHOUT_THINKING.format(index=1, found=found),
        }
