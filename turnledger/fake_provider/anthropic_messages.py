"""Anthropic Messages (`POST /v1/messages`): request parsing and the SSE script.

Wire format: `event: <type>` + `data: <json>` with matching type; message_start, ping, per block
content_block_start / _delta / _stop, message_delta (stop_reason, cumulative usage), message_stop.
A refused answer ends so too, its text block closed, with `stop_reason: "refusal"` (the streaming
classifiers' stop: provider-formats §1c, tests/fixtures/streams/anthropic_refusal.sse). An answer the
output limit cut in a call closes the cut `tool_use` block and stops with `max_tokens`
(tests/fixtures/streams/anthropic_truncated_args.sse).
Tool results arrive as `tool_result` blocks inside the last user message.

A thinking block's `signature` is one only this API mints and checks (signatures.py), over the
thinking text: a request whose history holds another is refused, `invalid_request_error`
"messages.N.content.M: Invalid `signature` in `thinking` block".

With thinking on (`thinking.type` enabled or adaptive), a request in a tool loop whose first assistant
message does not start with a thinking block is refused as the API refuses it (`unthought_loop`,
`LOOP_WITHOUT_THINKING`), whether or not the fake thinks by default (`FakeProvider(thinking=True)`
answers think; the request did not ask).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from turnledger.fake_provider.api import ApiSpec, ScriptContext, output_tokens
from turnledger.fake_provider.errors import BadRequestError
from turnledger.fake_provider.model import (
    Answer,
    Conversation,
    LastTurn,
    ToolResult,
    ToolSpec,
    content_text,
    last_text_part,
    split_json,
    split_text,
)
from turnledger.fake_provider.signatures import SignatureRule, Signed
from turnledger.fake_provider.sse import SseEvent


def parse(body: dict[str, Any]) -> Conversation:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("messages: field required and must be a non-empty list", param="messages")
    tools = tuple(
        ToolSpec(t["name"], t.get("input_schema") or {"type": "object"})
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("name"), str) and "input_schema" in t
    )
    names: dict[str, str] = {}
    for i, m in enumerate(messages):
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            for j, b in enumerate(m["content"]):
                if isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result"):
                    key = "id" if b["type"] == "tool_use" else "tool_use_id"
                    _check_id(b.get(key), f"messages.{i}.content.{j}.{b['type']}.{key}")
                if isinstance(b, dict) and b.get("type") == "tool_use" and m.get("role") == "assistant":
                    names[str(b.get("id"))] = str(b.get("name"))
    last = messages[-1]
    if not isinstance(last, dict):
        raise BadRequestError("messages: every message must be an object", param="messages")
    refusal = unthought_loop(body)
    if refusal is not None:
        raise refusal
    choice = body.get("tool_choice") or {}
    thinking = body.get("thinking") or {}
    conv: dict[str, Any] = {
        "model": str(body.get("model", "claude-fake")),
        "tools": tools,
        "allow_tools": not (isinstance(choice, dict) and choice.get("type") == "none"),
        "parallel": not (isinstance(choice, dict) and choice.get("disable_parallel_tool_use")),
        "thinking": isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"),
    }
    content = last.get("content")
    if last.get("role") != "user":
        return Conversation(last=LastTurn.OTHER, **conv)
    if isinstance(content, list):
        results = tuple(
            ToolResult(
                call_id=str(b.get("tool_use_id")),
                tool_name=names.get(str(b.get("tool_use_id"))),
                content=content_text(b.get("content")),
                is_error=bool(b.get("is_error")),
            )
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"
        )
        if results:
            return Conversation(last=LastTurn.TOOL_RESULTS, results=results, **conv)
    return Conversation(
        last=LastTurn.USER_TEXT,
        user_text=content_text(content),
        last_user_part=last_text_part(content),
        **conv,
    )


TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

THINKING_ON = ("enabled", "adaptive")
THINKING_TYPES = ("thinking", "redacted_thinking")

LOOP_WITHOUT_THINKING = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. "
    "When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding "
    "the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks "
    "from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation "
    "at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
"""The API's 400 invalid_request_error, as users quote it (OpenRouterTeam/ai-sdk-provider#162,
n8n-io/n8n#15715, anthropics/claude-code#1183; on Bedrock and Vertex the same words, anomalyco/opencode#3077
and #8010). `index` is the assistant message the current tool loop opened with: Claude thinks at the
start of a turn only ("Claude will not output another thinking block until after the next
non-tool_result user turn", Anthropic's extended-thinking-with-tool-use cookbook), and a tool-use loop
is one assistant turn, so later steps need not start with thinking."""


def _holds_result(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def _first_type(content: Any) -> str:
    first = content[0] if isinstance(content, list) and content else None
    return str(first.get("type")) if isinstance(first, dict) else "text"


def loop_opened_without_thinking(
    messages: Any, holds_result: Callable[[Any], bool], first_type: Callable[[Any], str]
) -> tuple[int, str] | None:
    """Claude's rule over a request's messages, thinking on: the index of the assistant message the
    current tool loop opened with and the type of its first block (`first_type` of its content, in
    Anthropic's names), when that is no thinking block; else None. The loop runs back from the last
    message, a user message with a tool result (`holds_result`), to the last user message without one."""
    if not isinstance(messages, list) or not messages:
        return None
    if not holds_result(messages[-1]) or messages[-1].get("role") != "user":
        return None
    opening: int | None = None
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if not isinstance(message, dict):
            break
        if message.get("role") == "assistant":
            opening = i
        elif not holds_result(message):
            break
    if opening is None:
        return None
    found = first_type(messages[opening].get("content"))
    return None if found in THINKING_TYPES else (opening, found)


def unthought_loop(body: dict[str, Any]) -> BadRequestError | None:
    """The refusal of a request that turns thinking on in a tool loop whose first assistant message does
    not start with a thinking block, or None."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in THINKING_ON:
        return None
    found = loop_opened_without_thinking(body.get("messages"), _holds_result, _first_type)
    if found is None:
        return None
    return BadRequestError(LOOP_WITHOUT_THINKING.format(index=found[0], found=found[1]))


def _check_id(value: Any, where: str) -> None:
    """Tool use ids are validated by pattern, as the API does (another provider's ids may fail it)."""
    if not isinstance(value, str) or not TOOL_USE_ID.match(value):
        raise BadRequestError(f"{where}: String should match pattern '^[a-zA-Z0-9_-]+$'")


def _ev(data: dict[str, Any], terminal: bool = False) -> SseEvent:
    return SseEvent(str(data["type"]), data, terminal)


def _stop_reason(answer: Answer) -> str:
    if answer.refused:
        return "refusal"
    if answer.limited:
        return "max_tokens"
    return "tool_use" if answer.is_tool_use else "end_turn"


def _message(
    ctx: ScriptContext, content: list[dict[str, Any]], stop: str | None, out_tokens: int
) -> dict[str, Any]:
    return {
        "id": ctx.id("msg_", "message"),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": ctx.input_tokens, "output_tokens": out_tokens},
    }


def script(answer: Answer, ctx: ScriptContext) -> list[SseEvent]:
    rng = ctx.rng
    events = [_ev({"type": "message_start", "message": _message(ctx, [], None, 1)}), _ev({"type": "ping"})]
    index = 0
    if answer.thinking:
        events.append(
            _ev(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                }
            )
        )
        for piece in split_text(answer.thinking, rng):
            events.append(
                _ev(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    }
                )
            )
        signature = _signature(answer, ctx)
        events.append(
            _ev(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": signature},
                }
            )
        )
        events.append(_ev({"type": "content_block_stop", "index": index}))
        index += 1
    if answer.text:
        events.append(
            _ev(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
        )
        for piece in split_text(answer.text, rng):
            events.append(
                _ev(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
            )
        events.append(_ev({"type": "content_block_stop", "index": index}))
        index += 1
    for k, call in enumerate(answer.tool_calls):
        block = {"type": "tool_use", "id": ctx.id("toolu_", f"call{k}"), "name": call.name, "input": {}}
        events.append(_ev({"type": "content_block_start", "index": index, "content_block": block}))
        for piece in ["", *split_json(ctx.arguments(answer, k), rng)]:
            events.append(
                _ev(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
            )
        events.append(_ev({"type": "content_block_stop", "index": index}))
        index += 1
    events.append(
        _ev(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(answer), "stop_sequence": None},
                "usage": {"output_tokens": output_tokens(answer)},
            }
        )
    )
    events.append(_ev({"type": "message_stop"}, terminal=True))
    return events


def error_event(ctx: ScriptContext, index: int) -> SseEvent:
    return _ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


def final_object(answer: Answer, ctx: ScriptContext) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if answer.thinking:
        content.append(
            {"type": "thinking", "thinking": answer.thinking, "signature": _signature(answer, ctx)}
        )
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    for k, call in enumerate(answer.tool_calls):
        raw = ctx.arguments(answer, k)
        try:
            args = json.loads(raw)
        except ValueError:
            args = {}  # what a lenient server-side parse of a cut document leaves
        content.append(
            {"type": "tool_use", "id": ctx.id("toolu_", f"call{k}"), "name": call.name, "input": args}
        )
    return _message(ctx, content, _stop_reason(answer), output_tokens(answer))


def _signed(body: dict[str, Any]) -> list[Signed]:
    """The signed thinking blocks of the request's assistant messages."""
    return [
        Signed(f"messages.{i}.content.{j}", str(b["signature"]), str(b.get("thinking") or ""))
        for i, m in enumerate(body.get("messages") or [])
        if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), list)
        for j, b in enumerate(m["content"])
        if isinstance(b, dict) and b.get("type") == "thinking" and b.get("signature") is not None
    ]


def _invalid_signature(signed: Signed) -> BadRequestError:
    return BadRequestError(f"{signed.where}: Invalid `signature` in `thinking` block")


SIGNATURES = SignatureRule(
    "anthropic-messages", b"\x12\xaa\x01", _signed, _invalid_signature, binds_text=True
)


def _signature(answer: Answer, ctx: ScriptContext) -> str:
    return SIGNATURES.mint(ctx.seed, ctx.basis, "signature", answer.thinking)


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


SPEC = ApiSpec(
    "anthropic-messages", parse, script, error_event, final_object, error_body, signatures=SIGNATURES
)
