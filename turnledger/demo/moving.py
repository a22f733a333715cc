"""The demo's conversations that move between APIs, as a gateway's fallback (or a user picking another
model) moves them: each dispatch, the tool loop's included, goes to another API's current adapter
(`LATEST`), so what one API answered (its signatures, its reasoning items) is sent to the others.

Route: the five APIs of `MOVE_TARGETS`, from place `index % 5`, stepping `1 + index % 4` places a
dispatch. Five is prime, so every step visits all five APIs before one comes again, and the four steps
between them cross all 20 ordered pairs of APIs: a few moving conversations cross every pair their
number of dispatches lets them.

Thinking: a moving conversation asks each API to think where the API's current adapter passes a policy
for it (`THINKING_POLICIES`), so its answers carry signatures: OpenAI Responses' `reasoning` with
`include: ["reasoning.encrypted_content"]` (openai-responses@3), Gemini's `thinking_config` with
`includeThoughts` (gemini@3: its thought parts, and the signature on the answer's first call, which the
demo's Gemini signs anyway as Gemini 3 does, `gemini_strict_signatures`), Anthropic's `thinking`
(anthropic-messages@3) and Claude's on Bedrock, `additional_model_request_fields.thinking`
(bedrock-converse@2): both leave it out of a request in a tool loop another API opened, as Claude refuses
thinking there. OpenAI Chat takes no reasoning input.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

from turnledger.adapters.registry import LATEST

THINKING_MAX_OUTPUT_TOKENS = 2048
"""The output budget of a dispatch that asks to think: Claude (on Anthropic's API and on Bedrock) takes
`budget_tokens` of at least 1,024 and refuses a `max_tokens` that is not above it (the demo's other
dispatches ask for 512)."""


@dataclass(frozen=True)
class MoveTarget:
    api: str
    provider: str
    model_revision: str

    @property
    def adapter(self) -> str:
        """The API's current adapter."""
        return LATEST[self.api]


MOVE_TARGETS: tuple[MoveTarget, ...] = (
    MoveTarget("anthropic-messages", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
    MoveTarget("openai-responses", "openai", "openai/o4-mini@2025-04"),
    MoveTarget("gemini", "google", "google/gemini-2.5-pro@2025-06"),
    MoveTarget("bedrock-converse", "bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05"),
    MoveTarget("openai-chat", "openai", "openai/gpt-4o@2024-08"),
)
"""One of each API, in the order a moving conversation goes round them (a reasoning model for Responses:
the API refuses `reasoning` for a model without it)."""

THINKING_POLICIES: dict[str, dict[str, Any]] = {
    "anthropic-messages": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    "openai-responses": {
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
    },
    "gemini": {"thinking_config": {"includeThoughts": True}},
    "bedrock-converse": {
        "additional_model_request_fields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    },
}
"""The dispatch policy that asks an API to think, by API, for the APIs whose current adapter passes one."""


def moves(seed: int, index: int, rate: float) -> bool:
    """Does conversation `index` move between APIs (a draw of its own, as the demo's other rates)?"""
    return random.Random(f"{seed}:move:{index}").random() < rate


def move_target(index: int, dispatch: int) -> MoveTarget:
    """Where dispatch number `dispatch` (from 0) of moving conversation `index` goes."""
    step = 1 + index % 4
    return MOVE_TARGETS[(index + dispatch * step) % len(MOVE_TARGETS)]


def thinking_policy(api: str) -> dict[str, Any]:
    """The policy that asks `api` to think (a fresh copy); none where its adapter has no such policy."""
    return copy.deepcopy(THINKING_POLICIES.get(api, {}))
