"""OpenAI Responses (`POST /v1/responses`), stateless: graph → request body.

Role rules (reference 1b): the whole history goes in `input` as items. Calls are
`function_call` items and results `function_call_output` items, paired by `call_id`
(never the `fc_` item id), outputs right after the calls of their assistant run, in
call order. Reasoning items are passed back (manual context) in their place in the
run, i.e. before the calls they belong to; a reasoning item with no following item
of its run is dropped (the API rejects "reasoning ... without its required following
item"). Only reasoning this API produced can be replayed: a thinking block is sent
only with its `encrypted_content` (the block signature, `adapters/signatures.py`) and its
`rs_` item id (`Block.item_id`, kept from the stream's reasoning item; a submitted block may
instead carry it as its own id).

System blocks stay in place as `system` message items, one input_text part per block,
rather than joined into `instructions` (which would concatenate blocks into one
string). Errors follow the same documented JSON envelope as openai-chat.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from turnledger.adapters._common import SCOPED_NOTICE, Run, delimited_scoped_text, result_text
from turnledger.adapters.base import JsonObject, UnsupportedKind
from turnledger.adapters.call_ids import IdRule, wire_call_id
from turnledger.adapters.kinds import ASSISTANT, TOOL
from turnledger.adapters.layout import BodyLayout
from turnledger.adapters.profiles import OPENAI_RESPONSES_IDS
from turnledger.adapters.signatures import own_signature
from turnledger.adapters.skeleton import AdapterBase, PartRenderer
from turnledger.adapters.turns import RenderedTurns, rendered_parts, results_carrying_scoped
from turnledger.model.graph import Block

API = "openai-responses"

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

    def wire_id(self, call_id: str | None) -> str | None:
        """The call id as sent: version 1 sends the graph's id as it is."""
        return call_id


@dataclass(frozen=True)
class OpenAIResponsesRulesV2(OpenAIResponsesRules):
    """Version 2: `call_id`s over the API's length limit (64) are sent as stable mapped ids, on the
    function_call and on its function_call_output alike."""

    call_ids: IdRule = OPENAI_RESPONSES_IDS

    def wire_id(self, call_id: str | None) -> str | None:
        return wire_call_id(self.call_ids, call_id)


def _policy_v3() -> dict[str, str]:
    """Version 3 passes what a reasoning model needs with manual context: `reasoning` (its effort
    and summary) and `include` (`["reasoning.encrypted_content"]` returns each reasoning item's
    encrypted content, which is the block's signature, so the next request can send the item back;
    provider-formats §1b). Without `include`, no reasoning item can be replayed."""
    return {**_policy_v1(), "reasoning": "reasoning", "include": "include"}


RULES_V1 = OpenAIResponsesRules()
RULES_V2 = OpenAIResponsesRulesV2()
RULES_V3 = OpenAIResponsesRulesV2(policy_fields=_policy_v3())


def _text(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    if not block.text:
        return None
    if block.role == ASSISTANT:
        return {"type": "message", "role": "assistant", "content": block.text}
    return {"type": rules.input_text_type, "text": block.text}


def _scoped_text(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    text = delimited_scoped_text(block)
    if block.role == ASSISTANT:
        return {"type": "message", "role": "assistant", "content": text}
    return {"type": rules.input_text_type, "text": text}


def _reasoning_item(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    """The reasoning item, named by its `rs_` id: the one the stream gave (`item_id`), or a submitted
    block's own id; without one, or without its encrypted content, it cannot be sent."""
    signature = own_signature(block, API)
    item_id = block.item_id or block.id
    if not signature or not item_id.startswith(rules.reasoning_id_prefix):
        return None
    summary = [{"type": "summary_text", "text": block.text}] if block.text else []
    return {"type": "reasoning", "id": item_id, "summary": summary, "encrypted_content": signature}


def _function_call_item(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    return {
        "type": "function_call",
        "call_id": rules.wire_id(block.call_id),
        "name": block.tool_name,
        "arguments": block.arguments or "",
    }


def _function_call_output_item(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    return {
        "type": "function_call_output",
        "call_id": rules.wire_id(block.call_id),
        "output": result_text(block, rules.cancel_status),
    }


_RENDER: dict[str, PartRenderer[OpenAIResponsesRules]] = {
    "text": _text,
    "scoped_text": _scoped_text,
    "reasoning_item": _reasoning_item,
    "function_call_item": _function_call_item,
    "function_call_output_item": _function_call_output_item,
}


class OpenAIResponsesAdapter(AdapterBase[OpenAIResponsesRules]):
    api = API
    provider = "openai"
    part_renderers = _RENDER

    def body_layout(self, rules: OpenAIResponsesRules) -> BodyLayout:
        return BodyLayout(
            turns="input",
            max_tokens=rules.max_tokens_field,
            parallel_tool_calls="parallel_tool_calls",
        )

    def turns(self, runs: list[Run], notice: str | None) -> RenderedTurns | UnsupportedKind:
        rules = self.rules
        items: list[Item] = []
        if notice:
            items.append(_message("system", [{"type": rules.input_text_type, "text": notice}]))
        for run in runs:
            if run.role == TOOL:
                outputs = results_carrying_scoped(
                    run.blocks,
                    self.render_block,
                    body_key="output",
                    text_type="input_text",
                    carrier="tool output",
                )
                if isinstance(outputs, UnsupportedKind):
                    return outputs
                items.extend(outputs)
                continue
            rendered = rendered_parts(run, self.render_block)
            if run.role == ASSISTANT:
                items.extend(_assistant_items(rendered, rules))
            elif rendered:
                items.append(_message(run.role, rendered))
        return RenderedTurns(turns=items)

    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        tool: JsonObject = {"type": "function", "name": name, "parameters": schema, "strict": False}
        if description:
            tool["description"] = description
        return tool


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


OPENAI_RESPONSES_V1 = OpenAIResponsesAdapter(1, RULES_V1)
OPENAI_RESPONSES_V2 = OpenAIResponsesAdapter(2, RULES_V2)
OPENAI_RESPONSES_V3 = OpenAIResponsesAdapter(3, RULES_V3)
