"""Gemini (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`): request parsing and the
chunk script.

Wire format: data-only SSE, each `data:` a whole GenerateContentResponse (`candidates[0].content`
with role `model` and `parts`, `responseId`, `modelVersion`); text arrives as `parts[].text`
fragments; a function call arrives whole in one part (`functionCall{name, args}`, without an
`id`, as Gemini 2.x sends it); the last chunk carries `finishReason` and `usageMetadata` (and, after
thinking, the thought signature on an empty text part, as Gemini 2.5 sends it). Without
`alt=sse` the same chunks are one JSON array. Tool results are `functionResponse` parts of the last
user content, one per call of the model content before it (else the API's 400).

A thought-through answer's calls carry a `thoughtSignature` on the first `functionCall` part (only the
first of parallel calls is signed, provider-formats §1d). Signatures are the API's own (signatures.py):
a request whose contents hold one this API did not mint is refused, 400 INVALID_ARGUMENT "Corrupted
thought signature.", except `skip_thought_signature_validator` on a function call, the stand-in Gemini
documents for a call it did not generate (ai.google.dev/gemini-api/docs/thought-signatures, FAQ).
With `FakeProvider(gemini_strict_signatures=True)` it is Gemini 3: every answer's first call is signed,
and a request whose current turn has a step whose first call carries no signature is refused
(`unsigned_step`, `MISSING_SIGNATURE`); Gemini 2.5, where the signature is optional, is the default.

Truncated arguments cannot be expressed on this wire (`args` is an object inside a complete
JSON chunk): the truncate fault becomes what Gemini sends when the model's call is cut or
malformed, a last chunk with `finishReason: MALFORMED_FUNCTION_CALL` and no call.

A refused answer's text chunks are followed by a last chunk with `finishReason: SAFETY`, its blocking
safety rating and no content (provider-formats §2d: "streamed content is empty if blocked";
tests/fixtures/streams/gemini_safety_after_text.sse). An answer the output limit cut in a call ends
with a last chunk with `finishReason: MAX_TOKENS` holding the calls before the cut one, or no part at
all (`{"content": {"role": "model"}}`, as tests/fixtures/streams/gemini_max_tokens_thought.sse ends).
"""

from __future__ import annotations

import json
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
    split_text,
)
from turnledger.fake_provider.signatures import SignatureRule, Signed
from turnledger.fake_provider.sse import SseEvent

PARALLEL_MISMATCH = (
    "Please ensure that the number of function response parts is equal to the number of function call "
    "parts of the function call turn."
)


def parse(body: dict[str, Any]) -> Conversation:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents or not all(isinstance(c, dict) for c in contents):
        raise BadRequestError(
            "* GenerateContentRequest.contents: contents is not specified", param="contents"
        )
    tools = tuple(
        ToolSpec(d["name"], _schema(d))
        for group in body.get("tools") or []
        if isinstance(group, dict)
        for d in group.get("functionDeclarations") or group.get("function_declarations") or []
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    )
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    thinking = (body.get("generationConfig") or {}).get("thinkingConfig") or {}
    conv: dict[str, Any] = {
        "model": str(body.get("model", "gemini-fake")),
        "tools": tools,
        "allow_tools": mode != "NONE",
        "thinking": isinstance(thinking, dict) and thinking.get("includeThoughts") is True,
    }
    last = contents[-1]
    if last.get("role", "user") != "user":
        return Conversation(last=LastTurn.OTHER, **conv)
    parts = [p for p in last.get("parts") or [] if isinstance(p, dict)]
    responses = [p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), dict)]
    if responses:
        calls = _previous_calls(contents)
        if len(calls) != len(responses):
            raise BadRequestError(PARALLEL_MISMATCH, param="contents")
        results = tuple(
            ToolResult(
                call_id=str(r.get("id") or call.get("id") or f"{call.get('name')}#{k}"),
                tool_name=str(r.get("name") or call.get("name")),
                content=_response_text(r.get("response")),
                is_error=isinstance(r.get("response"), dict) and "error" in r["response"],
            )
            for k, (r, call) in enumerate(zip(responses, calls, strict=True))
        )
        return Conversation(last=LastTurn.TOOL_RESULTS, results=results, **conv)
    return Conversation(
        last=LastTurn.USER_TEXT, user_text=content_text(parts), last_user_part=last_text_part(parts), **conv
    )


def _schema(declaration: dict[str, Any]) -> Any:
    """The declared parameters; the API takes proto JSON names in camelCase or snake_case."""
    for key in ("parametersJsonSchema", "parameters_json_schema", "parameters"):
        if isinstance(declaration.get(key), dict):
            return declaration[key]
    return {"type": "object"}


def _previous_calls(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(contents) < 2 or contents[-2].get("role") != "model":
        raise BadRequestError(
            "Please ensure that function response turn comes immediately after a function call turn.",
            param="contents",
        )
    parts = contents[-2].get("parts") or []
    return [
        p["functionCall"] for p in parts if isinstance(p, dict) and isinstance(p.get("functionCall"), dict)
    ]


def _response_text(response: Any) -> str:
    if isinstance(response, dict):
        if "output" in response:
            return content_text(response["output"])
        if "error" in response:
            return json.dumps(response["error"], sort_keys=True)
    return content_text(response)


def response_id(ctx: ScriptContext) -> str:
    return ctx.id("", "response", 22)


FOREIGN_CALL_SIGNATURE = "skip_thought_signature_validator"


def _signed(body: dict[str, Any]) -> list[Signed]:
    """Every part of the request's contents that carries a `thoughtSignature`."""
    return [
        Signed(f"contents[{i}].parts[{j}]", str(p["thoughtSignature"]), on_call="functionCall" in p)
        for i, c in enumerate(body.get("contents") or [])
        if isinstance(c, dict)
        for j, p in enumerate(c.get("parts") or [])
        if isinstance(p, dict) and p.get("thoughtSignature") is not None
    ]


def _corrupted(signed: Signed) -> BadRequestError:
    return BadRequestError("Corrupted thought signature.")


MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required for tools to "
    "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
    "data, function call `default_api:{name}` , position {position}. Please refer to "
    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
"""Gemini 3's 400 INVALID_ARGUMENT, as users quote it (manthanabc/paws#103, lbjlaq/Antigravity-Manager#2157,
nanbingxyz/5ire#405: gemini-3-pro-preview, "this does not happen with gemini-2.5"). `position` is the
model content's place in `contents` counting from 1, as the quoted ones put a first step after one user
content at position 2."""


def _current_turn(contents: list[dict[str, Any]]) -> int:
    """Where the current turn starts: after the last user content that is not only function responses."""
    for i in range(len(contents) - 1, -1, -1):
        content = contents[i]
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role", "user") == "user" and not all("functionResponse" in p for p in parts):
            return i + 1
    return 0


def unsigned_step(body: dict[str, Any]) -> BadRequestError | None:
    """Gemini 3's refusal of a request whose current turn has a step (a model content) whose first
    functionCall part carries no thoughtSignature, or None (provider-formats §1d)."""
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    start = _current_turn(contents)
    for i, content in enumerate(contents[start:], start):
        if content.get("role") != "model":
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        first = next((p for p in parts if isinstance(p.get("functionCall"), dict)), None)
        if first is not None and first.get("thoughtSignature") is None:
            name = first["functionCall"].get("name")
            return BadRequestError(MISSING_SIGNATURE.format(name=name, position=i + 1), param="contents")
    return None


SIGNATURES = SignatureRule(
    "gemini",
    b"\n$\x01",
    _signed,
    _corrupted,
    call_stand_ins=frozenset({FOREIGN_CALL_SIGNATURE}),
    unsigned=unsigned_step,
)


def thought_signature(ctx: ScriptContext) -> str:
    """An opaque token in base64, as Gemini's are (`CiQB…`); the same for the same answer."""
    return SIGNATURES.mint(ctx.seed, ctx.basis, "thought-signature")


def _chunk(
    ctx: ScriptContext, parts: list[dict[str, Any]], finish: str | None = None, answer: Answer | None = None
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    data: dict[str, Any] = {"candidates": [candidate]}
    if answer is not None:
        out = output_tokens(answer)
        data["usageMetadata"] = {
            "promptTokenCount": ctx.input_tokens,
            "candidatesTokenCount": out,
            "totalTokenCount": ctx.input_tokens + out,
        }
    data["modelVersion"] = ctx.model
    data["responseId"] = response_id(ctx)
    return data


BLOCKED_RATING = {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}


def _refusal_chunk(ctx: ScriptContext, answer: Answer) -> dict[str, Any]:
    """The last chunk of a refused answer: its stop and the rating that blocked it, no content."""
    data = _chunk(ctx, [], "SAFETY", answer)
    data["candidates"] = [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [BLOCKED_RATING]}]
    return data


def _limit_chunk(ctx: ScriptContext, answer: Answer) -> dict[str, Any]:
    """The last chunk of an answer the output limit cut in its last call: the calls before it."""
    calls = [_call_part(answer, k, ctx) for k in range(len(answer.tool_calls) - 1)]
    data = _chunk(ctx, calls, "MAX_TOKENS", answer)
    if not calls:
        data["candidates"][0]["content"] = {"role": "model"}
    return data


def _call_part(answer: Answer, k: int, ctx: ScriptContext) -> dict[str, Any]:
    """A call part; the first one signed after thinking, and always by Gemini 3 (strict signatures)."""
    call = answer.tool_calls[k]
    part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.arguments}}
    if k == 0 and (answer.thinking or ctx.strict_signatures):
        part["thoughtSignature"] = thought_signature(ctx)
    return part


def chunks(answer: Answer, ctx: ScriptContext) -> list[dict[str, Any]]:
    rng = ctx.rng
    out: list[dict[str, Any]] = []
    if answer.thinking:
        out.extend(
            _chunk(ctx, [{"text": piece, "thought": True}]) for piece in split_text(answer.thinking, rng)
        )
    if answer.refused:
        out.extend(_chunk(ctx, [{"text": piece}]) for piece in split_text(answer.text, rng) if piece)
        out.append(_refusal_chunk(ctx, answer))
        return out
    if answer.limited:
        out.extend(_chunk(ctx, [{"text": piece}]) for piece in split_text(answer.text, rng) if piece)
        out.append(_limit_chunk(ctx, answer))
        return out
    if answer.text and answer.thinking:
        # as Gemini 2.5 ends a thought-through answer: the signature on an empty text part of the last chunk
        out.extend(_chunk(ctx, [{"text": piece}]) for piece in split_text(answer.text, rng))
        out.append(_chunk(ctx, [{"text": "", "thoughtSignature": thought_signature(ctx)}], "STOP", answer))
        return out
    if answer.text:
        pieces = split_text(answer.text, rng)
        out.extend(_chunk(ctx, [{"text": piece}]) for piece in pieces[:-1])
        out.append(_chunk(ctx, [{"text": pieces[-1]}], "STOP", answer))
        return out
    if not answer.tool_calls:
        out.append(_chunk(ctx, [{"text": ""}], "STOP", answer))
        return out
    if ctx.truncated:
        # the first cut call ends the stream: Gemini reports the malformed call, and sends none of it
        first_cut = min(ctx.truncated)
        calls = [_call_part(answer, k, ctx) for k in range(first_cut)]
        out.append(_chunk(ctx, calls or [{"text": ""}], "MALFORMED_FUNCTION_CALL", answer))
        return out
    calls = [_call_part(answer, k, ctx) for k in range(len(answer.tool_calls))]
    out.append(_chunk(ctx, calls, "STOP", answer))
    return out


def script(answer: Answer, ctx: ScriptContext) -> list[SseEvent]:
    data = chunks(answer, ctx)
    return [SseEvent(None, d, terminal=i == len(data) - 1) for i, d in enumerate(data)]


def error_event(ctx: ScriptContext, index: int) -> SseEvent:
    error = {
        "code": 503,
        "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE",
    }
    return SseEvent(None, {"error": error})


def final_object(answer: Answer, ctx: ScriptContext) -> dict[str, Any]:
    if answer.refused:
        return _refusal_chunk(ctx, answer)
    if answer.limited:
        return _limit_chunk(ctx, answer)
    parts: list[dict[str, Any]] = []
    if answer.text:
        parts.append({"text": answer.text})
    parts.extend(_call_part(answer, k, ctx) for k in range(len(answer.tool_calls)))
    return _chunk(ctx, parts or [{"text": ""}], "STOP", answer)


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    status, number = _GOOGLE_STATUS.get(kind, ("INVALID_ARGUMENT", 400))
    return {"error": {"code": number, "message": message, "status": status}}


_GOOGLE_STATUS = {
    "not_found_error": ("NOT_FOUND", 404),
    "conflict_error": ("ABORTED", 409),
    "invalid_request_error": ("INVALID_ARGUMENT", 400),
}

SPEC = ApiSpec("gemini", parse, script, error_event, final_object, error_body, signatures=SIGNATURES)
