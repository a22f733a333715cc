"""Bedrock ConverseStream (`POST /model/{modelId}/converse-stream`): request parsing and the
event script, framed as the binary AWS event stream.

Events: messageStart{role}; per text block contentBlockDelta{delta:{text}}… then
contentBlockStop (text blocks have no start event); per tool call contentBlockStart{start:
{toolUse:{toolUseId, name}}}, contentBlockDelta{delta:{toolUse:{input: <JSON text
fragment>}}}…, contentBlockStop; messageStop{stopReason}; metadata{usage, metrics}. Every
payload carries the `p` padding field the service adds. Errors mid-stream are exception
messages (`:message-type: exception`). The stream names no response: the response's
`x-amzn-RequestId` header is its id. Tool results are `toolResult` blocks of the last user
message; `toolUseId` must match `[a-zA-Z0-9_-]+` (1-64), as the service validates it. Reasoning
(asked for as Claude's, `additionalModelRequestFields.thinking`) comes first:
contentBlockDelta{delta:{reasoningContent:{text}}}…, then {reasoningContent:{signature}}, then
contentBlockStop (tests/fixtures/streams/bedrock_reasoning_tool_use.eventstream). The signature is one
only this API mints and checks, over the reasoning text (signatures.py): a request whose history holds
another is refused, a ValidationException "The model returned the following errors:
messages.N.content.M: Invalid signature in thinking block". An error answer names its type in the
`x-amzn-errortype` header (refusals.py). Thinking on, a tool loop whose first assistant message does
not start with a reasoning block is refused as Claude refuses it through Bedrock (`unthought_loop`): a
ValidationException "The model returned the following errors: messages.N.content.0.type: Expected
`thinking` or `redacted_thinking`, but found `tool_use`. ..." (anomalyco/opencode#3077,
langchain-ai/langchain-aws#844), Claude's words and block types, Anthropic's rule
(`anthropic_messages.loop_opened_without_thinking`). A refused
answer ends with `messageStop{stopReason: "guardrail_intervened"}`, a guardrail's stop (StopReason of
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_MessageStopEvent.html); one the
output limit cut in a call closes the cut call's block and stops with `max_tokens` (the same page).
"""

from __future__ import annotations

import re
from typing import Any

from turnledger.fake_provider.anthropic_messages import LOOP_WITHOUT_THINKING, loop_opened_without_thinking
from turnledger.fake_provider.api import ApiSpec, ScriptContext, output_tokens
from turnledger.fake_provider.errors import BadRequestError
from turnledger.fake_provider.eventstream import EventStreamEvent
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
from turnledger.fake_provider.refusals import ERROR_TYPES
from turnledger.fake_provider.signatures import SignatureRule, Signed

TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def parse(body: dict[str, Any]) -> Conversation:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequestError(
            "1 validation error detected: Value null at 'messages' failed to satisfy constraint"
        )
    tools = tuple(
        ToolSpec(spec["name"], (spec.get("inputSchema") or {}).get("json") or {"type": "object"})
        for tool in (body.get("toolConfig") or {}).get("tools") or []
        if isinstance(tool, dict) and isinstance(spec := tool.get("toolSpec"), dict) and "name" in spec
    )
    names: dict[str, str] = {}
    for i, m in enumerate(messages):
        for j, block in enumerate(m.get("content") or []):
            for kind in ("toolUse", "toolResult"):
                inner = block.get(kind) if isinstance(block, dict) else None
                if isinstance(inner, dict):
                    _check_tool_use_id(
                        inner.get("toolUseId"), f"messages.{i}.member.content.{j}.member.{kind}"
                    )
                    if kind == "toolUse":
                        names[str(inner["toolUseId"])] = str(inner.get("name"))
    thinking = _thinking_on(body)
    refusal = unthought_loop(body) if thinking else None
    if refusal is not None:
        raise refusal
    conv: dict[str, Any] = {
        "model": str(body.get("model", "bedrock-fake")),
        "tools": tools,
        "thinking": thinking,
    }
    last = messages[-1]
    if last.get("role") != "user":
        return Conversation(last=LastTurn.OTHER, **conv)
    blocks = [b for b in last.get("content") or [] if isinstance(b, dict)]
    results = tuple(
        ToolResult(
            call_id=str(r["toolUseId"]),
            tool_name=names.get(str(r["toolUseId"])),
            content=content_text(r.get("content")),
            is_error=r.get("status") == "error",
        )
        for b in blocks
        if isinstance(r := b.get("toolResult"), dict)
    )
    if results:
        return Conversation(last=LastTurn.TOOL_RESULTS, results=results, **conv)
    return Conversation(
        last=LastTurn.USER_TEXT, user_text=content_text(blocks), last_user_part=last_text_part(blocks), **conv
    )


def _thinking_on(body: dict[str, Any]) -> bool:
    """Does the request ask Claude to think (`additionalModelRequestFields.thinking` enabled or adaptive)?"""
    fields = body.get("additionalModelRequestFields")
    thinking = fields.get("thinking") if isinstance(fields, dict) else None
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


CLAUDE_TYPES = {"reasoningContent": "thinking", "toolUse": "tool_use", "toolResult": "tool_result"}
"""A Converse content block's key → the type Claude's refusal names it by (a text block, and any other,
is `text`)."""


def _holds_result(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and "toolResult" in b for b in content)


def _first_type(content: Any) -> str:
    first = content[0] if isinstance(content, list) and content else None
    key = next(iter(first), "text") if isinstance(first, dict) else "text"
    return CLAUDE_TYPES.get(key, "text")


def unthought_loop(body: dict[str, Any]) -> BadRequestError | None:
    """The ValidationException of a thinking request whose current tool loop's first assistant message
    does not start with a reasoning block, or None."""
    found = loop_opened_without_thinking(body.get("messages"), _holds_result, _first_type)
    if found is None:
        return None
    return BadRequestError(
        "The model returned the following errors: "
        + LOOP_WITHOUT_THINKING.format(index=found[0], found=found[1])
    )


def _check_tool_use_id(value: Any, where: str) -> None:
    if not isinstance(value, str) or not TOOL_USE_ID.fullmatch(value):
        raise BadRequestError(
            f"1 validation error detected: Value '{value}' at '{where}.toolUseId' failed to satisfy "
            "constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+"
        )


def request_id(ctx: ScriptContext) -> str:
    raw = ctx.id("", "request", 32).lower()
    return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:32]}"


def _tool_use_id(ctx: ScriptContext, k: int) -> str:
    return ctx.id("tooluse_", f"call{k}", 22)


def _stop_reason(answer: Answer) -> str:
    if answer.refused:
        return "guardrail_intervened"
    if answer.limited:
        return "max_tokens"
    return "tool_use" if answer.is_tool_use else "end_turn"


def script(answer: Answer, ctx: ScriptContext) -> list[EventStreamEvent]:
    rng = ctx.rng
    pad = iter(range(1_000_000))

    def ev(event: str, data: dict[str, Any], terminal: bool = False) -> EventStreamEvent:
        return EventStreamEvent(
            event, {**data, "p": "abcdefghijklmnopqrstuvwxyz"[: next(pad) % 26 + 1]}, terminal
        )

    events = [ev("messageStart", {"role": "assistant"})]
    index = 0
    if answer.thinking:
        for piece in split_text(answer.thinking, rng):
            delta = {"reasoningContent": {"text": piece}}
            events.append(ev("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        delta = {"reasoningContent": {"signature": _signature(answer, ctx)}}
        events.append(ev("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        events.append(ev("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if answer.text:
        for piece in split_text(answer.text, rng):
            events.append(ev("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}))
        events.append(ev("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    for k, call in enumerate(answer.tool_calls):
        start = {"toolUse": {"toolUseId": _tool_use_id(ctx, k), "name": call.name}}
        events.append(ev("contentBlockStart", {"contentBlockIndex": index, "start": start}))
        for piece in split_json(ctx.arguments(answer, k), rng):
            delta = {"toolUse": {"input": piece}}
            events.append(ev("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        events.append(ev("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    events.append(ev("messageStop", {"stopReason": _stop_reason(answer)}, terminal=True))
    out = output_tokens(answer)
    usage = {"inputTokens": ctx.input_tokens, "outputTokens": out, "totalTokens": ctx.input_tokens + out}
    events.append(ev("metadata", {"usage": usage, "metrics": {"latencyMs": 42}}))
    return events


def error_event(ctx: ScriptContext, index: int) -> EventStreamEvent:
    return EventStreamEvent(
        "internalServerException", {"message": "The server encountered an internal error."}, exception=True
    )


def final_object(answer: Answer, ctx: ScriptContext) -> dict[str, Any]:
    import json

    content: list[dict[str, Any]] = []
    if answer.thinking:
        reasoning = {"text": answer.thinking, "signature": _signature(answer, ctx)}
        content.append({"reasoningContent": {"reasoningText": reasoning}})
    if answer.text:
        content.append({"text": answer.text})
    for k, call in enumerate(answer.tool_calls):
        try:
            args = json.loads(ctx.arguments(answer, k))
        except ValueError:
            args = {}
        content.append({"toolUse": {"toolUseId": _tool_use_id(ctx, k), "name": call.name, "input": args}})
    out = output_tokens(answer)
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": _stop_reason(answer),
        "usage": {
            "inputTokens": ctx.input_tokens,
            "outputTokens": out,
            "totalTokens": ctx.input_tokens + out,
        },
        "metrics": {"latencyMs": 42},
    }


def _signed(body: dict[str, Any]) -> list[Signed]:
    """The signed reasoning blocks of the request's messages."""
    return [
        Signed(f"messages.{i}.content.{j}", str(r["signature"]), str(r.get("text") or ""))
        for i, m in enumerate(body.get("messages") or [])
        if isinstance(m, dict)
        for j, b in enumerate(m.get("content") or [])
        if isinstance(b, dict)
        and isinstance(r := (b.get("reasoningContent") or {}).get("reasoningText"), dict)
        and r.get("signature") is not None
    ]


def _invalid_signature(signed: Signed) -> BadRequestError:
    return BadRequestError(
        f"The model returned the following errors: {signed.where}: Invalid signature in thinking block"
    )


SIGNATURES = SignatureRule("bedrock-converse", b"\x12\xaa\x01", _signed, _invalid_signature, binds_text=True)


def _signature(answer: Answer, ctx: ScriptContext) -> str:
    return SIGNATURES.mint(ctx.seed, ctx.basis, "signature", answer.thinking)


def error_headers(status: int) -> dict[str, str]:
    """The error type of an HTTP error, as Bedrock names it: in `x-amzn-errortype` (the body has only
    a message)."""
    types, client_type, server_type = ERROR_TYPES["bedrock-converse"]
    aws_type = types.get(status, server_type if status >= 500 else client_type)
    return {"x-amzn-errortype": f"{aws_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"}


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"message": message}


SPEC = ApiSpec(
    "bedrock-converse",
    parse,
    script,
    error_event,
    final_object,
    error_body,
    late_events=False,
    signatures=SIGNATURES,
    error_headers=error_headers,
)
