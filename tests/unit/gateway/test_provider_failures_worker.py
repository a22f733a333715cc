"""Provider failures through the worker, the real fold and the fake provider: a throttled request is
sent again once the provider's delay has passed, and the route waits with it; a request refused for
what it is ends at once; a pause holds no slot, ends at a cancel, and never outlives the deadline."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import httpx
import pytest

from tests.unit.gateway.provider_harness import APIS, Harness, harness
from turnledger.fake_provider import FaultPlan, ReceivedRequest
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.gateway.provider_failures import BackoffPolicy
from turnledger.gateway.worker import WorkerConfig, gave_up
from turnledger.model.events import (
    CancelRequested,
    DispatchDecision,
    DispatchState,
    PreviewRetracted,
    PreviewUpdated,
    ToolCallReady,
)
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.eventstream import encode_message

S = DispatchState

QUICK = BackoffPolicy(initial_s=0.05, max_s=0.05, jitter=0.0)


def config(**changes: object) -> WorkerConfig:
    base: dict[str, object] = {
        "settle_timeout_s": 10,
        "max_attempts": 3,
        "backoff": QUICK,
        "jitter": lambda: 0.0,
    }
    return WorkerConfig(**{**base, **changes})  # type: ignore[arg-type]


def first_marked(marker: str, fault: Fault) -> FaultPlan:
    return FaultPlan(first_with_marker={marker: (fault,)})


def posts(h: Harness, marker: str | None = None) -> list[ReceivedRequest]:
    return [r for r in h.fp.requests if r.method == "POST" and (marker is None or marker.encode() in r.body)]


async def until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def until_paused(h: Harness) -> None:
    """Until the worker waits out its first pause (the provider's refusal arrived and was judged)."""
    await until(lambda: h.worker.stats.counts["pauses"] == 1)


#: APIs that name the delay (headers, or Gemini's RetryInfo); Bedrock's throttling names none
NAMES_A_DELAY = {a: a != "bedrock-converse@1" for a in APIS}


@pytest.mark.parametrize("adapter", list(APIS))
async def test_a_throttled_request_is_sent_again_once_the_named_delay_has_passed(adapter: str) -> None:
    plan = first_marked("THROTTLED", Fault(FaultKind.RATE_LIMITED, 1200))
    async for h in harness(plan, config=config()):
        await h.converse("c1", adapter, text="THROTTLED tell me something", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 2
        first, second = posts(h)
        assert first.body == second.body  # the manifest's bytes, both times
        gap = second.received_at - first.received_at
        endpoint = h.worker.endpoints.endpoint(adapter, APIS[adapter][1])
        cooling_until = endpoint.route.cooling_until(endpoint.model)
        if NAMES_A_DELAY[adapter]:
            assert gap >= 1.2  # the provider's word, not the 0.05 s backoff
            assert cooling_until >= first.received_at + 1.2
        else:
            assert gap >= 0.05
            assert cooling_until == 0
        assert h.worker.stats.counts["http_429"] == 1
        assert h.worker.stats.counts["pauses"] == 1
        assert len(h.assistant_turns("c1")) == 1


#: (adapter, status) → the error type the worker names in the give-up
REFUSALS = {
    ("anthropic-messages@2", 400): "invalid_request_error",
    ("anthropic-messages@2", 413): "request_too_large",
    ("openai-chat@2", 400): "invalid_request_error",
    ("openai-responses@2", 404): "model_not_found",
    ("gemini@2", 400): "INVALID_ARGUMENT",
    ("bedrock-converse@1", 403): "AccessDeniedException",
}


@pytest.mark.parametrize(("adapter", "status"), list(REFUSALS))
async def test_a_request_refused_for_what_it_is_ends_at_once(adapter: str, status: int) -> None:
    plan = FaultPlan(always=(Fault(FaultKind.HTTP_STATUS, status),))
    async for h in harness(plan, config=config()):
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and gave_up(final)
        assert final.reason == ReasonCode.PROVIDER_REFUSED
        assert final.detail == (
            f"worker gave up: the provider refused the request (HTTP {status} {REFUSALS[adapter, status]}); "
            "not sent again: it would be too"
        )
        assert len(posts(h)) == 1
        assert h.worker.stats.counts["pauses"] == 0


@pytest.mark.parametrize(("adapter", "status"), [("anthropic-messages@2", 529), ("gemini@2", 503)])
async def test_overload_is_retried_after_the_backoff(adapter: str, status: int) -> None:
    plan = first_marked("BUSY", Fault(FaultKind.HTTP_STATUS, status))
    backoff = BackoffPolicy(initial_s=0.3, max_s=0.3, jitter=0.0)
    async for h in harness(plan, config=config(backoff=backoff)):
        await h.converse("c1", adapter, text="BUSY now", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 2
        first, second = posts(h)
        assert second.received_at - first.received_at >= 0.3
        assert h.worker.stats.counts[f"http_{status}"] == 1


async def test_an_error_event_inside_the_stream_is_retried() -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.ERROR_EVENT, 2),)})
    async for h in harness(plan, config=config()):
        await h.converse("c1", "anthropic-messages@2", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 2
        assert len(posts(h)) == 2
        assert h.worker.stats.counts["pauses"] == 1


class Proxy(httpx.AsyncBaseTransport):
    """A proxy in front of the fake provider: answers the first `times` requests itself (they never
    reach the fake), then passes every request on."""

    def __init__(self, answer: Callable[[], httpx.Response], times: int) -> None:
        self.answer, self.left, self.answered = answer, times, 0
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.answered < self.left:
            self.answered += 1
            return self.answer()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def bad_gateway_page() -> httpx.Response:
    page = b"<html><body><h1>502 Bad Gateway</h1> sk-fake-key</body></html>"
    return httpx.Response(200, headers={"content-type": "text/html; charset=utf-8"}, content=page)


@pytest.mark.parametrize("adapter", list(APIS))
async def test_a_proxy_s_page_in_place_of_the_stream_is_a_provider_error_retried(adapter: str) -> None:
    """A 200 HTML page (a proxy's error page) where the stream should be: the attempt ends UNKNOWN with
    PROVIDER_ERROR (it was MISSING_STOP), and the next generation, after the backoff, reaches the
    provider, whose own stream type (Bedrock's is not SSE's) is read."""
    proxy = Proxy(bad_gateway_page, times=1)
    async for h in harness(config=config(), transport=proxy):
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 2
        first = [
            (d.reason, d.detail)
            for d in h.ledger.of_type(DispatchDecision)
            if d.attempt_generation == 1 and d.state == S.UNKNOWN
        ]
        assert first == [
            (
                ReasonCode.PROVIDER_ERROR,
                "stream ended before any delta: HTTP 200, text/html not the API's stream",
            )
        ]
        assert (proxy.answered, len(posts(h))) == (1, 1)
        assert (h.worker.stats.counts["http_200"], h.worker.stats.counts["pauses"]) == (1, 1)


def sse_answer(event: bytes) -> Callable[[], httpx.Response]:
    return lambda: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=event)


BEDROCK_ACCESS_DENIED = encode_message(
    {":message-type": "exception", ":exception-type": "accessDeniedException"}, b'{"message":"no"}'
)

#: per API, a 200 whose stream is the provider's error before anything names a response (Bedrock's
#: without its `x-amzn-requestid` header, its handle), and the name the refusal gives
EARLY_REFUSALS: dict[str, tuple[Callable[[], httpx.Response], str]] = {
    "anthropic-messages@2": (
        sse_answer(b'event: error\ndata: {"type": "error", "error": {"type": "billing_error"}}\n\n'),
        "billing_error",
    ),
    "openai-chat@2": (
        sse_answer(b'data: {"error": {"type": "requests", "code": "insufficient_quota"}}\n\n'),
        "insufficient_quota",
    ),
    "openai-responses@2": (
        sse_answer(b'event: error\ndata: {"type": "error", "code": "insufficient_quota"}\n\n'),
        "insufficient_quota",
    ),
    "gemini@2": (
        sse_answer(b'data: {"error": {"code": 403, "status": "PERMISSION_DENIED"}}\n\n'),
        "PERMISSION_DENIED",
    ),
    "bedrock-converse@1": (
        lambda: httpx.Response(
            200, headers={"content-type": "application/vnd.amazon.eventstream"}, content=BEDROCK_ACCESS_DENIED
        ),
        "accessDeniedException",
    ),
}


def first_attempt(h: Harness) -> list[tuple[str, str]]:
    """The reason and detail of generation 1's UNKNOWN decision (how the fold ended it)."""
    return [
        (d.reason, d.detail)
        for d in h.ledger.of_type(DispatchDecision)
        if d.attempt_generation == 1 and d.state == S.UNKNOWN
    ]


@pytest.mark.parametrize("adapter", list(EARLY_REFUSALS))
async def test_a_refusing_error_before_anything_names_the_response_ends_the_operation_at_once(
    adapter: str,
) -> None:
    """It was dropped as an earlier stream's event: the fold said MISSING_STOP and the worker sent the
    request again, `insufficient_quota` included, until its attempts were spent. Now the attempt ends
    UNKNOWN PROVIDER_ERROR and the error's names judge it as mid-stream: refused, one request."""
    answer, name = EARLY_REFUSALS[adapter]
    proxy = Proxy(answer, times=10)
    async for h in harness(config=config(), transport=proxy):
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.reason, gave_up(final)) == (S.CANCELLED, ReasonCode.PROVIDER_REFUSED, True)
        assert final.detail == (
            f"worker gave up: the provider refused the request (stream error {name}); "
            "not sent again: it would be too"
        )
        assert first_attempt(h) == [
            (ReasonCode.PROVIDER_ERROR, f"stream ended before any delta: stream error {name}")
        ]
        assert (proxy.answered, posts(h)) == (1, [])
        assert (h.worker.stats.counts["errors_before_handle"], h.worker.stats.counts["pauses"]) == (1, 0)


#: per API, how the fold ends the attempt whose stream the fake's `error_event=0` replaced by its
#: (retried) error; Bedrock's stream is named by its header, so its error is a named response's
ERROR_FIRST = {
    **{
        a: (ReasonCode.PROVIDER_ERROR, f"stream ended before any delta: stream error {error}", 1)
        for a, error in [
            ("anthropic-messages@2", "overloaded_error"),
            ("openai-chat@2", "server_error"),
            ("openai-responses@2", "server_error"),
            ("gemini@2", "UNAVAILABLE"),
        ]
    },
    "bedrock-converse@1": (
        ReasonCode.PROVIDER_ERROR,
        'internalServerException: {"message":"The server encountered an internal error."}',
        0,
    ),
}


@pytest.mark.parametrize("adapter", list(APIS))
async def test_a_retried_error_before_anything_names_the_response_is_sent_again_after_the_pause(
    adapter: str,
) -> None:
    """The fake's error event alone (overloaded, a server error, UNAVAILABLE): a provider error, retried
    after the backoff, not a missing stop; the next generation commits."""
    plan = FaultPlan(by_request={0: (Fault(FaultKind.ERROR_EVENT, 0),)})
    async for h in harness(plan, config=config()):
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.attempt_generation) == (S.COMMITTED, 2)
        reason, detail, early = ERROR_FIRST[adapter]
        assert first_attempt(h) == [(reason, detail)]
        assert len(posts(h)) == 2
        assert (h.worker.stats.counts["errors_before_handle"], h.worker.stats.counts["pauses"]) == (early, 1)


async def test_a_proxy_s_page_every_time_the_give_up_says_what_came_instead() -> None:
    proxy = Proxy(bad_gateway_page, times=3)
    async for h in harness(config=config(), transport=proxy):
        await h.converse("c1", "anthropic-messages@2", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and final.reason == ReasonCode.WORKER_GAVE_UP
        assert final.detail.startswith("worker gave up: 3 attempts failed; last UNKNOWN PROVIDER_ERROR")
        assert final.detail.endswith("at generation 3; HTTP 200, text/html not the API's stream")
        assert "sk-fake-key" not in final.detail
        assert (proxy.answered, posts(h)) == (3, [])


async def test_a_redirect_ends_the_operation_at_once_never_followed() -> None:
    """A 3xx: the route's URL is not the API's; every generation would meet it again: CANCELLED
    PROVIDER_REFUSED at once, the location never requested."""
    proxy = Proxy(lambda: httpx.Response(307, headers={"location": "/elsewhere"}), times=10)
    async for h in harness(config=config(), transport=proxy):
        await h.converse("c1", "openai-chat@2", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and gave_up(final)
        assert final.reason == ReasonCode.PROVIDER_REFUSED
        assert final.detail == (
            "worker gave up: the provider refused the request (HTTP 307, a redirect not followed); "
            "not sent again: it would be too"
        )
        assert (proxy.answered, posts(h)) == (1, [])
        assert (h.worker.stats.counts["http_307"], h.worker.stats.counts["pauses"]) == (1, 0)


async def test_the_attempts_spent_the_give_up_names_the_last_failure() -> None:
    plan = FaultPlan(always=(Fault(FaultKind.RATE_LIMITED, 50),))
    async for h in harness(plan, config=config()):
        await h.converse("c1", "openai-chat@2", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and final.reason == ReasonCode.WORKER_GAVE_UP
        assert final.detail.startswith("worker gave up: 3 attempts failed; last UNKNOWN PROVIDER_ERROR")
        assert final.detail.endswith("at generation 3; HTTP 429 rate_limit_exceeded, retry after 0.05s")
        assert len(posts(h)) == 3
        assert h.worker.stats.counts["pauses"] == 2


async def test_a_route_cooling_down_holds_every_operation_it_serves() -> None:
    plan = first_marked("THROTTLED", Fault(FaultKind.RATE_LIMITED, 1500))
    async for h in harness(plan, config=config()):
        await h.converse("c1", "anthropic-messages@2", text="THROTTLED first", tools=False)
        await until_paused(h)
        assert [r.fault for r in h.fp.fault_log] == [Fault(FaultKind.RATE_LIMITED, 1500)]
        await h.converse("c2", "anthropic-messages@2", text="another conversation", tools=False)
        assert (await h.settled("c2", "op-1")).state == S.COMMITTED
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        [throttled, *_] = posts(h, "THROTTLED")
        [other] = posts(h, "another conversation")
        assert other.received_at >= throttled.received_at + 1.5
        assert h.worker.stats.counts["route_cooldown_waits"] >= 1


async def test_a_cooling_down_holds_only_the_model_the_provider_throttled() -> None:
    """Providers count rate limits and quotas per model: another model of the route goes at once."""
    plan = first_marked("THROTTLED", Fault(FaultKind.RATE_LIMITED, 3000))
    other_model = "anthropic/claude-opus-4@2025-05"
    async for h in harness(plan, config=config()):
        await h.converse("c1", "anthropic-messages@2", text="THROTTLED first", tools=False)
        await until_paused(h)
        await h.converse("c2", "anthropic-messages@2", text="another model", tools=False, model=other_model)
        assert (await h.settled("c2", "op-1")).state == S.COMMITTED
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        [throttled, retried] = posts(h, "THROTTLED")
        [other] = posts(h, "another model")
        assert b'"model":"claude-opus-4"' in other.body
        assert throttled.received_at < other.received_at < throttled.received_at + 3.0 <= retried.received_at
        assert h.worker.stats.counts["route_cooldown_waits"] == 0
        endpoints = h.worker.endpoints
        route = endpoints.endpoint("anthropic-messages@2", other_model).route
        assert route is endpoints.endpoint("anthropic-messages@2", APIS["anthropic-messages@2"][1]).route
        assert route.cooling_until("claude-opus-4") == 0
        assert route.cooling_until("claude-sonnet-4") >= throttled.received_at + 3.0


async def test_a_pause_holds_no_slot() -> None:
    """One slot in all: the second conversation is answered while the first waits out its pause."""
    plan = first_marked("BUSY", Fault(FaultKind.HTTP_STATUS, 503))
    backoff = BackoffPolicy(initial_s=2.0, max_s=2.0, jitter=0.0)
    async for h in harness(plan, config=config(max_concurrency=1, backoff=backoff)):
        await h.converse("c1", "openai-chat@2", text="BUSY first", tools=False)
        await until_paused(h)
        await h.converse("c2", "openai-chat@2", text="meanwhile", tools=False)
        assert (await h.settled("c2", "op-1")).state == S.COMMITTED
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        [_, retried] = posts(h, "BUSY")
        [meanwhile] = posts(h, "meanwhile")
        assert meanwhile.received_at < retried.received_at


async def test_a_cancel_ends_the_pause_at_once() -> None:
    plan = first_marked("THROTTLED", Fault(FaultKind.RATE_LIMITED, 120_000))
    async for h in harness(plan, config=config()):
        await h.converse("c1", "anthropic-messages@2", text="THROTTLED please", tools=False)
        await until_paused(h)
        await h.ledger.append(CancelRequested(**h.factory.stamp("c1"), operation_id="op-1", reason="stop"))
        final = await h.settled("c1", "op-1")  # within 15 s of a 120 s pause
        assert final.state == S.CANCELLED and not gave_up(final)
        assert len(posts(h)) == 1
        assert h.worker.stats.counts["verdict_cancelled"] == 1


async def test_a_pause_that_would_pass_the_deadline_gives_up_at_once() -> None:
    plan = first_marked("THROTTLED", Fault(FaultKind.RATE_LIMITED, 60_000))
    async for h in harness(plan, config=config()):
        await h.ledger.append(h.factory.user_turn("c1", "THROTTLED please"))
        await h.request("c1", "gemini@2", "op-1", tools=False, settle_within_ms=20_000)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and final.reason == ReasonCode.WORKER_GAVE_UP
        assert final.detail == (
            "worker gave up: HTTP 429 RESOURCE_EXHAUSTED, retry after 60s: "
            "waiting 60s more would pass the operation's deadline"
        )
        assert len(posts(h)) == 1
        assert h.worker.stats.counts["pauses_past_deadline"] == 1
        assert h.worker.stats.counts["pauses"] == 0


#: adapter → the refusal stop its API's answer ends with (`refusal_after`, fake_provider/faults.py)
REFUSAL_STOPS = {
    "anthropic-messages@2": "refusal",
    "openai-chat@2": "content_filter",
    "openai-responses@2": "content_filter",
    "gemini@2": "SAFETY",
    "bedrock-converse@1": "guardrail_intervened",
}


@pytest.mark.parametrize("adapter", list(REFUSAL_STOPS))
async def test_an_answer_stopped_for_a_refusal_is_not_sent_again_and_none_of_it_is_history(
    adapter: str,
) -> None:
    """The provider's refusal mid-stream is its answer, not a transport failure: one request, the
    operation CANCELLED PROVIDER_REFUSED, the text it had streamed retracted, no assistant turn. Each
    event comes 50 ms after the last and each is appended at once (no coalescing), so every text
    delta before the refusal is previewed before it."""
    refusal = Fault(FaultKind.REFUSAL_AFTER, 4)
    plan = FaultPlan(by_marker={"REFUSED": (refusal, Fault(FaultKind.SLOW, 50))})
    async for h in harness(plan, config=config(flush_s=0.0)):
        await h.converse("c1", adapter, text="REFUSED tell me something", tools=False)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.reason, final.attempt_generation) == (
            S.CANCELLED,
            ReasonCode.PROVIDER_REFUSED,
            1,
        )
        assert final.detail == f"stopped with {REFUSAL_STOPS[adapter]}, a refusal"
        assert not gave_up(final)  # the provider refused the answer: no worker gave up on it
        [sent] = posts(h)
        assert [(r.request_id, r.fault) for r in h.fp.fault_log] == [
            (sent.request_id, refusal),
            (sent.request_id, Fault(FaultKind.SLOW, 50)),
        ]
        previews = h.ledger.of_type(PreviewUpdated)
        assert "".join(p.text for p in previews) == "About REFUSED tell me"
        assert [
            (r.operation_id, r.attempt_generation, r.reason) for r in h.ledger.of_type(PreviewRetracted)
        ] == [("op-1", 1, ReasonCode.PROVIDER_REFUSED)]
        assert h.assistant_turns("c1") == []
        assert h.worker.stats.counts["pauses"] == 0


_CUT_ARGUMENTS = r"cut at \d+: Unterminated string starting at at \d+"
#: adapter → the decision's detail for an answer the output limit cut in its first call
#: (`max_tokens_in_call=0`, fake_provider/faults.py): each API's own max-tokens stop; Gemini cannot send
#: a cut call, so nothing came
OUTPUT_LIMIT_DETAILS = {
    "anthropic-messages@2": rf"tool block 0 at max_tokens: {_CUT_ARGUMENTS}; raise maxOutputTokens",
    "openai-chat@2": rf"tool block 0 at length: {_CUT_ARGUMENTS}; raise maxOutputTokens",
    "openai-responses@2": r"tool block 0 open at max_output_tokens; raise maxOutputTokens",
    "gemini@2": (
        r"limit reached at MAX_TOKENS while the model was still reasoning: nothing visible to commit; "
        r"raise maxOutputTokens"
    ),
    "bedrock-converse@1": rf"tool block 0 at max_tokens: {_CUT_ARGUMENTS}; raise maxOutputTokens",
}


@pytest.mark.parametrize("adapter", list(OUTPUT_LIMIT_DETAILS))
async def test_an_answer_cut_at_the_output_limit_is_not_sent_again_and_none_of_it_is_history(
    adapter: str,
) -> None:
    """The same request with the same budget meets the same limit: before, the fold settled the cut UNKNOWN
    and the worker sent new generations, each cut again, until it gave up (WORKER_GAVE_UP, the limit lost
    behind it). Now one request, the operation CANCELLED OUTPUT_LIMIT_REACHED at generation 1, the detail
    saying what was cut and what to do, no call dispatched, no assistant turn, no worker give-up."""
    cut = Fault(FaultKind.MAX_TOKENS_IN_CALL, 0)
    async for h in harness(FaultPlan(by_marker={"CUT": (cut,)}), config=config()):
        await h.converse("c1", adapter, text="CUT weather in Paris?")
        final = await h.settled("c1", "op-1")
        assert (final.state, final.reason, final.attempt_generation) == (
            S.CANCELLED,
            ReasonCode.OUTPUT_LIMIT_REACHED,
            1,
        )
        assert re.fullmatch(OUTPUT_LIMIT_DETAILS[adapter], final.detail), final.detail
        assert not gave_up(final)  # the limit ended the answer: no worker gave up on it
        [sent] = posts(h)
        assert [(r.request_id, r.fault) for r in h.fp.fault_log] == [(sent.request_id, cut)]
        decisions = [d for d in h.ledger.of_type(DispatchDecision) if d.operation_id == "op-1" and d.accepted]
        assert [d.state for d in decisions if d.state in (S.UNKNOWN, S.CANCELLED)] == [S.CANCELLED]
        assert (h.ledger.of_type(ToolCallReady), h.ledger.of_type(PreviewRetracted)) == ([], [])
        assert h.assistant_turns("c1") == []
        assert (h.worker.stats.counts["pauses"], h.worker.stats.counts["gave_up"]) == (0, 0)
