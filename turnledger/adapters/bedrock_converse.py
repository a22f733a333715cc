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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from turnledger.adapters._common import (
    SCOPED_NOTICE,
    call_tool_names,
    delimited_scoped_text,
    has_scoped,
    has_tool_blocks,
    is_cancel,
    is_failure,
    parse_arguments,
    pick_policy,
    place_results,
    role_runs,
)
from turnledger.adapters.base import AdapterBase, DispatchParams, JsonObject, UnsupportedKind
from turnledger.model.graph import Block, MessageSequence, Role

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
    return {"text": block.text} if block.text and block.text.strip() else None


def _reasoning(block: Block, rules: BedrockRules) -> Part | None:
    if not block.signature:
        return None
    return {"reasoningContent": {"reasoningText": {"text": block.text or "", "signature": block.signature}}}


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
    if block.text:
        texts.append(block.text)
    if is_failure(block) and not texts:
        texts.append(rules.empty_error_text)
    result: Part = {
        "toolUseId": tool_use_id(block.call_id),
        "content": [{"text": t} for t in texts],
        "status": "error" if is_failure(block) else "success",
    }
    return {"toolResult": result}


_RENDER: dict[str, Callable[[Block, BedrockRules], Part | None]] = {
    "text": _text,
    "reasoning": _reasoning,
    "scoped_text": _scoped_text,
    "tool_use": _tool_use,
    "tool_result": _tool_result,
}


class BedrockConverseAdapter(AdapterBase):
    api = "bedrock-converse"
    provider = "bedrock"

    rules: BedrockRules

    def __init__(self, version: int, rules: BedrockRules) -> None:
        super().__init__(version, rules)

    def build(self, sequence: MessageSequence, params: DispatchParams) -> JsonObject | UnsupportedKind:
        rules = self.rules
        blocks = sequence.blocks

        def render(block: Block) -> Part | None:
            return _RENDER[rules.renderers[block.kind]](block, rules)

        system: list[Part] = []
        if rules.scoped_notice and has_scoped(blocks):
            system.append({"text": rules.scoped_notice})
        messages: list[JsonObject] = []
        for run in role_runs(place_results(blocks)):
            parts = [p for p in (render(b) for b in run.blocks) if p is not None]
            if not parts:
                continue
            if run.role == Role.SYSTEM:
                system.extend(parts)
                continue
            role = "assistant" if run.role == Role.ASSISTANT else rules.tool_role_becomes
            if rules.merge_same_role and messages and messages[-1]["role"] == role:
                messages[-1]["content"].extend(parts)
            else:
                messages.append({"role": role, "content": parts})
        if rules.results_before_text:
            for message in messages:
                content = message["content"]
                message["content"] = [p for p in content if "toolResult" in p] + [
                    p for p in content if "toolResult" not in p
                ]

        inference: JsonObject = {"maxTokens": params.max_output_tokens}
        inference.update(pick_policy(params.policy, rules.policy_fields))
        payload: JsonObject = {"messages": messages, "inferenceConfig": inference}
        if system:
            payload["system"] = system
        specs = [_tool_spec(t.name, t.description, t.input_schema) for t in params.tools]
        if not specs and rules.stub_tools_when_history_has_tools and has_tool_blocks(blocks):
            specs = [_tool_spec(name, "", {"type": "object"}) for name in call_tool_names(blocks)]
        if specs:
            payload["toolConfig"] = {"tools": specs}
        return payload


def _tool_spec(name: str, description: str, schema: dict[str, Any]) -> JsonObject:
    spec: JsonObject = {"name": name, "inputSchema": {"json": schema}}
    if description:
        spec["description"] = description
    return {"toolSpec": spec}


BEDROCK_CONVERSE_V1 = BedrockConverseAdapter(1, RULES_V1)
