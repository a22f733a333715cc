"""Anthropic Messages (`POST /v1/messages`): graph → request body.

Role rules (reference 1c): system text is the top-level `system` list; tool results
travel in a *user* message immediately after the assistant message with the
`tool_use` blocks, all results of one assistant turn in ONE user message and before
any text (text before a `tool_result` is a 400); the server merges consecutive
same-role turns, so we merge them ourselves and keep the results first.

Thinking (version 3, the first to send the policy's `thinking`): with thinking on, the API refuses
a request whose current tool loop did not open with a thinking block (400 "messages.N.content.0.type:
Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final
`assistant` message must start with a thinking block ..."), in every request of that loop. A tool loop
is one assistant turn: the assistant messages after the last user message that holds no tool result,
the request ending on one that does; Claude thinks at the start of the turn only ("will not output
another thinking block until after the next non-tool_result user turn"), so it is the turn's FIRST
assistant message that must start with thinking. The adapter sends only thinking Anthropic signed
(`adapters/signatures.py`), so a loop another API opened (a gateway's fallback from Gemini, OpenAI or
Bedrock), or one Claude opened without thinking, can never meet the rule. Version 3 then sends the
request without `thinking` (the API's own advice: "To avoid this requirement, disable `thinking`"),
and without every policy field that needs it (`policy_without_loop_thinking`), for as long as that
loop lasts; the next user message opens a turn that thinks again. The manifest's bytes show it.
The rule is Claude's, shared with bedrock-converse@2 (`adapters/tool_loop.py`).
"""

from __future__ import annotations

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
from turnledger.adapters.call_ids import IdRule, wire_call_id
from turnledger.adapters.layout import BodyLayout
from turnledger.adapters.policy_rules import CLAUDE_RULES
from turnledger.adapters.profiles import ANTHROPIC_IDS
from turnledger.adapters.signatures import own_signature
from turnledger.adapters.skeleton import AdapterBase, PartRenderer
from turnledger.adapters.tool_loop import policy_in_loop, unthought_loop
from turnledger.adapters.turns import RenderedTurns, system_aside_turns
from turnledger.model.graph import Block
from turnledger.model.limits import is_blank

API = "anthropic-messages"

Part = dict[str, Any]


def _renderers_v1() -> dict[str, str]:
    return {
        "text": "text",
        "thinking": "thinking",
        "tool_call": "tool_use",
        "tool_result": "tool_result",
        "retrieved_snippet": "scoped_text",
        "compression_artifact": "scoped_text",
    }


def _policy_v1() -> dict[str, str]:
    # The pinned request type (anthropic 2.14.0 MessageCreateParams) has no temperature,
    # top_p or top_k any more; sending them would be keys the API no longer documents.
    # `stream` is a dispatch policy, not a transport detail: the manifest fixes the bytes sent.
    return {"stop_sequences": "stop_sequences", "stream": "stream"}


@dataclass(frozen=True)
class AnthropicRules:
    """The Anthropic Messages rules table (data; its `as_data()` is part of the adapter digest)."""

    system_placement: str = "top_level_system_text_blocks"
    tool_role_becomes: str = "user"
    merge_same_role: bool = True
    parallel_results: str = "one_user_message_after_assistant"
    results_before_text: bool = True
    error_encoding: str = "is_error_true"
    cancel_text: str = "Tool call cancelled before it completed."
    empty_error_text: str = "Tool call failed."
    unsigned_thinking: str = "drop"  # the API rejects thinking blocks without a signature
    stub_tools_when_history_has_tools: bool = True
    scoped_notice: str | None = SCOPED_NOTICE
    max_tokens_field: str = "max_tokens"
    renderers: dict[str, str] = field(default_factory=_renderers_v1)
    policy_fields: dict[str, str] = field(default_factory=_policy_v1)

    def as_data(self) -> JsonObject:
        return asdict(self)

    def wire_id(self, call_id: str | None) -> str | None:
        """The call id as sent: versions 0 and 1 send the graph's id as it is."""
        return call_id

    @property
    def policy_without_loop_thinking(self) -> tuple[str, ...]:
        """The policy keys (dotted paths, `tool_loop.policy_in_loop`) left out of a request whose tool
        loop did not open with thinking the adapter sends. Versions 0 to 2 send no `thinking`, so they
        leave nothing out, and the field is not in their rules table (nor their digest)."""
        return ()


@dataclass(frozen=True)
class AnthropicRulesV2(AnthropicRules):
    """Version 2: call ids the API would refuse (not `^[a-zA-Z0-9_-]+$`, e.g. another provider's) are
    sent as stable mapped ids, on the tool_use and on its tool_result alike."""

    call_ids: IdRule = ANTHROPIC_IDS

    def wire_id(self, call_id: str | None) -> str | None:
        return wire_call_id(self.call_ids, call_id)


def _policy_v3() -> dict[str, str]:
    """Version 3 passes the policy's `thinking` as it is (`{"type": "enabled", "budget_tokens": N}` or
    `{"type": "adaptive"}`): without it Claude never thinks, and no thinking block is ever signed."""
    return {**_policy_v1(), "thinking": "thinking"}


@dataclass(frozen=True)
class AnthropicRulesV3(AnthropicRulesV2):
    """Version 3: the policy's `thinking` is sent, except in a tool loop that did not open with
    thinking the adapter sends (the module docstring says why): then the request goes without the
    policy fields named here. `budget_tokens` travels inside `thinking`, and the adapter sends no
    interleaved-thinking beta header, so `thinking` is all that depends on it."""

    policy_fields: dict[str, str] = field(default_factory=_policy_v3)
    policy_without_loop_thinking: tuple[str, ...] = ("thinking",)


RULES_V1 = AnthropicRules()
RULES_V2 = AnthropicRulesV2()
RULES_V3 = AnthropicRulesV3()

# Version 0: the adapter as it was before thinking blocks and scoped inputs existed.
# Kept registered so a rollback still reads the same graph; a graph with a newer kind
# gets UnsupportedKind (PAUSED), never a flattened string.
RULES_V0 = AnthropicRules(
    scoped_notice=None,
    renderers={"text": "text", "tool_call": "tool_use", "tool_result": "tool_result"},
)


def _text(block: Block, rules: AnthropicRules) -> Part | None:
    # whitespace-only text blocks are a 400 ("text content blocks must contain non-whitespace text")
    return {"type": "text", "text": block.text} if block.text and not is_blank(block.text) else None


def _thinking(block: Block, rules: AnthropicRules) -> Part | None:
    signature = own_signature(block, API)
    if not signature:
        return None
    return {"type": "thinking", "thinking": block.text or "", "signature": signature}


def _scoped_text(block: Block, rules: AnthropicRules) -> Part | None:
    return {"type": "text", "text": delimited_scoped_text(block)}


def _tool_use(block: Block, rules: AnthropicRules) -> Part | None:
    return {
        "type": "tool_use",
        "id": rules.wire_id(block.call_id),
        "name": block.tool_name,
        "input": parse_arguments(block),
    }


def _tool_result(block: Block, rules: AnthropicRules) -> Part | None:
    part: Part = {"type": "tool_result", "tool_use_id": rules.wire_id(block.call_id)}
    texts: list[str] = []
    if is_cancel(block):
        texts.append(rules.cancel_text)
    if block.text and not is_blank(block.text):  # a blank text block is a 400, as in a message
        texts.append(block.text)
    if is_failure(block):
        part["is_error"] = True
        if not texts:
            texts.append(rules.empty_error_text)
    if texts:
        part["content"] = [{"type": "text", "text": t} for t in texts]
    return part


_RENDER: dict[str, PartRenderer[AnthropicRules]] = {
    "text": _text,
    "thinking": _thinking,
    "scoped_text": _scoped_text,
    "tool_use": _tool_use,
    "tool_result": _tool_result,
}


def _text_sent(block: Block) -> bool:
    return block.text is not None and not is_blank(block.text)


def _thinking_sent(block: Block) -> bool:
    return bool(own_signature(block, API))


def _always_sent(block: Block) -> bool:
    return True


SENT: dict[str, Callable[[Block], bool]] = {
    "text": _text_sent,
    "thinking": _thinking_sent,
    "scoped_text": _always_sent,
    "tool_use": _always_sent,
    "tool_result": _always_sent,
}
"""Renderer name → does its part go in the request (the renderer returns one)? Read without rendering,
so deciding a request's policy renders no block a cached prefix holds already."""


def _sent(block: Block, rules: AnthropicRules) -> bool:
    """Does the block's part go in the request?"""
    return SENT[rules.renderers[block.kind]](block)


def _is_tool_result(part: Part) -> bool:
    return bool(part["type"] == "tool_result")


class AnthropicMessagesAdapter(AdapterBase[AnthropicRules]):
    api = API
    provider = "anthropic"
    part_renderers = _RENDER

    def body_layout(self, rules: AnthropicRules) -> BodyLayout:
        return BodyLayout(
            turns="messages",
            max_tokens=rules.max_tokens_field,
            system=("system",),
            stub_tools=rules.stub_tools_when_history_has_tools,
        )

    def turns(self, runs: list[Run], notice: str | None) -> RenderedTurns:
        rules = self.rules
        return system_aside_turns(
            runs,
            self.render_block,
            system=[{"type": "text", "text": notice}] if notice else [],
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
        tool loop that did not open with a thinking block this adapter sends (`adapters/tool_loop.py`)."""
        rules = self.rules
        return policy_in_loop(
            params.policy,
            rules.policy_without_loop_thinking,
            lambda: unthought_loop(earlier, new, lambda block: _sent(block, rules)),
        )

    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        tool: JsonObject = {"name": name, "input_schema": schema}
        if description:
            tool["description"] = description
        return tool


ANTHROPIC_MESSAGES_V1 = AnthropicMessagesAdapter(1, RULES_V1)
ANTHROPIC_MESSAGES_V2 = AnthropicMessagesAdapter(2, RULES_V2)
ANTHROPIC_MESSAGES_V3 = AnthropicMessagesAdapter(3, RULES_V3, CLAUDE_RULES)
ANTHROPIC_MESSAGES_V0 = AnthropicMessagesAdapter(0, RULES_V0)
