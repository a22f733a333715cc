"""`adapters/policy_rules.py`: each row at its accepted and its refused edge, with the exact detail; the
rows each adapter version judges with; and an adapter's digest, which the rows stay out of."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.adapters import policy_rules as pr
from turnledger.adapters.policy_rules import (
    BEDROCK_CLAUDE_RULES,
    CLAUDE_RULES,
    GEMINI_RULES,
    RULES,
    policy_refusal,
    rules_named,
)
from turnledger.adapters.registry import ADAPTERS, LATEST
from turnledger.demo.moving import THINKING_MAX_OUTPUT_TOKENS, THINKING_POLICIES

OUT = 2048
"""The output budget of every case below but the budget's own."""


def _thinking(**fields: Any) -> dict[str, Any]:
    return {"thinking": {"type": "enabled", **fields}}


def _bedrock(thinking: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "additional_model_request_fields": {
            "thinking": {"type": "enabled", "budget_tokens": 1024} if thinking is None else thinking
        },
        **fields,
    }


BESIDE = "beside additional_model_request_fields.thinking turned on"

CASES: list[tuple[str, int, dict[str, Any], str | None]] = [
    # (rule, maxOutputTokens, policy, detail or None)
    ("claude_thinking_budget_floor", OUT, _thinking(budget_tokens=1024), None),
    ("claude_thinking_budget_floor", OUT, {"thinking": {"type": "adaptive"}}, None),
    ("claude_thinking_budget_floor", OUT, {"thinking": {"type": "disabled"}}, None),
    ("claude_thinking_budget_floor", OUT, _thinking(budget_tokens="512"), None),
    ("claude_thinking_budget_floor", OUT, _thinking(budget_tokens=1000.0), None),
    ("claude_thinking_budget_floor", OUT, _thinking(budget_tokens=True), None),
    ("claude_thinking_budget_floor", OUT, {"thinking": ["enabled"]}, None),
    (
        "claude_thinking_budget_floor",
        OUT,
        _thinking(budget_tokens=1023),
        "policy thinking.budget_tokens must be at least 1024 with thinking enabled, not 1023",
    ),
    (
        "claude_thinking_budget_floor",
        OUT,
        _thinking(),
        "policy thinking.budget_tokens must be at least 1024 with thinking enabled, not missing",
    ),
    ("claude_thinking_budget_below_output", OUT, _thinking(budget_tokens=2047), None),
    ("claude_thinking_budget_below_output", OUT, _thinking(), None),
    ("claude_thinking_budget_below_output", OUT, _thinking(budget_tokens=4096.0), None),
    (
        "claude_thinking_budget_below_output",
        OUT,
        {"thinking": {"type": "disabled", "budget_tokens": 4096}},
        None,
    ),
    (
        "claude_thinking_budget_below_output",
        OUT,
        _thinking(budget_tokens=2048),
        "policy thinking.budget_tokens must be below maxOutputTokens (2048), not 2048",
    ),
    (
        "claude_thinking_budget_below_output",
        OUT,
        _thinking(budget_tokens=4096),
        "policy thinking.budget_tokens must be below maxOutputTokens (2048), not 4096",
    ),
    ("bedrock_claude_thinking_budget_floor", OUT, _bedrock(), None),
    ("bedrock_claude_thinking_budget_floor", OUT, _thinking(budget_tokens=10), None),
    (
        "bedrock_claude_thinking_budget_floor",
        OUT,
        _bedrock({"type": "enabled", "budget_tokens": 1023}),
        "policy additional_model_request_fields.thinking.budget_tokens must be at least 1024 with thinking "
        "enabled, not 1023",
    ),
    ("bedrock_claude_thinking_budget_below_output", 1025, _bedrock(), None),
    (
        "bedrock_claude_thinking_budget_below_output",
        1024,
        _bedrock(),
        "policy additional_model_request_fields.thinking.budget_tokens must be below maxOutputTokens (1024), "
        "not 1024",
    ),
    ("bedrock_claude_thinking_temperature", OUT, _bedrock(temperature=1), None),
    ("bedrock_claude_thinking_temperature", OUT, _bedrock(temperature=1.0), None),
    ("bedrock_claude_thinking_temperature", OUT, _bedrock(), None),
    ("bedrock_claude_thinking_temperature", OUT, _bedrock(temperature="0.5"), None),
    ("bedrock_claude_thinking_temperature", OUT, _bedrock({"type": "disabled"}, temperature=0.5), None),
    ("bedrock_claude_thinking_temperature", OUT, {"temperature": 0.5}, None),
    ("bedrock_claude_thinking_temperature", OUT, {**_thinking(budget_tokens=1024), "temperature": 0.5}, None),
    (
        "bedrock_claude_thinking_temperature",
        OUT,
        _bedrock(temperature=0.5),
        f"policy temperature must be 1 or left out {BESIDE}, not 0.5",
    ),
    (
        "bedrock_claude_thinking_temperature",
        OUT,
        _bedrock({"type": "adaptive"}, temperature=0),
        f"policy temperature must be 1 or left out {BESIDE}, not 0",
    ),
    ("bedrock_claude_thinking_top_p", OUT, _bedrock(top_p=0.95), None),
    ("bedrock_claude_thinking_top_p", OUT, _bedrock(top_p=1), None),
    ("bedrock_claude_thinking_top_p", OUT, _bedrock(top_p=None), None),
    ("bedrock_claude_thinking_top_p", OUT, _bedrock({"type": "disabled"}, top_p=0.5), None),
    (
        "bedrock_claude_thinking_top_p",
        OUT,
        _bedrock(top_p=0.94),
        f"policy top_p must be at least 0.95 or left out {BESIDE}, not 0.94",
    ),
    (
        "bedrock_claude_thinking_top_p",
        OUT,
        _bedrock({"type": "adaptive"}, top_p=0),
        f"policy top_p must be at least 0.95 or left out {BESIDE}, not 0",
    ),
    ("bedrock_claude_thinking_top_k", OUT, _bedrock(), None),
    (
        "bedrock_claude_thinking_top_k",
        OUT,
        {"additional_model_request_fields": {"thinking": {"type": "disabled"}, "top_k": 40}},
        None,
    ),
    (
        "bedrock_claude_thinking_top_k",
        OUT,
        {
            "additional_model_request_fields": {
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "top_k": 40,
            }
        },
        f"policy additional_model_request_fields.top_k must be left out {BESIDE}, not 40",
    ),
    ("gemini_thinking_budget_or_level", OUT, {"thinking_config": {"thinkingBudget": 1024}}, None),
    ("gemini_thinking_budget_or_level", OUT, {"thinking_config": {"thinkingLevel": "high"}}, None),
    (
        "gemini_thinking_budget_or_level",
        OUT,
        {"thinking_config": {"thinkingBudget": None, "thinking_level": "low"}},
        None,
    ),
    (
        "gemini_thinking_budget_or_level",
        OUT,
        {"thinking_config": {"thinkingBudget": 0, "thinkingLevel": None}},
        None,
    ),
    ("gemini_thinking_budget_or_level", OUT, {"thinking_config": "high"}, None),
    (
        "gemini_thinking_budget_or_level",
        OUT,
        {"thinking_config": {"thinkingBudget": 0, "thinkingLevel": "low"}},
        "policy thinking_config must set thinkingBudget or thinkingLevel, not both: thinkingBudget 0 and "
        "thinkingLevel 'low'",
    ),
    (
        "gemini_thinking_budget_or_level",
        OUT,
        {"thinking_config": {"thinking_budget": -1, "thinking_level": "high"}},
        "policy thinking_config must set thinkingBudget or thinkingLevel, not both: thinking_budget -1 and "
        "thinking_level 'high'",
    ),
]


@pytest.mark.parametrize(("rule", "max_output_tokens", "policy", "detail"), CASES)
def test_each_rule_at_its_edges(
    rule: str, max_output_tokens: int, policy: dict[str, Any], detail: str | None
) -> None:
    assert rules_named(rule)[0].refusal(max_output_tokens, policy) == detail


def test_every_rule_has_a_refused_case() -> None:
    refused = {rule for rule, _, _, detail in CASES if detail is not None}
    assert refused == {rule.name for rule in RULES}


def test_the_first_rule_broken_is_the_refusal() -> None:
    policy = {"thinking": {"type": "enabled", "budget_tokens": 10}}
    assert policy_refusal(CLAUDE_RULES, 5, policy) == (
        "policy thinking.budget_tokens must be at least 1024 with thinking enabled, not 10"
    )
    assert policy_refusal(tuple(reversed(CLAUDE_RULES)), 5, policy) == (
        "policy thinking.budget_tokens must be below maxOutputTokens (5), not 10"
    )
    assert policy_refusal((), 5, policy) is None
    assert (
        policy_refusal(CLAUDE_RULES, 2048, {"thinking": {"type": "enabled", "budget_tokens": 1024}}) is None
    )


def test_rules_are_named_in_the_order_given() -> None:
    assert [
        r.name for r in rules_named("gemini_thinking_budget_or_level", "claude_thinking_budget_floor")
    ] == [
        "gemini_thinking_budget_or_level",
        "claude_thinking_budget_floor",
    ]
    with pytest.raises(KeyError):
        rules_named("no_such_rule")


ROWS_OF = {
    "anthropic-messages@3": CLAUDE_RULES,
    "bedrock-converse@2": BEDROCK_CLAUDE_RULES,
    "gemini@3": GEMINI_RULES,
}


def test_only_the_versions_that_send_a_thinking_policy_judge_it() -> None:
    judged = {a: adapter.policy_rules for a, adapter in ADAPTERS.items()}
    assert {a: rows for a, rows in judged.items() if rows} == ROWS_OF
    assert [r.name for r in BEDROCK_CLAUDE_RULES] == [
        "bedrock_claude_thinking_budget_floor",
        "bedrock_claude_thinking_budget_below_output",
        "bedrock_claude_thinking_temperature",
        "bedrock_claude_thinking_top_p",
        "bedrock_claude_thinking_top_k",
    ]
    assert [r.name for r in CLAUDE_RULES] == [
        "claude_thinking_budget_floor",
        "claude_thinking_budget_below_output",
    ]
    assert [r.name for r in GEMINI_RULES] == ["gemini_thinking_budget_or_level"]


REFUSED_BY_EACH = {
    "anthropic-messages": (
        _thinking(budget_tokens=4096),
        "policy thinking.budget_tokens must be below maxOutputTokens (2048), not 4096",
    ),
    "bedrock-converse": (
        _bedrock(temperature=0.2),
        f"policy temperature must be 1 or left out {BESIDE}, not 0.2",
    ),
    "gemini": (
        {"thinking_config": {"thinkingBudget": 512, "thinkingLevel": "low"}},
        "policy thinking_config must set thinkingBudget or thinkingLevel, not both: thinkingBudget 512 and "
        "thinkingLevel 'low'",
    ),
}


@pytest.mark.parametrize("adapter_id", sorted(ADAPTERS))
def test_each_adapter_refuses_what_its_version_sends_and_takes_the_rest(adapter_id: str) -> None:
    """An older version ignores the key, so it takes the policy as it always did."""
    adapter = ADAPTERS[adapter_id]
    policy, detail = REFUSED_BY_EACH.get(adapter.api, (_thinking(budget_tokens=4096), None))
    expected = detail if adapter_id in ROWS_OF else None
    assert adapter.policy_refusal(OUT, policy) == expected


@pytest.mark.parametrize("api", sorted(THINKING_POLICIES))
def test_the_demos_thinking_policies_are_taken(api: str) -> None:
    """The demo sends these (demo/moving.py), with its thinking output budget."""
    assert ADAPTERS[LATEST[api]].policy_refusal(THINKING_MAX_OUTPUT_TOKENS, THINKING_POLICIES[api]) is None


def test_the_rules_table_has_one_row_per_name() -> None:
    assert len(pr.BY_NAME) == len(RULES) == 8


def test_top_k_is_looked_for_beside_the_thinking_wherever_that_is() -> None:
    """At the policy's root beside a root `thinking` (as Anthropic's API would take it), in the object
    holding the thinking on Bedrock; never inside the thinking."""
    thinking = {"type": "enabled", "budget_tokens": 1024}
    assert pr.top_k_with_thinking(("thinking",), OUT, {"thinking": thinking, "top_k": 5}) == (
        "policy top_k must be left out beside thinking turned on, not 5"
    )
    assert pr.top_k_with_thinking(("thinking",), OUT, {"thinking": {**thinking, "top_k": 5}}) is None


@pytest.mark.parametrize(
    "policy",
    [
        {"thinking": {"type": "a_type_claude_adds_later"}},
        {"thinking": {"type": "adaptive"}},
        {"reasoning": {"effort": "an_effort_openai_adds_later", "summary": "a_new_summary"}},
        {"reasoning": {"effort": "xhigh"}},
    ],
)
def test_a_value_from_a_list_the_provider_grows_is_left_to_the_provider(policy: dict[str, Any]) -> None:
    """Claude's thinking types and OpenAI's efforts grow with new models: a pinned list would refuse
    at the ledger what a newer model takes (the module's "Not judged")."""
    for adapter_id in sorted(ADAPTERS):
        assert ADAPTERS[adapter_id].policy_refusal(OUT, policy) is None, adapter_id
