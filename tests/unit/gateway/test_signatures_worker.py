"""Reasoning signatures through the worker, the real fold and the fake provider, which checks every
signature it is sent as the providers do (fake_provider/signatures.py): a conversation answered with
thinking and tool calls by one API and continued on another commits, and its second request holds
none of the first API's signatures; continued on the same API, it holds them all; a Responses
reasoning item goes back under its rs_ id with its encrypted content, before its call, which the
provider refuses without it; one without encrypted content goes back (openai-responses@4) as a
reference to its rs_ id when the request is stored, and a request that is not stored asks for the
encrypted content; an answer another API made without reasoning goes to a Gemini that
requires signatures as Gemini 3 does (`FakeProvider(gemini_strict_signatures=True)`) with Gemini's
stand-in on its first call; gemini@3 asked, by its `thinking_config` policy, for Gemini's thoughts gets
them, and sends back the signature that came with them; a tool loop another API opened, or Claude without
thinking, continues on anthropic-messages@3 with a thinking policy, which sends that request without
`thinking` (with it, the fake refuses the request, as Anthropic does); on bedrock-converse@2 alike, which
leaves out `additionalModelRequestFields.thinking` (the fake Bedrock refuses it with a
ValidationException)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

import pytest

from tests.unit.fake_provider.test_signatures import post
from tests.unit.gateway.provider_harness import Harness, harness
from turnledger.adapters.anthropic_messages import ANTHROPIC_MESSAGES_V3, RULES_V3
from turnledger.adapters.bedrock_converse import BEDROCK_CONVERSE_V2
from turnledger.adapters.bedrock_converse import RULES_V2 as BEDROCK_RULES_V2
from turnledger.adapters.profiles import api_of
from turnledger.fake_provider import bedrock, gemini
from turnledger.fake_provider.anthropic_messages import LOOP_WITHOUT_THINKING, unthought_loop
from turnledger.fake_provider.gemini import MISSING_SIGNATURE, unsigned_step
from turnledger.fake_provider.signatures import Signed
from turnledger.model.events import CommittedTurn, DispatchState
from turnledger.model.graph import Block, BlockKind
from turnledger.model.reasons import ReasonCode

S = DispatchState

REASONING: Mapping[str, Any] = {"reasoning": {"effort": "low"}, "include": ["reasoning.encrypted_content"]}
"""The dispatch policy of a Responses reasoning model whose reasoning items can be sent back."""


def policy_of(adapter: str) -> Mapping[str, Any] | None:
    return REASONING if api_of(adapter) == "openai-responses" else None


async def first_answer(h: Harness, adapter: str) -> tuple[CommittedTurn, list[Block]]:
    """The committed first answer (thinking and tool calls) and its signed blocks."""
    await h.converse("c1", adapter, policy=policy_of(adapter))
    assert (await h.settled("c1", "op-1")).state == S.COMMITTED
    [answer] = h.assistant_turns("c1")
    assert BlockKind.THINKING in [b.kind for b in answer.blocks]
    assert BlockKind.TOOL_CALL in [b.kind for b in answer.blocks]
    signed = [b for b in answer.blocks if b.signature]
    assert signed and {b.signed_by for b in signed} == {api_of(adapter)}
    return answer, signed


async def continued(h: Harness, adapter: str, answer: CommittedTurn) -> bytes:
    """Continue the conversation on `adapter`: it commits an answer naming every tool result, at its
    first request; the bytes of that request."""
    await h.request("c1", adapter, "op-2", policy=policy_of(adapter))
    second = await h.settled("c1", "op-2")
    assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
    [text] = [b for b in h.assistant_turns("c1")[-1].blocks if b.kind == BlockKind.TEXT]
    calls = [b for b in answer.blocks if b.kind == BlockKind.TOOL_CALL]
    assert text.text is not None and text.text.count(" returned: ") == len(calls)
    _, second_post = h.posts()  # one request each: nothing refused, nothing sent again
    assert h.fp.auth_failures == []
    return second_post


MOVES = [
    ("anthropic-messages@2", "gemini@2"),
    ("anthropic-messages@2", "bedrock-converse@1"),
    ("bedrock-converse@1", "anthropic-messages@2"),
    ("openai-responses@3", "anthropic-messages@2"),
    ("openai-responses@3", "gemini@2"),
    ("gemini@2", "anthropic-messages@2"),
]
"""(first API, next API): each but the last sent the first API's signature on before 37fe5bf, and
the next API refused it; Gemini signs only calls and text, which Anthropic sends unsigned anyway."""


@pytest.mark.parametrize(("first", "then"), MOVES)
async def test_a_conversation_moved_to_another_api_sends_it_none_of_the_first_api_s_signatures(
    first: str, then: str
) -> None:
    async for h in harness(tools_run=True, thinking=True):
        answer, signed = await first_answer(h, first)
        body = await continued(h, then, answer)
        assert [b.signature for b in signed if b.signature and b.signature.encode() in body] == []


STAYS = ["anthropic-messages@2", "gemini@2", "bedrock-converse@1"]


@pytest.mark.parametrize("adapter", STAYS)
async def test_a_conversation_that_stays_on_its_api_sends_every_signature_back(adapter: str) -> None:
    """The provider takes them: the worker kept each signature, and the thinking text it signs, intact."""
    async for h in harness(tools_run=True, thinking=True):
        answer, signed = await first_answer(h, adapter)
        body = await continued(h, adapter, answer)
        assert all(b.signature and b.signature.encode() in body for b in signed)


async def test_a_responses_reasoning_item_goes_back_under_its_rs_id_before_its_call() -> None:
    async for h in harness(tools_run=True):
        answer, signed = await first_answer(h, "openai-responses@3")
        [thinking] = signed
        assert thinking.kind == BlockKind.THINKING and thinking.item_id is not None
        assert thinking.item_id.startswith("rs_") and thinking.signature is not None
        assert thinking.signature.startswith("gAAAAABo")
        first_call = next(b for b in answer.blocks if b.kind == BlockKind.TOOL_CALL)
        body = json.loads(await continued(h, "openai-responses@3", answer))
        assert (body["reasoning"], body["include"]) == (REASONING["reasoning"], REASONING["include"])
        items = body["input"]
        [n] = [i for i, item in enumerate(items) if item["type"] == "reasoning"]
        assert items[n] == {
            "type": "reasoning",
            "id": thinking.item_id,
            "summary": [{"type": "summary_text", "text": thinking.text}],
            "encrypted_content": thinking.signature,
        }
        assert (items[n + 1]["type"], items[n + 1]["call_id"]) == ("function_call", first_call.call_id)
        alone = await post(h.fp, "/v1/responses", {**body, "input": items[:n] + items[n + 1 :]})
        assert alone.status_code == 400 and needs(thinking.item_id, alone.json()["error"]["message"])


def needs(reasoning_id: str, message: str) -> bool:
    """Are these the provider's words on a call sent back without the reasoning item its answer began
    with? (The call's fc_ item id is the provider's, which the graph does not keep.)"""
    words = f"of type 'function_call' was provided without its required 'reasoning' item: '{reasoning_id}'."
    return re.fullmatch(rf"Item 'fc_\w{{40}}' {re.escape(words)}", message) is not None


async def test_a_responses_call_whose_reasoning_cannot_go_back_is_refused_and_not_sent_again() -> None:
    """Without `include`, a reasoning item comes without its encrypted content, so openai-responses@3
    cannot send it back (adapters/openai_responses.py); its calls go back alone, and the provider
    refuses them as the real API does."""
    async for h in harness(tools_run=True):
        policy = {"reasoning": REASONING["reasoning"]}
        await h.converse("c1", "openai-responses@3", policy=policy)
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        [thinking] = [b for b in h.assistant_turns("c1")[0].blocks if b.kind == BlockKind.THINKING]
        assert thinking.signature is None and thinking.item_id is not None
        await h.request("c1", "openai-responses@3", "op-2", policy=policy)
        second = await h.settled("c1", "op-2")
        assert (second.state, second.reason, second.attempt_generation) == (
            S.CANCELLED,
            ReasonCode.PROVIDER_REFUSED,
            1,
        )
        assert second.detail == (
            "worker gave up: the provider refused the request (HTTP 400 invalid_request_error); "
            "not sent again: it would be too"
        )
        _, sent = h.posts()
        body = json.loads(sent)
        assert [i["type"] for i in body["input"]].count("reasoning") == 0
        again = await post(h.fp, "/v1/responses", body)
        assert again.status_code == 400 and needs(thinking.item_id, again.json()["error"]["message"])


async def test_openai_responses_4_refers_to_that_reasoning_item_by_its_rs_id_and_the_call_is_taken() -> None:
    """The same conversation on openai-responses@4: the request is stored (the API's default), so the
    reasoning item goes back as a reference to its rs_ id, which the provider finds; the answer
    commits at its first request."""
    async for h in harness(tools_run=True):
        policy = {"reasoning": REASONING["reasoning"]}
        await h.converse("c1", "openai-responses@4", policy=policy)
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        answer = h.assistant_turns("c1")[0]
        [thinking] = [b for b in answer.blocks if b.kind == BlockKind.THINKING]
        assert thinking.signature is None and thinking.item_id is not None
        await h.request("c1", "openai-responses@4", "op-2", policy=policy)
        second = await h.settled("c1", "op-2")
        assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
        first_post, sent = h.posts()
        assert "include" not in json.loads(first_post)
        items = json.loads(sent)["input"]
        [n] = [i for i, item in enumerate(items) if item["type"] == "item_reference"]
        first_call = next(b for b in answer.blocks if b.kind == BlockKind.TOOL_CALL)
        assert items[n] == {"type": "item_reference", "id": thinking.item_id}
        assert (items[n + 1]["type"], items[n + 1]["call_id"]) == ("function_call", first_call.call_id)
        assert [i["type"] for i in items].count("reasoning") == 0


async def test_openai_responses_4_asks_for_the_encrypted_content_of_a_request_that_is_not_stored() -> None:
    """With `store: false` nothing can be referred to: @4 adds `include`, so the answer's reasoning item
    comes with its encrypted content and goes back whole; @3 sends the policy as it is, and the next
    request is refused. Neither request is in background mode, which would keep the response (the
    stream policy leaves it out for `store: false`; the fake refuses the two together)."""
    async for h in harness(tools_run=True):
        policy = {"reasoning": REASONING["reasoning"], "store": False}
        await h.converse("c1", "openai-responses@4", policy=policy)
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        answer = h.assistant_turns("c1")[0]
        [thinking] = [b for b in answer.blocks if b.kind == BlockKind.THINKING]
        assert thinking.signature is not None and thinking.signature.startswith("gAAAAABo")
        await h.request("c1", "openai-responses@4", "op-2", policy=policy)
        second = await h.settled("c1", "op-2")
        assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
        first_post, sent = h.posts()
        for request in (first_post, sent):
            body = json.loads(request)
            assert (body["stream"], body["store"], "background" in body) == (True, False, False)
        assert json.loads(first_post)["include"] == REASONING["include"]
        [reasoning] = [i for i in json.loads(sent)["input"] if i["type"] == "reasoning"]
        assert (reasoning["id"], reasoning["encrypted_content"]) == (thinking.item_id, thinking.signature)
    async for h in harness(tools_run=True):
        await h.converse("c1", "openai-responses@3", policy=policy)
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        await h.request("c1", "openai-responses@3", "op-2", policy=policy)
        second = await h.settled("c1", "op-2")
        assert (second.state, second.reason) == (S.CANCELLED, ReasonCode.PROVIDER_REFUSED)


UNSIGNED = ["anthropic-messages@2", "openai-chat@2"]
"""APIs whose answer here has tool calls and no signature: Claude without thinking, OpenAI Chat."""


async def unsigned_answer(h: Harness, adapter: str) -> CommittedTurn:
    """The committed first answer: tool calls, and no signature anywhere."""
    await h.converse("c1", adapter)
    assert (await h.settled("c1", "op-1")).state == S.COMMITTED
    [answer] = h.assistant_turns("c1")
    assert BlockKind.TOOL_CALL in [b.kind for b in answer.blocks]
    assert [b.signature for b in answer.blocks] == [None] * len(answer.blocks)
    return answer


@pytest.mark.parametrize("first", UNSIGNED)
async def test_an_answer_made_without_reasoning_goes_to_gemini_3_with_the_stand_in_on_its_first_call(
    first: str,
) -> None:
    async for h in harness(tools_run=True, gemini_strict_signatures=True):
        answer = await unsigned_answer(h, first)
        body = json.loads(await continued(h, "gemini@3", answer))
        [step] = [content for content in body["contents"] if content["role"] == "model"]
        calls = [part for part in step["parts"] if "functionCall" in part]
        assert len(calls) == len([b for b in answer.blocks if b.kind == BlockKind.TOOL_CALL])
        first_stood_in = ["skip_thought_signature_validator"] + [None] * (len(calls) - 1)
        assert [part.get("thoughtSignature") for part in calls] == first_stood_in


@pytest.mark.parametrize("first", UNSIGNED)
async def test_gemini_2_sends_that_first_call_unsigned_and_gemini_3_refuses_it(first: str) -> None:
    async for h in harness(tools_run=True, gemini_strict_signatures=True):
        answer = await unsigned_answer(h, first)
        await h.request("c1", "gemini@2", "op-2")
        final = await h.settled("c1", "op-2")
        assert (final.state, final.reason) == (S.CANCELLED, ReasonCode.PROVIDER_REFUSED)
        assert final.detail == (
            "worker gave up: the provider refused the request (HTTP 400 INVALID_ARGUMENT); "
            "not sent again: it would be too"
        )
        _, refused = h.posts()
        first_call = next(b for b in answer.blocks if b.kind == BlockKind.TOOL_CALL)
        refusal = unsigned_step(json.loads(refused))
        assert refusal is not None
        assert refusal.message == MISSING_SIGNATURE.format(name=first_call.tool_name, position=2)


GEMINI_THOUGHTS: Mapping[str, Any] = {"thinking_config": {"includeThoughts": True}}
"""The dispatch policy that asks gemini@3 for Gemini's thoughts (generationConfig.thinkingConfig)."""


async def test_gemini_3_asked_for_its_thoughts_commits_them_and_sends_their_signature_back() -> None:
    """The fake thinks only because the request asks (the harness does not tell it to). Gemini signs the
    answer's first call, not its thought parts: the thinking block commits unsigned and is not sent back
    (adapters/gemini.py drops a thought without a signature), the call's signature is, on its part, and
    the provider takes it (the second request commits at its first attempt)."""
    async for h in harness(tools_run=True, gemini_strict_signatures=True):
        await h.converse("c1", "gemini@3", policy=GEMINI_THOUGHTS)
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        [answer] = h.assistant_turns("c1")
        kinds = [b.kind for b in answer.blocks]
        assert kinds == [BlockKind.THINKING] + [BlockKind.TOOL_CALL] * (len(kinds) - 1)
        assert len(kinds) >= 2 and answer.blocks[0].text and answer.blocks[0].signature is None
        call = answer.blocks[1]
        assert call.signed_by == "gemini" and call.signature is not None
        assert gemini.SIGNATURES.minted(h.fp.seed, Signed("x", call.signature, on_call=True))
        await h.request("c1", "gemini@3", "op-2", policy=GEMINI_THOUGHTS)
        second = await h.settled("c1", "op-2")
        assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
        first_post, second_post = h.posts()
        assert json.loads(first_post)["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
        body = json.loads(second_post)
        assert body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
        [step] = [content for content in body["contents"] if content["role"] == "model"]
        assert [part.get("thoughtSignature") for part in step["parts"]] == [call.signature] + [None] * (
            len(kinds) - 2
        )
        assert [part["functionCall"]["name"] for part in step["parts"]] == [
            b.tool_name for b in answer.blocks[1:]
        ]
        assert BlockKind.THINKING in [b.kind for b in h.assistant_turns("c1")[-1].blocks]


THINKING: Mapping[str, Any] = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
"""The dispatch policy of a Claude asked to think (anthropic-messages@3 sends it): the least budget Claude
takes, below the output budget (`THINKING_OUTPUT`)."""
THINKING_OUTPUT = 2048

LOOPS_OPENED_WITHOUT_CLAUDE_S_THINKING = [
    ("gemini@3", True),  # Gemini thinks, signs its call: nothing Anthropic takes
    ("openai-chat@2", False),
    ("anthropic-messages@3", False),  # Claude asked without thinking
]


async def opened_elsewhere(h: Harness, first: str) -> CommittedTurn:
    """The first answer, tool calls and no thinking block Anthropic signed; its results given."""
    await h.converse("c1", first)
    assert (await h.settled("c1", "op-1")).state == S.COMMITTED
    [answer] = h.assistant_turns("c1")
    assert BlockKind.TOOL_CALL in [b.kind for b in answer.blocks]
    assert not [b for b in answer.blocks if b.signature and b.signed_by == "anthropic-messages"]
    return answer


@pytest.mark.parametrize(("first", "thinks"), LOOPS_OPENED_WITHOUT_CLAUDE_S_THINKING)
async def test_a_loop_opened_without_claude_s_thinking_continues_on_anthropic_3_without_thinking(
    first: str, thinks: bool
) -> None:
    """anthropic-messages@3 leaves `thinking` out of that request, and it commits at its first try; the
    same body with `thinking` is what the provider refuses."""
    async for h in harness(tools_run=True, thinking=thinks):
        answer = await opened_elsewhere(h, first)
        await h.request(
            "c1", "anthropic-messages@3", "op-2", policy=THINKING, max_output_tokens=THINKING_OUTPUT
        )
        second = await h.settled("c1", "op-2")
        assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
        [text] = [b for b in h.assistant_turns("c1")[-1].blocks if b.kind == BlockKind.TEXT]
        calls = [b for b in answer.blocks if b.kind == BlockKind.TOOL_CALL]
        assert text.text is not None and text.text.count(" returned: ") == len(calls)
        _, sent = h.posts()
        body = json.loads(sent)
        assert "thinking" not in body
        assert body["messages"][1]["content"][0]["type"] == "tool_use"
        refusal = unthought_loop({**body, **THINKING})
        assert refusal is not None
        assert refusal.message == LOOP_WITHOUT_THINKING.format(index=1, found="tool_use")


@pytest.mark.parametrize(("first", "thinks"), LOOPS_OPENED_WITHOUT_CLAUDE_S_THINKING)
async def test_without_the_rule_that_request_goes_with_thinking_and_is_refused(
    first: str, thinks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anthropic-messages@3 with the rule taken out (`policy_without_loop_thinking` empty): the request
    turns thinking on, the provider refuses it, and the operation ends CANCELLED PROVIDER_REFUSED, not
    sent again: every request of that loop would be refused alike."""
    unruled = dataclasses.replace(RULES_V3, policy_without_loop_thinking=())
    monkeypatch.setattr(ANTHROPIC_MESSAGES_V3, "rules", unruled)
    async for h in harness(tools_run=True, thinking=thinks):
        await opened_elsewhere(h, first)
        await h.request(
            "c1", "anthropic-messages@3", "op-2", policy=THINKING, max_output_tokens=THINKING_OUTPUT
        )
        final = await h.settled("c1", "op-2")
        assert (final.state, final.reason, final.attempt_generation) == (
            S.CANCELLED,
            ReasonCode.PROVIDER_REFUSED,
            1,
        )
        assert final.detail == (
            "worker gave up: the provider refused the request (HTTP 400 invalid_request_error); "
            "not sent again: it would be too"
        )
        _, refused = h.posts()
        body = json.loads(refused)
        assert body["thinking"] == THINKING["thinking"]
        refusal = unthought_loop(body)
        assert refusal is not None
        assert refusal.message == LOOP_WITHOUT_THINKING.format(index=1, found="tool_use")


async def test_a_loop_claude_opened_with_thinking_keeps_thinking_on_anthropic_3() -> None:
    """Its thinking goes back signed, so the request keeps `thinking`, and Claude thinks again."""
    async for h in harness(tools_run=True):
        await h.converse("c1", "anthropic-messages@3", policy=THINKING, max_output_tokens=THINKING_OUTPUT)
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        [answer] = h.assistant_turns("c1")
        assert answer.blocks[0].kind == BlockKind.THINKING
        assert answer.blocks[0].signed_by == "anthropic-messages"
        await h.request(
            "c1", "anthropic-messages@3", "op-2", policy=THINKING, max_output_tokens=THINKING_OUTPUT
        )
        second = await h.settled("c1", "op-2")
        assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
        _, sent = h.posts()
        body = json.loads(sent)
        assert body["thinking"] == THINKING["thinking"]
        assert body["messages"][1]["content"][0]["signature"] == answer.blocks[0].signature
        assert h.assistant_turns("c1")[-1].blocks[0].kind == BlockKind.THINKING


BEDROCK_THINKING: Mapping[str, Any] = {
    "additional_model_request_fields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}
}
"""The dispatch policy of a Claude on Bedrock asked to think (bedrock-converse@2 sends it)."""

BEDROCK_REFUSAL = "The model returned the following errors: " + LOOP_WITHOUT_THINKING.format(
    index=1, found="tool_use"
)


async def test_a_loop_another_api_opened_continues_on_bedrock_2_without_thinking() -> None:
    """bedrock-converse@2 leaves `additionalModelRequestFields.thinking` out of that request, and it
    commits at its first try; the same body with it is what the provider refuses."""
    async for h in harness(tools_run=True):
        answer = await opened_elsewhere(h, "openai-chat@2")
        await h.request(
            "c1", "bedrock-converse@2", "op-2", policy=BEDROCK_THINKING, max_output_tokens=THINKING_OUTPUT
        )
        second = await h.settled("c1", "op-2")
        assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
        [text] = [b for b in h.assistant_turns("c1")[-1].blocks if b.kind == BlockKind.TEXT]
        calls = [b for b in answer.blocks if b.kind == BlockKind.TOOL_CALL]
        assert text.text is not None and text.text.count(" returned: ") == len(calls)
        _, sent = h.posts()
        body = json.loads(sent)
        assert "additionalModelRequestFields" not in body
        assert list(body["messages"][1]["content"][0]) == ["toolUse"]
        fields = {"additionalModelRequestFields": BEDROCK_THINKING["additional_model_request_fields"]}
        refusal = bedrock.unthought_loop({**body, **fields})
        assert refusal is not None and refusal.message == BEDROCK_REFUSAL


async def test_without_the_rule_bedrock_2_sends_thinking_and_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bedrock-converse@2 with the rule taken out: the request turns thinking on, Bedrock refuses it (a
    ValidationException), and the operation ends CANCELLED PROVIDER_REFUSED, not sent again."""
    unruled = dataclasses.replace(BEDROCK_RULES_V2, policy_without_loop_thinking=())
    monkeypatch.setattr(BEDROCK_CONVERSE_V2, "rules", unruled)
    async for h in harness(tools_run=True):
        await opened_elsewhere(h, "openai-chat@2")
        await h.request(
            "c1", "bedrock-converse@2", "op-2", policy=BEDROCK_THINKING, max_output_tokens=THINKING_OUTPUT
        )
        final = await h.settled("c1", "op-2")
        assert (final.state, final.reason, final.attempt_generation) == (
            S.CANCELLED,
            ReasonCode.PROVIDER_REFUSED,
            1,
        )
        assert final.detail == (
            "worker gave up: the provider refused the request (HTTP 400 ValidationException); "
            "not sent again: it would be too"
        )
        _, refused = h.posts()
        body = json.loads(refused)
        assert body["additionalModelRequestFields"] == BEDROCK_THINKING["additional_model_request_fields"]
        refusal = bedrock.unthought_loop(body)
        assert refusal is not None and refusal.message == BEDROCK_REFUSAL


async def test_a_loop_claude_opened_with_thinking_on_bedrock_keeps_thinking_on_bedrock_2() -> None:
    """Its reasoning goes back signed, so the request keeps `thinking`, and Claude thinks again."""
    async for h in harness(tools_run=True):
        await h.converse(
            "c1", "bedrock-converse@2", policy=BEDROCK_THINKING, max_output_tokens=THINKING_OUTPUT
        )
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        [answer] = h.assistant_turns("c1")
        assert answer.blocks[0].kind == BlockKind.THINKING
        assert answer.blocks[0].signed_by == "bedrock-converse"
        await h.request(
            "c1", "bedrock-converse@2", "op-2", policy=BEDROCK_THINKING, max_output_tokens=THINKING_OUTPUT
        )
        second = await h.settled("c1", "op-2")
        assert (second.state, second.attempt_generation) == (S.COMMITTED, 1), second.detail
        _, sent = h.posts()
        body = json.loads(sent)
        assert body["additionalModelRequestFields"] == BEDROCK_THINKING["additional_model_request_fields"]
        reasoning = body["messages"][1]["content"][0]["reasoningContent"]["reasoningText"]
        assert reasoning["signature"] == answer.blocks[0].signature
        assert h.assistant_turns("c1")[-1].blocks[0].kind == BlockKind.THINKING
