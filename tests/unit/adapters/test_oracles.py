"""Invariant oracle (provider error texts) and SDK shape oracle over golden and generated conversations."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from tests.unit.adapters.conversations import GOLDEN_CONVERSATIONS, params_for
from tests.unit.adapters.invariants import CHECKERS
from tests.unit.adapters.sdk_oracle import ORACLES, ShapeError
from tests.unit.adapters.strategies import conversations
from turnledger.adapters.base import Rendered
from turnledger.adapters.registry import ADAPTERS, LATEST
from turnledger.model.graph import MessageSequence

CURRENT = [ADAPTERS[i] for i in sorted(LATEST.values())]


def _body(adapter_id: str, sequence: MessageSequence) -> dict:
    adapter = ADAPTERS[adapter_id]
    outcome = adapter.render(sequence, params_for(adapter.provider))
    assert isinstance(outcome, Rendered), outcome
    return orjson.loads(outcome.body)


@pytest.mark.parametrize("adapter_id", sorted(LATEST.values()))
@pytest.mark.parametrize("conversation", sorted(GOLDEN_CONVERSATIONS))
def test_golden_conversations_pass_both_oracles(adapter_id: str, conversation: str) -> None:
    body = _body(adapter_id, GOLDEN_CONVERSATIONS[conversation]())
    api = ADAPTERS[adapter_id].api
    assert CHECKERS[api](body) == []
    if api in ORACLES:
        ORACLES[api](body)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_generated_conversations_have_no_invariant_violation(sequence: MessageSequence) -> None:
    for adapter in CURRENT:
        outcome = adapter.render(sequence, params_for(adapter.provider))
        assert isinstance(outcome, Rendered)
        body = orjson.loads(outcome.body)
        assert CHECKERS[adapter.api](body) == [], (adapter.adapter_id, body)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_generated_conversations_match_sdk_types(sequence: MessageSequence) -> None:
    for adapter in CURRENT:
        if adapter.api not in ORACLES:
            continue
        outcome = adapter.render(sequence, params_for(adapter.provider))
        assert isinstance(outcome, Rendered)
        ORACLES[adapter.api](orjson.loads(outcome.body))


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_every_call_answered_exactly_once_in_every_api(sequence: MessageSequence) -> None:
    call_ids = sorted(b.call_id for b in sequence.blocks if b.kind == "tool_call")
    chat = _body("openai-chat@1", sequence)
    assert sorted(m["tool_call_id"] for m in chat["messages"] if m["role"] == "tool") == call_ids
    responses = _body("openai-responses@1", sequence)
    assert sorted(i["call_id"] for i in responses["input"] if i["type"] == "function_call_output") == call_ids
    anthropic = _body("anthropic-messages@1", sequence)
    got = [
        p["tool_use_id"] for m in anthropic["messages"] for p in m["content"] if p["type"] == "tool_result"
    ]
    assert sorted(got) == call_ids
    gemini = _body("gemini@1", sequence)
    got = [
        p["functionResponse"]["id"] for c in gemini["contents"] for p in c["parts"] if "functionResponse" in p
    ]
    assert sorted(got) == call_ids


# ---- the oracles themselves must bite ------------------------------------------------


def test_invariant_checkers_catch_broken_requests() -> None:
    chat = _body("openai-chat@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    broken = dict(chat, messages=[m for m in chat["messages"] if m.get("tool_call_id") != "call_2_2"])
    assert any("did not have response messages" in v for v in CHECKERS["openai-chat"](broken))
    orphan = dict(chat, messages=[m for m in chat["messages"] if not m.get("tool_calls")])
    assert any("preceeding message with 'tool_calls'" in v for v in CHECKERS["openai-chat"](orphan))

    anth = _body("anthropic-messages@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    results_msg = anth["messages"][2]
    split = [
        *anth["messages"][:2],
        {"role": "user", "content": results_msg["content"][:1]},
        {"role": "user", "content": results_msg["content"][1:]},
    ]
    assert CHECKERS["anthropic-messages"](dict(anth, messages=split))
    text_first = dict(results_msg, content=results_msg["content"][::-1])
    assert any(
        "text before tool_result" in v
        for v in CHECKERS["anthropic-messages"](dict(anth, messages=[*anth["messages"][:2], text_first]))
    )

    gem = _body("gemini@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    responses = gem["contents"][2]
    gem_split = [*gem["contents"][:2], dict(responses, parts=responses["parts"][:1])]
    assert any(
        "number of function response parts" in v for v in CHECKERS["gemini"](dict(gem, contents=gem_split))
    )

    resp = _body("openai-responses@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    no_out = [i for i in resp["input"] if i.get("call_id") != "call_2_1" or i["type"] == "function_call"]
    assert any("No tool output found" in v for v in CHECKERS["openai-responses"](dict(resp, input=no_out)))

    bed = _body("bedrock-converse@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    res = bed["messages"][2]
    bed_split = [
        *bed["messages"][:2],
        dict(res, content=res["content"][:1]),
        dict(res, content=res["content"][1:]),
    ]
    found = CHECKERS["bedrock-converse"](dict(bed, messages=bed_split))
    assert any("Expected toolResult blocks" in v for v in found)


def test_sdk_oracle_catches_shape_errors() -> None:
    anth = _body("anthropic-messages@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    bad = orjson.loads(orjson.dumps(anth))
    del bad["messages"][2]["content"][0]["tool_use_id"]
    with pytest.raises(ShapeError):
        ORACLES["anthropic-messages"](bad)
    extra = dict(anth, temperature=0.3)  # a key the pinned SDK type does not know: dropped → caught
    with pytest.raises(ShapeError):
        ORACLES["anthropic-messages"](extra)
    chat = _body("openai-chat@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    bad_chat = orjson.loads(orjson.dumps(chat))
    bad_chat["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    with pytest.raises(ShapeError):
        ORACLES["openai-chat"](bad_chat)
    coerced = dict(chat, max_completion_tokens="1600")
    with pytest.raises(ShapeError):
        ORACLES["openai-chat"](coerced)
    gem = _body("gemini@1", GOLDEN_CONVERSATIONS["parallel_tools"]())
    bad_gem = orjson.loads(orjson.dumps(gem))
    bad_gem["contents"][0]["parts"][0]["bogus"] = 1
    with pytest.raises(ShapeError):
        ORACLES["gemini"](bad_gem)
