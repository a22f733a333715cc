"""AWS Bedrock Converse: graph → request body (model id goes in the URL, not the body).

Role rules (reference 1e): `system[]` is top-level; messages strictly alternate
user/assistant (consecutive same roles are merged); every `toolResult` of one
assistant turn goes in the next user message, results before text; an error-status
result must have non-empty content; `toolConfig` must be present whenever the history
has toolUse/toolResult; `toolUseId` is 1-64 chars of `[a-zA-Z0-9_-]` (ids minted by
other providers are mapped deterministically, on the call and on its result alike).

Thinking (version 2): Claude on Bedrock thinks when asked in `additionalModelRequestFields` (`{"thinking":
{"type": "enabled", "budget_tokens": N}}`, Claude 3.7 and 4; the model's own request fields, which
Converse passes on: AWS's "Extended thinking" user guide and the Converse API reference). Version 2 sends
the policy's `additional_model_request_fields` as it is, at the body's root. Claude's tool-loop rule then
applies as on Anthropic's own API (`adapters/tool_loop.py`; through Bedrock a ValidationException "The
model returned the following errors: messages.N.content.0.type: Expected `thinking` or
`redacted_thinking`, but found `tool_use`. ...", anomalyco/opencode#3077, pydantic/pydantic-ai#2453):
in a tool loop that did not open with a reasoning block this adapter sends (Bedrock's own signature),
the request goes without `additionalModelRequestFields.thinking`, its other keys kept.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from turnledger.adapters._common import (
    SCOPED_NOTICE,
    Run,
    delimited_scoped_text,
    is_cancel,
    is_failure,
    parse_arguments,
)
from turnledger.adapters.base import DispatchParams, JsonObject
from turnledger.adapters.layout import BodyLayout
from turnledger.adapters.policy_rules import BEDROCK_CLAUDE_RULES
from turnledger.adapters.signatures import own_signature
from turnledger.adapters.skeleton import AdapterBase, PartRenderer
from turnledger.adapters.tool_loop import policy_in_loop, unthought_loop
from turnledger.adapters.turns import RenderedTurns, system_aside_turns
from turnledger.model.graph import Block
from turnledger.model.limits import is_blank

API = "bedrock-converse"

Part = dict[str, Any]

_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _renderers_v1() -> dict[str, str]:
    return {
        "text": "text",
        "thinking": "reasoning",
        "tool_call": "tool_use",
        "tool_result": "tool_result",
        "retrieved_snippet": "scoped_text",
        "compression_artifact": "scoped_text",
    }


def _policy_v1() -> dict[str, str]:
    return {"temperature": "temperature", "top_p": "topP", "stop_sequences": "stopSequences"}


@dataclass(frozen=True)
class BedrockRules:
    """The Bedrock Converse rules table."""

    system_placement: str = "top_level_system_list"
    tool_role_becomes: str = "user"
    merge_same_role: bool = True  # Converse rejects non-alternating roles
    parallel_results: str = "one_user_message_after_assistant"
    results_before_text: bool = True
    error_encoding: str = "status_error"
    cancel_text: str = "Tool call cancelled before it completed."
    empty_error_text: str = "Tool call failed."
    tool_use_id_mapping: str = "keep_if_[a-zA-Z0-9_-]{1,64}_else_tu_sha256_prefix"
    unsigned_thinking: str = "drop"
    stub_tools_when_history_has_tools: bool = True
    scoped_notice: str | None = SCOPED_NOTICE
    renderers: dict[str, str] = field(default_factory=_renderers_v1)
    policy_fields: dict[str, str] = field(default_factory=_policy_v1)

    def as_data(self) -> JsonObject:
        return asdict(self)

    @property
    def policy_at_root(self) -> tuple[str, ...]:
        """The API policy fields that go at the body's root, not in `inferenceConfig`: none in version 1
        (the field is not in its rules table, nor its digest)."""
        return ()

    @property
    def policy_without_loop_thinking(self) -> tuple[str, ...]:
        """The policy keys (dotted paths, `tool_loop.policy_in_loop`) left out of a request whose tool
        loop did not open with thinking the adapter sends: none in version 1, which sends no thinking."""
        return ()


def _policy_v2() -> dict[str, str]:
    """Version 2 passes the policy's `additional_model_request_fields` as it is: the model's own
    request fields, Claude's `thinking` among them."""
    return {**_policy_v1(), "additional_model_request_fields": "additionalModelRequestFields"}


@dataclass(frozen=True)
class BedrockRulesV2(BedrockRules):
    """Version 2: `additionalModelRequestFields` sent, at the body's root; its `thinking` left out in a
    tool loop that did not open with thinking the adapter sends (the module docstring says why)."""

    policy_fields: dict[str, str] = field(default_factory=_policy_v2)
    policy_at_root: tuple[str, ...] = ("additionalModelRequestFields",)
    policy_without_loop_thinking: tuple[str, ...] = ("additional_model_request_fields.thinking",)


RULES_V1 = BedrockRules()
RULES_V2 = BedrockRulesV2()


def tool_use_id(call_id: str | None) -> str:
    """The call id if Bedrock accepts it, else a stable id derived from it."""
    value = call_id or ""
    if _TOOL_USE_ID.fullmatch(value):
        return value
    return "tu_" + hashlib.sha256(value.encode()).hexdigest()[:40]


def _text(block: Block, rules: BedrockRules) -> Part | None:
    return {"text": block.text} if block.text and not is_blank(block.text) else None


def _reasoning(block: Block, rules: BedrockRules) -> Part | None:
    signature = own_signature(block, API)
    if not signature:
        return None
    return {"reasoningContent": {"reasoningText": {"text": block.text or "", "signature": signature}}}


def _scoped_text(block: Block, rules: BedrockRules) -> Part | None:
    return {"text": delimited_scoped_text(block)}


def _tool_use(block: Block, rules: BedrockRules) -> Part | None:
    return {
        "toolUse": {
            "toolUseId": tool_use_id(block.call_id),
            "name": block.tool_name,
            "input": parse_arguments(block),
        }
    }


def _tool_result(block: Block, rules: BedrockRules) -> Part | None:
    texts: list[str] = []
    if is_cancel(block):
        texts.append(rules.cancel_text)
    if block.text and not is_blank(block.text):  # a blank text block is a 400, as in a message
        texts.append(block.text)
    if is_failure(block) and not texts:
        texts.append(rules.empty_error_text)
    result: Part = {
        "toolUseId": tool_use_id(block.call_id),
        "content": [{"text": t} for t in texts],
        "status": "error" if is_failure(block) else "success",
    }
    return {"toolResult": result}


_RENDER: dict[str, PartRenderer[BedrockRules]] = {
    "text": _text,
    "reasoning": _reasoning,
    "scoped_text": _scoped_text,
    "tool_use": _tool_use,
    "tool_result": _tool_result,
}


def _text_sent(block: Block) -> bool:
    return block.text is not None and not is_blank(block.text)


def _reasoning_sent(block: Block) -> bool:
    return bool(own_signature(block, API))


def _always_sent(block: Block) -> bool:
    return True


SENT: dict[str, Callable[[Block], bool]] = {
    "text": _text_sent,
    "reasoning": _reasoning_sent,
    "scoped_text": _always_sent,
    "tool_use": _always_sent,
    "tool_result": _always_sent,
}
"""Renderer name → does its part go in the request (the renderer returns one)? Read without rendering,
so deciding a request's policy renders no block a cached prefix holds already."""


def _is_tool_result(part: Part) -> bool:
    return "toolResult" in part


class BedrockConverseAdapter(AdapterBase[BedrockRules]):
    api = API
    provider = "bedrock"
    part_renderers = _RENDER

    def body_layout(self, rules: BedrockRules) -> BodyLayout:
        return BodyLayout(
            turns="messages",
            model=None,
            max_tokens="maxTokens",
            generation="inferenceConfig",
            system=("system",),
            tools=("toolConfig", "tools"),
            stub_tools=rules.stub_tools_when_history_has_tools,
            root_policy=rules.policy_at_root,
        )

    def turns(self, runs: list[Run], notice: str | None) -> RenderedTurns:
        rules = self.rules
        return system_aside_turns(
            runs,
            self.render_block,
            system=[{"text": notice}] if notice else [],
            content_key="content",
            assistant_role="assistant",
            other_role=rules.tool_role_becomes,
            merge_same_role=rules.merge_same_role,
            results_first=_is_tool_result if rules.results_before_text else None,
        )

    def request_policy(
        self, earlier: Sequence[Block], new: Sequence[Block], params: DispatchParams
    ) -> Mapping[str, Any]:
        """The request's policy, less `policy_without_loop_thinking` when that turns thinking on in a
        tool loop that did not open with a reasoning block this adapter sends (`adapters/tool_loop.py`)."""
        sent = self.rules.renderers
        return policy_in_loop(
            params.policy,
            self.rules.policy_without_loop_thinking,
            lambda: unthought_loop(earlier, new, lambda block: SENT[sent[block.kind]](block)),
        )

    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        spec: JsonObject = {"name": name, "inputSchema": {"json": schema}}
        if description:
            spec["description"] = description
        return {"toolSpec": spec}


BEDROCK_CONVERSE_V1 = BedrockConverseAdapter(1, RULES_V1)
BEDROCK_CONVERSE_V2 = BedrockConverseAdapter(2, RULES_V2, BEDROCK_CLAUDE_RULES)
