"""OpenAI Responses (`POST /v1/responses`), stateless: graph → request body.

Role rules (reference 1b): the whole history goes in `input` as items. Calls are
`function_call` items and results `function_call_output` items, paired by `call_id`
(never the `fc_` item id), outputs right after the calls of their assistant run, in
call order. Reasoning items are passed back (manual context) in their place in the
run, i.e. before the calls they belong to; a reasoning item with no following item
of its run is dropped (the API rejects "reasoning ... without its required following
item"). Only reasoning this API produced can be replayed: a thinking block is sent
only with its `encrypted_content` (the block signature) and its `rs_` item id.

System blocks stay in place as `system` message items, one input_text part per block,
rather than joined into `instructions` (which would concatenate blocks into one
string). Errors follow the same documented JSON envelope as openai-chat.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from turnledger.adapters._common import (
    SCOPED_NOTICE,
    delimited_scoped_text,
    has_scoped,
    is_cancel,
    is_failure,
    pick_policy,
    place_results,
    role_runs,
)
from turnledger.adapters.base import (
    AdapterBase,
    DispatchParams,
    JsonObject,
    UnsupportedKind,
    parse_model_revision,
)
from turnledger.model.canonical import canonical_json
from turnledger.model.graph import Block, BlockKind, MessageSequence, Role

Item = dict[str, Any]


def _renderers_v1() -> dict[str, str]:
    return {
        "text": "text",
        "thinking": "reasoning_item",
        "tool_call": "function_call_item",
        "tool_result": "function_call_output_item",
        "retrieved_snippet": "scoped_text",
        "compression_artifact": "scoped_text",
    }


def _policy_v1() -> dict[str, str]:
    # `stream` and `background` are dispatch policy: the manifest fixes the bytes sent, and
    # background mode is what makes a Responses stream resumable by its id.
    return {
        "temperature": "temperature",
        "top_p": "top_p",
        "store": "store",
        "stream": "stream",
        "background": "background",
    }


@dataclass(frozen=True)
class OpenAIResponsesRules:
    """The Responses API rules table."""

    system_placement: str = "in_place_system_message_items"
    input_text_type: str = "input_text"
    assistant_text: str = "one_easy_message_item_per_block"
    pairing_key: str = "call_id"
    parallel_results: str = "n_function_call_output_items_after_run_in_call_order"
    reasoning: str = "item_before_its_calls_requires_signature_and_rs_id"
    reasoning_id_prefix: str = "rs_"
    drop_reasoning_without_following_item: bool = True
    error_encoding: str = "json_error_envelope_text"
    cancel_status: str = "cancelled"
    tool_scoped_blocks: str = "extra_input_text_part_of_preceding_output"
    scoped_notice: str | None = SCOPED_NOTICE
    max_tokens_field: str = "max_output_tokens"
    parallel_tool_calls_needs_tools: bool = True
    renderers: dict[str, str] = field(default_factory=_renderers_v1)
    policy_fields: dict[str, str] = field(default_factory=_policy_v1)

    def as_data(self) -> JsonObject:
        return asdict(self)


RULES_V1 = OpenAIResponsesRules()


def output_text(block: Block, cancel_status: str) -> str:
    if not is_failure(block):
        return block.text or ""
    status = cancel_status if is_cancel(block) else "error"
    return canonical_json({"error": {"status": status, "message": block.text or ""}}).decode()


def _text(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    if not block.text:
        return None
    if block.role == Role.ASSISTANT:
        return {"type": "message", "role": "assistant", "content": block.text}
    return {"type": rules.input_text_type, "text": block.text}


def _scoped_text(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    text = delimited_scoped_text(block)
    if block.role == Role.ASSISTANT:
        return {"type": "message", "role": "assistant", "content": text}
    return {"type": rules.input_text_type, "text": text}


def _reasoning_item(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    if not block.signature or not block.id.startswith(rules.reasoning_id_prefix):
        return None
    summary = [{"type": "summary_text", "text": block.text}] if block.text else []
    return {"type": "reasoning", "id": block.id, "summary": summary, "encrypted_content": block.signature}


def _function_call_item(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    return {
        "type": "function_call",
        "call_id": block.call_id,
        "name": block.tool_name,
        "arguments": block.arguments or "",
    }


def _function_call_output_item(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    return {
        "type": "function_call_output",
        "call_id": block.call_id,
        "output": output_text(block, rules.cancel_status),
    }


_RENDER: dict[str, Callable[[Block, OpenAIResponsesRules], Item | None]] = {
    "text": _text,
    "scoped_text": _scoped_text,
    "reasoning_item": _reasoning_item,
    "function_call_item": _function_call_item,
    "function_call_output_item": _function_call_output_item,
}


class OpenAIResponsesAdapter(AdapterBase):
    api = "openai-responses"
    provider = "openai"

    rules: OpenAIResponsesRules

    def __init__(self, version: int, rules: OpenAIResponsesRules) -> None:
        super().__init__(version, rules)

    def build(self, sequence: MessageSequence, params: DispatchParams) -> JsonObject | UnsupportedKind:
        rules = self.rules
        blocks = sequence.blocks

        def render(block: Block) -> Item | None:
            return _RENDER[rules.renderers[block.kind]](block, rules)

        items: list[Item] = []
        if rules.scoped_notice and has_scoped(blocks):
            items.append(_message("system", [{"type": rules.input_text_type, "text": rules.scoped_notice}]))
        for run in role_runs(place_results(blocks)):
            if run.role == Role.TOOL:
                outputs = _tool_items(run.blocks, render)
                if isinstance(outputs, UnsupportedKind):
                    return outputs
                items.extend(outputs)
                continue
            rendered = [p for p in (render(b) for b in run.blocks) if p is not None]
            if run.role == Role.ASSISTANT:
                items.extend(_assistant_items(rendered, rules))
            elif rendered:
                items.append(_message(run.role, rendered))

        payload: JsonObject = {
            "model": parse_model_revision(params.model_revision).model,
            rules.max_tokens_field: params.max_output_tokens,
            "input": items,
        }
        if params.tools:
            payload["tools"] = [_function_tool(t.name, t.description, t.input_schema) for t in params.tools]
        policy = pick_policy(params.policy, rules.policy_fields)
        if params.tools and "parallel_tool_calls" in params.policy:
            policy["parallel_tool_calls"] = bool(params.policy["parallel_tool_calls"])
        payload.update(policy)
        return payload


def _message(role: str, content: list[Item]) -> Item:
    return {"type": "message", "role": role, "content": content}


def _assistant_items(rendered: list[Item], rules: OpenAIResponsesRules) -> list[Item]:
    """Assistant run items in order; reasoning items with nothing after them in the run are dropped."""
    if not rules.drop_reasoning_without_following_item:
        return rendered
    out = list(rendered)
    while out and out[-1]["type"] == "reasoning":
        out.pop()
    return out


def _tool_items(
    blocks: tuple[Block, ...], render: Callable[[Block], Item | None]
) -> list[Item] | UnsupportedKind:
    """Outputs in order; tool-scoped parts ride on the previous output as extra input_text parts."""
    out: list[Item] = []
    for block in blocks:
        item = render(block)
        if item is None:
            continue
        if block.kind == BlockKind.TOOL_RESULT:
            out.append(item)
            continue
        if not out:
            return UnsupportedKind(
                kind=block.kind, block_id=block.id, detail="tool-role block with no tool output to carry it"
            )
        last = out[-1]
        if isinstance(last["output"], str):
            last["output"] = [{"type": "input_text", "text": last["output"]}]
        last["output"].append(item)
    return out


def _function_tool(name: str, description: str, schema: dict[str, Any]) -> JsonObject:
    tool: JsonObject = {"type": "function", "name": name, "parameters": schema, "strict": False}
    if description:
        tool["description"] = description
    return tool


OPENAI_RESPONSES_V1 = OpenAIResponsesAdapter(1, RULES_V1)
