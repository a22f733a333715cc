"""OpenAI Chat Completions (`POST /v1/chat/completions`): graph → request body.

Role rules (reference 1a): system text stays in place as `system` messages; an
assistant message carries all of its run's calls in `tool_calls` (arguments are the
raw JSON *string* the model produced, untouched); it is followed immediately by one
`tool` message per call, in `tool_calls` order. Chat Completions has no reasoning
input, so thinking blocks are not sent.

Error convention (the API has no error flag for tool messages): the tool message's
content is the canonical JSON text `{"error":{"message":..,"status":"error"}}`, and
for a cancelled call `"status":"cancelled"`. A success is the payload text as is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from turnledger.adapters._common import SCOPED_NOTICE, Run, delimited_scoped_text, result_text
from turnledger.adapters.base import JsonObject, UnsupportedKind
from turnledger.adapters.call_ids import IdRule, wire_call_id
from turnledger.adapters.kinds import SYSTEM, TOOL, TOOL_CALL
from turnledger.adapters.layout import BodyLayout
from turnledger.adapters.profiles import OPENAI_CHAT_IDS
from turnledger.adapters.skeleton import AdapterBase, PartRenderer
from turnledger.adapters.turns import RenderedTurns, results_carrying_scoped
from turnledger.model.graph import Block

Part = dict[str, Any]


def _renderers_v1() -> dict[str, str]:
    return {
        "text": "text_part",
        "thinking": "omit",
        "tool_call": "tool_call",
        "tool_result": "tool_message",
        "retrieved_snippet": "scoped_text_part",
        "compression_artifact": "scoped_text_part",
    }


def _policy_v1() -> dict[str, str]:
    return {
        "temperature": "temperature",
        "top_p": "top_p",
        "stop_sequences": "stop",
        "seed": "seed",
        "presence_penalty": "presence_penalty",
        "frequency_penalty": "frequency_penalty",
        # `stream` (and its options) is a dispatch policy: the manifest fixes the bytes sent.
        "stream": "stream",
        "stream_options": "stream_options",
    }


@dataclass(frozen=True)
class OpenAIChatRules:
    """The Chat Completions rules table."""

    system_role: str = "system"
    system_placement: str = "in_place_messages"
    merge_same_role: bool = False
    parallel_results: str = "n_tool_messages_right_after_assistant_in_call_order"
    error_encoding: str = "json_error_envelope_text"
    cancel_status: str = "cancelled"
    thinking: str = "omit_no_reasoning_input"
    tool_scoped_blocks: str = "extra_text_part_of_preceding_tool_message"
    scoped_notice: str | None = SCOPED_NOTICE
    max_tokens_field: str = "max_completion_tokens"
    parallel_tool_calls_needs_tools: bool = True
    renderers: dict[str, str] = field(default_factory=_renderers_v1)
    policy_fields: dict[str, str] = field(default_factory=_policy_v1)

    def as_data(self) -> JsonObject:
        return asdict(self)

    def wire_id(self, call_id: str | None) -> str | None:
        """The call id as sent: version 1 sends the graph's id as it is."""
        return call_id


@dataclass(frozen=True)
class OpenAIChatRulesV2(OpenAIChatRules):
    """Version 2: call ids over the API's length limit (40) are sent as stable mapped ids, in
    `tool_calls[].id` and in the tool message's `tool_call_id` alike."""

    call_ids: IdRule = OPENAI_CHAT_IDS

    def wire_id(self, call_id: str | None) -> str | None:
        return wire_call_id(self.call_ids, call_id)


RULES_V1 = OpenAIChatRules()
RULES_V2 = OpenAIChatRulesV2()


def _text_part(block: Block, rules: OpenAIChatRules) -> Part | None:
    return {"type": "text", "text": block.text} if block.text else None


def _scoped_text_part(block: Block, rules: OpenAIChatRules) -> Part | None:
    return {"type": "text", "text": delimited_scoped_text(block)}


def _omit(block: Block, rules: OpenAIChatRules) -> Part | None:
    return None


def _tool_call(block: Block, rules: OpenAIChatRules) -> Part | None:
    return {
        "id": rules.wire_id(block.call_id),
        "type": "function",
        "function": {"name": block.tool_name, "arguments": block.arguments or ""},
    }


def _tool_message(block: Block, rules: OpenAIChatRules) -> Part | None:
    return {
        "role": "tool",
        "tool_call_id": rules.wire_id(block.call_id),
        "content": result_text(block, rules.cancel_status),
    }


_RENDER: dict[str, PartRenderer[OpenAIChatRules]] = {
    "text_part": _text_part,
    "scoped_text_part": _scoped_text_part,
    "omit": _omit,
    "tool_call": _tool_call,
    "tool_message": _tool_message,
}


class OpenAIChatAdapter(AdapterBase[OpenAIChatRules]):
    api = "openai-chat"
    provider = "openai"
    part_renderers = _RENDER

    def body_layout(self, rules: OpenAIChatRules) -> BodyLayout:
        return BodyLayout(
            turns="messages",
            max_tokens=rules.max_tokens_field,
            parallel_tool_calls="parallel_tool_calls",
        )

    def turns(self, runs: list[Run], notice: str | None) -> RenderedTurns | UnsupportedKind:
        rules = self.rules
        messages: list[JsonObject] = []
        if notice:
            messages.append({"role": rules.system_role, "content": [{"type": "text", "text": notice}]})
        for run in runs:
            if run.role == TOOL:
                tool_messages = results_carrying_scoped(
                    run.blocks,
                    self.render_block,
                    body_key="content",
                    text_type="text",
                    carrier="tool message",
                )
                if isinstance(tool_messages, UnsupportedKind):
                    return tool_messages
                messages.extend(tool_messages)
                continue
            texts: list[Part] = []
            calls: list[Part] = []
            for block in run.blocks:
                part = self.render_block(block)
                if part is None:
                    continue
                (calls if block.kind == TOOL_CALL else texts).append(part)
            if not texts and not calls:
                continue
            message: JsonObject = {"role": rules.system_role if run.role == SYSTEM else run.role}
            if texts:
                message["content"] = texts
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        return RenderedTurns(turns=messages)

    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        fn: JsonObject = {"name": name, "parameters": schema}
        if description:
            fn["description"] = description
        return {"type": "function", "function": fn}


OPENAI_CHAT_V1 = OpenAIChatAdapter(1, RULES_V1)
OPENAI_CHAT_V2 = OpenAIChatAdapter(2, RULES_V2)
