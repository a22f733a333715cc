"""OpenAI Responses (`POST /v1/responses`): request parsing, the typed SSE script, response objects.

Wire format: `event: <type>` + `data: <json>`, every event with a `sequence_number` that increases by one
per response (the resume cursor of background mode). Items: `message` (`msg_…`) with `output_text`
parts, `function_call` (`fc_…` item id, `call_…` call id). Tool results are trailing
`function_call_output` items of `input`.

A request with `reasoning` (any effort) is answered by a reasoning model: the output starts with a
`reasoning` item (`rs_…`) whose summary streams as `response.reasoning_summary_text.delta` (always,
whatever `reasoning.summary` says: a fake's simplification), shaped as
tests/fixtures/streams/openai_responses_tools.sse. When `include` names
`reasoning.encrypted_content`, the item's `output_item.done` (and the final output) carries its
`encrypted_content`, a token only this API mints (signatures.py). A reasoning item in `input` is
checked as the API checks it (provider-formats §1b): it must be followed by an item of its answer
(a function call or an assistant message), else "Item 'rs_…' of type 'reasoning' was provided without
its required following item."; its `encrypted_content` must be one this API minted, else "The
encrypted content gAAA...XXXX could not be verified." (code `invalid_encrypted_content`).
A call of an answer that had a reasoning item must come back after that item (the answer's other
calls and its message may stand between), else "Item 'fc_…' of type 'function_call' was provided
without its required 'reasoning' item: 'rs_…'." (invalid_request_error, param `input`, as users quote
it: continuedev/continue#10018, cline/cline#12242). The fake can tell only for a call id it minted
itself (`ReasonedCalls`, kept by the server); any other call goes unchecked.
A reasoning item may also come back by its id alone, as an `item_reference` (`{"type":
"item_reference", "id": "rs_…"}`) or as the item without `encrypted_content`: the API then looks up the
item it stored. The server keeps the reasoning ids of the answers it gave to stored requests (`store`
not false, the API's default), and takes such an item when the request is stored and the id is one of
them; else it answers 404 (invalid_request_error) "Item with id 'rs_…' not found." and, for a
request with `store: false`, adds "Items are not persisted when `store` is set to false. Try again
with `store` set to true, or remove this item from your input." (as users quote the API:
vercel/ai#7543, can1357/oh-my-pi#41). Found, it counts as the reasoning item that leads its answer's
calls, and must be followed as one.

A refused answer ends with its message item done with status `incomplete` and a terminal
`response.incomplete` whose `incomplete_details.reason` is `content_filter` (provider-formats §2c,
tests/fixtures/streams/openai_responses_content_filter.sse). One the output limit cut in a call ends
after the cut argument deltas, the call's item never done (`incomplete` in the final output), with
`response.incomplete` for `max_output_tokens` (tests/fixtures/streams/openai_responses_incomplete.sse).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
from turnledger.fake_provider.signatures import SignatureRule, Signed, abbreviated
from turnledger.fake_provider.sse import SseEvent

MAX_CALL_ID = 64
REFUSED_DETAILS = {"reason": "content_filter"}
"""The `incomplete_details` of a refused answer."""
LIMITED_DETAILS = {"reason": "max_output_tokens"}
"""The `incomplete_details` of an answer the output limit cut."""
TERMINAL_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})
ENCRYPTED_CONTENT = "reasoning.encrypted_content"
"""The `include` value that asks for each reasoning item's encrypted content."""
FOLLOWS_REASONING = frozenset({"function_call", "message"})
"""The items a reasoning item of an answer may be followed by (an assistant message, a call)."""


def parse(body: dict[str, Any]) -> Conversation:
    raw = body.get("input")
    if isinstance(raw, str):
        items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": raw}]
    elif isinstance(raw, list) and raw and all(isinstance(i, dict) for i in raw):
        items = raw
    else:
        raise BadRequestError("'input' must be a string or a non-empty array of items", param="input")
    tools = tuple(
        ToolSpec(t["name"], t.get("parameters") or {"type": "object"})
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str)
    )
    for n, item in enumerate(items):
        call_id = item.get("call_id")
        if isinstance(call_id, str) and len(call_id) > MAX_CALL_ID:
            raise BadRequestError(
                f"Invalid 'input[{n}].call_id': string too long. Expected a string with maximum length "
                f"{MAX_CALL_ID}, but got a string with length {len(call_id)} instead.",
                param=f"input[{n}].call_id",
            )
    _check_reasoning_followed(items)
    names = {str(i.get("call_id")): str(i.get("name")) for i in items if i.get("type") == "function_call"}
    conv: dict[str, Any] = {
        "model": str(body.get("model", "gpt-fake")),
        "tools": tools,
        "allow_tools": body.get("tool_choice") != "none",
        "parallel": body.get("parallel_tool_calls", True) is not False,
        "thinking": isinstance(body.get("reasoning"), dict),
    }
    last = items[-1]
    if last.get("type") == "function_call_output":
        trailing = []
        for item in reversed(items):
            if item.get("type") != "function_call_output":
                break
            trailing.append(item)
        results = tuple(
            ToolResult(str(i.get("call_id")), names.get(str(i.get("call_id"))), content_text(i.get("output")))
            for i in reversed(trailing)
        )
        return Conversation(last=LastTurn.TOOL_RESULTS, results=results, **conv)
    if last.get("type", "message") == "message" and last.get("role") == "user":
        return Conversation(
            last=LastTurn.USER_TEXT,
            user_text=content_text(last.get("content")),
            last_user_part=last_text_part(last.get("content")),
            **conv,
        )
    return Conversation(last=LastTurn.OTHER, **conv)


def _of_an_answer(item: dict[str, Any]) -> bool:
    """Is the item one a reasoning item of an answer may be followed by (a call, an assistant message)?"""
    kind = item.get("type", "message" if "role" in item else None)
    return kind in FOLLOWS_REASONING and (kind != "message" or item.get("role") == "assistant")


def _check_reasoning_followed(items: list[dict[str, Any]]) -> None:
    """A reasoning item must be followed by an item of its answer: a call, or an assistant message."""
    for n, item in enumerate(items):
        if item.get("type") != "reasoning":
            continue
        if not _of_an_answer(items[n + 1] if n + 1 < len(items) else {}):
            raise BadRequestError(
                f"Item '{item.get('id')}' of type 'reasoning' was provided without its required "
                "following item.",
                param="input",
            )


@dataclass(frozen=True, slots=True)
class ReasonedCall:
    """A call of an answer that had a reasoning item: the call's item id and the reasoning item's."""

    item_id: str
    reasoning_id: str


@dataclass
class ReasonedCalls:
    """The calls this server answered after a reasoning item, by call id: which reasoning item each
    must come back after; and the reasoning items it stored, which may come back by id alone."""

    by_call_id: dict[str, ReasonedCall] = field(default_factory=dict)
    stored: set[str] = field(default_factory=set)

    def remember(self, answer: Answer, ctx: ScriptContext) -> None:
        items = _items(answer, ctx)
        if items and items[0]["type"] == "reasoning":
            self.by_call_id.update(
                (item["call_id"], ReasonedCall(item["id"], items[0]["id"]))
                for item in items
                if item["type"] == "function_call"
            )
            if _stored(ctx.request):
                self.stored.add(items[0]["id"])

    def check(self, body: dict[str, Any]) -> None:
        """Refuse the first item sent by id alone that is not stored, then the first call of the input
        known to need a reasoning item that does not lead it."""
        items = body.get("input")
        if not isinstance(items, list):
            return
        self._check_by_id(items, _stored(body))
        for n, item in enumerate(items):
            known = self.by_call_id.get(str(item.get("call_id")))
            if (
                item.get("type") == "function_call"
                and known is not None
                and _leading_reasoning(items[:n]) != known.reasoning_id
            ):
                raise BadRequestError(
                    f"Item '{known.item_id}' of type 'function_call' was provided without its required "
                    f"'reasoning' item: '{known.reasoning_id}'.",
                    param="input",
                )

    def _check_by_id(self, items: list[dict[str, Any]], stored: bool) -> None:
        """Items sent by id alone must name a reasoning item this server stored, in a stored request,
        and be followed as a reasoning item is."""
        for n, item in enumerate(items):
            item_id = _by_id_alone(item)
            if item_id is None:
                continue
            if not stored or item_id not in self.stored:
                raise BadRequestError(
                    f"Item with id '{item_id}' not found." + ("" if stored else NOT_PERSISTED),
                    status=404,
                    param="input",
                    kind="invalid_request_error",
                )
            if not _of_an_answer(items[n + 1] if n + 1 < len(items) else {}):
                raise BadRequestError(
                    f"Item '{item_id}' of type 'reasoning' was provided without its required following item.",
                    param="input",
                )


NOT_PERSISTED = (
    " Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove"
    " this item from your input."
)
"""What the API adds to "Item with id '…' not found." for a request with `store: false`."""


def _stored(request: dict[str, Any]) -> bool:
    """Is the request stored? (`store` is true unless the request says false.)"""
    return request.get("store", True) is not False


def _by_id_alone(item: dict[str, Any]) -> str | None:
    """The id of an item the API must look up: an `item_reference`, or a reasoning item without its
    encrypted content."""
    kind = item.get("type")
    if kind == "item_reference" or (kind == "reasoning" and item.get("encrypted_content") is None):
        return str(item.get("id"))
    return None


def _leading_reasoning(before: list[dict[str, Any]]) -> object:
    """The id of the reasoning item that leads the answer the next item is in: the nearest item before
    it other than the answer's calls and assistant messages, when that is a reasoning item or a
    reference to one."""
    for item in reversed(before):
        if not _of_an_answer(item):
            return item.get("id") if item.get("type") in ("reasoning", "item_reference") else None
    return None


def _signed(body: dict[str, Any]) -> list[Signed]:
    """The encrypted content of every reasoning item of the request's input."""
    items = body.get("input")
    return [
        Signed(f"input[{n}]", str(item["encrypted_content"]))
        for n, item in enumerate(items if isinstance(items, list) else [])
        if isinstance(item, dict)
        and item.get("type") == "reasoning"
        and item.get("encrypted_content") is not None
    ]


def _unverified(signed: Signed) -> BadRequestError:
    return BadRequestError(
        f"The encrypted content {abbreviated(signed.token)} could not be verified.",
        code="invalid_encrypted_content",
    )


SIGNATURES = SignatureRule(
    "openai-responses",
    b"\x80" + CREATED_AT.to_bytes(8, "big"),  # a Fernet token's version and time: "gAAAAABo…"
    _signed,
    _unverified,
    urlsafe=True,
)


def response_id(ctx: ScriptContext) -> str:
    return ctx.id("resp_", "response", 40)


def response_object(
    ctx: ScriptContext,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    req = ctx.request
    tools = [t for t in req.get("tools") or [] if isinstance(t, dict)]
    return {
        "id": response_id(ctx),
        "object": "response",
        "created_at": CREATED_AT,
        "status": status,
        "background": ctx.background,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": req.get("instructions"),
        "max_output_tokens": req.get("max_output_tokens"),
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": req.get("parallel_tool_calls", True) is not False,
        "previous_response_id": req.get("previous_response_id"),
        "store": req.get("store", True) is not False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": req.get("tool_choice", "auto"),
        "tools": tools,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": req.get("metadata") or {},
    }


def _usage(answer: Answer, ctx: ScriptContext) -> dict[str, Any]:
    out = output_tokens(answer)
    return {
        "input_tokens": ctx.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": len(answer.thinking) // 4},
        "total_tokens": ctx.input_tokens + out,
    }


def _items(answer: Answer, ctx: ScriptContext) -> list[dict[str, Any]]:
    """The final output items."""
    items: list[dict[str, Any]] = []
    if answer.thinking:
        items.append(_reasoning_item(answer, ctx))
    if answer.text:
        items.append(
            {
                "type": "message",
                "id": ctx.id("msg_", "message", 40),
                "status": "incomplete" if answer.refused else "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}],
            }
        )
    cut = len(answer.tool_calls) - 1 if answer.limited else None
    for k, call in enumerate(answer.tool_calls):
        items.append(
            {
                "type": "function_call",
                "id": ctx.id("fc_", f"call{k}", 40),
                "call_id": ctx.id("call_", f"call{k}"),
                "name": call.name,
                "arguments": ctx.arguments(answer, k),
                "status": "incomplete" if k == cut else "completed",
            }
        )
    return items


def _reasoning_item(answer: Answer, ctx: ScriptContext) -> dict[str, Any]:
    item: dict[str, Any] = {"id": ctx.id("rs_", "reasoning", 40), "type": "reasoning"}
    include = ctx.request.get("include")
    if isinstance(include, list) and ENCRYPTED_CONTENT in include:
        item["encrypted_content"] = SIGNATURES.mint(ctx.seed, ctx.basis, "encrypted-content")
    item["summary"] = [{"type": "summary_text", "text": answer.thinking}]
    return item


def script(answer: Answer, ctx: ScriptContext) -> list[SseEvent]:
    rng = ctx.rng
    events: list[SseEvent] = []

    def add(data: dict[str, Any], terminal: bool = False) -> None:
        data["sequence_number"] = len(events)
        events.append(SseEvent(str(data["type"]), data, terminal))

    add(
        {
            "type": "response.created",
            "response": response_object(ctx, "queued" if ctx.background else "in_progress", []),
        }
    )
    add({"type": "response.in_progress", "response": response_object(ctx, "in_progress", [])})
    items = _items(answer, ctx)
    for out_index, item in enumerate(items):
        if item["type"] == "reasoning":
            add(
                {
                    "type": "response.output_item.added",
                    "output_index": out_index,
                    "item": {"id": item["id"], "type": "reasoning", "summary": []},
                }
            )
            where = {"item_id": item["id"], "output_index": out_index, "summary_index": 0}
            summary = {"type": "summary_text", "text": ""}
            add({"type": "response.reasoning_summary_part.added", **where, "part": summary})
            for piece in split_text(answer.thinking, rng):
                add({"type": "response.reasoning_summary_text.delta", **where, "delta": piece})
            add({"type": "response.reasoning_summary_text.done", **where, "text": answer.thinking})
            add(
                {
                    "type": "response.reasoning_summary_part.done",
                    **where,
                    "part": {**summary, "text": answer.thinking},
                }
            )
        elif item["type"] == "message":
            text = answer.text
            add(
                {
                    "type": "response.output_item.added",
                    "output_index": out_index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {"item_id": item["id"], "output_index": out_index, "content_index": 0}
            add({"type": "response.content_part.added", **where, "part": part})
            for piece in split_text(text, rng):
                add({"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []})
            add({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
            add({"type": "response.content_part.done", **where, "part": {**part, "text": text}})
        else:
            args = item["arguments"]
            add(
                {
                    "type": "response.output_item.added",
                    "output_index": out_index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            where = {"item_id": item["id"], "output_index": out_index}
            for piece in split_json(args, rng):
                add({"type": "response.function_call_arguments.delta", **where, "delta": piece})
            if item["status"] == "incomplete":
                break  # cut by the output limit: the call is never done
            add(
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "name": item["name"],
                    "arguments": args,
                }
            )
        add({"type": "response.output_item.done", "output_index": out_index, "item": item})
    final = final_object(answer, ctx)
    add({"type": f"response.{final['status']}", "response": final}, terminal=True)
    return events


def error_event(ctx: ScriptContext, index: int) -> SseEvent:
    error = {"code": "server_error", "message": "The model failed to generate a response."}
    data: dict[str, Any] = {
        "type": "response.failed",
        "response": response_object(ctx, "failed", [], error=error),
    }
    data["sequence_number"] = index
    return SseEvent("response.failed", data)


def final_object(answer: Answer, ctx: ScriptContext) -> dict[str, Any]:
    """The finished response: `completed`, or `incomplete` for a content filter when refused and for
    `max_output_tokens` when the output limit cut it."""
    if answer.refused or answer.limited:
        details = REFUSED_DETAILS if answer.refused else LIMITED_DETAILS
        return response_object(
            ctx, "incomplete", _items(answer, ctx), _usage(answer, ctx), None, dict(details)
        )
    return response_object(ctx, "completed", _items(answer, ctx), _usage(answer, ctx))


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


SPEC = ApiSpec(
    "openai-responses", parse, script, error_event, final_object, error_body, signatures=SIGNATURES
)
