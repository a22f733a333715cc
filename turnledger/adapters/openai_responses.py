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

A reasoning block without encrypted content (the request asked for `reasoning` but not for
`include: ["reasoning.encrypted_content"]`) is dropped by versions 1 to 3, and the API then refuses
every later request of the conversation once the answer had a call: "Item 'fc_…' of type
'function_call' was provided without its required 'reasoning' item: 'rs_…'." Version 4 follows what
OpenAI documents. A stored response's items (`store`, true by default) can be named in `input` by id:
an `item_reference` input item, `{"type": "item_reference", "id": …}` ("An internal identifier for an
item to reference", the Responses API reference's input item list; provider-formats §1b), which is
how the Vercel AI SDK's OpenAI provider sends stored reasoning back
(packages/openai/src/responses/convert-to-openai-responses-input.ts). So a stored request sends an
unsigned reasoning block as a reference to its `rs_` id (`renderers`). Nothing is kept for a request
with `store: false`: the API answers a reference to its item "Item with id 'rs_…' not found. Items are
not persisted when `store` is set to false." (vercel/ai#7543), and the `include` value
`reasoning.encrypted_content` is documented as what "enables reasoning items to be used in
multi-turn conversations when using the Responses API statelessly (like when the store parameter is
set to false, or when an organization is enrolled in the zero data retention program)". So such a
request renders as version 3 does, and, when its policy asks for `reasoning`, version 4 adds that
`include` value (`not_stored`, `NOT_STORED`): it changes only what the
answer carries, and `reasoning` is accepted only by the reasoning models that return reasoning items,
so adding it cannot make a request the API would have taken one it refuses.

System blocks stay in place as `system` message items, one input_text part per block,
rather than joined into `instructions` (which would concatenate blocks into one
string). Errors follow the same documented JSON envelope as openai-chat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from turnledger.adapters._common import SCOPED_NOTICE, Run, delimited_scoped_text, result_text
from turnledger.adapters.base import DispatchParams, JsonObject, RenderOutcome, UnsupportedKind
from turnledger.adapters.call_ids import IdRule, wire_call_id
from turnledger.adapters.kinds import ASSISTANT, TOOL
from turnledger.adapters.layout import BodyLayout
from turnledger.adapters.profiles import OPENAI_RESPONSES_IDS
from turnledger.adapters.signatures import own_signature
from turnledger.adapters.skeleton import AdapterBase, PartRenderer
from turnledger.adapters.turns import RenderedTurns, rendered_parts, results_carrying_scoped
from turnledger.model.graph import Block, MessageSequence

if TYPE_CHECKING:
    from turnledger.adapters.prefix import RenderCache

API = "openai-responses"

Item = dict[str, Any]

ENCRYPTED_CONTENT = "reasoning.encrypted_content"
"""The `include` value that asks for each reasoning item's encrypted content."""


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

    @property
    def not_stored(self) -> str:
        """What a request with `store: false` renders differently (`NOT_STORED`). Versions 1 to 3
        predate the field, so it is not in their rules table (nor their digest)."""
        return "as_stored"


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


def _renderers_v4() -> dict[str, str]:
    return {**_renderers_v1(), "thinking": "reasoning_item_or_reference"}


@dataclass(frozen=True)
class OpenAIResponsesRulesV4(OpenAIResponsesRulesV2):
    """Version 4: a reasoning block without encrypted content goes back by reference when the request
    is stored, and a request that is not stored asks for the encrypted content (module docstring)."""

    reasoning: str = "item_before_its_calls_with_signature_or_referenced_by_rs_id_when_stored"
    renderers: dict[str, str] = field(default_factory=_renderers_v4)
    policy_fields: dict[str, str] = field(default_factory=_policy_v3)
    not_stored: str = "reasoning_item_whole_and_its_encrypted_content_asked_for"


@dataclass(frozen=True)
class NotStoredRule:
    """How a request with `store: false` differs from a stored one."""

    renderers: Mapping[str, str]
    """Block kind → the renderer used instead of the rules table's."""
    include_with_reasoning: tuple[str, ...]
    """The `include` values added when the policy asks for `reasoning`."""


NOT_STORED: Mapping[str, NotStoredRule] = {
    "as_stored": NotStoredRule(renderers={}, include_with_reasoning=()),
    "reasoning_item_whole_and_its_encrypted_content_asked_for": NotStoredRule(
        renderers={"thinking": "reasoning_item"}, include_with_reasoning=(ENCRYPTED_CONTENT,)
    ),
}
"""`not_stored` → the rule (module docstring: nothing is kept to refer to, and only the encrypted
content can bring a reasoning item back)."""


RULES_V1 = OpenAIResponsesRules()
RULES_V2 = OpenAIResponsesRulesV2()
RULES_V3 = OpenAIResponsesRulesV2(policy_fields=_policy_v3())
RULES_V4 = OpenAIResponsesRulesV4()


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


def _reasoning_item_or_reference(block: Block, rules: OpenAIResponsesRules) -> Item | None:
    """The reasoning item with its encrypted content when it has it; else, named by its `rs_` id, a
    reference the API resolves to the item it stored (a stored request only: `NOT_STORED`)."""
    item = _reasoning_item(block, rules)
    item_id = block.item_id or block.id
    if item is not None or not item_id.startswith(rules.reasoning_id_prefix):
        return item
    return {"type": "item_reference", "id": item_id}


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
    "reasoning_item_or_reference": _reasoning_item_or_reference,
    "function_call_item": _function_call_item,
    "function_call_output_item": _function_call_output_item,
}


class OpenAIResponsesAdapter(AdapterBase[OpenAIResponsesRules]):
    api = API
    provider = "openai"
    part_renderers = _RENDER

    def __init__(self, version: int, rules: OpenAIResponsesRules) -> None:
        super().__init__(version, rules)
        self._not_stored = self
        if NOT_STORED[rules.not_stored].renderers:
            self._not_stored = _NotStoredTwin(self)

    def build(self, sequence: MessageSequence, params: DispatchParams) -> JsonObject | UnsupportedKind:
        adapter, params = self._for_dispatch(params)
        return AdapterBase.build(adapter, sequence, params)

    def render(
        self, sequence: MessageSequence, params: DispatchParams, cache: RenderCache | None = None
    ) -> RenderOutcome:
        adapter, params = self._for_dispatch(params)
        return AdapterBase.render(adapter, sequence, params, cache)

    def _for_dispatch(
        self, params: DispatchParams
    ) -> tuple[AdapterBase[OpenAIResponsesRules], DispatchParams]:
        """Who renders a dispatch, with what policy: a request with `store: false` is rendered with
        the rules' `not_stored` renderers and, when it asks for `reasoning`, their `include` values
        added to its policy; any other request as this adapter's rules say."""
        policy = params.policy
        if policy.get("store") is not False:
            return self, params
        included = _included(policy, NOT_STORED[self.rules.not_stored].include_with_reasoning)
        return self._not_stored, params if included is policy else replace(params, policy=included)

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


class _NotStoredTwin(OpenAIResponsesAdapter):
    """An adapter's renders of requests with `store: false`: its rules with its `not_stored` renderers in
    place of `renderers`, under a render-cache key of its own (a conversation's prefix rendered for
    a stored request is not reused for one that is not, nor the other way round)."""

    def __init__(self, stored: OpenAIResponsesAdapter) -> None:
        rules = stored.rules
        AdapterBase.__init__(
            self,
            stored.version,
            replace(rules, renderers={**rules.renderers, **NOT_STORED[rules.not_stored].renderers}),
        )
        self._not_stored = self
        self.render_key = f"{stored.adapter_id} store:false"


def _included(policy: Mapping[str, Any], added: tuple[str, ...]) -> Mapping[str, Any]:
    """The policy with `added` in its `include` when it asks for `reasoning`; an `include` that is not a
    list is left for the API to refuse."""
    include = policy.get("include") or []
    if policy.get("reasoning") is None or not isinstance(include, list):
        return policy
    missing = [value for value in added if value not in include]
    return {**policy, "include": [*include, *missing]} if missing else policy


def _message(role: str, content: list[Item]) -> Item:
    return {"type": "message", "role": role, "content": content}


def _assistant_items(rendered: list[Item], rules: OpenAIResponsesRules) -> list[Item]:
    """Assistant run items in order; reasoning items with nothing after them in the run are dropped."""
    if not rules.drop_reasoning_without_following_item:
        return rendered
    out = list(rendered)
    while out and out[-1]["type"] in REASONING_ITEMS:
        out.pop()
    return out


REASONING_ITEMS = frozenset({"reasoning", "item_reference"})
"""A reasoning item, or a reference to one: the only items this adapter refers to are reasoning items."""


OPENAI_RESPONSES_V1 = OpenAIResponsesAdapter(1, RULES_V1)
OPENAI_RESPONSES_V2 = OpenAIResponsesAdapter(2, RULES_V2)
OPENAI_RESPONSES_V3 = OpenAIResponsesAdapter(3, RULES_V3)
OPENAI_RESPONSES_V4 = OpenAIResponsesAdapter(4, RULES_V4)
