"""Reasoning signatures in the fake provider: each API mints its own, checks every one a request
holds, and refuses one it did not mint with its own 400, as the real APIs do (signatures.py); a
Responses reasoning model's reasoning item, and the checks on one sent back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import botocore.exceptions
import httpx
import pytest
from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from tests.unit.fake_provider.test_sdk_clients import _bedrock_client
from turnledger.fake_provider import FakeProvider, anthropic_messages, bedrock, gemini, openai_responses
from turnledger.fake_provider.signatures import SignatureRule, Signed

pytestmark = pytest.mark.timeout(60)

SEED = 7
RULES = {"anthropic-messages": anthropic_messages.SIGNATURES, "gemini": gemini.SIGNATURES,
         "bedrock-converse": bedrock.SIGNATURES,
         "openai-responses": openai_responses.SIGNATURES}  # fmt: skip
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


# the rule itself ---------------------------------------------------------------------------------


@pytest.mark.parametrize("api", list(RULES))
def test_a_token_is_checked_by_the_api_and_seed_that_minted_it_only(api: str) -> None:
    rule = RULES[api]
    token = rule.mint(SEED, "basis", "signature", "thought")
    assert token == rule.mint(SEED, "basis", "signature", "thought")  # deterministic
    assert token != rule.mint(SEED, "basis", "other", "thought")
    assert token != rule.mint(SEED, "other basis", "signature", "thought")
    assert rule.minted(SEED, Signed("x", token, "thought"))
    assert not rule.minted(SEED + 1, Signed("x", token, "thought"))
    for other in RULES.values():
        if other is not rule:
            assert not other.minted(SEED, Signed("x", token, "thought"))


def test_tokens_begin_as_the_real_apis_do() -> None:
    assert anthropic_messages.SIGNATURES.mint(SEED, "b", "l", "t").startswith("EqoB")
    assert bedrock.SIGNATURES.mint(SEED, "b", "l", "t").startswith("EqoB")
    assert gemini.SIGNATURES.mint(SEED, "b", "l").startswith("CiQB")
    assert openai_responses.SIGNATURES.mint(SEED, "b", "l").startswith("gAAAAABo")


@pytest.mark.parametrize(("api", "binds"), [("anthropic-messages", True), ("bedrock-converse", True),
                                            ("gemini", False)])  # fmt: skip
def test_claude_signs_the_thinking_text_gemini_signs_nothing_the_request_shows(api: str, binds: bool) -> None:
    rule = RULES[api]
    token = rule.mint(SEED, "basis", "signature", "the thought")
    assert rule.minted(SEED, Signed("x", token, "another thought")) is not binds


@pytest.mark.parametrize(
    "token",
    [
        "",
        "not base64 at all!",
        "EqoB",  # the header alone
        "c2lnOnJlc3A=",  # base64 of another header
    ],
)
def test_anything_else_is_not_a_signature(token: str) -> None:
    assert not anthropic_messages.SIGNATURES.minted(SEED, Signed("x", token, ""))


def test_a_cut_lengthened_or_changed_token_is_not_a_signature() -> None:
    rule = anthropic_messages.SIGNATURES
    token = rule.mint(SEED, "basis", "signature", "t")
    assert not rule.minted(SEED, Signed("x", token[:-8], "t"))
    for lengthened in (token + "!", token[:8] + "\n" + token[8:], token + "AAAA"):
        assert not rule.minted(SEED, Signed("x", lengthened, "t"))
    changed = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
    assert not rule.minted(SEED, Signed("x", changed, "t"))


def test_gemini_takes_its_stand_in_on_a_function_call_only() -> None:
    rule: SignatureRule = gemini.SIGNATURES
    assert rule.minted(SEED, Signed("x", "skip_thought_signature_validator", on_call=True))
    assert not rule.minted(SEED, Signed("x", "skip_thought_signature_validator", on_call=False))
    assert not anthropic_messages.SIGNATURES.minted(
        SEED, Signed("x", "skip_thought_signature_validator", on_call=True)
    )


# over HTTP -----------------------------------------------------------------------------------------


def headers(fp: FakeProvider) -> dict[str, str]:
    return {
        "x-api-key": fp.keys.anthropic,
        "anthropic-version": "2023-06-01",
        "authorization": f"Bearer {fp.keys.openai}",
        "x-goog-api-key": fp.keys.gemini,
    }


async def post(fp: FakeProvider, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=fp.base_url, headers=headers(fp), timeout=10) as client:
        return await client.post(path, json=body)


ANTHROPIC_ASK = {
    "model": "claude-sonnet-4",
    "max_tokens": 256,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tools": [{"name": "get_weather", "input_schema": WEATHER}],
    "messages": [{"role": "user", "content": "weather in Oslo?"}],
}


def anthropic_history(answer: dict[str, Any]) -> dict[str, Any]:
    """The request after `answer` (thinking + calls): the answer, then a result for each call."""
    results = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": "sunny"}
        for b in answer["content"]
        if b["type"] == "tool_use"
    ]
    messages = [*ANTHROPIC_ASK["messages"], {"role": "assistant", "content": answer["content"]},
                {"role": "user", "content": results}]  # fmt: skip
    return {**ANTHROPIC_ASK, "messages": messages}


def anthropic_refusal(where: str) -> dict[str, Any]:
    message = f"{where}: Invalid `signature` in `thinking` block"
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


async def test_anthropic_takes_back_its_own_signature_and_refuses_any_other() -> None:
    async with FakeProvider(seed=SEED) as fp:
        answer = (await post(fp, "/v1/messages", ANTHROPIC_ASK)).json()
        thinking = answer["content"][0]
        assert thinking["type"] == "thinking" and thinking["signature"].startswith("EqoB")
        assert answer["content"][1]["type"] == "tool_use"
        again = anthropic_history(answer)
        assert (await post(fp, "/v1/messages", again)).status_code == 200

        foreign = gemini.SIGNATURES.mint(SEED, "basis", "thought-signature")
        for changed in ({"signature": foreign}, {"thinking": thinking["thinking"] + " And more."}):
            body = anthropic_history({"content": [{**thinking, **changed}, *answer["content"][1:]]})
            refused = await post(fp, "/v1/messages", body)
            assert (refused.status_code, refused.json()) == (400, anthropic_refusal("messages.1.content.0"))


async def test_anthropic_streams_the_signature_it_checks() -> None:
    async with FakeProvider(seed=SEED) as fp:
        async with httpx.AsyncClient(base_url=fp.base_url, headers=headers(fp), timeout=10) as client:
            raw = (await client.post("/v1/messages", json={**ANTHROPIC_ASK, "stream": True})).text
        events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta" and e["index"] == 0]
        text = "".join(d.get("thinking", "") for d in deltas)
        [signature] = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
        assert anthropic_messages.SIGNATURES.minted(SEED, Signed("x", signature, text))


GEMINI_PATH = "/v1beta/models/gemini-2.5-pro:generateContent"
GEMINI_ASK = {
    "contents": [{"role": "user", "parts": [{"text": "Oslo, Rome, Paris weather"}]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
    "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": WEATHER}]}],
}
CORRUPTED = {"error": {"code": 400, "message": "Corrupted thought signature.", "status": "INVALID_ARGUMENT"}}


def gemini_history(model_parts: list[dict[str, Any]]) -> dict[str, Any]:
    responses = [
        {"functionResponse": {"name": p["functionCall"]["name"], "response": {"output": "sunny"}}}
        for p in model_parts
        if "functionCall" in p
    ]
    contents = [*GEMINI_ASK["contents"], {"role": "model", "parts": model_parts},
                {"role": "user", "parts": responses}]  # fmt: skip
    return {**GEMINI_ASK, "contents": contents}


async def test_gemini_signs_the_first_call_of_a_thought_through_answer() -> None:
    async with FakeProvider(seed=SEED, thinking=True) as fp:
        streamed = await post(
            fp, GEMINI_PATH.replace(":generateContent", ":streamGenerateContent"), GEMINI_ASK
        )
        parts = [p for chunk in streamed.json() for p in chunk["candidates"][0]["content"]["parts"]]
        calls = [p for p in parts if "functionCall" in p]
        assert len(calls) >= 2, "the seed gives parallel calls"
        assert [("thoughtSignature" in p) for p in calls] == [True] + [False] * (len(calls) - 1)
        assert gemini.SIGNATURES.minted(SEED, Signed("x", calls[0]["thoughtSignature"], on_call=True))
        assert all(p.get("thought") for p in parts if "functionCall" not in p)


async def test_gemini_thinks_and_signs_when_the_request_asks_for_its_thoughts() -> None:
    """`generationConfig.thinkingConfig.includeThoughts: true` alone (the fake not told to think) gives
    thought parts and a signed first call; the same request without it, neither (Gemini 2.5)."""
    path = GEMINI_PATH.replace(":generateContent", ":streamGenerateContent")
    async with FakeProvider(seed=SEED) as fp:
        parts = [p for chunk in (await post(fp, path, GEMINI_ASK)).json()
                 for p in chunk["candidates"][0]["content"]["parts"]]  # fmt: skip
        calls = [p for p in parts if "functionCall" in p]
        assert [p["thought"] for p in parts if "functionCall" not in p] == [True] * (len(parts) - len(calls))
        assert len(parts) > len(calls) >= 1
        assert gemini.SIGNATURES.minted(SEED, Signed("x", calls[0]["thoughtSignature"], on_call=True))
        unasked = {key: value for key, value in GEMINI_ASK.items() if key != "generationConfig"}
        parts = [p for chunk in (await post(fp, path, unasked)).json()
                 for p in chunk["candidates"][0]["content"]["parts"]]  # fmt: skip
        assert [p for p in parts if "thought" in p or "thoughtSignature" in p] == []


@pytest.mark.parametrize(
    ("generation_config", "thinks"),
    [
        ({"thinkingConfig": {"includeThoughts": True}}, True),
        ({"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "low"}}, True),
        ({"thinkingConfig": {"includeThoughts": False}}, False),
        ({"thinkingConfig": {"includeThoughts": "true"}}, False),
        ({"thinkingConfig": {"thinkingBudget": 1024}}, False),
        ({"thinkingConfig": ["includeThoughts"]}, False),
        ({"temperature": 0.2}, False),
        (None, False),
    ],
)
def test_gemini_reads_a_request_for_thoughts_from_include_thoughts_true_only(
    generation_config: dict[str, Any] | None, thinks: bool
) -> None:
    """A budget or a level makes Gemini think but returns no thought part: only `includeThoughts` does."""
    body = {"contents": GEMINI_ASK["contents"], "generationConfig": generation_config}
    assert gemini.parse(body).thinking is thinks


async def test_gemini_takes_back_its_own_signature_and_its_stand_in_on_a_call_only() -> None:
    async with FakeProvider(seed=SEED, thinking=True) as fp:
        answer = (await post(fp, GEMINI_PATH, GEMINI_ASK)).json()
        parts = answer["candidates"][0]["content"]["parts"]
        assert "thoughtSignature" in parts[0]
        assert (await post(fp, GEMINI_PATH, gemini_history(parts))).status_code == 200

        stand_in = "skip_thought_signature_validator"
        call = {k: v for k, v in parts[0].items() if k != "thoughtSignature"}
        assert (
            await post(fp, GEMINI_PATH, gemini_history([{**call, "thoughtSignature": stand_in}]))
        ).status_code == 200

        foreign = anthropic_messages.SIGNATURES.mint(SEED, "basis", "signature", "")
        for wrong in (
            [{**call, "thoughtSignature": foreign}],
            [{"text": "", "thoughtSignature": stand_in}, call],
            [{"text": "thinking", "thought": True, "thoughtSignature": foreign}, call],
        ):
            refused = await post(fp, GEMINI_PATH, gemini_history(wrong))
            assert (refused.status_code, refused.json()) == (400, CORRUPTED)


def missing_signature(name: str, position: int) -> dict[str, Any]:
    message = (
        "Function call is missing a thought_signature in functionCall parts. This is required for tools to "
        "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
        f"data, function call `default_api:{name}` , position {position}. Please refer to "
        "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
    )
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


def call_part(city: str, signature: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": "get_weather", "args": {"city": city}}}
    return part if signature is None else {**part, "thoughtSignature": signature}


def response_part(city: str) -> dict[str, Any]:
    return {"functionResponse": {"name": "get_weather", "response": {"output": f"{city}: sunny"}}}


def steps(*model_parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The ask, then each step (a model content) answered by one function response per call."""
    contents = list(GEMINI_ASK["contents"])
    for parts in model_parts:
        answered = [response_part(p["functionCall"]["args"]["city"]) for p in parts if "functionCall" in p]
        contents += [{"role": "model", "parts": parts}, {"role": "user", "parts": answered}]
    return {**GEMINI_ASK, "contents": contents}


STAND_IN = "skip_thought_signature_validator"


async def test_strict_gemini_refuses_a_step_of_the_current_turn_whose_first_call_is_unsigned() -> None:
    """Gemini 3 (not 2.5) requires the first call of each step of the current turn signed."""
    unsigned_first = steps([{"text": "checking"}, call_part("Oslo"), call_part("Rome")])
    second_step = steps([call_part("Oslo", STAND_IN)], [call_part("Rome")])
    async with FakeProvider(seed=SEED, gemini_strict_signatures=True) as fp:
        refused = await post(fp, GEMINI_PATH, unsigned_first)
        assert (refused.status_code, refused.json()) == (400, missing_signature("get_weather", 2))
        refused = await post(fp, GEMINI_PATH, second_step)
        assert (refused.status_code, refused.json()) == (400, missing_signature("get_weather", 4))
    async with FakeProvider(seed=SEED) as fp:
        assert (await post(fp, GEMINI_PATH, unsigned_first)).status_code == 200
        assert (await post(fp, GEMINI_PATH, second_step)).status_code == 200


async def test_strict_gemini_takes_a_signed_or_stood_in_first_call_and_unsigned_calls_of_past_turns() -> None:
    async with FakeProvider(seed=SEED, gemini_strict_signatures=True) as fp:
        answer = (await post(fp, GEMINI_PATH, GEMINI_ASK)).json()
        own = answer["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
        next_question = {"role": "user", "parts": [{"text": "and Rome?"}]}
        past_turn = [*steps([call_part("Oslo")])["contents"], next_question]
        for body in (
            steps([call_part("Oslo", own), call_part("Rome")]),
            steps([call_part("Oslo", STAND_IN), call_part("Rome")], [call_part("Paris", STAND_IN)]),
            steps([{"text": "no calls"}]),
            {**GEMINI_ASK, "contents": past_turn},
        ):
            answered = await post(fp, GEMINI_PATH, body)
            assert answered.status_code == 200, (body, answered.json())


async def test_strict_gemini_signs_the_first_call_of_an_answer_without_thinking() -> None:
    """Gemini 3 returns a signature on the first call of every answer, thinking asked for or not."""
    ask = {k: v for k, v in GEMINI_ASK.items() if k != "generationConfig"}
    async with FakeProvider(seed=SEED, gemini_strict_signatures=True) as fp:
        parts = (await post(fp, GEMINI_PATH, ask)).json()["candidates"][0]["content"]["parts"]
        calls = [p for p in parts if "functionCall" in p]
        assert len(calls) >= 2, "the seed gives parallel calls"
        assert [("thoughtSignature" in p) for p in calls] == [True] + [False] * (len(calls) - 1)
        assert gemini.SIGNATURES.minted(SEED, Signed("x", calls[0]["thoughtSignature"], on_call=True))
        assert all("thought" not in p for p in parts)
        assert (await post(fp, GEMINI_PATH, steps(calls))).status_code == 200


@pytest.mark.parametrize(
    ("contents", "position"),
    [
        # a user content with text beside its function responses starts the current turn
        ([{"role": "model", "parts": [call_part("Oslo")]},
          {"role": "user", "parts": [response_part("Oslo"), {"text": "and Rome?"}]},
          {"role": "model", "parts": [call_part("Rome")]}], 3),
        # a content without a role is the user's; its text starts the current turn
        ([{"role": "model", "parts": [call_part("Oslo")]}, {"parts": [{"text": "q"}]},
          {"role": "model", "parts": [{"text": "x"}, call_part("Rome", STAND_IN), call_part("Lima")]}], None),
        # no user text at all: the whole request is the current turn
        ([{"role": "model", "parts": [call_part("Oslo")]}], 1),
        ([{"role": "user", "parts": [response_part("Oslo")]},
          {"role": "model", "parts": [call_part("Oslo")]}], 2),
        # a part that is not an object, and a call that is not one, are no first call
        ([{"role": "user", "parts": [{"text": "q"}]},
          {"role": "model", "parts": ["text", {"functionCall": "x"}, call_part("Rome")]}], 2),
    ],
)  # fmt: skip
def test_the_current_turn_is_what_follows_the_last_user_content_that_is_not_only_function_responses(
    contents: list[dict[str, Any]], position: int | None
) -> None:
    refusal = gemini.unsigned_step({"contents": contents})
    if position is None:
        assert refusal is None
    else:
        assert refusal is not None
        assert (refusal.message, refusal.status) == (
            missing_signature("get_weather", position)["error"]["message"],
            400,
        )


def _converse(client: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return client.converse(  # type: ignore[no-any-return]
        modelId="anthropic.claude-sonnet-4-20250514-v1:0",
        messages=messages,
        toolConfig={"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": WEATHER}}}]},
        additionalModelRequestFields={"thinking": {"type": "enabled", "budget_tokens": 1024}},
    )


async def test_bedrock_reasons_signs_and_refuses_another_signature_with_a_validation_exception() -> None:
    async with FakeProvider(seed=SEED) as fp:
        client = _bedrock_client(fp.base_url, fp.keys.aws_access_key_id, fp.keys.aws_secret_access_key)
        ask = [{"role": "user", "content": [{"text": "weather in Oslo?"}]}]
        answer = await asyncio.to_thread(_converse, client, ask)
        content = answer["output"]["message"]["content"]
        reasoning = content[0]["reasoningContent"]["reasoningText"]
        assert reasoning["signature"].startswith("EqoB") and reasoning["text"].startswith("Considering")
        calls = [b["toolUse"] for b in content if "toolUse" in b]
        assert calls

        def history(assistant: list[dict[str, Any]]) -> list[dict[str, Any]]:
            results = [
                {"toolResult": {"toolUseId": c["toolUseId"], "content": [{"text": "sunny"}]}} for c in calls
            ]
            return [*ask, {"role": "assistant", "content": assistant}, {"role": "user", "content": results}]

        again = await asyncio.to_thread(_converse, client, history(content))
        assert again["stopReason"] == "end_turn"
        foreign = anthropic_messages.SIGNATURES.mint(SEED, "basis", "signature", reasoning["text"])
        wrong = [{"reasoningContent": {"reasoningText": {**reasoning, "signature": foreign}}}, *content[1:]]
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            await asyncio.to_thread(_converse, client, history(wrong))
        error = refused.value.response["Error"]
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert error == {
            "Code": "ValidationException",
            "Message": "The model returned the following errors: messages.1.content.0: "
            "Invalid signature in thinking block",
        }


async def test_bedrock_streams_its_reasoning_as_the_service_does() -> None:
    async with FakeProvider(seed=SEED) as fp:
        client = _bedrock_client(fp.base_url, fp.keys.aws_access_key_id, fp.keys.aws_secret_access_key)

        def stream() -> list[dict[str, Any]]:
            response = client.converse_stream(
                modelId="anthropic.claude-sonnet-4-20250514-v1:0",
                messages=[{"role": "user", "content": [{"text": "tell me something"}]}],
                additionalModelRequestFields={"thinking": {"type": "enabled", "budget_tokens": 1024}},
            )
            return list(response["stream"])

        events = await asyncio.to_thread(stream)
        deltas = [e["contentBlockDelta"] for e in events if "contentBlockDelta" in e]
        reasoning = [d["delta"]["reasoningContent"] for d in deltas if d["contentBlockIndex"] == 0]
        assert [next(iter(r)) for r in reasoning][-1] == "signature"
        assert {next(iter(r)) for r in reasoning[:-1]} == {"text"}
        text = "".join(r["text"] for r in reasoning[:-1])
        assert bedrock.SIGNATURES.minted(SEED, Signed("x", reasoning[-1]["signature"], text))
        assert [next(iter(e)) for e in events][:1] == ["messageStart"]
        stop = [e["contentBlockStop"]["contentBlockIndex"] for e in events if "contentBlockStop" in e]
        assert stop == [0, 1]


async def test_a_request_without_thinking_gets_no_signature() -> None:
    async with FakeProvider(seed=SEED) as fp:
        ask = {k: v for k, v in ANTHROPIC_ASK.items() if k != "thinking"}
        answer = (await post(fp, "/v1/messages", ask)).json()
        assert [b["type"] for b in answer["content"]] == ["tool_use"] * len(answer["content"])
        gemini_ask = {k: v for k, v in GEMINI_ASK.items() if k != "generationConfig"}
        parts = (await post(fp, GEMINI_PATH, gemini_ask)).json()["candidates"][0]["content"]["parts"]
        assert all("thoughtSignature" not in p for p in parts)


RESPONSES_ASK = {
    "model": "o4-mini",
    "reasoning": {"effort": "low"},
    "include": ["reasoning.encrypted_content"],
    "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER}],
    "input": "weather in Oslo?",
}


def sse(raw: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]


async def test_a_responses_reasoning_model_streams_its_reasoning_item_first() -> None:
    async with FakeProvider(seed=SEED) as fp:
        raw = (await post(fp, "/v1/responses", {**RESPONSES_ASK, "stream": True})).text
        events = sse(raw)
        state = ResponseStreamState(input_tools=omit, text_format=omit)
        for event in events:
            state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))
        final = state._completed_response
        assert final is not None and [o.type for o in final.output][:2] == ["reasoning", "function_call"]
        reasoning = final.output[0]
        assert reasoning.id.startswith("rs_") and reasoning.encrypted_content.startswith("gAAAAABo")
        summary = reasoning.summary[0].text
        assert summary.startswith("Considering the request; ")
        mine = [e for e in events if e.get("item_id") == reasoning.id or e.get("output_index") == 0]
        assert [e["type"] for e in mine][:3] == [
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
        ]
        assert "".join(e["delta"] for e in mine if e["type"].endswith("summary_text.delta")) == summary
        added, done = mine[0]["item"], next(e for e in mine if e["type"] == "response.output_item.done")
        assert "encrypted_content" not in added and added["summary"] == []
        assert done["item"]["encrypted_content"] == reasoning.encrypted_content
        token = Signed("x", reasoning.encrypted_content)
        assert openai_responses.SIGNATURES.minted(SEED, token)
        assert (
            final.usage is not None
            and final.usage.output_tokens_details.reasoning_tokens == len(summary) // 4
        )


async def test_reasoning_without_include_has_no_encrypted_content_and_none_without_reasoning() -> None:
    async with FakeProvider(seed=SEED) as fp:
        ask = {k: v for k, v in RESPONSES_ASK.items() if k != "include"}
        output = (await post(fp, "/v1/responses", ask)).json()["output"]
        assert output[0]["type"] == "reasoning" and "encrypted_content" not in output[0]
        plain = {k: v for k, v in ask.items() if k != "reasoning"}
        output = (await post(fp, "/v1/responses", plain)).json()["output"]
        assert [o["type"] for o in output] == ["function_call"] * len(output)


def responses_history(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The request after `output`: the user's words, the answer's items, a result per call."""
    results = [
        {"type": "function_call_output", "call_id": o["call_id"], "output": "sunny"}
        for o in output
        if o["type"] == "function_call"
    ]
    user = {"type": "message", "role": "user", "content": RESPONSES_ASK["input"]}
    return {**RESPONSES_ASK, "input": [user, *output, *results]}


def unverified(token: str) -> dict[str, Any]:
    message = f"The encrypted content {token[:4]}...{token[-4:]} could not be verified."
    error = {"message": message, "type": "invalid_request_error", "param": None}
    return {"error": {**error, "code": "invalid_encrypted_content"}}


def orphan(item_id: str) -> dict[str, Any]:
    message = f"Item '{item_id}' of type 'reasoning' was provided without its required following item."
    return {"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": None}}


async def test_responses_takes_back_its_reasoning_item_before_its_call_and_nothing_else() -> None:
    async with FakeProvider(seed=SEED) as fp:
        output = (await post(fp, "/v1/responses", RESPONSES_ASK)).json()["output"]
        reasoning, call = output[0], output[1]
        assert (reasoning["type"], call["type"]) == ("reasoning", "function_call")
        again = await post(fp, "/v1/responses", responses_history(output))
        assert again.status_code == 200 and again.json()["status"] == "completed"

        foreign = anthropic_messages.SIGNATURES.mint(SEED, "basis", "signature", "")
        refused = await post(
            fp, "/v1/responses", responses_history([{**reasoning, "encrypted_content": foreign}, *output[1:]])
        )
        assert (refused.status_code, refused.json()) == (400, unverified(foreign))

        history = responses_history(output)
        user, *rest = history["input"]
        for alone in ([user, *rest[1:], reasoning], [user, reasoning, *rest[len(output):]],
                      [user, reasoning, user, *rest[1:]]):  # fmt: skip
            refused = await post(fp, "/v1/responses", {**history, "input": alone})
            assert (refused.status_code, refused.json()) == (400, orphan(reasoning["id"]))


def without_reasoning(call: dict[str, Any], reasoning: dict[str, Any]) -> dict[str, Any]:
    message = (
        f"Item '{call['id']}' of type 'function_call' was provided without its required 'reasoning' item: "
        f"'{reasoning['id']}'."
    )
    return {"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": None}}


async def test_responses_refuses_a_call_it_made_after_reasoning_sent_back_without_that_reasoning() -> None:
    async with FakeProvider(seed=SEED) as fp:
        output = (await post(fp, "/v1/responses", RESPONSES_ASK)).json()["output"]
        reasoning, first, second, third = output
        history = responses_history(output)
        user, *rest = history["input"]
        results = rest[len(output) :]
        other = (await post(fp, "/v1/responses", {**RESPONSES_ASK, "input": "weather in Lima?"})).json()
        other_reasoning = other["output"][0]
        assert other_reasoning["type"] == "reasoning" and other_reasoning["id"] != reasoning["id"]
        said = {"type": "message", "role": "assistant", "content": "Checking."}
        for inputs, call in [
            ([user, first, second, third, *results], first),
            ([user, reasoning, first, results[0], second, results[1], third, results[2]], second),
            ([user, other_reasoning, first, second, third, *results], first),
            ([user, reasoning, first, user, second, third, *results], second),
        ]:
            refused = await post(fp, "/v1/responses", {**history, "input": inputs})
            assert (refused.status_code, refused.json()) == (400, without_reasoning(call, reasoning))

        said_first = [user, reasoning, said, first, second, third, *results]
        plain = {k: v for k, v in RESPONSES_ASK.items() if k not in ("reasoning", "include")}
        plain_calls = (await post(fp, "/v1/responses", plain)).json()["output"]
        mine = {"type": "function_call", "call_id": "call_mine", "name": "get_weather", "arguments": "{}"}
        for inputs in (said_first, responses_history(plain_calls)["input"], [user, mine]):
            taken = await post(fp, "/v1/responses", {**history, "input": inputs})
            assert (taken.status_code, taken.json()["status"]) == (200, "completed")


def not_found(item_id: str, stored: bool) -> dict[str, Any]:
    message = f"Item with id '{item_id}' not found."
    if not stored:
        message += (
            " Items are not persisted when `store` is set to false. Try again with `store` set to true, or "
            "remove this item from your input."
        )
    return {"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": None}}


def by_reference(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer's items with its reasoning item as a reference to its id."""
    reasoning, *rest = output
    return [{"type": "item_reference", "id": reasoning["id"]}, *rest]


UNINCLUDED = {k: v for k, v in RESPONSES_ASK.items() if k != "include"}
"""A reasoning model asked for no encrypted content: its reasoning items come by id alone."""


async def test_a_stored_reasoning_item_comes_back_by_reference_or_by_id_alone() -> None:
    async with FakeProvider(seed=SEED) as fp:
        for store in ({}, {"store": True}):
            ask = {**UNINCLUDED, **store}
            output = (await post(fp, "/v1/responses", ask)).json()["output"]
            assert output[0]["type"] == "reasoning" and "encrypted_content" not in output[0]
            for sent in (by_reference(output), output):
                taken = await post(fp, "/v1/responses", {**responses_history(sent), **store})
                assert (taken.status_code, taken.json()["status"]) == (200, "completed")
            call = output[1]
            refused = await post(fp, "/v1/responses", {**responses_history(output[1:]), **store})
            assert (refused.status_code, refused.json()) == (400, without_reasoning(call, output[0]))


async def test_a_reasoning_item_by_id_alone_is_not_found_unless_this_server_stored_it() -> None:
    """Stored by another server (or never), made for a request with `store: false`, or sent in one."""
    async with FakeProvider(seed=SEED) as fp:
        stored = (await post(fp, "/v1/responses", UNINCLUDED)).json()["output"]
        not_stored = await post(
            fp, "/v1/responses", {**UNINCLUDED, "input": "weather in Lima?", "store": False}
        )
        unstored = not_stored.json()["output"]
        foreign = [{**stored[0], "id": "rs_elsewhere"}, *stored[1:]]
        for output, store, item_id in [
            (foreign, True, "rs_elsewhere"),
            (unstored, True, unstored[0]["id"]),
            (unstored, False, unstored[0]["id"]),
            (stored, False, stored[0]["id"]),
        ]:
            for sent in (by_reference(output), output):
                refused = await post(fp, "/v1/responses", {**responses_history(sent), "store": store})
                assert (refused.status_code, refused.json()) == (404, not_found(item_id, store))
        signed = (await post(fp, "/v1/responses", {**RESPONSES_ASK, "store": False})).json()["output"]
        taken = await post(fp, "/v1/responses", {**responses_history(signed), "store": False})
        assert (taken.status_code, taken.json()["status"]) == (200, "completed")


async def test_a_reference_to_reasoning_must_be_followed_by_an_item_of_its_answer() -> None:
    async with FakeProvider(seed=SEED) as fp:
        output = (await post(fp, "/v1/responses", UNINCLUDED)).json()["output"]
        reference, *_ = by_reference(output)
        history = responses_history(output)
        user, *_ = history["input"]
        refused = await post(fp, "/v1/responses", {**history, "input": [user, reference, user]})
        assert (refused.status_code, refused.json()) == (400, orphan(output[0]["id"]))
