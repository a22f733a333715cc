"""The fold refuses a dispatch whose policy its adapter's provider is sure to refuse (`request_rules._policy`,
the adapter's rows of `adapters/policy_rules.py`): INVALID_EVENT with the rule's detail, no operation,
no manifest. Before, it was PREPARED, sent, and ended CANCELLED PROVIDER_REFUSED. An older version of the
same API, which does not send the key, prepares the same request as before; so does the demo's thinking
policy for each API it sends one to."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.demo.moving import MOVE_TARGETS, THINKING_MAX_OUTPUT_TOKENS, THINKING_POLICIES
from turnledger.model.events import DispatchRequested, DispatchState
from turnledger.model.reasons import ReasonCode

from .scenario import WEATHER, Conversation, DispatchDecision, ManifestIssued, Rejected

S = DispatchState
CLAUDE = "anthropic/claude-sonnet-4@2025-05"
BEDROCK_CLAUDE = "bedrock/anthropic.claude-sonnet-4@2025-05"
TOO_BIG = {"thinking": {"type": "enabled", "budget_tokens": 4096}}
BEDROCK_COLD = {
    "additional_model_request_fields": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    "temperature": 0.2,
}


def _request(
    c: Conversation, adapter: str, provider: str, model: str, policy: dict[str, Any], max_output_tokens: int
) -> None:
    c.apply(
        DispatchRequested(
            **c._common(),
            operation_id="op-1",
            adapter=adapter,
            provider=provider,
            model_revision=model,
            tools=(WEATHER,),
            max_output_tokens=max_output_tokens,
            policy=policy,
        )
    )


@pytest.mark.parametrize(
    ("adapter", "provider", "model", "policy", "detail"),
    [
        (
            "anthropic-messages@3",
            "anthropic",
            CLAUDE,
            TOO_BIG,
            "policy thinking.budget_tokens must be below maxOutputTokens (2048), not 4096",
        ),
        (
            "bedrock-converse@2",
            "bedrock",
            BEDROCK_CLAUDE,
            BEDROCK_COLD,
            "policy temperature must be 1 or left out beside additional_model_request_fields.thinking turned "
            "on, not 0.2",
        ),
        (
            "gemini@3",
            "google",
            "google/gemini-2.5-pro@2025-06",
            {"thinking_config": {"thinkingBudget": 1024, "thinkingLevel": "high"}},
            "policy thinking_config must set thinkingBudget or thinkingLevel, not both: thinkingBudget 1024 "
            "and thinkingLevel 'high'",
        ),
    ],
)
def test_a_policy_the_provider_refuses_is_refused_and_makes_no_operation(
    adapter: str, provider: str, model: str, policy: dict[str, Any], detail: str
) -> None:
    c = Conversation()
    c.user("hi")
    before = c.state.operations
    _request(c, adapter, provider, model, policy, 2048)
    [rejected] = c.of(Rejected)
    assert (rejected.operation_id, rejected.reason, rejected.event_type, rejected.detail) == (
        "op-1",
        ReasonCode.INVALID_EVENT,
        "DispatchRequested",
        detail,
    )
    assert c.of(DispatchDecision) == [] and c.of(ManifestIssued) == []
    assert c.state.operations == before


@pytest.mark.parametrize(
    ("adapter", "provider", "model", "policy"),
    [
        ("anthropic-messages@2", "anthropic", CLAUDE, TOO_BIG),
        ("bedrock-converse@1", "bedrock", BEDROCK_CLAUDE, BEDROCK_COLD),
        (
            "gemini@2",
            "google",
            "google/gemini-2.5-pro@2025-06",
            {"thinking_config": {"thinkingBudget": 1, "thinkingLevel": "low"}},
        ),
        ("openai-responses@2", "openai", "openai/o4-mini@2025-04", {"reasoning": {"effort": "maximal"}}),
    ],
)
def test_an_older_version_that_does_not_send_the_key_prepares_the_request(
    adapter: str, provider: str, model: str, policy: dict[str, Any]
) -> None:
    c = Conversation()
    c.user("hi")
    _request(c, adapter, provider, model, policy, 2048)
    assert c.of(Rejected) == []
    [decision] = c.of(DispatchDecision)
    assert (decision.state, decision.accepted, decision.reason) == (S.PREPARED, True, None)
    assert len(c.of(ManifestIssued)) == 1


@pytest.mark.parametrize("target", MOVE_TARGETS, ids=lambda t: t.api)
def test_the_demos_thinking_policies_are_prepared(target: Any) -> None:
    c = Conversation()
    c.user("hi")
    policy = THINKING_POLICIES.get(target.api, {})
    _request(c, target.adapter, target.provider, target.model_revision, policy, THINKING_MAX_OUTPUT_TOKENS)
    assert c.of(Rejected) == []
    [decision] = c.of(DispatchDecision)
    assert (decision.state, decision.accepted, decision.reason) == (S.PREPARED, True, None)
