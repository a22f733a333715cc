"""What a provider's failure means for the next generation: each rule of provider_failures.py, the
delays a provider can name, the backoff, and that nothing but a known type name leaves an error body."""

from __future__ import annotations

import email.utils
import sys
import time

import orjson
import pytest

from turnledger.adapters.profiles import Framing
from turnledger.gateway.provider_failures import (
    ERROR_TYPES,
    MAX_ERROR_BODY_BYTES,
    BackoffPolicy,
    ProviderFailure,
    http_failure,
    is_stream,
    stream_failure,
)

NOW = 1_800_000_000.0
REDIRECT = "a redirect not followed"
JSON_INSTEAD = "application/json not the API's stream"


def _body(obj: object) -> bytes:
    return orjson.dumps(obj)


def anthropic_error(kind: str) -> bytes:
    return _body({"type": "error", "error": {"type": kind, "message": "sk-ant-SECRET in the text"}})


def openai_error(kind: str, code: str | None) -> bytes:
    return _body({"error": {"message": "sk-SECRET", "type": kind, "param": None, "code": code}})


def gemini_error(status: str, details: list[object] | None = None) -> bytes:
    error: dict[str, object] = {"code": 429, "message": "AIza-SECRET", "status": status}
    if details is not None:
        error["details"] = details
    return _body({"error": error})


@pytest.mark.parametrize(
    ("api", "status", "headers", "body", "expected"),
    [
        # the header wins over the type and the status
        ("anthropic-messages", 400, {"x-should-retry": "true"}, anthropic_error("invalid_request_error"),
         ProviderFailure(True, "x-should-retry", 400, "invalid_request_error")),
        ("openai-chat", 500, {"x-should-retry": "FALSE "}, b"",
         ProviderFailure(False, "x-should-retry", 500)),
        # a documented type decides, whatever the status says
        ("anthropic-messages", 529, {}, anthropic_error("overloaded_error"),
         ProviderFailure(True, "error type", 529, "overloaded_error")),
        ("anthropic-messages", 401, {}, anthropic_error("authentication_error"),
         ProviderFailure(False, "error type", 401, "authentication_error")),
        ("anthropic-messages", 413, {}, anthropic_error("request_too_large"),
         ProviderFailure(False, "error type", 413, "request_too_large")),
        ("openai-chat", 429, {}, openai_error("requests", "rate_limit_exceeded"),
         ProviderFailure(True, "error type", 429, "rate_limit_exceeded")),
        ("openai-responses", 429, {}, openai_error("insufficient_quota", "insufficient_quota"),
         ProviderFailure(False, "error type", 429, "insufficient_quota")),
        ("openai-chat", 401, {}, openai_error("invalid_request_error", "invalid_api_key"),
         ProviderFailure(False, "error type", 401, "invalid_api_key")),
        ("gemini", 429, {}, gemini_error("RESOURCE_EXHAUSTED"),
         ProviderFailure(True, "error type", 429, "RESOURCE_EXHAUSTED")),
        ("gemini", 403, {}, gemini_error("PERMISSION_DENIED"),
         ProviderFailure(False, "error type", 403, "PERMISSION_DENIED")),
        ("gemini", 503, {}, b'[{"error": {"code": 503, "status": "UNAVAILABLE"}}]',
         ProviderFailure(True, "error type", 503, "UNAVAILABLE")),
        ("bedrock-converse", 429, {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/"},
         b'{"message": "slow down"}', ProviderFailure(True, "error type", 429, "ThrottlingException")),
        ("bedrock-converse", 400, {}, b'{"__type": "com.amazon.bedrock#ValidationException"}',
         ProviderFailure(False, "error type", 400, "ValidationException")),
        ("bedrock-converse", 400, {}, b'{"__type": "ValidationException"}',  # a bare name, no namespace
         ProviderFailure(False, "error type", 400, "ValidationException")),
        ("bedrock-converse", 403, {"x-amzn-errortype": "MissingAuthenticationTokenException:x"}, b"",
         ProviderFailure(False, "error type", 403, "MissingAuthenticationTokenException")),
        # another API's names are not this one's: the status decides
        ("anthropic-messages", 429, {}, gemini_error("INVALID_ARGUMENT"),
         ProviderFailure(True, "status", 429)),
        # the status rows, the type unknown or absent
        ("anthropic-messages", 408, {}, b"", ProviderFailure(True, "status", 408)),
        ("openai-chat", 409, {}, b"not json", ProviderFailure(True, "status", 409)),
        ("gemini", 500, {}, b"", ProviderFailure(True, "status", 500)),
        ("bedrock-converse", 599, {}, b"", ProviderFailure(True, "status", 599)),
        ("openai-chat", 400, {}, openai_error("some_new_type", None), ProviderFailure(False, "status", 400)),
        ("gemini", 404, {}, b"", ProviderFailure(False, "status", 404)),
        ("bedrock-converse", 424, {}, b"", ProviderFailure(False, "status", 424)),
        ("anthropic-messages", 499, {}, b"", ProviderFailure(False, "status", 499)),
        # not the stream: a redirect is refused, a 2xx of another type retried
        ("openai-chat", 302, {"location": "https://elsewhere.test/"}, b"",
         ProviderFailure(False, "status", 302, not_a_stream=REDIRECT)),
        ("gemini", 300, {}, b"", ProviderFailure(False, "status", 300, not_a_stream=REDIRECT)),
        ("gemini", 399, {}, b"", ProviderFailure(False, "status", 399, not_a_stream=REDIRECT)),
        ("anthropic-messages", 200, {"content-type": "text/html"}, b"<html>bad gateway</html>",
         ProviderFailure(True, "status", 200, not_a_stream="text/html not the API's stream")),
        ("anthropic-messages", 299, {"content-type": "text/plain"}, b"",
         ProviderFailure(True, "status", 299, not_a_stream="text/plain not the API's stream")),
        ("openai-chat", 200, {"content-type": "application/json"}, openai_error("x", "insufficient_quota"),
         ProviderFailure(False, "error type", 200, "insufficient_quota", None, JSON_INSTEAD)),
    ],
)  # fmt: skip
def test_each_rule_in_its_order(
    api: str, status: int, headers: dict[str, str], body: bytes, expected: ProviderFailure
) -> None:
    assert http_failure(api, status, headers, body, NOW) == expected


def test_only_a_known_type_name_leaves_the_error_body() -> None:
    secret = "sk-ant-api03-" + "x" * 40
    body = _body({"type": "error", "error": {"type": secret, "message": secret, "code": secret}})
    failure = http_failure("anthropic-messages", 400, {"x-amzn-errortype": secret}, body, NOW)
    assert failure == ProviderFailure(False, "status", 400)
    assert secret not in repr(failure) and secret not in failure.describe()


def test_an_error_body_past_the_bound_is_not_parsed() -> None:
    short = _body({"error": {"type": "overloaded_error"}})
    at_the_bound = short + b" " * (MAX_ERROR_BODY_BYTES - len(short))
    assert len(at_the_bound) == MAX_ERROR_BODY_BYTES
    assert http_failure("anthropic-messages", 400, {}, at_the_bound, NOW) == ProviderFailure(
        True, "error type", 400, "overloaded_error"
    )
    past_it = at_the_bound + b" "
    assert http_failure("anthropic-messages", 400, {}, past_it, NOW) == ProviderFailure(False, "status", 400)
    assert http_failure("anthropic-messages", 400, {}, short, NOW) == ProviderFailure(
        True, "error type", 400, "overloaded_error"
    )


def test_the_header_rule_keeps_the_delay_the_provider_named() -> None:
    headers = {"x-should-retry": "true", "retry-after-ms": "1500"}
    body = openai_error("requests", "rate_limit_exceeded")
    assert http_failure("openai-chat", 429, headers, body, NOW) == ProviderFailure(
        True, "x-should-retry", 429, "rate_limit_exceeded", 1.5
    )


def test_an_api_without_a_row_knows_no_type_the_status_decides() -> None:
    body = anthropic_error("overloaded_error")
    assert http_failure("some-other-api", 529, {}, body, NOW) == ProviderFailure(True, "status", 529)
    assert http_failure("some-other-api", 400, {}, body, NOW) == ProviderFailure(False, "status", 400)
    assert stream_failure("some-other-api", "invalid_request_error") == ProviderFailure(True, "stream error")


@pytest.mark.parametrize(
    ("headers", "body", "seconds"),
    [
        ({"retry-after-ms": "1500"}, b"", 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, b"", 0.25),  # the finer one first
        ({"retry-after": "7"}, b"", 7.0),
        ({"retry-after": " 2.5 "}, b"", 2.5),
        ({"retry-after": email.utils.formatdate(NOW + 30, usegmt=True)}, b"", 30.0),
        ({"retry-after": email.utils.formatdate(NOW - 30, usegmt=True)}, b"", None),  # a date passed
        ({"retry-after": email.utils.formatdate(NOW, usegmt=True)}, b"", None),  # a date that is now
        ({"retry-after": email.utils.formatdate(NOW + 1, usegmt=True)}, b"", 1.0),  # the least a date names
        ({"retry-after": "Fri, 15 Jan 2027 09:00:30 +0100"}, b"", 30.0),  # a zone named is kept
        ({"retry-after": "soon"}, b"", None),
        ({"retry-after": "0"}, b"", None),
        ({"retry-after": "-3"}, b"", None),
        ({"retry-after": "inf"}, b"", None),
        ({"retry-after": "+inf"}, b"", None),  # the word, signed: still no delay, not the longest pause
        ({"retry-after": "Infinity"}, b"", None),
        ({"retry-after": "nan"}, b"", None),
        ({"retry-after-ms": "x", "retry-after": "4"}, b"", 4.0),
        ({}, gemini_error("RESOURCE_EXHAUSTED", [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "retryDelay": "99s"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "22s"},
        ]), 22.0),
        ({}, gemini_error("RESOURCE_EXHAUSTED", [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.5s"}
        ]), 0.5),
        ({}, gemini_error("RESOURCE_EXHAUSTED", [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "22"}
        ]), None),
        ({}, gemini_error("RESOURCE_EXHAUSTED", ["not a detail"]), None),
        ({}, _body({"error": {"details": "not a list"}}), None),
        ({"retry-after": "3"}, gemini_error("RESOURCE_EXHAUSTED", [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "22s"}
        ]), 3.0),  # a header first
    ],
)  # fmt: skip
def test_the_delay_a_provider_names(headers: dict[str, str], body: bytes, seconds: float | None) -> None:
    assert http_failure("gemini", 429, headers, body, NOW).retry_after_s == seconds


def test_stream_errors_a_documented_type_decides_else_they_are_retried() -> None:
    assert stream_failure("anthropic-messages", "overloaded_error") == ProviderFailure(
        True, "error type", None, "overloaded_error"
    )
    assert stream_failure("anthropic-messages", "invalid_request_error") == ProviderFailure(
        False, "error type", None, "invalid_request_error"
    )
    assert stream_failure("bedrock-converse", "throttlingException") == ProviderFailure(
        True, "error type", None, "throttlingException"
    )
    assert stream_failure("bedrock-converse", "validationException").retryable is False
    assert stream_failure("openai-responses", "server_error").retryable is True
    for ours in ("undecodable_event", "malformed_event", "", "something new"):
        assert stream_failure("gemini", ours) == ProviderFailure(True, "stream error")


def test_a_stream_error_s_object_is_read_by_the_names_an_error_body_is_read_by() -> None:
    """The error object a stream's error event carried is read as an HTTP error body's: Anthropic's
    `details.error_code`, then `code`, `type`, `status`; the parser's own type comes after them; an
    object that is not one names nothing."""
    spend_cap = {
        "type": "rate_limit_error",
        "message": "m",
        "details": {"error_code": "enforced_spend_limit_reached"},
    }
    assert stream_failure("anthropic-messages", "rate_limit_error", spend_cap) == ProviderFailure(
        False, "error type", None, "enforced_spend_limit_reached"
    )
    assert http_failure("anthropic-messages", 429, {}, _body({"error": spend_cap}), NOW) == ProviderFailure(
        False, "error type", 429, "enforced_spend_limit_reached"
    )
    quota = {"type": "requests", "code": "insufficient_quota", "param": "invalid_request_error"}
    assert stream_failure("openai-chat", "requests", quota) == ProviderFailure(
        False, "error type", None, "insufficient_quota"
    )
    unavailable = {"code": 503, "status": "UNAVAILABLE", "message": "invalid_argument"}
    assert stream_failure("gemini", "UNAVAILABLE", unavailable).retryable is True
    assert stream_failure("openai-chat", "server_error", {"type": "some_new_type"}) == ProviderFailure(
        True, "error type", None, "server_error"
    )
    for not_an_object in (None, ["insufficient_quota"], "insufficient_quota"):
        assert stream_failure("openai-chat", "new", not_an_object) == ProviderFailure(True, "stream error")


def test_every_api_has_a_row_and_every_name_is_lower_case() -> None:
    assert set(ERROR_TYPES) == {
        "anthropic-messages",
        "openai-chat",
        "openai-responses",
        "gemini",
        "bedrock-converse",
    }
    for table in ERROR_TYPES.values():
        assert all(name == name.lower() for name in table)
        assert True in table.values() and False in table.values()


def test_backoff_doubles_to_its_cap_less_its_jitter() -> None:
    policy = BackoffPolicy()
    assert [policy.pause_s(n, 0.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert policy.pause_s(3, 0.5) == 2.0 * (1 - 0.25 * 0.5)
    assert policy.pause_s(0, 0.0) == 0.5
    assert BackoffPolicy(initial_s=0.1, max_s=0.3, jitter=0.0).pause_s(5, 0.9) == 0.3
    # past any float's range of doublings the pause is still the cap (2.0 ** 1025 overflows)
    assert [policy.pause_s(n, 0.0) for n in (65, 66, 1026, 10**6)] == [8.0, 8.0, 8.0, 8.0]
    assert BackoffPolicy(initial_s=1e-30, max_s=1e6, jitter=0.0).pause_s(10**6, 0.0) == 1e-30 * 2.0**64


def test_the_pause_is_the_providers_word_else_the_backoff() -> None:
    policy = BackoffPolicy()
    named = ProviderFailure(True, "status", 429, None, 12.0)
    assert named.pause_s(1, policy, 0.99) == 12.0
    assert ProviderFailure(True, "status", 503).pause_s(2, policy, 0.0) == 1.0


@pytest.mark.parametrize(
    ("status", "content_type", "framing", "read"),
    [
        (200, None, Framing.SSE, True),
        (200, "", Framing.SSE, True),
        (200, "text/event-stream", Framing.SSE, True),
        (201, "Text/Event-Stream; charset=UTF-8", Framing.SSE, True),
        (299, " text/event-stream ;charset=utf-8", Framing.SSE, True),
        (200, "application/vnd.amazon.eventstream", Framing.AWS_EVENT_STREAM, True),
        (200, None, Framing.AWS_EVENT_STREAM, True),
        (200, "application/vnd.amazon.eventstream", Framing.SSE, False),
        (200, "text/event-stream", Framing.AWS_EVENT_STREAM, False),
        (200, "text/html; charset=utf-8", Framing.SSE, False),
        (200, "application/json", Framing.SSE, False),
        (200, "text/event-stream-ish", Framing.SSE, False),
        (199, "text/event-stream", Framing.SSE, False),
        (300, "text/event-stream", Framing.SSE, False),
        (302, None, Framing.SSE, False),
        (400, "text/event-stream", Framing.SSE, False),
    ],
)
def test_only_a_2xx_of_the_framing_s_type_or_of_none_is_read_as_a_stream(
    status: int, content_type: str | None, framing: Framing, read: bool
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    assert is_stream(status, headers, framing) is read


def test_a_content_type_is_repeated_only_in_a_media_type_s_shape() -> None:
    """The header is the provider's (or a proxy's) text: anything but a bounded `type/subtype` is not
    repeated (here it quotes the credential)."""
    secret = "sk-ant-api03-" + "x" * 40
    longest = "a" * 64 + "/" + "b" * 64

    def shown(content_type: str) -> str | None:
        return http_failure("openai-chat", 200, {"content-type": content_type}, b"", NOW).not_a_stream

    assert shown("Application/Problem+JSON; charset=utf-8") == "application/problem+json not the API's stream"
    assert shown(longest) == f"{longest} not the API's stream"
    for unshaped in (
        secret,
        f"text/{secret}x{'y' * 60}",
        "a" * 65 + "/b",
        "text/html/x",
        "/html",
        "text/",
        "-x/y",
    ):
        assert shown(unshaped) == "a content-type not the API's stream"
    assert secret not in (http_failure("gemini", 200, {"content-type": secret}, b"", NOW).describe())
    # an answer below 200 is not the stream either, whether or not it names a type (a 2xx naming none is read)
    assert shown("") == "no content-type not the API's stream"
    assert http_failure("openai-chat", 101, {}, b"", NOW) == ProviderFailure(
        True, "status", 101, not_a_stream="no content-type not the API's stream"
    )


def test_descriptions() -> None:
    assert ProviderFailure(True, "status", 200, not_a_stream="text/html not the API's stream").describe() == (
        "HTTP 200, text/html not the API's stream"
    )
    assert ProviderFailure(
        False, "error type", 302, "invalid_request_error", 1.0, "a redirect not followed"
    ).describe() == ("HTTP 302 invalid_request_error, a redirect not followed, retry after 1s")
    assert ProviderFailure(True, "status", 503).describe() == "HTTP 503"
    assert (
        ProviderFailure(True, "error type", 429, "rate_limit_error", 2.0).describe()
        == "HTTP 429 rate_limit_error, retry after 2s"
    )
    assert ProviderFailure(True, "stream error").describe() == "stream error"
    assert ProviderFailure(True, "error type", None, "overloaded_error").describe() == (
        "stream error overloaded_error"
    )


# Audit of the rows against the providers' own sources (each test names its source).


@pytest.mark.parametrize("code", ["enforced_spend_limit_reached", "contract_spend_limit_reached"])
def test_an_anthropic_spend_cap_is_refused_though_its_type_says_rate_limit(code: str) -> None:
    # platform.claude.com/docs/api/rate-limits: a tier's spend cap answers 429 `rate_limit_error` with
    # `error.details.error_code`, no retry-after, and "retrying ... fails" until the month ends;
    # anthropic 2.14.0 `_exceptions.py` reads that code first (`extract_error_code`) and maps both codes
    # to their own RateLimitError subclasses (`_error_classes.py`).
    error = {"type": "rate_limit_error", "message": "sk-ant-SECRET", "details": {"error_code": code}}
    body = _body({"type": "error", "error": error, "request_id": "req_1"})
    expected = ProviderFailure(False, "error type", 429, code)
    assert http_failure("anthropic-messages", 429, {}, body, NOW) == expected


def test_an_anthropic_error_code_the_row_does_not_name_falls_back_to_the_type() -> None:
    # anthropic 2.14.0 `_exceptions.py`: "Treat an unrecognized `error_code` as the bare `type`";
    # `ramp_limit_exceeded` says to retry after its retry-after.
    error = {"type": "rate_limit_error", "message": "m", "details": {"error_code": "ramp_limit_exceeded"}}
    body = _body({"type": "error", "error": error})
    assert http_failure("anthropic-messages", 429, {"retry-after": "7"}, body, NOW) == ProviderFailure(
        True, "error type", 429, "rate_limit_error", 7.0
    )


OPENAI_BILLING_CODES = [
    "credit_balance_exhausted",
    "organization_spend_limit_exceeded",
    "project_spend_limit_exceeded",
    "organization_usage_limit_exceeded",
    "billing_not_active",
]


@pytest.mark.parametrize("code", OPENAI_BILLING_CODES)
def test_openai_billing_codes_are_refused_by_their_code(code: str) -> None:
    # help.openai.com 6614457 "Troubleshooting API usage and spend limits": check `error.code`, the type
    # "may still" be `insufficient_quota`; "Retrying these errors won't restore access". The spend-limit
    # guide: a hard limit answers 429 with `organization_spend_limit_exceeded` or
    # `project_spend_limit_exceeded`.
    # openai 3.57.0 `types/beta/session_turn_error.py` lists the same codes and `billing_not_active`.
    body = openai_error("insufficient_quota", code)
    assert http_failure("openai-chat", 429, {}, body, NOW) == ProviderFailure(False, "error type", 429, code)
    # a Responses stream's `error` event carries the code alone
    assert stream_failure("openai-responses", code) == ProviderFailure(False, "error type", None, code)


OPENAI_RESPONSE_ERRORS_OF_THE_REQUEST = [
    "invalid_image",
    "invalid_image_format",
    "invalid_base64_image",
    "invalid_image_url",
    "image_too_large",
    "image_too_small",
    "image_parse_error",
    "image_content_policy_violation",
    "invalid_image_mode",
    "image_file_too_large",
    "unsupported_image_media_type",
    "empty_image_file",
]


@pytest.mark.parametrize("code", OPENAI_RESPONSE_ERRORS_OF_THE_REQUEST)
def test_a_response_that_failed_on_its_own_image_is_refused(code: str) -> None:
    # openai 3.57.0 `types/responses/response_error.py`: the documented `response.failed` codes. These
    # name the request's own image bytes, which the next generation sends again unchanged.
    assert stream_failure("openai-responses", code) == ProviderFailure(False, "error type", None, code)


@pytest.mark.parametrize("code", ["vector_store_timeout", "failed_to_download_image"])
def test_a_response_that_failed_on_something_outside_the_request_is_retried(code: str) -> None:
    assert stream_failure("openai-responses", code).retryable is True


@pytest.mark.parametrize(
    "date",
    [
        "Fri Jan 15 08:00:30 2027",  # RFC 9110 5.6.7 asctime-date: no zone, GMT by definition
        "Fri, 15 Jan 2027 08:00:30 -0000",  # RFC 5322 3.3: UTC, the sender's local zone unknown
    ],
)
def test_an_http_date_that_names_no_zone_is_gmt(date: str) -> None:
    assert email.utils.formatdate(NOW + 30, usegmt=True) == "Fri, 15 Jan 2027 08:00:30 GMT"
    assert http_failure("openai-chat", 429, {"retry-after": date}, b"", NOW).retry_after_s == 30.0


def test_a_date_that_names_no_zone_is_gmt_whatever_the_machines_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    # read as local time, the two dates below would be 5 h 30 early here, a date passed: no delay
    monkeypatch.setenv("TZ", "TST-5:30")  # POSIX: 5 h 30 east of UTC, no zone database needed
    time.tzset()
    try:
        assert time.localtime(NOW).tm_gmtoff == 19_800
        for date in ("Fri Jan 15 08:00:30 2027", "Fri, 15 Jan 2027 08:00:30 -0000"):
            assert http_failure("openai-chat", 429, {"retry-after": date}, b"", NOW).retry_after_s == 30.0
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(("ms", "seconds"), [("700", 0.7), ("2300", 2.3), ("1500", 1.5)])
def test_retry_after_ms_is_divided_as_the_sdks_divide_it(ms: str, seconds: float) -> None:
    # anthropic 2.14.0 and openai 3.57.0 `_parse_retry_after_header`: the header's float over 1000
    assert http_failure("openai-chat", 429, {"retry-after-ms": ms}, b"", NOW).retry_after_s == seconds


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"retry-after": "9" * 400}, b""),  # RFC 9110 delay-seconds is 1*DIGIT: valid, if absurd
        ({"retry-after": "1e999"}, b""),
        ({"retry-after-ms": "9" * 400}, b""),
        ({}, gemini_error("RESOURCE_EXHAUSTED", [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1e999s"}
        ])),
    ],
)  # fmt: skip
def test_a_delay_too_long_for_a_float_is_the_longest_pause_not_the_backoff(
    headers: dict[str, str], body: bytes
) -> None:
    # openai 3.57.0 `_parse_retry_after_header`: "Numeric overflow is an excessive server delay, not a
    # malformed infinity literal" (it then does not retry); anthropic 2.14.0 waits min(inf, 4294967 s).
    failure = http_failure("gemini", 429, headers, body, NOW)
    assert failure.retry_after_s == sys.float_info.max
    assert failure.pause_s(1, BackoffPolicy(), 0.0) == sys.float_info.max


@pytest.mark.parametrize(
    ("status", "name", "retryable"),
    [
        # ai.google.dev's API errors: 499 CANCELLED is the client closing the request, not its bytes
        (499, "CANCELLED", True),
        # 501 UNIMPLEMENTED is a 5xx the same bytes meet again; google-genai's retry statuses are
        # 408, 429, 500, 502, 503, 504 (`_api_client.py` `_RETRY_HTTP_STATUS_CODES`)
        (501, "UNIMPLEMENTED", False),
    ],
)
def test_gemini_statuses_whose_http_code_would_say_otherwise(status: int, name: str, retryable: bool) -> None:
    assert http_failure("gemini", status, {}, gemini_error(name), NOW) == ProviderFailure(
        retryable, "error type", status, name
    )
    assert http_failure("gemini", status, {}, b"", NOW).retryable is not retryable  # the status rule alone
