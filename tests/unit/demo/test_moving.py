"""The demo's conversations that move between APIs (`turnledger/demo/moving.py`): which conversations move,
the API each of their dispatches goes to, and what each API is asked so that it thinks."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.unit.adapters.conversations import TOOLS, Conversation
from turnledger.adapters.base import DispatchParams
from turnledger.adapters.profiles import api_of
from turnledger.adapters.registry import LATEST, get_adapter
from turnledger.demo.moving import (
    MOVE_TARGETS,
    THINKING_MAX_OUTPUT_TOKENS,
    THINKING_POLICIES,
    move_target,
    moves,
    thinking_policy,
)
from turnledger.fake_provider import anthropic_messages, bedrock, gemini, openai_chat, openai_responses
from turnledger.gateway.client import stream_policy

APIS = [t.api for t in MOVE_TARGETS]
FAKE_APIS = {
    spec.name: spec
    for spec in (
        anthropic_messages.SPEC,
        openai_chat.SPEC,
        openai_responses.SPEC,
        gemini.SPEC,
        bedrock.SPEC,
    )
}


def route(index: int, dispatches: int = 5) -> list[str]:
    return [move_target(index, n).api for n in range(dispatches)]


# ------------------------------------------------------------------ where each dispatch goes


def test_the_targets_are_one_of_each_api_with_its_current_adapter() -> None:
    assert sorted(APIS) == sorted(LATEST)
    assert [t.adapter for t in MOVE_TARGETS] == [LATEST[api] for api in APIS]
    assert all(api_of(t.adapter) == t.api for t in MOVE_TARGETS)


def test_a_moving_conversation_steps_through_every_api_before_one_comes_again() -> None:
    assert route(0) == ["anthropic-messages", "openai-responses", "gemini", "bedrock-converse", "openai-chat"]
    assert route(1) == ["openai-responses", "bedrock-converse", "anthropic-messages", "gemini", "openai-chat"]
    assert route(2) == ["gemini", "anthropic-messages", "bedrock-converse", "openai-responses", "openai-chat"]
    assert route(3) == ["bedrock-converse", "gemini", "openai-responses", "anthropic-messages", "openai-chat"]
    assert route(4, 6) == [
        "openai-chat", "anthropic-messages", "openai-responses", "gemini", "bedrock-converse", "openai-chat",
    ]  # fmt: skip


@pytest.mark.parametrize("index", range(20))
def test_every_dispatch_of_a_moving_conversation_goes_to_another_api(index: int) -> None:
    apis = route(index, 11)
    assert all(a != b for a, b in itertools.pairwise(apis))
    assert sorted(apis[:5]) == sorted(APIS)


def test_four_moving_conversations_in_a_row_cross_all_twenty_ordered_pairs() -> None:
    for first in range(8):
        pairs = {pair for i in range(first, first + 4) for pair in itertools.pairwise(route(i, 6))}
        assert len(pairs) == 20, first


def test_the_route_is_a_function_of_the_index_alone() -> None:
    assert route(7, 4) == route(7, 4) == route(27, 4)
    assert route(7, 4) != route(8, 4)


# ------------------------------------------------------------------ which conversations move


def test_a_conversation_moves_by_a_seeded_draw_of_its_own() -> None:
    """The draw is keyed `seed:move:index`, as the other rates' are: the same run moves the same ones."""
    assert [i for i in range(24) if moves(7, i, 0.2)] == [2, 3, 5, 7, 11, 12, 19]
    assert [i for i in range(24) if moves(8, i, 0.2)] != [2, 3, 5, 7, 11, 12, 19]
    assert not any(moves(7, i, 0.0) for i in range(100))
    assert all(moves(7, i, 1.0) for i in range(100))


# ------------------------------------------------------------------ what each API is asked to think


def test_the_thinking_policies_per_api() -> None:
    assert {api: thinking_policy(api) for api in APIS} == {
        "anthropic-messages": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        "openai-responses": {
            "reasoning": {"effort": "low", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
        },
        "gemini": {"thinking_config": {"includeThoughts": True}},
        "bedrock-converse": {
            "additional_model_request_fields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}
        },
        "openai-chat": {},
    }


def test_a_thinking_dispatch_has_room_above_claude_s_budget() -> None:
    """Claude refuses `max_tokens` not above `budget_tokens` (at least 1,024), on Anthropic's API and on
    Bedrock."""
    budgets = [
        THINKING_POLICIES["anthropic-messages"]["thinking"]["budget_tokens"],
        THINKING_POLICIES["bedrock-converse"]["additional_model_request_fields"]["thinking"]["budget_tokens"],
    ]
    assert budgets == [1024, 1024]
    assert max(budgets) < THINKING_MAX_OUTPUT_TOKENS


def test_a_thinking_policy_is_a_fresh_copy() -> None:
    policy = thinking_policy("openai-responses")
    policy["include"].append("x")
    policy["reasoning"]["effort"] = "high"
    assert THINKING_POLICIES["openai-responses"] == {
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
    }


def _asked(api: str, policy: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The current adapter's request body with `policy` (and the stream policy, as the demo sends it), and
    whether the fake provider reads it as a request to think."""
    target = next(t for t in MOVE_TARGETS if t.api == api)
    c = Conversation("moving")
    c.next_turn().user("weather in Paris?")
    params = DispatchParams(
        model_revision=target.model_revision,
        tools=TOOLS,
        max_output_tokens=512,
        policy={**stream_policy(target.adapter), **policy},
    )
    body = get_adapter(target.adapter).build(c.build(), params)
    assert isinstance(body, dict)
    return body, FAKE_APIS[api].parse(body).thinking


@pytest.mark.parametrize("api", APIS)
def test_each_api_thinks_exactly_when_the_demo_asks_it_to(api: str) -> None:
    """A policy key the current adapter does not pass would be dropped without a word: the fake provider,
    which reads a request as the API does, is what says whether the request asks to think."""
    _, thinks = _asked(api, thinking_policy(api))
    assert thinks is (api != "openai-chat")


def test_the_responses_request_asks_for_the_reasoning_items_content() -> None:
    body, _ = _asked("openai-responses", thinking_policy("openai-responses"))
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]


def test_the_gemini_request_asks_for_its_thoughts() -> None:
    body, _ = _asked("gemini", thinking_policy("gemini"))
    assert body["generationConfig"] == {"maxOutputTokens": 512, "thinkingConfig": {"includeThoughts": True}}


def test_the_bedrock_request_asks_claude_to_think() -> None:
    """bedrock-converse@2 passes the policy's `additional_model_request_fields` at the body's root
    (version 1 dropped it)."""
    body, _ = _asked("bedrock-converse", thinking_policy("bedrock-converse"))
    assert body["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert body["inferenceConfig"] == {"maxTokens": 512}


def test_the_anthropic_request_asks_to_think() -> None:
    """anthropic-messages@3 passes the policy's `thinking` (versions before it dropped it)."""
    body, _ = _asked("anthropic-messages", thinking_policy("anthropic-messages"))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
