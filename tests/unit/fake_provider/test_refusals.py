"""The fake's refusals in each API's words (refusals.py), and that they are scripted only: a seeded
plan's random draws are what they were before the refusals existed."""

from __future__ import annotations

import random

import pytest

from turnledger.fake_provider.errors import BadRequestError
from turnledger.fake_provider.faults import DRAWN_KINDS, Fault, FaultKind, FaultPlan, parse_fault_header
from turnledger.fake_provider.httpio import reason_phrase
from turnledger.fake_provider.refusals import Refusal, refusal_for

THROTTLED = {FaultKind.RATE_LIMITED: Fault(FaultKind.RATE_LIMITED, 1500)}


def test_rate_limited_in_each_apis_words() -> None:
    assert refusal_for("anthropic-messages", THROTTLED) == Refusal(
        429,
        {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "fake provider: HTTP 429 (rate_limit_error)"},
        },
        {"retry-after": "1.5", "retry-after-ms": "1500"},
        Fault(FaultKind.RATE_LIMITED, 1500),
    )
    assert refusal_for("openai-chat", THROTTLED) == Refusal(
        429,
        {
            "error": {
                "message": "fake provider: HTTP 429 (rate_limit_exceeded)",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        {"retry-after": "1.5", "retry-after-ms": "1500"},
        Fault(FaultKind.RATE_LIMITED, 1500),
    )
    gemini = refusal_for("gemini", THROTTLED)
    assert gemini is not None and gemini.headers == {}
    assert gemini.body == {
        "error": {
            "code": 429,
            "message": "fake provider: HTTP 429 (RESOURCE_EXHAUSTED)",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}],
        }
    }
    assert refusal_for("bedrock-converse", THROTTLED) == Refusal(
        429,
        {"message": "fake provider: HTTP 429 (ThrottlingException)"},
        {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"},
        Fault(FaultKind.RATE_LIMITED, 1500),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("api", "status", "kind"),
    [
        ("anthropic-messages", 529, "overloaded_error"),
        ("anthropic-messages", 503, "api_error"),  # no row: the API's 5xx type
        ("anthropic-messages", 418, "invalid_request_error"),  # no row: the API's 4xx type
        ("gemini", 504, "DEADLINE_EXCEEDED"),
        ("gemini", 418, "FAILED_PRECONDITION"),
        ("bedrock-converse", 424, "ModelErrorException"),
        ("bedrock-converse", 502, "InternalServerException"),
    ],
)
def test_http_status_gets_the_apis_type_for_it(api: str, status: int, kind: str) -> None:
    refusal = refusal_for(api, {FaultKind.HTTP_STATUS: Fault(FaultKind.HTTP_STATUS, status)})
    assert refusal is not None and refusal.status == status
    assert refusal.fault == Fault(FaultKind.HTTP_STATUS, status)
    assert kind in str(refusal.body) + str(refusal.headers)
    assert "retry-after" not in refusal.headers


def test_openai_names_a_code_only_where_it_has_one() -> None:
    for status, kind, code in [(500, "server_error", None), (400, "invalid_request_error", None),
                               (401, "invalid_request_error", "invalid_api_key")]:  # fmt: skip
        refusal = refusal_for(
            "openai-responses", {FaultKind.HTTP_STATUS: Fault(FaultKind.HTTP_STATUS, status)}
        )
        assert refusal is not None
        assert (refusal.body["error"]["type"], refusal.body["error"]["code"]) == (kind, code)


def test_defaults_and_precedence() -> None:
    default = refusal_for("anthropic-messages", {FaultKind.RATE_LIMITED: Fault(FaultKind.RATE_LIMITED)})
    assert default is not None and default.headers["retry-after-ms"] == "1000"
    for value in (None, 200, 600, 399):
        refusal = refusal_for("gemini", {FaultKind.HTTP_STATUS: Fault(FaultKind.HTTP_STATUS, value)})
        assert refusal is not None and refusal.status == 500 and refusal.fault.value == 500
    both = refusal_for(
        "openai-chat",
        {**THROTTLED, FaultKind.HTTP_STATUS: Fault(FaultKind.HTTP_STATUS, 400)},
    )
    assert both is not None and both.status == 429
    assert refusal_for("openai-chat", {FaultKind.SLOW: Fault(FaultKind.SLOW, 5)}) is None


def test_refusals_are_scripted_only() -> None:
    assert DRAWN_KINDS == (
        FaultKind.DISCONNECT, FaultKind.DUPLICATE, FaultKind.MISSING_STOP, FaultKind.TRUNCATED_ARGS,
        FaultKind.SLOW, FaultKind.ERROR_EVENT, FaultKind.LATE_EVENTS,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"faults \['http_status', 'rate_limited'\] are scripted only"):
        FaultPlan(rates={FaultKind.RATE_LIMITED: 0.1, FaultKind.HTTP_STATUS: 0.2})
    plan = FaultPlan.uniform(1.0)
    assert set(plan.rates) == set(DRAWN_KINDS)
    assert {f.kind for f in plan.draw(random.Random(3))} == set(DRAWN_KINDS)
    assert parse_fault_header("rate_limited=250, http_status=503") == (
        Fault(FaultKind.RATE_LIMITED, 250),
        Fault(FaultKind.HTTP_STATUS, 503),
    )
    with pytest.raises(BadRequestError):
        parse_fault_header("http_status=abc")


def test_a_draw_calls_the_rng_once_per_drawn_kind() -> None:
    rng, reference = random.Random(11), random.Random(11)
    FaultPlan(rates={FaultKind.SLOW: 0.5}).draw(rng)
    for _ in DRAWN_KINDS:
        reference.random()
    assert rng.random() == reference.random()


def test_reason_phrases() -> None:
    assert reason_phrase(429) == "Too Many Requests"
    assert reason_phrase(529) == "Overloaded"
    assert reason_phrase(499) == "Client Error"
    assert reason_phrase(599) == "Server Error"
