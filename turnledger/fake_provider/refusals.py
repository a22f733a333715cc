"""Answers that refuse a generation request before any stream: HTTP errors as each API sends them.

Two faults (faults.py) end here: `rate_limited=N` is the API's throttling answer (HTTP 429) asking
the client to come back in N ms, `http_status=N` the API's error answer with status N. Each API says
it its own way:

| API | error type in | a retry delay in |
|---|---|---|
| Anthropic Messages | `{"type": "error", "error": {"type": ...}}` | `retry-after` (s), `retry-after-ms` |
| OpenAI Chat, Responses | `{"error": {"type": ..., "code": ...}}` | `retry-after` (s), `retry-after-ms` |
| Gemini | `{"error": {"code": N, "status": ...}}` | a `google.rpc.RetryInfo` detail's `retryDelay` |
| Bedrock | the `x-amzn-errortype` header; body `{"message": ...}` | none (the client backs off) |

A status with no row of its own gets the API's generic type for its class (4xx / 5xx).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnledger.fake_provider.faults import Fault, FaultKind

DEFAULT_RETRY_AFTER_MS = 1000
DEFAULT_STATUS = 500

_ANTHROPIC = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
              404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
              529: "overloaded_error"}  # fmt: skip
_OPENAI = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}  # `code`; see below
_GEMINI = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
           504: "DEADLINE_EXCEEDED"}  # fmt: skip
_BEDROCK = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
            408: "ModelTimeoutException", 424: "ModelErrorException", 429: "ThrottlingException",
            500: "InternalServerException", 503: "ServiceUnavailableException"}  # fmt: skip

ERROR_TYPES: Mapping[str, tuple[Mapping[int, str], str, str]] = {
    "anthropic-messages": (_ANTHROPIC, "invalid_request_error", "api_error"),
    "openai-chat": (_OPENAI, "", ""),
    "openai-responses": (_OPENAI, "", ""),
    "gemini": (_GEMINI, "FAILED_PRECONDITION", "INTERNAL"),
    "bedrock-converse": (_BEDROCK, "ValidationException", "InternalServerException"),
}
"""Per API: the error type of each status, then the generic 4xx and 5xx types."""


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    fault: Fault


def refusal_for(api: str, by_kind: Mapping[FaultKind, Fault]) -> Refusal | None:
    """The refusal the request's faults ask for (`rate_limited` first), or None to answer it."""
    if FaultKind.RATE_LIMITED in by_kind:
        value = by_kind[FaultKind.RATE_LIMITED].value
        delay_ms = DEFAULT_RETRY_AFTER_MS if value is None else value
        return _refusal(api, 429, delay_ms, Fault(FaultKind.RATE_LIMITED, delay_ms))
    if FaultKind.HTTP_STATUS in by_kind:
        value = by_kind[FaultKind.HTTP_STATUS].value
        status = DEFAULT_STATUS if value is None or not 400 <= value <= 599 else value
        return _refusal(api, status, None, Fault(FaultKind.HTTP_STATUS, status))
    return None


def _refusal(api: str, status: int, delay_ms: int | None, fault: Fault) -> Refusal:
    types, client_type, server_type = ERROR_TYPES[api]
    kind = types.get(status, server_type if status >= 500 else client_type)
    message = f"fake provider: HTTP {status}" + (f" ({kind})" if kind else "")
    headers: dict[str, str] = {}
    if api == "bedrock-converse":
        headers["x-amzn-errortype"] = f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        return Refusal(status, {"message": message}, headers, fault)
    if api == "gemini":
        error: dict[str, Any] = {"code": status, "message": message, "status": kind}
        if delay_ms is not None:
            retry = {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{delay_ms / 1000:g}s",
            }
            error["details"] = [retry]
        return Refusal(status, {"error": error}, headers, fault)
    if delay_ms is not None:
        headers["retry-after"] = f"{delay_ms / 1000:g}"
        headers["retry-after-ms"] = str(delay_ms)
    if api == "anthropic-messages":
        return Refusal(status, {"type": "error", "error": {"type": kind, "message": message}}, headers, fault)
    # OpenAI: `code` is the specific name (None when there is none), `type` the class of error
    code = types.get(status)
    openai_type = (
        "requests" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    )
    body = {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
    return Refusal(status, body, headers, fault)
