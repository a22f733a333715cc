"""A stream's end through the worker, the real fold and the fake provider, which holds the connection
open after the stream's last event (`hold_open`) and records who ended the hold: the worker stops
reading at the provider's final event (a message stop, an error event), closes the connection itself
and the attempt settles at once, not when the provider lets go.

Each hold lasts `HOLD_MS`, well within `Harness.settled`'s wait: a worker that reads on to the
provider's close still settles, later, and the hold's record (`TIME_UP`, not `CLIENT_CLOSED`) says so."""

from __future__ import annotations

import pytest

from tests.unit.gateway.provider_harness import APIS, Harness, harness
from tests.unit.gateway.test_provider_failures_worker import config, first_attempt, posts, until
from turnledger.fake_provider import FaultPlan
from turnledger.fake_provider.delivery import HoldEnd
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.model.events import DispatchState
from turnledger.model.reasons import ReasonCode

pytestmark = pytest.mark.timeout(60)

S = DispatchState

HOLD_MS = 6000
HOLD = Fault(FaultKind.HOLD_OPEN, HOLD_MS)


async def held(h: Harness) -> list[tuple[str, HoldEnd]]:
    """Which request's connection was held, and who ended the hold (once the fake has seen it end: the
    worker may settle before the fake reads the close)."""
    await until(lambda: len(h.fp.holds) == 1)
    return [(r.request_id, r.ended) for r in h.fp.holds]


@pytest.mark.parametrize("adapter", list(APIS))
async def test_a_stream_held_open_after_its_final_event_commits_at_once(adapter: str) -> None:
    """Anthropic's message_stop, Chat's [DONE], Responses' response.completed, Gemini's finishing chunk,
    Bedrock's metadata after its messageStop: the answer commits at its one request, and the worker
    closed the connection."""
    plan = FaultPlan(by_request={0: (HOLD,)})
    async for h in harness(plan, config=config()):
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.reason, final.attempt_generation) == (S.COMMITTED, None, 1)
        assert await held(h) == [("req_000001", HoldEnd.CLIENT_CLOSED)]
        counts = h.worker.stats.counts
        assert (counts["final_in_stream"], counts["disconnects"], len(posts(h))) == (1, 0, 1)


#: per API, how the fold ends the attempt whose stream the fake's `error_event=2` ended
ERROR_MID_STREAM = {
    "anthropic-messages@2": "overloaded_error: Overloaded",
    "openai-chat@2": "server_error: The server had an error while processing your request. Sorry about that!",
    "openai-responses@2": "server_error: The model failed to generate a response.",
    "gemini@2": "UNAVAILABLE: The model is overloaded. Please try again later.",
    "bedrock-converse@1": 'internalServerException: {"message":"The server encountered an internal error."}',
}


@pytest.mark.parametrize("adapter", list(APIS))
async def test_a_stream_held_open_after_its_error_event_is_retried_at_once(adapter: str) -> None:
    """The error event (Anthropic's `error`, Chat's error chunk, Responses' `response.failed`, Gemini's
    error chunk, Bedrock's exception message) settles the attempt UNKNOWN PROVIDER_ERROR; the worker
    closed the connection and the next generation commits."""
    plan = FaultPlan(by_request={0: (Fault(FaultKind.ERROR_EVENT, 2), HOLD)})
    async for h in harness(plan, config=config()):
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.attempt_generation) == (S.COMMITTED, 2)
        assert first_attempt(h) == [(ReasonCode.PROVIDER_ERROR, ERROR_MID_STREAM[adapter])]
        assert await held(h) == [("req_000001", HoldEnd.CLIENT_CLOSED)]
        assert (h.worker.stats.counts["final_in_stream"], len(posts(h))) == (2, 2)  # an error, then a stop


GRACE_S = 0.3

#: per API, how the fold ends the attempt whose stream the fake's `error_event=0` replaced by its error
#: (test_provider_failures_worker.py), and whether the error came before anything named the response
#: (Bedrock's stream is named by its header)
ERROR_FIRST = {
    **{
        a: (f"stream ended before any delta: stream error {error}", True)
        for a, error in [
            ("anthropic-messages@2", "overloaded_error"),
            ("openai-chat@2", "server_error"),
            ("openai-responses@2", "server_error"),
            ("gemini@2", "UNAVAILABLE"),
        ]
    },
    "bedrock-converse@1": (ERROR_MID_STREAM["bedrock-converse@1"], False),
}


@pytest.mark.parametrize("adapter", list(APIS))
async def test_a_stream_held_open_after_an_error_before_anything_names_it_ends_after_the_grace(
    adapter: str,
) -> None:
    """The stream is the provider's error alone, and the connection stays open: the read waits for the
    stream to name its response (the error may be an earlier stream's, re-sent late) for
    `unnamed_error_grace_s`, not until the provider closes; then the attempt ends UNKNOWN PROVIDER_ERROR,
    the worker closes the connection and the next generation commits."""
    plan = FaultPlan(by_request={0: (Fault(FaultKind.ERROR_EVENT, 0), HOLD)})
    async for h in harness(plan, config=config(unnamed_error_grace_s=GRACE_S)):
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.attempt_generation) == (S.COMMITTED, 2)
        detail, unnamed = ERROR_FIRST[adapter]
        assert first_attempt(h) == [(ReasonCode.PROVIDER_ERROR, detail)]
        assert await held(h) == [("req_000001", HoldEnd.CLIENT_CLOSED)]
        if unnamed:  # the grace waited out, not the reader's default (5 s)
            assert GRACE_S <= h.fp.holds[0].held_s < 4.0
        counts = h.worker.stats.counts
        assert (counts["errors_before_handle"], len(posts(h))) == (int(unnamed), 2)
