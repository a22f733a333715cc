"""What a provider's failure means for the operation: try again after a pause, or stop at once.

The worker sends a manifest's exact bytes, so a request the provider refuses for what it is (a bad
request, a credential or permission it does not accept, a model it does not have, a request too
large, a quota spent) is refused again by every later generation: such a failure ends the
operation at once, CANCELLED with PROVIDER_REFUSED. Throttling, overload, a server error, a timeout
and a stream that broke or arrived garbled may pass later: the next generation waits first.

An answer is read as the API's stream only when it is one (`is_stream`): a 2xx whose `content-type`
is the API's stream type, or that names none. Any other is a failure judged here: an error status, a
redirect (never followed) or a 2xx of another type (a proxy's HTML page, a JSON object).

Which, by the first rule that applies:

| rule | what it reads | verdict |
|---|---|---|
| header | `x-should-retry` (Anthropic and OpenAI send it beside an error) | `true` retry, `false` refused |
| error type | the first of its names (`error_names`) the API's row of `ERROR_TYPES` knows | its verdict |
| status | HTTP 408, 409, 429 or 5xx | retry |
| status | any other HTTP 4xx | refused |
| status | HTTP 3xx: the route's URL is not the API's, which every generation would meet again | refused |
| status | a 2xx that is not the API's stream: a proxy's page, often transient | retry |
| stream error | any other error event of a 200 stream (ours too: undecodable, malformed) | retry |

The 4xx and 5xx rows are the ones the Stainless-generated SDKs (anthropic, openai) retry on; a 2xx
that is not the stream is sent again as such a client would send it (here a new generation, after the
pause), and a redirect is never followed (the request is signed for its URL; the route's URL is the
API's own). The type rows follow each API's documented error types (provider documentation,
docs/architecture.md "Provider failures" names them). Only names from `ERROR_TYPES` are kept from an
error body, never its text: an error body may quote the credential.

How long to wait (`pause_s`): what the provider asked for, when it said — `retry-after-ms`
(milliseconds), `retry-after` (seconds, or an HTTP date), Gemini's `google.rpc.RetryInfo`
`retryDelay` in the error body — else the SDKs' exponential backoff: 0.5 s doubling per failed
attempt up to 8 s, less a random quarter at most. The provider's word is kept whatever its length
(as anthropic 2.14.0 does, up to 4,294,967 s; openai 3.57.0 waits at most 120 s and past that does
not retry at all): the operation's deadline decides whether the wait fits (gateway/worker.py), and
asking sooner only earns another refusal.

Pure: the caller passes the time (an HTTP date is relative to it) and the jitter's draw.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from turnledger.adapters.profiles import Framing

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""HTTP statuses below 500 that may pass later (timeout, conflict, throttled); every 5xx may too, and
so may a 2xx that is not the API's stream (`http_failure`)."""

STREAM_TYPES: Mapping[Framing, str] = {
    Framing.SSE: "text/event-stream",
    Framing.AWS_EVENT_STREAM: "application/vnd.amazon.eventstream",
}
"""The media type of each framing's stream, as the providers (and the fake provider) name it."""

MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}")
"""A media type as RFC 6838 names one (in lower case; each name bounded here): the only shape of a
`content-type` a failure repeats."""

RETRY_INFO = "google.rpc.RetryInfo"
"""The `@type` suffix of the error detail in which Gemini says how long to wait (`retryDelay`)."""

LONGEST_PAUSE_S = sys.float_info.max
"""A delay named in more digits than a float holds (`retry-after: 1e999`, 400 nines): longer than any
deadline, so the worker gives up at once instead of asking again after the backoff."""

MAX_ERROR_BODY_BYTES = 65_536
"""An error body longer than this is not parsed (its type is then unknown; the status decides)."""

RETRY = True
REFUSED = False

_ANTHROPIC: Mapping[str, bool] = {
    "rate_limit_error": RETRY,
    "overloaded_error": RETRY,
    "api_error": RETRY,
    "timeout_error": RETRY,
    "invalid_request_error": REFUSED,
    "authentication_error": REFUSED,
    "permission_error": REFUSED,
    "not_found_error": REFUSED,
    "request_too_large": REFUSED,
    "billing_error": REFUSED,
    # `error.details.error_code` of a 429 `rate_limit_error`: a spend cap, not a rate (the month, or
    # the contract, must end first; no retry-after)
    "enforced_spend_limit_reached": REFUSED,
    "contract_spend_limit_reached": REFUSED,
}
_OPENAI: Mapping[str, bool] = {
    "rate_limit_exceeded": RETRY,
    "server_error": RETRY,
    "insufficient_quota": REFUSED,
    # the billing causes `insufficient_quota` (or another type) may carry in `code`: none passes before
    # someone adds credit or raises a limit
    "credit_balance_exhausted": REFUSED,
    "organization_spend_limit_exceeded": REFUSED,
    "project_spend_limit_exceeded": REFUSED,
    "organization_usage_limit_exceeded": REFUSED,
    "billing_not_active": REFUSED,
    "invalid_request_error": REFUSED,
    "invalid_api_key": REFUSED,
    "model_not_found": REFUSED,
    "context_length_exceeded": REFUSED,
    "invalid_prompt": REFUSED,
    # a Responses stream's `response.failed` codes that name the request's own image (the next
    # generation sends the same bytes); its other codes (`vector_store_timeout`,
    # `failed_to_download_image`, ...) stay stream errors, retried
    "invalid_image": REFUSED,
    "invalid_image_format": REFUSED,
    "invalid_base64_image": REFUSED,
    "invalid_image_url": REFUSED,
    "image_too_large": REFUSED,
    "image_too_small": REFUSED,
    "image_parse_error": REFUSED,
    "image_content_policy_violation": REFUSED,
    "invalid_image_mode": REFUSED,
    "image_file_too_large": REFUSED,
    "unsupported_image_media_type": REFUSED,
    "empty_image_file": REFUSED,
}
_GEMINI: Mapping[str, bool] = {
    "resource_exhausted": RETRY,
    "unavailable": RETRY,
    "internal": RETRY,
    "deadline_exceeded": RETRY,
    "invalid_argument": REFUSED,
    "failed_precondition": REFUSED,
    "permission_denied": REFUSED,
    "unauthenticated": REFUSED,
    "not_found": REFUSED,
    "cancelled": RETRY,  # 499: the client closed the request, nothing in its bytes
    "unimplemented": REFUSED,  # 501: a 5xx the same bytes meet again (google-genai does not retry it)
}
_BEDROCK: Mapping[str, bool] = {
    "throttlingexception": RETRY,
    "serviceunavailableexception": RETRY,
    "internalserverexception": RETRY,
    "modelstreamerrorexception": RETRY,
    "modeltimeoutexception": RETRY,
    "modelnotreadyexception": RETRY,
    "validationexception": REFUSED,
    "accessdeniedexception": REFUSED,
    "resourcenotfoundexception": REFUSED,
    "unrecognizedclientexception": REFUSED,
    "incompletesignatureexception": REFUSED,
    "invalidsignatureexception": REFUSED,
    "expiredtokenexception": REFUSED,
    "missingauthenticationtokenexception": REFUSED,
}

ERROR_TYPES: Mapping[str, Mapping[str, bool]] = {
    "anthropic-messages": _ANTHROPIC,
    "openai-chat": _OPENAI,
    "openai-responses": _OPENAI,
    "gemini": _GEMINI,
    "bedrock-converse": _BEDROCK,
}
"""Per API, the error types it documents (in lower case: compared so) and whether a request that met
one may pass later."""

_ERROR_TYPE_FIELDS = ("code", "type", "status")
"""Where an error body names its type, most specific first (OpenAI's `code` says `insufficient_quota`
where its `type` says the same or `requests`); Anthropic's `details.error_code` comes before them (a
code the row does not name falls back to the type, as the SDK says to) and Bedrock's body `__type`
after."""


MAX_DOUBLINGS = 64
"""Past this many the backoff is its cap whatever the policy (2.0 ** 1025 overflows a float: a worker
told `--max-attempts 2000` would have crashed on its 1026th pause)."""


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """The pause before a generation when the provider named none: `initial_s`, doubling per failed
    attempt, at most `max_s`, less `jitter` of it at most."""

    initial_s: float = 0.5
    max_s: float = 8.0
    jitter: float = 0.25

    def pause_s(self, failed_attempts: int, draw: float) -> float:
        """After `failed_attempts` (≥ 1) failed generations; `draw` in [0, 1) picks the jitter."""
        doublings = min(max(0, failed_attempts - 1), MAX_DOUBLINGS)
        base = min(self.initial_s * 2.0**doublings, self.max_s)
        return base * (1.0 - self.jitter * draw)


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    """One failed read as the worker judges it. `error_type` is only ever a name from `ERROR_TYPES`
    (or our parser's own), never text a provider chose."""

    retryable: bool
    rule: str
    status: int | None = None
    error_type: str | None = None
    retry_after_s: float | None = None
    not_a_stream: str | None = None
    """What a 2xx or a 3xx answered instead of the stream: `a redirect not followed`, `text/html not the
    API's stream`."""

    def pause_s(self, failed_attempts: int, backoff: BackoffPolicy, draw: float) -> float:
        """How long to wait before the next generation: the provider's word, else the backoff."""
        if self.retry_after_s is not None:
            return self.retry_after_s
        return backoff.pause_s(failed_attempts, draw)

    def describe(self) -> str:
        """E.g. `HTTP 429 rate_limit_error, retry after 2s`, `stream error overloaded_error`,
        `HTTP 200, text/html not the API's stream`, `HTTP 302, a redirect not followed`."""
        what = f"HTTP {self.status}" if self.status is not None else "stream error"
        if self.error_type is not None:
            what += f" {self.error_type}"
        if self.not_a_stream is not None:
            what += f", {self.not_a_stream}"
        if self.retry_after_s is not None:
            what += f", retry after {self.retry_after_s:g}s"
        return what


def is_stream(status: int, headers: Mapping[str, str], framing: Framing) -> bool:
    """Is this answer the API's stream, to be read as one? A 2xx whose `content-type` is the framing's
    media type (in any case, whatever its parameters: `text/event-stream; charset=utf-8`), or that
    names none. Anything else is a failure, for `http_failure`."""
    content_type = headers.get("content-type")
    return 200 <= status < 300 and (not content_type or media_type(content_type) == STREAM_TYPES[framing])


def media_type(content_type: str) -> str:
    """`Text/HTML; charset=UTF-8` → `text/html`."""
    return content_type.partition(";")[0].strip().lower()


def http_failure(
    api: str, status: int, headers: Mapping[str, str], body: bytes, now_s: float
) -> ProviderFailure:
    """An answer that is not the API's stream (`is_stream`): an error status, a redirect, a 2xx of
    another type. Its verdict, its known type, the pause it asked for. `headers` are looked up in
    lower case (httpx's headers are case-insensitive already)."""
    parsed = _json(body)
    error_type = _known_type(api, _type_candidates(headers, parsed))
    retry_after = _retry_after_s(headers, parsed, now_s)
    instead = _not_a_stream(status, headers)
    verdict = _header_verdict(headers)
    if verdict is not None:
        return ProviderFailure(verdict, "x-should-retry", status, error_type, retry_after, instead)
    if error_type is not None:
        verdict = ERROR_TYPES[api][error_type.lower()]
        return ProviderFailure(verdict, "error type", status, error_type, retry_after, instead)
    retryable = status < 300 or status in RETRYABLE_STATUSES or status >= 500
    return ProviderFailure(retryable, "status", status, None, retry_after, instead)


def _not_a_stream(status: int, headers: Mapping[str, str]) -> str | None:
    """What a status below 400 answered instead of the stream (an error status says it itself). Of a
    `content-type`, only a media type's shape is repeated: the header is the provider's (or a proxy's)
    text."""
    if status >= 400:
        return None
    if status >= 300:
        return "a redirect not followed"
    shown = media_type(headers.get("content-type", ""))
    if not MEDIA_TYPE.fullmatch(shown):
        shown = "a content-type" if shown else "no content-type"
    return f"{shown} not the API's stream"


def stream_failure(api: str, error_type: str, error: Any = None) -> ProviderFailure:
    """An error event inside a stream (or one our parser raised for it), with the error object the
    event carried, if any: the first documented name among the object's (`error_names`, as for an
    HTTP error body) and then the parser's `error_type` decides; any other may pass on a new
    generation."""
    known = _known_type(api, [*error_names(error), error_type])
    if known is not None:
        return ProviderFailure(ERROR_TYPES[api][known.lower()], "error type", None, known)
    return ProviderFailure(RETRY, "stream error", None, None)


def _header_verdict(headers: Mapping[str, str]) -> bool | None:
    return {"true": RETRY, "false": REFUSED}.get(headers.get("x-should-retry", "").strip().lower())


def _known_type(api: str, candidates: list[str]) -> str | None:
    """The first candidate the API's row names (compared in lower case), spelled as the provider did."""
    table = ERROR_TYPES.get(api, {})
    for candidate in candidates:
        name = candidate.strip()
        if name.lower() in table:
            return name
    return None


def _type_candidates(headers: Mapping[str, str], parsed: Any) -> list[str]:
    """Where an HTTP error names its type: Bedrock's `x-amzn-errortype` header (before its `:`), the
    body's error object (`error_names`), a body's `__type` (after its `#`)."""
    found = []
    amzn = headers.get("x-amzn-errortype")
    if amzn:
        found.append(amzn.partition(":")[0])
    found.extend(error_names(_error_object(parsed)))
    if isinstance(parsed, Mapping) and isinstance(parsed.get("__type"), str):
        found.append(str(parsed["__type"]).rpartition("#")[2])
    return found


def error_names(error: Any) -> list[str]:
    """The names an error object gives its error, most specific first: Anthropic's
    `details.error_code`, then `code`, `type`, Gemini's `status` (`_ERROR_TYPE_FIELDS`). An HTTP error
    body's object and a stream's error event are read by this one rule, so the first name the API's
    row knows decides either way: OpenAI's `{"type": "requests", "code": "insufficient_quota"}` is
    refused by its code, `{"type": "invalid_request_error", "code": "<a code no row names>"}` by its
    type."""
    if not isinstance(error, Mapping):
        return []
    found = []
    details = error.get("details")  # Gemini's is a list: its RetryInfo is read by `_retry_delay`
    if isinstance(details, Mapping) and isinstance(details.get("error_code"), str):
        found.append(str(details["error_code"]))
    found.extend(str(error[f]) for f in _ERROR_TYPE_FIELDS if isinstance(error.get(f), str))
    return found


def _error_object(parsed: Any) -> Any:
    """The body's error object: `{"error": {...}}`, or Gemini's `[{"error": {...}}]` on a JSON stream."""
    if isinstance(parsed, list) and parsed:
        parsed = parsed[0]
    return parsed.get("error") if isinstance(parsed, Mapping) else None


def _retry_after_s(headers: Mapping[str, str], parsed: Any, now_s: float) -> float | None:
    for value in (
        _number(headers.get("retry-after-ms"), 1000.0),
        _seconds_or_date(headers.get("retry-after"), now_s),
        _retry_delay(parsed),
    ):
        if value is not None:
            return value
    return None


def _number(text: str | None, per_second: float) -> float | None:
    """Seconds from a count of `per_second` units, divided as the SDKs divide it (700 ms is 0.7 s). A
    number too large for a float is the longest pause; the word `inf` (or `nan`) names no delay."""
    if text is None:
        return None
    text = text.strip()
    try:
        value = float(text) / per_second
    except ValueError:
        return None
    if value == math.inf and text.lower().lstrip("+") not in ("inf", "infinity"):
        return LONGEST_PAUSE_S
    return value if math.isfinite(value) and value > 0 else None


def _seconds_or_date(text: str | None, now_s: float) -> float | None:
    if text is None:
        return None
    seconds = _number(text, 1.0)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # asctime names no zone: every HTTP-date is GMT (RFC 9110 5.6.7)
        when = when.replace(tzinfo=datetime.UTC)  # and RFC 5322's `-0000` is UTC too
    delay = when.timestamp() - now_s
    return delay if delay > 0 else None


def _retry_delay(parsed: Any) -> float | None:
    """Gemini's `google.rpc.RetryInfo` detail: `"retryDelay": "22s"` (a protobuf Duration in JSON)."""
    error = _error_object(parsed)
    details = error.get("details") if isinstance(error, Mapping) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if not isinstance(detail, Mapping) or not str(detail.get("@type", "")).endswith(
            "google.rpc.RetryInfo"
        ):
            continue
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            return _number(delay[:-1], 1.0)
    return None


def _json(body: bytes) -> Any:
    if not body or len(body) > MAX_ERROR_BODY_BYTES:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
