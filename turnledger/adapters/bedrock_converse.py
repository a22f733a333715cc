"""AWS Bedrock Converse: graph → request body (model id goes in the URL, not the body).

Role rules (reference 1e): `system[]` is top-level; messages strictly alternate
user/assistant (consecutive same roles are merged); every `toolResult` of one
assistant turn goes in the next user message, results before text; an error-status
result must have non-empty content; `toolConfig` must be present whenever the history
has toolUse/toolResult; `toolUseId` is 1-64 chars of `[a-zA-Z0-9_-]` (ids minted by
other providers are mapped deterministically, on the call and on its result alike).
"""

from __future__ import annotations

import hashlib
import re
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
from turnledger.adapters.base import JsonObject
from turnledger.adapters.layout import BodyLayout
from turnledger.adapters.signatures import own_signature
from turnledger.adapters.skeleton import AdapterBase, PartRenderer
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


RULES_V1 = BedrockRules()


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

    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        spec: JsonObject = {"name": name, "inputSchema": {"json": schema}}
        if description:
            spec["description"] = description
        return {"toolSpec": spec}


BEDROCK_CONVERSE_V1 = BedrockConverseAdapter(1, RULES_V1)
