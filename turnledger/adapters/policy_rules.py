"""A dispatch policy the provider is sure to refuse for what it is, whatever the history: one row per
rule, each given the request's output budget and its policy and returning the refusal's detail (the
policy key, what it must be, what it was), or None.

Four adapter versions pass a thinking policy as it is (anthropic-messages@3 `thinking`,
bedrock-converse@2 `additional_model_request_fields`, gemini@3 `thinking_config`, openai-responses@3
and @4 `reasoning`). Unchecked, a policy the API refuses was prepared, sent, and ended CANCELLED
PROVIDER_REFUSED after a round trip; the ledger now refuses it (INVALID_EVENT,
`dispatch/request_rules.py`). Each adapter names the rows that judge what it sends (`AdapterBase`'s
`policy_rules`); a version that does not send a key checks nothing of it, so its requests are taken as
before. The rows are a check, not rendering: they are not in the adapter's digest, and a rule learnt
later is a new row, not a new adapter version.

The rules and their sources:

- With `thinking.type` `enabled`, `budget_tokens` is given and is at least 1,024, and below
  `max_tokens` (the request's `maxOutputTokens`): "Must be ≥1024 and less than `max_tokens`" (anthropic
  2.14.0 `ThinkingConfigEnabledParam`, `budget_tokens` Required; platform.claude.com extended-thinking).
  The exception, a budget past `max_tokens` with interleaved thinking, needs a beta header the adapter
  does not send. On Bedrock the same, in `additionalModelRequestFields.thinking` against
  `inferenceConfig.maxTokens` (AWS's "Extended thinking" user guide, claude-messages-extended-thinking;
  modelparams.dev's probe: budget "range min 1024", "Must be less than inferenceConfig.maxTokens").
- With Claude's thinking on (`enabled` or `adaptive`, `tool_loop.THINKING_ON`), Bedrock's
  `inferenceConfig` carries no `temperature` but 1 and no `topP` below 0.95, and
  `additionalModelRequestFields` no `top_k`: "Thinking isn't compatible with temperature, top_p, or top_k
  modifications" (AWS's extended-thinking user guide, "Feature compatibility"); Bedrock's words
  "temperature may only be set to 1 when thinking is enabled" (mnfst/modelparams.dev#305's live probe);
  with thinking on, "top_p is allowed at values between 0.95 and 1" (Anthropic's thinking docs,
  "Sampling parameters", as quoted by MemberJunction's ResolveSamplingParams), and only a `top_p` below
  that is refused here (through Bedrock, Claude 3.7 said "top_p must be unset when
  thinking is enabled", chatboxai/chatbox#2099: a model's rule, not refused here); adaptive thinking
  refuses a temperature too (dotCipher/opencode-claude-bridge#1, "verified this against the API").
  anthropic-messages@3 sends no `temperature`, `top_p` or `top_k` (the pinned request type has none),
  so these rows are Bedrock's only.
- Gemini's `thinkingConfig` sets `thinkingBudget` or `thinkingLevel`, not both: "You cannot use both
  `thinking_level` and `thinking_budget` in the same request. Doing so will return a 400 error"
  (ai.google.dev/gemini-api/docs/gemini-3, as quoted by gemini_ex's ThinkingConfig docs; the error
  "thinking_budget and thinking_level are not supported together"). Google's JSON takes either
  spelling of a field (the proto3 JSON mapping, protobuf.dev/programming-guides/json: a parser accepts
  the lowerCamelCase and the proto field name), so both are read; a null is a field left out.

Not judged: a value from a list the provider grows. Claude's `thinking.type` (`adaptive` and
`between_tools` came after `enabled`), OpenAI's `reasoning.effort` (`xhigh` and `max` came after `high`)
and `reasoning.summary` are checked by the provider alone: a list pinned here from an SDK would refuse
at the ledger what a newer model takes, until a release caught up, while a misspelt value costs one
round trip and comes back as the provider's own refusal (CANCELLED `PROVIDER_REFUSED`, its words in the
detail). The rows below hold rules that do not move with the model list: numbers and pairs of fields.

Dropped, for want of a source that holds for every model the adapter may send to: which `thinking.type`
a Claude model on Bedrock takes, `thinkingBudget`'s range and `thinkingLevel`'s values (both "model
dependent", google-genai 3.6.1 `ThinkingConfig`), a manual `enabled` budget on Claude 4.7 and later
(refused there, accepted before: the model's rule), forced tool use with thinking (the adapters send
no `tool_choice`). A value of another shape than the rule reads (a `thinking` that is not an object,
a budget that is not an integer) is left to the API, as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from turnledger.adapters.tool_loop import thinking_on

PolicyCheck = Callable[[tuple[str, ...], int, Mapping[str, Any]], str | None]
"""Given the row's path (where in the policy Claude's thinking is; unused by the rows that need none), the
request's `maxOutputTokens` and its policy: the refusal's detail, or None."""

MIN_THINKING_BUDGET = 1024
MIN_TOP_P_WITH_THINKING = 0.95
GEMINI_BUDGET_FIELDS = ("thinkingBudget", "thinking_budget")
GEMINI_LEVEL_FIELDS = ("thinkingLevel", "thinking_level")

ANTHROPIC_THINKING = ("thinking",)
BEDROCK_THINKING = ("additional_model_request_fields", "thinking")


@dataclass(frozen=True)
class PolicyRule:
    """One rule: its name (what an adapter lists), its check, and the path its check reads."""

    name: str
    check: PolicyCheck
    path: tuple[str, ...] = ()

    def refusal(self, max_output_tokens: int, policy: Mapping[str, Any]) -> str | None:
        return self.check(self.path, max_output_tokens, policy)


def _at(policy: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value at `path` in the policy, or None where a step is missing or not an object."""
    node: Any = policy
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _named(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _is_integer(value: Any) -> bool:
    return type(value) is int


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _enabled(thinking: Any) -> bool:
    return isinstance(thinking, Mapping) and thinking.get("type") == "enabled"


def _beside_thinking(path: tuple[str, ...]) -> str:
    return f"beside {_named(path)} turned on"


def thinking_budget_floor(
    path: tuple[str, ...], max_output_tokens: int, policy: Mapping[str, Any]
) -> str | None:
    """Enabled thinking has a `budget_tokens` of at least 1,024."""
    thinking = _at(policy, path)
    if not _enabled(thinking):
        return None
    budget = thinking.get("budget_tokens")
    if budget is not None and not (_is_integer(budget) and budget < MIN_THINKING_BUDGET):
        return None
    was = "missing" if budget is None else str(budget)
    named = _named((*path, "budget_tokens"))
    return f"policy {named} must be at least {MIN_THINKING_BUDGET} with thinking enabled, not {was}"


def thinking_budget_below_output(
    path: tuple[str, ...], max_output_tokens: int, policy: Mapping[str, Any]
) -> str | None:
    """Enabled thinking's `budget_tokens` is below the request's output budget."""
    thinking = _at(policy, path)
    if not _enabled(thinking):
        return None
    budget = thinking.get("budget_tokens")
    if not _is_integer(budget) or budget < max_output_tokens:
        return None
    named = _named((*path, "budget_tokens"))
    return f"policy {named} must be below maxOutputTokens ({max_output_tokens}), not {budget}"


def temperature_with_thinking(
    path: tuple[str, ...], max_output_tokens: int, policy: Mapping[str, Any]
) -> str | None:
    """With Claude's thinking on, a temperature is 1 or left out."""
    temperature = policy.get("temperature")
    if not _is_number(temperature) or temperature == 1 or not thinking_on(_at(policy, path)):
        return None
    return f"policy temperature must be 1 or left out {_beside_thinking(path)}, not {temperature}"


def top_p_with_thinking(
    path: tuple[str, ...], max_output_tokens: int, policy: Mapping[str, Any]
) -> str | None:
    """With Claude's thinking on, a top_p is at least 0.95 or left out."""
    top_p: Any = policy.get("top_p")
    if not _is_number(top_p) or top_p >= MIN_TOP_P_WITH_THINKING or not thinking_on(_at(policy, path)):
        return None
    least = MIN_TOP_P_WITH_THINKING
    return f"policy top_p must be at least {least} or left out {_beside_thinking(path)}, not {top_p}"


def top_k_with_thinking(
    path: tuple[str, ...], max_output_tokens: int, policy: Mapping[str, Any]
) -> str | None:
    """With Claude's thinking on, no top_k beside it (in the object that holds the thinking)."""
    top_k_path = (*path[:-1], "top_k")
    top_k = _at(policy, top_k_path)
    if top_k is None or not thinking_on(_at(policy, path)):
        return None
    return f"policy {_named(top_k_path)} must be left out {_beside_thinking(path)}, not {top_k!r}"


def _given(config: Mapping[str, Any], spellings: tuple[str, ...]) -> tuple[str, Any] | None:
    """The first of a field's spellings the config gives a value (not null), with the value."""
    return next(((name, config[name]) for name in spellings if config.get(name) is not None), None)


def gemini_budget_or_level(
    path: tuple[str, ...], max_output_tokens: int, policy: Mapping[str, Any]
) -> str | None:
    """Gemini's `thinking_config` sets a thinking budget or a thinking level, not both."""
    config = policy.get("thinking_config")
    if not isinstance(config, Mapping):
        return None
    budget = _given(config, GEMINI_BUDGET_FIELDS)
    level = _given(config, GEMINI_LEVEL_FIELDS)
    if budget is None or level is None:
        return None
    given = f"{budget[0]} {budget[1]!r} and {level[0]} {level[1]!r}"
    return f"policy thinking_config must set thinkingBudget or thinkingLevel, not both: {given}"


RULES: tuple[PolicyRule, ...] = (
    PolicyRule("claude_thinking_budget_floor", thinking_budget_floor, ANTHROPIC_THINKING),
    PolicyRule("claude_thinking_budget_below_output", thinking_budget_below_output, ANTHROPIC_THINKING),
    PolicyRule("bedrock_claude_thinking_budget_floor", thinking_budget_floor, BEDROCK_THINKING),
    PolicyRule("bedrock_claude_thinking_budget_below_output", thinking_budget_below_output, BEDROCK_THINKING),
    PolicyRule("bedrock_claude_thinking_temperature", temperature_with_thinking, BEDROCK_THINKING),
    PolicyRule("bedrock_claude_thinking_top_p", top_p_with_thinking, BEDROCK_THINKING),
    PolicyRule("bedrock_claude_thinking_top_k", top_k_with_thinking, BEDROCK_THINKING),
    PolicyRule("gemini_thinking_budget_or_level", gemini_budget_or_level),
)
"""Every rule, by name; an adapter picks its rows with `rules_named`."""

BY_NAME: Mapping[str, PolicyRule] = {rule.name: rule for rule in RULES}


def rules_named(*names: str) -> tuple[PolicyRule, ...]:
    """The rows of these names, in the order given (a name not in the table is a KeyError)."""
    return tuple(BY_NAME[name] for name in names)


CLAUDE_RULES = rules_named("claude_thinking_budget_floor", "claude_thinking_budget_below_output")
BEDROCK_CLAUDE_RULES = rules_named(
    "bedrock_claude_thinking_budget_floor",
    "bedrock_claude_thinking_budget_below_output",
    "bedrock_claude_thinking_temperature",
    "bedrock_claude_thinking_top_p",
    "bedrock_claude_thinking_top_k",
)
GEMINI_RULES = rules_named("gemini_thinking_budget_or_level")


def policy_refusal(
    rules: tuple[PolicyRule, ...], max_output_tokens: int, policy: Mapping[str, Any]
) -> str | None:
    """The detail of the first rule the policy breaks, or None."""
    for rule in rules:
        detail = rule.refusal(max_output_tokens, policy)
        if detail is not None:
            return detail
    return None
