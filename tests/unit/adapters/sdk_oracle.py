"""Shape oracle: validate rendered bodies against the official SDK request types (reference 4).

TypedDict params: `validate_python(strict=True)` rejects coercions, draining the lazy
`Iterable` validators makes nested items actually validated, and round-trip equality
(`materialize(validated) == body`) catches keys the TypedDict silently dropped.
google-genai models forbid extra keys but accept both casings, so we compare our
bytes with their camelCase dump. Bedrock has no typed SDK here; its invariant checker
covers it. The SDKs are pinned exactly (private module paths).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

Body = dict[str, Any]


def materialize(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: materialize(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [materialize(x) for x in v]
    if isinstance(v, Iterator):
        return [materialize(x) for x in v]
    return v


class ShapeError(AssertionError):
    pass


def _check_typed(ta: TypeAdapter[Any], body: Body) -> None:
    try:
        validated = materialize(ta.validate_python(body, strict=True))
    except ValidationError as exc:
        raise ShapeError(f"SDK type rejected the body: {exc.errors()[0]}") from None
    if validated != body:
        raise ShapeError(f"round trip changed the body (dropped or coerced keys): {validated} != {body}")


@cache
def _anthropic() -> TypeAdapter[Any]:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return TypeAdapter(MessageCreateParamsNonStreaming)


@cache
def _openai_chat() -> TypeAdapter[Any]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    return TypeAdapter(CompletionCreateParamsNonStreaming)


@cache
def _openai_responses() -> TypeAdapter[Any]:
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    return TypeAdapter(ResponseCreateParamsNonStreaming)


def check_anthropic(body: Body) -> None:
    _check_typed(_anthropic(), body)


def check_openai_chat(body: Body) -> None:
    _check_typed(_openai_chat(), body)


def check_openai_responses(body: Body) -> None:
    _check_typed(_openai_responses(), body)


def check_gemini(body: Body) -> None:
    import orjson
    from google.genai import types

    def roundtrip(model: Any, value: Any) -> Any:
        ta: TypeAdapter[Any] = TypeAdapter(model)
        try:
            parsed = ta.validate_json(orjson.dumps(value), strict=True)
        except ValidationError as exc:
            raise ShapeError(f"google-genai rejected {model}: {exc.errors()[0]}") from None
        return ta.dump_python(parsed, mode="json", by_alias=True, exclude_none=True)

    expected_keys = {"contents", "systemInstruction", "generationConfig", "tools"}
    if set(body) - expected_keys:
        raise ShapeError(f"unexpected top-level keys {set(body) - expected_keys}")
    checks: list[tuple[Any, str]] = [
        (list[types.Content], "contents"),
        (types.GenerationConfig, "generationConfig"),
    ]
    if "systemInstruction" in body:
        checks.append((types.Content, "systemInstruction"))
    if "tools" in body:
        checks.append((list[types.Tool], "tools"))
    for model, key in checks:
        dumped = roundtrip(model, body[key])
        if dumped != body[key]:
            raise ShapeError(f"google-genai round trip of {key} differs: {dumped} != {body[key]}")


ORACLES: dict[str, Callable[[Body], None]] = {
    "anthropic-messages": check_anthropic,
    "openai-chat": check_openai_chat,
    "openai-responses": check_openai_responses,
    "gemini": check_gemini,
}
