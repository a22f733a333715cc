"""OpenAI Chat Completions (`POST /v1/chat/completions`): request parsing and the chunk script.

Wire format: data-only SSE of `chat.completion.chunk` objects; tool call fragments routed by
`delta.tool_calls[].index` (id/type/name on the first fragment only); `finish_reason` on a last chunk with
an empty delta; an optional usage chunk (`choices: []`) with `stream_options.include_usage`; `data: [DONE]`.
A refused answer ends so too, with `finish_reason: "content_filter"` (provider-formats §2b,
tests/fixtures/streams/openai_chat_content_filter.sse); one the output limit cut in a call, with
`finish_reason: "length"` after the cut fragment (tests/fixtures/streams/openai_chat_truncated_length.sse).
It streams no reasoning: an answer of thinking alone (the `thinking_only` fault) is blank text and `stop`.
Tool results are trailing `role: "tool"` messages.
"""

from __future__ import annotations

from typing import Any

from turnledger.fake_provider.api import ApiSpec, ScriptContext, output_tokens
from turnledger.fake_provider.errors import BadRequestError
from turnledger.fake_provider.ids import CREATED_AT
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
from turnledger.fake_provider.sse import DONE, SseEvent

FINGERPRINT = "fp_fake0001"


def parse(body: dict[str, Any]) -> Conversation:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequestError("'messages' must be a non-empty array of objects", param="messages")
    tools = tuple(
        ToolSpec(t["function"]["name"], t["function"].get("parameters") or {"type": "object"})
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
    )
    names: dict[str, str] = {}
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        for j, tc in enumerate(calls or []):
            if isinstance(tc, dict) and isinstance(tc.get("function"), dict):
                _check_length(tc.get("id"), f"messages[{i}].tool_calls[{j}].id")
                names[str(tc.get("id"))] = str(tc["function"].get("name"))
        if m.get("role") == "tool":
            _check_length(m.get("tool_call_id"), f"messages[{i}].tool_call_id")
    conv: dict[str, Any] = {
        "model": str(body.get("model", "gpt-fake")),
        "tools": tools,
        "allow_tools": body.get("tool_choice") != "none",
        "parallel": body.get("parallel_tool_calls", True) is not False,
    }
    last = messages[-1]
    if last.get("role") == "tool":
        trailing = []
        for m in reversed(messages):
            if m.get("role") != "tool":
                break
            trailing.append(m)
        results = tuple(
            ToolResult(
                str(m.get("tool_call_id")),
                names.get(str(m.get("tool_call_id"))),
                content_text(m.get("content")),
            )
            for m in reversed(trailing)
        )
        return Conversation(last=LastTurn.TOOL_RESULTS, results=results, **conv)
    if last.get("role") == "user":
        return Conversation(
            last=LastTurn.USER_TEXT,
            user_text=content_text(last.get("content")),
            last_user_part=last_text_part(last.get("content")),
            **conv,
        )
    return Conversation(last=LastTurn.OTHER, **conv)


MAX_CALL_ID = 40


def _check_length(value: Any, where: str) -> None:
    if isinstance(value, str) and len(value) > MAX_CALL_ID:
        raise BadRequestError(
            f"Invalid '{where}': string too long. Expected a string with maximum length {MAX_CALL_ID}, "
            f"but got a string with length {len(value)} instead.",
            param=where,
        )


def _include_usage(ctx: ScriptContext) -> bool:
    opts = ctx.request.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def _chunk(ctx: ScriptContext, delta: dict[str, Any], finish: str | None = None) -> SseEvent:
    data: dict[str, Any] = {
        "id": ctx.id("chatcmpl-", "completion"),
        "object": "chat.completion.chunk",
        "created": CREATED_AT,
        "model": ctx.model,
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if _include_usage(ctx):
        data["usage"] = None
    return SseEvent(None, data)


def _finish(answer: Answer) -> str:
    if answer.refused:
        return "content_filter"
    if answer.limited:
        return "length"
    return "tool_calls" if answer.is_tool_use else "stop"


def _usage(answer: Answer, ctx: ScriptContext) -> dict[str, int]:
    out = output_tokens(answer)
    return {
        "prompt_tokens": ctx.input_tokens,
        "completion_tokens": out,
        "total_tokens": ctx.input_tokens + out,
    }


def script(answer: Answer, ctx: ScriptContext) -> list[SseEvent]:
    rng = ctx.rng
    first: dict[str, Any] = {"role": "assistant", "content": "" if answer.text else None, "refusal": None}
    events = [_chunk(ctx, first)]
    if answer.text:
        events.extend(_chunk(ctx, {"content": piece}) for piece in split_text(answer.text, rng))
    for k, call in enumerate(answer.tool_calls):
        head = {
            "index": k,
            "id": ctx.id("call_", f"call{k}"),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        events.append(_chunk(ctx, {"tool_calls": [head]}))
        for piece in split_json(ctx.arguments(answer, k), rng):
            events.append(_chunk(ctx, {"tool_calls": [{"index": k, "function": {"arguments": piece}}]}))
    events.append(_chunk(ctx, {}, _finish(answer)))
    if _include_usage(ctx):
        events.append(
            SseEvent(
                None,
                {
                    "id": ctx.id("chatcmpl-", "completion"),
                    "object": "chat.completion.chunk",
                    "created": CREATED_AT,
                    "model": ctx.model,
                    "system_fingerprint": FINGERPRINT,
                    "choices": [],
                    "usage": _usage(answer, ctx),
                },
            )
        )
    events.append(SseEvent(None, DONE, terminal=True))
    return events


def error_event(ctx: ScriptContext, index: int) -> SseEvent:
    return SseEvent(
        None,
        {
            "error": {
                "message": "The server had an error while processing your request. Sorry about that!",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
    )


def final_object(answer: Answer, ctx: ScriptContext) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None, "refusal": None}
    if answer.tool_calls:
        message["tool_calls"] = [
            {
                "id": ctx.id("call_", f"call{k}"),
                "type": "function",
                "function": {"name": c.name, "arguments": ctx.arguments(answer, k)},
            }
            for k, c in enumerate(answer.tool_calls)
        ]
    return {
        "id": ctx.id("chatcmpl-", "completion"),
        "object": "chat.completion",
        "created": CREATED_AT,
        "model": ctx.model,
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(answer)}],
        "usage": _usage(answer, ctx),
    }


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


SPEC = ApiSpec("openai-chat", parse, script, error_event, final_object, error_body, streams_thinking=False)
