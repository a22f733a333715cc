"""The worker's per-operation flow (gateway/worker.py), one step at a time: what it appends, what it sends
to the provider and what it counts at each branch of a recovery, a confirmed cancel, a termination and
the continuation of an open attempt. The fold is scripted (each appended event gets the records a test
gives for it, on the worker's board at once), the provider is an `httpx.MockTransport`: no network, no
clock but the small timeouts a test sets."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from tests.unit.gateway.decisions import decision, manifest_issued
from tests.unit.gateway.ledger import InMemoryLedger
from turnledger.gateway import worker as worker_module
from turnledger.gateway.board import Observed
from turnledger.gateway.client import now_ms
from turnledger.gateway.endpoints import ProviderEndpoint, ProviderRoutes, endpoints_for
from turnledger.gateway.journal import JournalEntry, WorkerJournal
from turnledger.gateway.provider_failures import BackoffPolicy, ProviderFailure
from turnledger.gateway.slot_hold import SlotHold
from turnledger.gateway.stream_read import Phase
from turnledger.gateway.worker import GIVE_UP_PREFIX, DispatchWorker, Verdict, WorkerConfig
from turnledger.model.events import (
    AttemptTerminated,
    CancelRequested,
    DispatchAttempt,
    DispatchDecision,
    DispatchSent,
    DispatchState,
    HandleBound,
    IngressEvent,
    RecoveryReported,
    Rejected,
    ReplayStarted,
    ResumeStarted,
    StreamEnded,
)
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode

S = DispatchState
KEY = ("c1", "op-1")
BASE = "http://provider.test"
HANDLE = "resp_68a1f0c2b7e88190a1b2c3d4e5f60718"
KEPT = ("openai-responses@2", "openai/gpt-4.1@2025-04", '{"stream":true,"background":true}')
NOT_KEPT = ("openai-responses@2", "openai/gpt-4.1@2025-04", '{"stream":true}')
Answer = Callable[[IngressEvent], Sequence[Observed]]


def refusal(event: IngressEvent, reason: ReasonCode) -> Rejected:
    return rejected(event.event_id, type(event).__name__, reason)


def rejected(event_id: str, event_type: str, reason: ReasonCode) -> Rejected:
    return Rejected(
        conversation_id="c1",
        operation_id=KEY[1],
        event_id=event_id,
        event_type=event_type,
        reason=reason,
        detail="refused by the test",
        occurred_at_ms=2_000,
    )


@dataclass
class Flow:
    """A worker (id w1) with a scripted fold and provider, and everything it appended and sent."""

    manifest: DispatchManifest
    worker: DispatchWorker = field(init=False)
    events: list[IngressEvent] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)
    answer: Answer = lambda event: ()
    respond: Callable[[httpx.Request], httpx.Response] = lambda request: httpx.Response(200)

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)
        await asyncio.sleep(0)  # an append takes a turn of the loop: a worker looping on appends is bounded
        await self.worker.board.apply(self.answer(event))

    async def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        await asyncio.sleep(0)  # an answer takes a turn of the loop: a worker looping on requests is bounded
        return self.respond(request)

    @property
    def endpoint(self) -> ProviderEndpoint:
        return self.worker.endpoints.endpoint_for(self.manifest)

    def decide(self, state: DispatchState, **fields: Any) -> None:
        """The board sees the operation's manifest and `state` as its latest decision."""
        self.worker.board.apply_nowait(manifest_issued("op-1").model_copy(update={"manifest": self.manifest}))
        self.worker.board.apply_nowait(decision("op-1", state, **fields))

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    @property
    def counts(self) -> dict[str, int]:
        return {name: n for name, n in self.worker.stats.counts.items() if n}


@pytest.fixture
async def flow() -> AsyncIterator[Flow]:
    async with flows(KEPT) as f:
        yield f


@contextlib.asynccontextmanager
async def flows(
    api: tuple[str, str, str], journal: WorkerJournal | None = None, **config: Any
) -> AsyncIterator[Flow]:
    adapter, model, body = api
    manifest = (
        manifest_issued("op-1")
        .manifest.model_copy(update={"adapter": adapter, "model_revision": model, "request_body": body})
        .sealed()  # as the fold issues it: a handle is bound to its digest
    )
    f = Flow(manifest)
    routes = endpoints_for(BASE, {"OPENAI_API_KEY": "sk-test"})
    settings = {"worker_id": "w1", "settle_timeout_s": 0.05, "cas_timeout_s": 0.05, "sweep": False, **config}
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(f.handler)) as http,
        DispatchWorker(f, routes, config=WorkerConfig(**settings), http=http, journal=journal) as worker,
    ):
        f.worker = worker
        yield f


def terminated_answer(event: IngressEvent) -> Sequence[Observed]:
    """The fold's answer to AttemptTerminated of a cancelled attempt: CANCELLED, confirmed terminated."""
    if isinstance(event, AttemptTerminated):
        return [
            decision(
                "op-1", S.CANCELLED, source_event_id=event.event_id, attempt_terminated=True,
                reason=ReasonCode.ATTEMPT_TERMINATED,
            )
        ]  # fmt: skip
    return ()


# -- a cancelled attempt is confirmed terminated -------------------------------------------------------


async def test_a_kept_response_of_ours_is_cancelled_at_the_provider_then_confirmed_terminated(
    flow: Flow,
) -> None:
    """The bound handle's response is stopped at the provider (the API's cancel URL, the route's
    credential and timeout, an empty body), then AttemptTerminated of that generation."""
    flow.decide(S.CANCELLED, response_handle=HANDLE, lease_owner="w1")
    flow.answer = terminated_answer
    await flow.worker._confirm_cancelled(flow.manifest, flow.endpoint, 1, HANDLE)
    [stop] = flow.requests
    assert (stop.method, str(stop.url), stop.content) == ("POST", f"{BASE}/v1/responses/{HANDLE}/cancel", b"")
    assert stop.headers["authorization"] == "Bearer sk-test"
    timeout = flow.endpoint.route.timeout
    assert stop.extensions["timeout"] == timeout.as_dict() and timeout.read == 60.0
    assert [(e.attempt_generation, e.worker_id) for e in flow.of(AttemptTerminated)] == [(1, "w1")]
    assert len(flow.events) == 1
    assert flow.counts == {"provider_cancel_200": 1, "cancel_confirmed": 1}
    assert set(flow.worker._signed_with) == {KEY}


@pytest.mark.parametrize("owner", [None, "", "w1"])
async def test_an_attempt_whose_lease_is_free_or_ours_is_confirmed(flow: Flow, owner: str | None) -> None:
    flow.decide(S.CANCELLED, response_handle=HANDLE, lease_owner=owner)
    flow.answer = terminated_answer
    await flow.worker._confirm_cancelled(flow.manifest, flow.endpoint, 1, HANDLE)
    assert len(flow.requests) == 1 and len(flow.of(AttemptTerminated)) == 1


@pytest.mark.parametrize(
    ("state", "fields", "generation"),
    [
        (None, {}, 1),  # nothing seen of the operation
        (S.UNKNOWN, {}, 1),  # not cancelled
        (S.CANCELLED, {}, 2),  # another generation was cancelled
        (S.CANCELLED, {"attempt_terminated": True}, 1),  # already confirmed terminated
        (S.CANCELLED, {"attempt_generation": 0}, 0),  # cancelled before any attempt
        (S.CANCELLED, {"lease_owner": "w2"}, 1),  # another worker holds the attempt: it confirms
    ],
)
async def test_nothing_is_confirmed_for_an_attempt_that_is_not_an_open_cancelled_one_of_ours(
    flow: Flow, state: DispatchState | None, fields: dict[str, Any], generation: int
) -> None:
    if state is not None:
        flow.decide(state, response_handle=HANDLE, **fields)
    await flow.worker._confirm_cancelled(flow.manifest, flow.endpoint, generation, HANDLE)
    assert (flow.events, flow.requests, flow.counts) == ([], [], {})


@pytest.mark.parametrize(
    ("api", "handle", "bound"),
    [
        (KEPT, None, HANDLE),  # no handle of this read
        (KEPT, "resp_other", HANDLE),  # a handle the ledger did not bind
        (KEPT, HANDLE, None),  # bound to nothing
        (NOT_KEPT, HANDLE, HANDLE),  # the provider keeps no response of a request without background
    ],
)
async def test_without_a_bound_kept_response_the_attempt_is_confirmed_with_no_provider_request(
    api: tuple[str, str, str], handle: str | None, bound: str | None
) -> None:
    async with flows(api) as flow:
        flow.decide(S.CANCELLED, response_handle=bound)
        flow.answer = terminated_answer
        await flow.worker._confirm_cancelled(flow.manifest, flow.endpoint, 1, handle)
        assert flow.requests == []
        assert [e.attempt_generation for e in flow.of(AttemptTerminated)] == [1] and len(flow.events) == 1
        assert flow.counts == {"cancel_confirmed": 1}


async def test_a_provider_cancel_that_fails_leaves_the_confirmation_to_the_lease_expiry(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    flow.respond = unreachable
    flow.decide(S.CANCELLED, response_handle=HANDLE)
    with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
        await flow.worker._confirm_cancelled(flow.manifest, flow.endpoint, 1, HANDLE)
    assert len(flow.requests) == 1 and flow.events == []
    assert flow.counts == {"provider_cancel_failed": 1}
    assert [r.getMessage() for r in caplog.records] == [
        f"c1/op-1: cancelling {HANDLE} at the provider failed: ConnectError('refused')"
    ]


async def test_a_refused_confirmation_is_counted_and_logged(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    flow.decide(S.CANCELLED)
    flow.answer = lambda event: [refusal(event, ReasonCode.LEASE_NOT_HELD)]
    with caplog.at_level(logging.INFO, logger="turnledger.gateway.worker"):
        await flow.worker._confirm_cancelled(flow.manifest, flow.endpoint, 1, None)
    assert flow.counts == {"cancel_confirmed": 1, "refused_LEASE_NOT_HELD": 1}
    assert [r.getMessage() for r in caplog.records] == [
        "c1/op-1: AttemptTerminated refused: LEASE_NOT_HELD (refused by the test)"
    ]


async def test_a_confirmation_nobody_answers_is_waited_for_the_settle_timeout_only(flow: Flow) -> None:
    flow.decide(S.CANCELLED)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await flow.worker._confirm_cancelled(flow.manifest, flow.endpoint, 1, None)
    assert 0.05 <= loop.time() - started < 1.0
    assert len(flow.of(AttemptTerminated)) == 1


# -- an attempt is terminated when the provider keeps nothing ------------------------------------------


async def test_a_terminated_attempt_that_the_fold_leaves_open_is_retried(flow: Flow) -> None:
    flow.decide(S.UNKNOWN)
    flow.answer = lambda event: [
        decision("op-1", S.UNKNOWN, source_event_id=event.event_id, attempt_terminated=True)
    ]
    assert await flow.worker._terminate(flow.manifest, 1) is Verdict.RETRY
    assert [(e.attempt_generation, e.worker_id) for e in flow.of(AttemptTerminated)] == [(1, "w1")]
    assert flow.counts == {"terminated": 1}


@pytest.mark.parametrize(
    ("state", "verdict"), [(S.COMMITTED, Verdict.COMMITTED), (S.CANCELLED, Verdict.CANCELLED)]
)
async def test_a_termination_that_finds_the_operation_final_ends_with_its_state(
    flow: Flow, state: DispatchState, verdict: Verdict
) -> None:
    flow.decide(S.UNKNOWN)
    flow.answer = lambda event: [decision("op-1", state, source_event_id=event.event_id)]
    assert await flow.worker._terminate(flow.manifest, 1) is verdict


@pytest.mark.parametrize(
    ("reason", "verdict"),
    [
        (ReasonCode.LEASE_NOT_HELD, Verdict.LOST_LEASE),
        (ReasonCode.STALE_GENERATION, Verdict.LOST_LEASE),
        (ReasonCode.ILLEGAL_TRANSITION, Verdict.RETRY),  # a refusal that does not end the phase
    ],
)
async def test_a_refused_termination_is_another_worker_s_only_when_the_refusal_says_so(
    flow: Flow, reason: ReasonCode, verdict: Verdict
) -> None:
    flow.decide(S.UNKNOWN)
    flow.answer = lambda event: [refusal(event, reason)]
    assert await flow.worker._terminate(flow.manifest, 1) is verdict
    assert flow.counts == {"terminated": 1, f"refused_{reason.value}": 1}


async def test_a_termination_nobody_answers_is_waited_for_the_settle_timeout_only(flow: Flow) -> None:
    flow.decide(S.UNKNOWN)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await flow.worker._terminate(flow.manifest, 1) is Verdict.RETRY
    assert 0.05 <= loop.time() - started < 1.0


# -- recovery after a restart ---------------------------------------------------------------------------


def entry(after: int = 0, generation: int | None = 1, handle: str | None = None) -> JournalEntry:
    return JournalEntry("op-1", "c1", after, generation, handle)


async def test_a_journaled_operation_with_no_manifest_after_catch_up_closes_its_entry(tmp_path: Path) -> None:
    """Found by the chaos soak (seeds 21, 22, 28, 30): a restarted worker's journal held operations
    another worker had ended, read from before the partition's low watermark; each was skipped with a
    warning and stayed open, so it came back at every move of its partition."""
    journal = WorkerJournal(tmp_path / "journal")
    journal.write(entry())
    async with flows(KEPT, journal=journal) as f:
        f.worker.take({("c1", "op-1")})
        await asyncio.gather(*f.worker._tasks.values())
        assert (f.worker.journal.open_entries(), f.events, f.requests) == ([], [], [])
        assert f.counts == {"journaled_settled_elsewhere": 1}
        f.worker.take({("c1", "op-1")})
        assert f.worker._tasks == {}
    assert WorkerJournal(tmp_path / "journal").open_entries() == []


async def test_nothing_seen_of_a_journaled_operation_starts_a_generation(flow: Flow) -> None:
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry()) is Verdict.RETRY
    assert (flow.events, flow.counts) == ([], {})


@pytest.mark.parametrize(
    ("state", "verdict"),
    [(S.COMMITTED, Verdict.COMMITTED), (S.REJECTED, Verdict.CANCELLED), (S.CANCELLED, Verdict.CANCELLED)],
)
async def test_a_journaled_operation_found_final_ends_with_its_state(
    flow: Flow, state: DispatchState, verdict: Verdict
) -> None:
    flow.decide(state, attempt_terminated=True)
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry()) is verdict
    assert (flow.events, flow.counts) == ([], {})


async def test_a_journaled_operation_found_cancelled_with_its_attempt_open_confirms_it(flow: Flow) -> None:
    """The journaled handle is the one the ledger bound: the kept response is stopped at the provider."""
    flow.decide(S.CANCELLED, response_handle=HANDLE)
    flow.answer = terminated_answer
    verdict = await flow.worker._recover(flow.manifest, flow.endpoint, entry(handle=HANDLE))
    assert verdict is Verdict.CANCELLED
    assert [str(r.url) for r in flow.requests] == [f"{BASE}/v1/responses/{HANDLE}/cancel"]
    assert [e.attempt_generation for e in flow.of(AttemptTerminated)] == [1]


@pytest.mark.parametrize(
    ("state", "generation", "after"),
    [(S.PREPARED, 1, 0), (S.SENT, 1, 1), (S.SENT, 1, 2)],  # never accepted, or an older generation
)
async def test_an_attempt_the_journal_never_saw_accepted_is_started_anew(
    flow: Flow, state: DispatchState, generation: int, after: int
) -> None:
    flow.decide(state, attempt_generation=generation)
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry(after=after)) is Verdict.RETRY
    assert (flow.events, flow.counts) == ([], {})


async def test_an_attempt_another_worker_holds_is_left_to_it(flow: Flow) -> None:
    flow.decide(S.STREAMING, lease_owner="w2")
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry()) is Verdict.LOST_LEASE
    assert (flow.events, flow.counts) == ([], {})


def recovered_answer(state: DispatchState = S.COMMITTED) -> Answer:
    """The fold's answer to RecoveryReported (`state`), and to HandleBound (SENT with the handle bound)."""

    def answer(event: IngressEvent) -> Sequence[Observed]:
        if isinstance(event, RecoveryReported):
            reason = ReasonCode.WORKER_RECOVERED if state == S.UNKNOWN else None
            return [decision("op-1", state, source_event_id=event.event_id, reason=reason)]
        if isinstance(event, HandleBound):
            return [
                decision(
                    "op-1", S.SENT, source_event_id=event.event_id, response_handle=event.response_handle
                )
            ]
        return ()

    return answer


@pytest.mark.parametrize("state", [S.DISPATCHING, S.SENT, S.STREAMING])
@pytest.mark.parametrize("owner", [None, "", "w1"])
async def test_an_active_attempt_of_ours_is_reported_recovered_and_waited_for(
    flow: Flow, state: DispatchState, owner: str | None
) -> None:
    flow.decide(state, response_handle=HANDLE if state != S.DISPATCHING else None, lease_owner=owner)
    flow.answer = recovered_answer()
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry(generation=2)) is Verdict.COMMITTED
    [recovered] = flow.events
    assert isinstance(recovered, RecoveryReported)
    assert (recovered.attempt_generation, recovered.worker_id) == (1, "w1")
    assert flow.counts == {"recoveries": 1}


async def test_a_handle_journaled_but_never_bound_is_bound_through_the_ledger_first(flow: Flow) -> None:
    flow.decide(S.SENT)
    flow.answer = recovered_answer()
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry(handle=HANDLE)) is Verdict.COMMITTED
    bound, recovered = flow.events
    assert isinstance(bound, HandleBound) and isinstance(recovered, RecoveryReported)
    assert (bound.attempt_generation, bound.response_handle, bound.manifest_digest, bound.resumable) == (
        1, HANDLE, flow.manifest.manifest_digest, True,
    )  # fmt: skip
    assert flow.counts == {"recoveries": 1, "journaled_handles_bound": 1}


async def test_a_journaled_handle_the_ledger_does_not_bind_is_never_used(flow: Flow) -> None:
    flow.decide(S.SENT)
    answered = recovered_answer(S.UNKNOWN)
    flow.answer = lambda event: [] if isinstance(event, HandleBound) else answered(event)
    # the recovery ends in UNKNOWN: with no handle, the open attempt is replayed or terminated
    verdict = await flow.worker._recover(flow.manifest, flow.endpoint, entry(handle=HANDLE))
    assert isinstance(flow.events[0], HandleBound)
    assert flow.counts["unbound_handles_dropped"] == 1 and flow.counts["journaled_handles_bound"] == 1
    assert [type(e) for e in flow.events] == [HandleBound, RecoveryReported, AttemptTerminated]
    assert flow.requests == []  # no resume by the unbound handle
    assert verdict is Verdict.RETRY


@pytest.mark.parametrize(
    ("journaled", "state", "bound"),
    [
        (2, S.SENT, None),  # the handle of another generation: not bound, not used
        (1, S.STREAMING, None),  # not SENT: the stream's own handle binding decides
        (1, S.SENT, "resp_other"),  # the ledger bound another handle
    ],
)
async def test_a_journaled_handle_is_bound_only_for_its_generation_while_none_is(
    flow: Flow, journaled: int, state: DispatchState, bound: str | None
) -> None:
    flow.decide(state, response_handle=bound)
    flow.answer = recovered_answer()
    verdict = await flow.worker._recover(
        flow.manifest, flow.endpoint, entry(generation=journaled, handle=HANDLE)
    )
    assert verdict is Verdict.COMMITTED
    assert [type(e) for e in flow.events] == [RecoveryReported]
    dropped = {"unbound_handles_dropped": 1} if journaled == 1 else {}
    assert flow.counts == {"recoveries": 1, **dropped}


async def test_an_open_unknown_attempt_is_continued_from_its_own_decision(flow: Flow) -> None:
    """UNKNOWN and not terminated: nothing is appended to report the recovery, the decision that made it
    UNKNOWN ends the phase at once, and with no bound handle (nor kept keys) the attempt is terminated."""
    flow.decide(S.UNKNOWN, source_event_id="the-disconnect", reason=ReasonCode.STREAM_DISCONNECTED)
    flow.answer = lambda event: [
        decision("op-1", S.UNKNOWN, source_event_id=event.event_id, attempt_terminated=True)
    ]
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry()) is Verdict.RETRY
    assert [type(e) for e in flow.events] == [AttemptTerminated]
    assert flow.counts == {"recoveries": 1, "terminated": 1}


async def test_an_unknown_attempt_already_terminated_starts_a_new_generation(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, attempt_terminated=True)
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry()) is Verdict.RETRY
    assert (flow.events, flow.counts) == ([], {"recoveries": 1})


async def test_a_handle_bound_through_the_ledger_is_used_as_soon_as_the_ledger_answers() -> None:
    async with flows(KEPT, settle_timeout_s=60) as flow:
        flow.decide(S.SENT)
        flow.answer = recovered_answer()
        verdict = await flow.worker._recover(flow.manifest, flow.endpoint, entry(handle=HANDLE))
        assert verdict is Verdict.COMMITTED  # within the test's bound, not the 60 s settle timeout


async def test_a_cancel_that_lands_while_a_journaled_handle_is_bound_ends_the_wait_at_once() -> None:
    """The fold refuses HandleBound once the operation is CANCELLED, and its CANCELLED decision may
    reach the board first: the wait ends on it, and the handle is not used."""
    async with flows(KEPT, settle_timeout_s=60) as flow:
        flow.decide(S.SENT)
        flow.answer = lambda event: [decision("op-1", S.CANCELLED, source_event_id="a-cancel")]
        verdict = await flow.worker._recover(flow.manifest, flow.endpoint, entry(handle=HANDLE))
        assert verdict is Verdict.RETRY and [type(e) for e in flow.events] == [HandleBound]
        assert flow.counts == {"recoveries": 1, "journaled_handles_bound": 1, "unbound_handles_dropped": 1}


async def test_a_refused_binding_of_a_journaled_handle_is_counted(flow: Flow) -> None:
    flow.decide(S.SENT)
    recovered = recovered_answer()
    flow.answer = lambda event: (
        [refusal(event, ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST)]
        if isinstance(event, HandleBound)
        else recovered(event)
    )
    verdict = await flow.worker._recover(flow.manifest, flow.endpoint, entry(handle=HANDLE))
    assert verdict is Verdict.COMMITTED
    assert flow.counts == {
        "recoveries": 1, "journaled_handles_bound": 1, "refused_HANDLE_BOUND_TO_OTHER_MANIFEST": 1,
        "unbound_handles_dropped": 1,
    }  # fmt: skip


async def test_a_recovery_is_not_ended_by_an_expiry_seen_before_it(flow: Flow) -> None:
    """An expiry of this generation before the restart (the worker then took its attempt back) is not
    the recovery's: the phase waits for the answer to RecoveryReported."""
    flow.decide(S.UNKNOWN, reason=ReasonCode.LEASE_EXPIRED, source_event_id="an-old-claim")
    flow.decide(S.STREAMING, source_event_id="taken-back")
    flow.answer = recovered_answer()
    assert await flow.worker._recover(flow.manifest, flow.endpoint, entry()) is Verdict.COMMITTED
    assert flow.counts == {"recoveries": 1}


# -- an open attempt is continued under its generation --------------------------------------------------


def ends_in(state: DispatchState, generation: int = 1) -> Answer:
    """The fold's answer to a read's StreamEnded: `state` (COMMITTED: the answer was whole)."""

    def answer(event: IngressEvent) -> Sequence[Observed]:
        if isinstance(event, StreamEnded):
            return [decision("op-1", state, source_event_id=event.event_id, attempt_generation=generation)]
        return ()

    return answer


def refused_with(status: int) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, json={"error": {"type": "server_error"}})


def disconnected(**fields: Any) -> dict[str, Any]:
    """An open attempt whose stream was cut: UNKNOWN, not terminated, by the decision `the-cut`."""
    return {"source_event_id": "the-cut", "reason": ReasonCode.STREAM_DISCONNECTED, **fields}


async def test_a_takeover_resumes_a_kept_response_from_its_bound_handle(flow: Flow) -> None:
    """UNKNOWN with a bound handle and a kept response: ResumeStarted, then a GET of the stream from its
    start (acked -1), and the commit the read brings is the operation's verdict."""
    flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE))
    flow.respond = refused_with(503)
    flow.answer = ends_in(S.COMMITTED)
    assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.COMMITTED
    resumed, ended = flow.events
    assert isinstance(resumed, ResumeStarted) and isinstance(ended, StreamEnded)
    assert (resumed.attempt_generation, resumed.response_handle, resumed.worker_id) == (1, HANDLE, "w1")
    assert (ended.attempt_generation, ended.last_delta_sequence) == (1, -1)
    [get] = flow.requests
    assert (get.method, str(get.url)) == ("GET", flow.endpoint.resume_url(HANDLE))
    assert get.headers["authorization"] == "Bearer sk-test"
    assert flow.counts == {"takeovers": 1, "resumes": 1, "http_503": 1, "resumed_commits": 1}
    assert flow.worker._failures[KEY].source_event_id == "the-cut"  # what ended the attempt's last phase
    assert set(flow.worker._signed_with) == {KEY}  # the resume was signed with the route's credential
    assert set(flow.worker.leases._signs_of_life) == {KEY}  # the resume renews the lease


async def test_a_recovered_stream_is_read_again_from_its_first_delta(flow: Flow) -> None:
    """A restart knows nothing of what was read: the resume after a recovery asks for every delta."""
    flow.decide(S.STREAMING, response_handle=HANDLE)

    def fold(event: IngressEvent) -> Sequence[Observed]:
        if isinstance(event, RecoveryReported):
            return [
                decision(
                    "op-1", S.UNKNOWN, **disconnected(response_handle=HANDLE, source_event_id=event.event_id)
                )
            ]
        return ends_in(S.COMMITTED)(event)

    flow.answer = fold
    flow.respond = refused_with(503)
    verdict = await flow.worker._recover(flow.manifest, flow.endpoint, entry(handle=HANDLE))
    assert verdict is Verdict.COMMITTED
    assert [type(e) for e in flow.events] == [RecoveryReported, ResumeStarted, StreamEnded]
    assert flow.of(StreamEnded)[0].last_delta_sequence == -1


@pytest.mark.parametrize(
    ("fields", "verdict"),
    [
        ({}, Verdict.RETRY),  # nothing seen
        ({"state": S.SENT}, Verdict.RETRY),  # not UNKNOWN: a new attempt decides
        ({"state": S.UNKNOWN, "attempt_terminated": True}, Verdict.RETRY),
        ({"state": S.UNKNOWN, "lease_owner": "w2"}, Verdict.LOST_LEASE),
    ],
)
async def test_only_an_open_unknown_attempt_nobody_else_holds_is_taken_over(
    flow: Flow, fields: dict[str, Any], verdict: Verdict
) -> None:
    if fields:
        rest = {name: value for name, value in fields.items() if name != "state"}
        flow.decide(fields["state"], **disconnected(**rest))
    assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is verdict
    assert (flow.events, flow.requests, flow.counts) == ([], [], {})


@pytest.mark.parametrize("owner", [None, "", "w1"])
async def test_an_open_attempt_whose_lease_is_free_or_ours_is_taken_over(
    flow: Flow, owner: str | None
) -> None:
    flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE, lease_owner=owner))
    flow.respond = refused_with(503)
    flow.answer = ends_in(S.COMMITTED)
    assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.COMMITTED
    assert flow.counts["takeovers"] == 1


async def test_a_resume_continues_after_the_last_delta_the_phase_acknowledged(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE))
    flow.respond = refused_with(503)
    flow.answer = ends_in(S.COMMITTED)
    phase = Phase(sources={"the-cut"}, handle=HANDLE, acked=7)
    assert await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, phase) is Verdict.COMMITTED
    assert [e.last_delta_sequence for e in flow.of(StreamEnded)] == [7]


async def test_a_refused_resume_ends_the_phase_at_once_as_a_lost_lease() -> None:
    """ResumeStarted is the new phase's own event: its refusal as another's ends the wait."""
    async with flows(KEPT, settle_timeout_s=60) as flow:
        flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE))
        flow.respond = refused_with(503)
        flow.answer = lambda event: (
            [refusal(event, ReasonCode.LEASE_NOT_HELD)] if isinstance(event, ResumeStarted) else []
        )
        assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.LOST_LEASE
        assert flow.counts["lost_leases"] == 1


@pytest.mark.parametrize("kept", [True, False])
async def test_a_takeover_after_a_lease_expiry_is_not_ended_by_that_expiry(kept: bool) -> None:
    """The claimed expiry made the attempt UNKNOWN and free: the worker that takes it over resumes or
    replays it, and the expiry it started from does not end its new phase (only a later one would)."""
    async with replaying() as flow:
        if kept:
            flow.manifest = flow.manifest.model_copy(update={"request_body": KEPT[2]})
        flow.decide(
            S.UNKNOWN, reason=ReasonCode.LEASE_EXPIRED, source_event_id="the-claim", response_handle=HANDLE
        )
        flow.respond = refused_with(503)
        flow.answer = replay_answer()
        assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.COMMITTED
        assert flow.counts["resumes" if kept else "replays"] == 1


async def test_a_handle_the_ledger_did_not_bind_is_not_resumed(flow: Flow) -> None:
    """The phase's handle is not the bound one: no GET; with no kept keys the attempt is terminated."""
    flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE))
    flow.answer = terminated_unknown
    verdict = await flow.worker._after_stream(
        flow.manifest, flow.endpoint, 1, Phase(sources={"the-cut"}, handle="resp_other")
    )
    assert verdict is Verdict.RETRY
    assert flow.requests == [] and [type(e) for e in flow.events] == [AttemptTerminated]
    assert flow.counts == {"terminated": 1}


async def test_a_response_that_is_not_kept_is_not_resumed_by_its_handle() -> None:
    async with flows(NOT_KEPT) as flow:
        flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE))
        flow.answer = terminated_unknown
        assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.RETRY
        assert flow.requests == [] and [type(e) for e in flow.events] == [AttemptTerminated]


def terminated_unknown(event: IngressEvent) -> Sequence[Observed]:
    if isinstance(event, AttemptTerminated):
        return [decision("op-1", S.UNKNOWN, source_event_id=event.event_id, attempt_terminated=True)]
    return ()


@contextlib.asynccontextmanager
async def replaying() -> AsyncIterator[Flow]:
    """A flow whose provider keeps idempotency keys, on a plain stream (no response kept)."""
    async with flows(NOT_KEPT) as flow:
        flow.worker.endpoints = endpoints_for(
            BASE, {"OPENAI_API_KEY": "sk-test"}, keeps_idempotency_keys=True
        )
        yield flow


def replay_answer(state: DispatchState = S.SENT, key: str | None = "idem-1") -> Answer:
    def answer(event: IngressEvent) -> Sequence[Observed]:
        if isinstance(event, ReplayStarted):
            return [decision("op-1", state, source_event_id=event.event_id, idempotency_key=key)]
        return ends_in(S.COMMITTED)(event)

    return answer


async def test_an_attempt_the_provider_keeps_by_key_is_replayed_with_its_key() -> None:
    """No handle, a provider that keeps keys: ReplayStarted, then the manifest's bytes again with the
    idempotency key the ledger answered with; the read starts from scratch."""
    async with replaying() as flow:
        flow.decide(S.UNKNOWN, **disconnected())
        flow.answer = replay_answer()
        flow.respond = refused_with(503)
        assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.COMMITTED
        replayed, ended = flow.events
        assert isinstance(replayed, ReplayStarted) and isinstance(ended, StreamEnded)
        assert (replayed.attempt_generation, replayed.worker_id) == (1, "w1")
        [post] = flow.requests
        assert (post.method, str(post.url), post.content) == (
            "POST", flow.endpoint.url, flow.manifest.request_body.encode(),
        )  # fmt: skip
        assert post.headers["idempotency-key"] == "idem-1"
        assert flow.counts == {"takeovers": 1, "replays": 1, "http_503": 1, "resumed_commits": 1}
        assert set(flow.worker.leases._signs_of_life) == {KEY}  # the replay renews the lease


@pytest.mark.parametrize(
    ("answer", "cancelled"),
    [
        (None, False),  # no answer within the CAS timeout
        (S.UNKNOWN, False),  # the fold did not take the replay
        (S.SENT, True),  # taken, but the operation was cancelled meanwhile
    ],
)
async def test_a_replay_that_is_not_taken_is_terminated_instead(
    answer: DispatchState | None, cancelled: bool
) -> None:
    async with replaying() as flow:
        flow.decide(S.UNKNOWN, **disconnected())
        replayed = replay_answer(answer) if answer is not None else (lambda event: ())

        def fold(event: IngressEvent) -> Sequence[Observed]:
            if cancelled and isinstance(event, ReplayStarted):
                return [*replayed(event), decision("op-1", S.CANCELLED, source_event_id="a-cancel")]
            if cancelled:
                return terminated_answer(event)
            return [*replayed(event), *terminated_unknown(event)]

        flow.answer = fold
        verdict = await flow.worker._continue(flow.manifest, flow.endpoint, None)
        assert flow.requests == []  # never sent again
        assert [type(e).__name__ for e in flow.events] == ["ReplayStarted", "AttemptTerminated"]
        assert verdict is (Verdict.CANCELLED if cancelled else Verdict.RETRY)


async def test_a_cancel_that_lands_before_the_replay_is_answered_ends_the_wait_at_once() -> None:
    async with replaying() as flow, asyncio.timeout(2):
        flow.worker.config = replace(flow.worker.config, cas_timeout_s=60)
        flow.decide(S.UNKNOWN, **disconnected())
        flow.answer = lambda event: (
            [decision("op-1", S.CANCELLED, source_event_id="a-cancel")]
            if isinstance(event, ReplayStarted)
            else terminated_answer(event)
        )
        assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.CANCELLED
        assert flow.requests == [] and [type(e).__name__ for e in flow.events] == [
            "ReplayStarted", "AttemptTerminated",
        ]  # fmt: skip


async def test_a_replay_the_ledger_gave_no_key_is_sent_without_one() -> None:
    async with replaying() as flow:
        flow.decide(S.UNKNOWN, **disconnected())
        flow.answer = replay_answer(key=None)
        flow.respond = refused_with(503)
        assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.COMMITTED
        [post] = flow.requests
        assert "idempotency-key" not in post.headers


async def test_an_attempt_the_cas_gave_no_key_is_sent_without_one(flow: Flow) -> None:
    flow.decide(S.PREPARED, attempt_generation=0)
    flow.answer = lambda event: [*cas(event, idempotency_key=None), *ends_in(S.COMMITTED, 2)(event)]
    flow.respond = refused_with(503)
    assert await flow.worker._attempt(flow.manifest, flow.endpoint) is Verdict.COMMITTED
    [post] = flow.requests
    assert "idempotency-key" not in post.headers


async def test_resumes_stop_at_max_resumes_and_the_attempt_is_terminated() -> None:
    async with flows(KEPT, max_resumes=2) as flow:
        flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE))
        flow.respond = refused_with(503)

        def fold(event: IngressEvent) -> Sequence[Observed]:
            if isinstance(event, StreamEnded):  # each resumed read is cut again
                return [
                    decision(
                        "op-1",
                        S.UNKNOWN,
                        **disconnected(response_handle=HANDLE, source_event_id=event.event_id),
                    )
                ]
            return terminated_unknown(event)

        flow.answer = fold
        assert await flow.worker._continue(flow.manifest, flow.endpoint, None) is Verdict.RETRY
        assert [r.method for r in flow.requests] == ["GET", "GET"]
        assert [type(e) for e in flow.events] == [
            ResumeStarted, StreamEnded, ResumeStarted, StreamEnded, AttemptTerminated,
        ]  # fmt: skip
        assert flow.counts["resumes"] == 2


# -- what ends a phase ----------------------------------------------------------------------------------


async def test_a_phase_with_no_verdict_in_time_is_given_up_in_the_ledger(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    flow.decide(S.STREAMING)
    with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
        verdict = await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, Phase(sources={"mine"}))
    assert verdict is Verdict.GIVE_UP
    [give_up] = flow.events
    assert isinstance(give_up, CancelRequested)
    assert (give_up.operation_id, give_up.worker_gave_up, give_up.reason_code) == ("op-1", True, None)
    assert give_up.reason == GIVE_UP_PREFIX + "no verdict on generation 1 within 0.05s"
    assert flow.counts == {"settle_timeouts": 1}
    assert [r.getMessage() for r in caplog.records] == ["op-1 generation 1: no verdict within 0.05s"]


@pytest.mark.parametrize("reason", [ReasonCode.LEASE_NOT_HELD, ReasonCode.STALE_GENERATION])
async def test_a_phase_whose_own_event_is_refused_as_another_s_is_a_lost_lease(
    flow: Flow, reason: ReasonCode
) -> None:
    flow.decide(S.STREAMING)
    flow.worker.board.apply_nowait(rejected("mine", "StreamEnded", reason))
    verdict = await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, Phase(sources={"mine"}))
    assert verdict is Verdict.LOST_LEASE
    assert flow.counts == {f"refused_{reason.value}": 1, "lost_leases": 1}


async def test_an_expiry_claimed_by_another_worker_ends_the_phase_as_a_lost_lease(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, reason=ReasonCode.LEASE_EXPIRED, source_event_id="their-claim")
    verdict = await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, Phase(sources={"mine"}))
    assert verdict is Verdict.LOST_LEASE and flow.events == []
    assert flow.counts == {"lost_leases": 1}


async def test_an_expiry_caused_by_the_phase_s_own_event_is_continued(flow: Flow) -> None:
    """A lease the worker's own event found expired: the attempt is still its to continue."""
    flow.decide(S.UNKNOWN, reason=ReasonCode.LEASE_EXPIRED, source_event_id="mine")
    flow.answer = terminated_unknown
    verdict = await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, Phase(sources={"mine"}))
    assert verdict is Verdict.RETRY and [type(e) for e in flow.events] == [AttemptTerminated]
    assert flow.counts == {"terminated": 1}


async def test_an_attempt_the_fold_terminated_is_retried_at_once(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, reason=ReasonCode.STREAM_INCOMPLETE, source_event_id="mine")
    failure = ProviderFailure(True, "status", 503)
    phase = Phase(sources={"mine"}, failure=failure)
    assert await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, phase) is Verdict.RETRY
    assert flow.events == [] and flow.counts == {"incomplete": 1}
    assert flow.worker._provider_failures == {KEY: failure}
    assert flow.worker._failures[KEY].reason == ReasonCode.STREAM_INCOMPLETE


async def test_a_phase_without_a_failure_forgets_an_earlier_one(flow: Flow) -> None:
    flow.decide(S.COMMITTED, source_event_id="mine")
    flow.worker._provider_failures[KEY] = ProviderFailure(True, "status", 503)
    verdict = await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, Phase(sources={"mine"}))
    assert verdict is Verdict.COMMITTED and flow.worker._provider_failures == {}
    assert flow.counts == {}  # a commit of the first read is no resumed commit


async def test_a_cancelled_phase_confirms_its_attempt_terminated(flow: Flow) -> None:
    flow.decide(S.CANCELLED, response_handle=HANDLE)
    flow.answer = terminated_answer
    phase = Phase(sources={"mine"}, handle=HANDLE)
    assert await flow.worker._after_stream(flow.manifest, flow.endpoint, 1, phase) is Verdict.CANCELLED
    assert [str(r.url) for r in flow.requests] == [f"{BASE}/v1/responses/{HANDLE}/cancel"]
    assert [e.attempt_generation for e in flow.of(AttemptTerminated)] == [1]


# -- one generation: the CAS, the send ------------------------------------------------------------------


def cas(event: IngressEvent, **fields: Any) -> list[Observed]:
    """The CAS decision on a DispatchAttempt: accepted, generation 2, with its idempotency key."""
    if not isinstance(event, DispatchAttempt):
        return []
    accepted = {
        "previous_state": S.PREPARED, "attempt_generation": 2, "idempotency_key": "idem-2", **fields,
    }  # fmt: skip
    state = accepted.pop("state", S.DISPATCHING)
    return [decision("op-1", state, source_event_id=event.event_id, **accepted)]


async def test_an_accepted_attempt_is_journaled_sent_and_read_with_its_idempotency_key(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, attempt_terminated=True)  # generation 1 is over
    flow.answer = lambda event: [*cas(event), *ends_in(S.COMMITTED, 2)(event)]
    flow.respond = refused_with(503)
    journaled: list[JournalEntry] = []
    write = flow.worker.journal.write

    def journal(entry: JournalEntry) -> None:
        journaled.append(entry)
        write(entry)

    flow.worker.journal.write = journal  # type: ignore[method-assign]
    assert await flow.worker._attempt(flow.manifest, flow.endpoint) is Verdict.COMMITTED
    attempt, sent, ended = flow.events
    assert isinstance(attempt, DispatchAttempt) and isinstance(sent, DispatchSent)
    assert (attempt.expected_revision, attempt.expected_cancel_generation, attempt.worker_id) == (1, 0, "w1")
    assert (attempt.lease_ms, attempt.replayable) == (30_000, False)
    assert isinstance(ended, StreamEnded) and (sent.attempt_generation, ended.attempt_generation) == (2, 2)
    assert journaled == [JournalEntry("op-1", "c1", 1), JournalEntry("op-1", "c1", 1, 2)]
    [post] = flow.requests
    assert (post.method, str(post.url), post.content) == (
        "POST", flow.endpoint.url, flow.manifest.request_body.encode(),
    )  # fmt: skip
    assert post.headers["idempotency-key"] == "idem-2"
    assert flow.counts == {"attempts": 1, "http_503": 1}
    assert set(flow.worker.leases._signs_of_life) == {KEY}  # the attempt is alive from its acceptance


async def test_an_attempt_whose_sent_is_refused_as_another_s_ends_at_once_as_a_lost_lease() -> None:
    """DispatchSent is the phase's own event: a refusal that says a newer generation started ends the
    phase without waiting for the read's end to be decided."""
    async with flows(KEPT, settle_timeout_s=60) as flow:
        flow.decide(S.PREPARED, attempt_generation=0)
        flow.respond = refused_with(503)
        flow.answer = lambda event: (
            [refusal(event, ReasonCode.STALE_GENERATION)] if isinstance(event, DispatchSent) else cas(event)
        )
        assert await flow.worker._attempt(flow.manifest, flow.endpoint) is Verdict.LOST_LEASE
        assert flow.counts["lost_leases"] == 1


async def test_the_first_attempt_of_an_operation_is_journaled_after_generation_0(flow: Flow) -> None:
    flow.answer = lambda event: cas(event, state=S.REJECTED, accepted=False)
    flow.worker.board.apply_nowait(manifest_issued("op-1").model_copy(update={"manifest": flow.manifest}))
    assert await flow.worker._attempt(flow.manifest, flow.endpoint) is Verdict.LOST_CAS
    assert flow.worker.journal.get(KEY) == JournalEntry("op-1", "c1", 0)


async def test_an_attempt_with_no_cas_answer_in_time_is_given_up(flow: Flow) -> None:
    flow.decide(S.PREPARED)
    assert await flow.worker._attempt(flow.manifest, flow.endpoint) is Verdict.GIVE_UP
    attempt, give_up = flow.events
    assert isinstance(attempt, DispatchAttempt) and isinstance(give_up, CancelRequested)
    assert give_up.reason == GIVE_UP_PREFIX + "no CAS answer within 0.05s"
    assert flow.counts == {"attempts": 1, "cas_timeouts": 1}
    assert flow.requests == []


async def test_a_refused_attempt_is_a_lost_cas(flow: Flow) -> None:
    flow.decide(S.PREPARED)
    flow.answer = lambda event: [refusal(event, ReasonCode.ILLEGAL_TRANSITION)]
    assert await flow.worker._attempt(flow.manifest, flow.endpoint) is Verdict.LOST_CAS
    assert flow.counts == {"attempts": 1, "refused_ILLEGAL_TRANSITION": 1}
    assert len(flow.events) == 1 and flow.requests == []


@pytest.mark.parametrize(
    "fields", [{"accepted": False, "state": S.PREPARED}, {"accepted": False, "state": S.DISPATCHING}]
)
async def test_a_cas_that_does_not_start_the_attempt_is_a_conflict(
    flow: Flow, fields: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    flow.decide(S.PREPARED)
    flow.answer = lambda event: cas(
        event, reason=ReasonCode.CAS_REVISION_MISMATCH, detail="revision 2", **fields
    )
    with caplog.at_level(logging.INFO, logger="turnledger.gateway.worker"):
        assert await flow.worker._attempt(flow.manifest, flow.endpoint) is Verdict.LOST_CAS
    assert flow.counts == {"attempts": 1, "cas_conflicts": 1}
    assert len(flow.events) == 1 and flow.requests == []
    assert [r.getMessage() for r in caplog.records] == [
        "op-1: CAS conflict CAS_REVISION_MISMATCH (revision 2)"
    ]


async def test_a_busy_conversation_is_asked_again_once_its_other_attempt_is_terminated(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    """CONVERSATION_BUSY: the attempt is asked again as soon as the board shows the other operation's
    attempt can produce nothing more."""
    flow.decide(S.PREPARED)
    flow.worker.board.apply_nowait(decision("op-0", S.STREAMING))
    asked: list[DispatchAttempt] = []

    def fold(event: IngressEvent) -> Sequence[Observed]:
        if not isinstance(event, DispatchAttempt):
            return ()
        asked.append(event)
        if len(asked) == 1:  # busy; the other attempt ends right after
            loop = asyncio.get_running_loop()
            loop.call_soon(flow.worker.board.apply_nowait, decision("op-0", S.COMMITTED))
            loop.call_soon(lambda: asyncio.ensure_future(flow.worker.board.apply([])))
            return cas(event, state=S.PREPARED, accepted=False, reason=ReasonCode.CONVERSATION_BUSY,
                       detail="op-0", deadline_at_ms=1)  # fmt: skip
        return cas(event, state=S.REJECTED, accepted=False, reason=ReasonCode.CAS_REVISION_MISMATCH)

    flow.answer = fold
    with caplog.at_level(logging.INFO, logger="turnledger.gateway.worker"):
        assert await flow.worker._cas(flow.manifest, flow.endpoint) == cas(asked[1], state=S.REJECTED,
            accepted=False, reason=ReasonCode.CAS_REVISION_MISMATCH)[0]  # fmt: skip
    assert len(asked) == 2 and flow.counts == {"attempts": 2, "conversation_busy": 1}
    assert [r.getMessage() for r in caplog.records] == ["c1/op-1: conversation busy (op-0); waiting"]


@pytest.mark.parametrize(("deadline_in_s", "asked"), [(-1, 1), (3600, 2)])
async def test_a_conversation_still_busy_is_asked_again_only_before_the_deadline(
    flow: Flow, deadline_in_s: int, asked: int
) -> None:
    flow.decide(S.PREPARED)
    flow.worker.board.apply_nowait(decision("op-0", S.STREAMING))
    attempts: list[IngressEvent] = []
    deadline = int(time.time() * 1000) + deadline_in_s * 1000

    def fold(event: IngressEvent) -> Sequence[Observed]:
        attempts.append(event)
        if len(attempts) == 1:
            return cas(event, state=S.PREPARED, accepted=False, reason=ReasonCode.CONVERSATION_BUSY,
                       deadline_at_ms=deadline)  # fmt: skip
        return cas(event, state=S.REJECTED, accepted=False, reason=ReasonCode.CAS_REVISION_MISMATCH)

    flow.answer = fold
    answer = await flow.worker._cas(flow.manifest, flow.endpoint)
    assert len(attempts) == asked
    assert isinstance(answer, DispatchDecision)
    assert answer.reason == (ReasonCode.CONVERSATION_BUSY if asked == 1 else ReasonCode.CAS_REVISION_MISMATCH)


async def test_a_conversation_still_busy_at_its_deadline_s_own_millisecond_is_not_asked_again(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline's own millisecond is past it, as for the CAS (an attempt at `deadline_at_ms` is
    refused): the busy answer is the answer."""
    clock = SimpleNamespace(time=lambda: 5_000.0, monotonic=time.monotonic)  # now: 5,000,000 ms
    monkeypatch.setattr(worker_module, "time", clock)
    flow.decide(S.PREPARED)
    flow.worker.board.apply_nowait(decision("op-0", S.STREAMING))
    attempts: list[IngressEvent] = []

    def fold(event: IngressEvent) -> Sequence[Observed]:
        attempts.append(event)
        return cas(event, state=S.PREPARED, accepted=False, reason=ReasonCode.CONVERSATION_BUSY,
                   deadline_at_ms=5_000_000)  # fmt: skip

    flow.answer = fold
    answer = await flow.worker._cas(flow.manifest, flow.endpoint)
    assert len(attempts) == 1 and answer == cas(attempts[0], state=S.PREPARED, accepted=False,
        reason=ReasonCode.CONVERSATION_BUSY, deadline_at_ms=5_000_000)[0]  # fmt: skip


async def test_a_busy_conversation_waits_for_its_other_operations_not_for_its_own(flow: Flow) -> None:
    """Only the other operations' attempts hold the conversation: once they can produce nothing more the
    attempt is asked again at once (here past the deadline), whatever the board shows of the operation
    itself (another worker's attempt of it: the CAS says so)."""
    flow.decide(S.PREPARED)
    flow.worker.board.apply_nowait(decision("op-0", S.STREAMING))
    asked: list[DispatchAttempt] = []

    def fold(event: IngressEvent) -> Sequence[Observed]:
        if not isinstance(event, DispatchAttempt):
            return ()
        asked.append(event)
        if len(asked) == 1:  # busy; another worker's attempt of op-1 is seen, then op-0 ends
            ours = decision("op-1", S.DISPATCHING, attempt_generation=2, lease_owner="w2")
            loop = asyncio.get_running_loop()
            loop.call_soon(flow.worker.board.apply_nowait, ours)
            loop.call_soon(flow.worker.board.apply_nowait, decision("op-0", S.COMMITTED))
            loop.call_soon(lambda: asyncio.ensure_future(flow.worker.board.apply([])))
            return cas(event, state=S.PREPARED, accepted=False, reason=ReasonCode.CONVERSATION_BUSY,
                       deadline_at_ms=1)  # fmt: skip
        return cas(event, state=S.DISPATCHING, accepted=False, reason=ReasonCode.CAS_STATE_MISMATCH)

    flow.answer = fold
    answer = await flow.worker._cas(flow.manifest, flow.endpoint)
    assert len(asked) == 2 and isinstance(answer, DispatchDecision)
    assert answer.reason == ReasonCode.CAS_STATE_MISMATCH
    assert flow.counts == {"attempts": 2, "conversation_busy": 1}


# -- after a failed generation: refuse, give up, or pause -------------------------------------------------


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


REFUSED = ProviderFailure(False, "status", 401, "authentication_error")
THROTTLED = ProviderFailure(True, "status", 429, "rate_limit_error", retry_after_s=0.01)


async def test_a_request_refused_for_what_it_is_ends_the_operation(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    flow.decide(S.UNKNOWN, attempt_terminated=True)
    flow.worker._provider_failures[KEY] = REFUSED
    refused = sample("turnledger_provider_failures_total", api="openai-responses", verdict="refused")
    with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
        verdict = await flow.worker._after_failed_attempt(flow.manifest, flow.endpoint, 1)
    assert verdict is Verdict.GIVE_UP
    why = "the provider refused the request (HTTP 401 authentication_error); not sent again: it would be too"
    [give_up] = flow.events
    assert isinstance(give_up, CancelRequested)
    assert (give_up.reason, give_up.reason_code) == (GIVE_UP_PREFIX + why, ReasonCode.PROVIDER_REFUSED)
    assert flow.counts == {"provider_refused": 1} and flow.worker._provider_failures == {}
    assert (
        sample("turnledger_provider_failures_total", api="openai-responses", verdict="refused") == refused + 1
    )
    assert [r.getMessage() for r in caplog.records] == [f"c1/op-1: {why}"]


async def test_a_refusal_of_a_credential_replaced_since_is_sent_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The request was signed before the route's credential changed (a rotated key): the refusal may be
    of the old one, so the request goes once more, after the backoff."""
    async with flows(KEPT, backoff=BackoffPolicy(initial_s=0.01, max_s=0.01, jitter=0.0)) as flow:
        flow.decide(S.UNKNOWN, attempt_terminated=True, deadline_at_ms=None)
        flow.worker._provider_failures[KEY] = REFUSED
        flow.worker._signed_with[KEY] = -1  # a credential the route has replaced since
        with caplog.at_level(logging.INFO, logger="turnledger.gateway.worker"):
            assert await flow.worker._after_failed_attempt(flow.manifest, flow.endpoint, 1) is Verdict.RETRY
        assert flow.events == [] and flow.counts == {"refusals_of_a_replaced_credential": 1, "pauses": 1}
        assert [r.getMessage() for r in caplog.records] == [
            "c1/op-1: HTTP 401 authentication_error met a credential since replaced: sent again",
            "c1/op-1: next generation in 0.01s (HTTP 401 authentication_error)",
        ]


@pytest.mark.parametrize("signed_with", [None, 0])
async def test_a_refusal_of_the_credential_the_route_still_has_ends_the_operation(
    flow: Flow, signed_with: int | None
) -> None:
    flow.decide(S.UNKNOWN, attempt_terminated=True, deadline_at_ms=None)
    flow.worker._provider_failures[KEY] = REFUSED
    if signed_with is not None:
        flow.worker._signed_with[KEY] = signed_with
    assert await flow.worker._after_failed_attempt(flow.manifest, flow.endpoint, 1) is Verdict.GIVE_UP
    assert flow.counts == {"provider_refused": 1}


@pytest.mark.parametrize(
    ("failure", "last"),
    [
        (None, "UNKNOWN STREAM_INCOMPLETE (cut) at generation 1"),
        (
            THROTTLED,
            "UNKNOWN STREAM_INCOMPLETE (cut) at generation 1; HTTP 429 rate_limit_error, retry after 0.01s",
        ),
    ],
)
async def test_the_last_attempt_spent_gives_up_naming_the_last_failure(
    failure: ProviderFailure | None, last: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with flows(KEPT, max_attempts=2) as flow:
        flow.decide(S.UNKNOWN, attempt_terminated=True)
        flow.worker._failures[KEY] = decision(
            "op-1", S.UNKNOWN, reason=ReasonCode.STREAM_INCOMPLETE, detail="cut"
        )
        if failure is not None:
            flow.worker._provider_failures[KEY] = failure
        with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
            assert await flow.worker._after_failed_attempt(flow.manifest, flow.endpoint, 2) is Verdict.GIVE_UP
        [give_up] = flow.events
        assert isinstance(give_up, CancelRequested) and give_up.reason_code is None
        assert give_up.reason == f"{GIVE_UP_PREFIX}2 attempts failed; last {last}"
        assert flow.counts == {"gave_up": 1} and flow.worker._failures == {}
        assert [r.getMessage() for r in caplog.records] == [
            f"c1/op-1: giving up after 2 attempts; last: {last}"
        ]


async def test_a_throttled_generation_pauses_as_asked_and_cools_the_route_for_its_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with flows(KEPT, max_attempts=2) as flow:
        flow.decide(S.UNKNOWN, attempt_terminated=True, deadline_at_ms=None)
        flow.worker._provider_failures[KEY] = THROTTLED
        retried = sample("turnledger_provider_failures_total", api="openai-responses", verdict="retried")
        paused = sample("turnledger_provider_retry_pause_seconds_sum", api="openai-responses")
        before = time.monotonic()
        with caplog.at_level(logging.INFO, logger="turnledger.gateway.worker"):
            assert await flow.worker._after_failed_attempt(flow.manifest, flow.endpoint, 1) is Verdict.RETRY
        assert flow.events == [] and flow.counts == {"pauses": 1}
        route = flow.endpoint.route
        assert before + 0.01 <= route.cooling_until(flow.endpoint.model) <= time.monotonic() + 0.01
        assert route.cooling_until("openai/gpt-4o@2024-08") == 0.0
        assert (
            sample("turnledger_provider_failures_total", api="openai-responses", verdict="retried")
            == retried + 1
        )
        assert sample("turnledger_provider_retry_pause_seconds_sum", api="openai-responses") == pytest.approx(
            paused + 0.01
        )
        assert [r.getMessage() for r in caplog.records] == [
            "c1/op-1: next generation in 0.01s (HTTP 429 rate_limit_error, retry after 0.01s)"
        ]


async def test_without_the_provider_s_word_the_pause_is_the_backoff(caplog: pytest.LogCaptureFixture) -> None:
    backoff = BackoffPolicy(initial_s=0.01, max_s=1.0, jitter=0.5)
    async with flows(KEPT, backoff=backoff, jitter=lambda: 1.0) as flow:
        flow.decide(S.UNKNOWN, attempt_terminated=True, deadline_at_ms=None)
        for failure in (None, ProviderFailure(True, "status", 503)):
            if failure is not None:
                flow.worker._provider_failures[KEY] = failure
            with caplog.at_level(logging.INFO, logger="turnledger.gateway.worker"):
                assert (
                    await flow.worker._after_failed_attempt(flow.manifest, flow.endpoint, 2) is Verdict.RETRY
                )
        # two failed attempts: 0.01 doubled, less half of it
        assert [r.getMessage() for r in caplog.records] == [
            "c1/op-1: next generation in 0.01s (no decision)",
            "c1/op-1: next generation in 0.01s (HTTP 503)",
        ]
        assert flow.endpoint.route.cooling_until(flow.endpoint.model) == 0.0


async def test_a_pause_past_the_deadline_gives_up_at_once(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, deadline_at_ms=now_ms() + 500)
    verdict = await flow.worker._pause(flow.manifest, flow.endpoint, 1.0, "HTTP 503")
    assert verdict is Verdict.GIVE_UP
    [give_up] = flow.events
    assert isinstance(give_up, CancelRequested)
    assert give_up.reason == GIVE_UP_PREFIX + "HTTP 503: waiting 1s more would pass the operation's deadline"
    assert flow.counts == {"pauses_past_deadline": 1}


@pytest.mark.parametrize(
    ("deadline_in_ms", "verdict"), [(1_000, Verdict.GIVE_UP), (1_001, Verdict.CANCELLED)]
)
async def test_a_pause_that_would_end_at_the_deadline_is_past_it(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, deadline_in_ms: int, verdict: Verdict
) -> None:
    """A pause of 1 s that ends at the deadline is given up; one that ends a millisecond before it is
    waited (here until a cancel ends it)."""
    monkeypatch.setattr(worker_module, "now_ms", lambda: 5_000_000)
    flow.decide(S.UNKNOWN, deadline_at_ms=5_000_000 + deadline_in_ms)
    waiting = asyncio.ensure_future(flow.worker._pause(flow.manifest, flow.endpoint, 1.0, "HTTP 503"))
    await asyncio.sleep(0.01)
    await flow.worker.board.apply([decision("op-1", S.CANCELLED)])
    assert await waiting is verdict


async def test_a_pause_for_an_operation_the_board_has_not_seen_is_waited(flow: Flow) -> None:
    assert await flow.worker._pause(flow.manifest, flow.endpoint, 0.01, "HTTP 503") is None
    assert flow.counts == {"pauses": 1}


async def test_a_pause_gives_its_slots_back_and_takes_them_again(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, deadline_at_ms=None)
    slot = asyncio.Semaphore(1)
    hold = flow.worker._holds[KEY] = SlotHold([slot])
    await hold.take()
    held_during: list[bool] = []
    waiting = asyncio.ensure_future(flow.worker._pause(flow.manifest, flow.endpoint, 0.05, "HTTP 503"))
    await asyncio.sleep(0.01)
    held_during.append(slot.locked())
    assert await waiting is None
    assert held_during == [False] and slot.locked()
    assert flow.counts == {"pauses": 1}


async def test_a_cancel_ends_a_pause_at_once(flow: Flow) -> None:
    flow.decide(S.UNKNOWN, deadline_at_ms=now_ms() + 60_000)
    waiting = asyncio.ensure_future(flow.worker._pause(flow.manifest, flow.endpoint, 30.0, "HTTP 503"))
    await asyncio.sleep(0.01)
    await flow.worker.board.apply([decision("op-1", S.CANCELLED)])
    assert await waiting is Verdict.CANCELLED


async def test_a_route_cooling_down_for_the_model_is_waited_out(flow: Flow) -> None:
    route, model = flow.endpoint.route, flow.endpoint.model
    route.cool_down(model, 0.05, time.monotonic())
    flow.decide(S.PREPARED, deadline_at_ms=None)
    assert await flow.worker._route_ready(flow.manifest, flow.endpoint) is None
    assert time.monotonic() >= route.cooling_until(model)
    assert flow.counts == {"route_cooldown_waits": 1, "pauses": 1}


async def test_a_route_cooling_down_past_the_deadline_gives_up(flow: Flow) -> None:
    route, model = flow.endpoint.route, flow.endpoint.model
    route.cool_down(model, 60.0, time.monotonic())
    flow.decide(S.PREPARED, deadline_at_ms=now_ms() + 1_000)
    assert await flow.worker._route_ready(flow.manifest, flow.endpoint) is Verdict.GIVE_UP
    [give_up] = flow.events
    assert isinstance(give_up, CancelRequested)
    assert give_up.reason.startswith(
        f"{GIVE_UP_PREFIX}route {route.name} cooling down for {model}: waiting 6"
    )


# -- one operation from start to verdict ---------------------------------------------------------------


async def test_an_operation_with_no_manifest_is_skipped(flow: Flow, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
        await flow.worker._run(KEY, None)
    assert (flow.events, flow.counts) == ([], {})
    assert [r.getMessage() for r in caplog.records] == ["no manifest for c1/op-1; skipped"]


async def test_a_manifest_that_does_not_stream_is_given_up_and_finished() -> None:
    async with flows(("openai-responses@2", "openai/gpt-4.1@2025-04", "{}")) as flow:
        verdicts: list[tuple[Any, Verdict]] = []
        flow.worker._on_verdict = lambda key, verdict: verdicts.append((key, verdict))
        flow.decide(S.PREPARED)
        flow.worker.journal.write(JournalEntry("op-1", "c1", 0))
        await flow.worker._run(KEY, None)
        [give_up] = flow.events
        assert isinstance(give_up, CancelRequested)
        assert (
            give_up.reason
            == GIVE_UP_PREFIX + "the manifest's request does not stream (dispatch policy stream)"
        )
        assert flow.counts == {"not_streaming": 1, "verdict_give_up": 1}
        assert verdicts == [(KEY, Verdict.GIVE_UP)]
        assert flow.worker.journal.open_entries() == []  # done
        assert KEY in flow.worker.board.manifests  # a give-up is not final until its CANCELLED arrives


@pytest.mark.parametrize(("state", "forgotten"), [(S.COMMITTED, True), (S.UNKNOWN, False)])
async def test_a_finished_operation_is_forgotten_by_the_board_only_when_final(
    flow: Flow, state: DispatchState, forgotten: bool
) -> None:
    flow.decide(S.PREPARED)
    flow.worker._failures[KEY] = decision("op-1", S.UNKNOWN)
    verdict = {S.COMMITTED: Verdict.COMMITTED, S.UNKNOWN: Verdict.LOST_LEASE}[state]
    flow.worker._finish(flow.manifest, verdict)
    assert (KEY not in flow.worker.board.manifests) is forgotten
    assert flow.worker._failures == {} and flow.counts == {f"verdict_{verdict.value}": 1}


class Generations:
    """A fold for whole operations: each DispatchAttempt starts the next generation, each read's end
    is decided by `ends` in turn (UNKNOWN STREAM_INCOMPLETE: the fold terminated the attempt)."""

    def __init__(self, *ends: DispatchState) -> None:
        self.ends = list(ends)
        self.generation = 0

    def __call__(self, event: IngressEvent) -> Sequence[Observed]:
        if isinstance(event, DispatchAttempt):
            self.generation += 1
            return cas(event, attempt_generation=self.generation, deadline_at_ms=None)
        if isinstance(event, StreamEnded):
            state = self.ends.pop(0)
            reason = ReasonCode.STREAM_INCOMPLETE if state == S.UNKNOWN else None
            return [
                decision(
                    "op-1", state, source_event_id=event.event_id, attempt_generation=self.generation,
                    reason=reason, deadline_at_ms=None, attempt_terminated=state == S.UNKNOWN,
                )
            ]  # fmt: skip
        return ()


async def settle(flow: Flow) -> None:
    while flow.worker.busy:
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def live(**config: Any) -> AsyncIterator[tuple[Flow, list[tuple[Any, Verdict]]]]:
    """A live flow (no sweeper) whose verdicts are recorded, with a 10 ms backoff and no jitter."""
    backoff = BackoffPolicy(initial_s=0.01, max_s=0.01, jitter=0.0)
    async with flows(KEPT, backoff=backoff, **config) as flow:
        verdicts: list[tuple[Any, Verdict]] = []
        flow.worker._on_verdict = lambda key, verdict: verdicts.append((key, verdict))
        flow.respond = refused_with(503)
        yield flow, verdicts


async def test_a_prepared_operation_is_attempted_once_the_worker_is_live() -> None:
    async with live() as (flow, verdicts):
        fold = Generations(S.COMMITTED)
        held: list[int] = []
        route_free = flow.endpoint.route.slots._value

        def answer(event: IngressEvent) -> Sequence[Observed]:
            if isinstance(event, DispatchAttempt):  # the route's slot and a worker slot
                held.append(flow.worker._holds[KEY].held)
                held.append(route_free - flow.endpoint.route.slots._value)
            return fold(event)

        flow.answer = answer
        prepared = decision("op-1", S.PREPARED, attempt_generation=0, deadline_at_ms=None)
        issued = manifest_issued("op-1").model_copy(update={"manifest": flow.manifest})
        await flow.worker.observe([issued, prepared])
        assert flow.worker.busy == 0 and flow.events == []  # catching up: the board only
        await flow.worker.go_live(only=set())
        assert flow.worker.busy == 0
        await flow.worker.observe([prepared.model_copy(update={"accepted": False})])  # a refused CAS
        assert flow.worker.busy == 0
        await flow.worker.observe([prepared])
        assert flow.worker.busy == 1 and [t.get_name() for t in flow.worker._tasks.values()] == [
            "dispatch-c1/op-1"
        ]
        await settle(flow)
        assert [type(e).__name__ for e in flow.events] == ["DispatchAttempt", "DispatchSent", "StreamEnded"]
        assert verdicts == [(KEY, Verdict.COMMITTED)]
        assert flow.counts == {"attempts": 1, "http_503": 1, "verdict_committed": 1}
        assert flow.worker._holds == {} and flow.worker._signed_with == {}
        assert held == [2, 1] and flow.endpoint.route.slots._value == route_free  # given back
        assert flow.worker.leases._signs_of_life == {}  # nothing left to renew


async def test_a_generation_the_fold_terminated_is_followed_by_a_new_one_after_a_pause() -> None:
    async with live(max_attempts=3) as (flow, verdicts):
        flow.answer = Generations(S.UNKNOWN, S.COMMITTED)
        flow.decide(S.PREPARED, attempt_generation=0, deadline_at_ms=None)
        await flow.worker.go_live(only={KEY})
        await settle(flow)
        assert verdicts == [(KEY, Verdict.COMMITTED)]
        assert [e.attempt_generation for e in flow.of(DispatchSent)] == [1, 2]
        assert flow.counts == {
            "attempts": 2, "http_503": 2, "incomplete": 1, "retries": 1, "pauses": 1, "verdict_committed": 1,
        }  # fmt: skip


async def test_the_attempts_are_spent_at_max_attempts() -> None:
    async with live(max_attempts=2) as (flow, verdicts):
        flow.answer = Generations(S.UNKNOWN, S.UNKNOWN, S.COMMITTED)
        flow.decide(S.PREPARED, attempt_generation=0, deadline_at_ms=None)
        await flow.worker.go_live(only={KEY})
        await settle(flow)
        assert verdicts == [(KEY, Verdict.GIVE_UP)]
        assert [e.attempt_generation for e in flow.of(DispatchSent)] == [1, 2]
        [give_up] = flow.of(CancelRequested)
        assert give_up.reason.startswith(f"{GIVE_UP_PREFIX}2 attempts failed; last UNKNOWN STREAM_INCOMPLETE")
        assert flow.counts["retries"] == 2 and flow.counts["gave_up"] == 1


async def test_a_lost_cas_ends_the_operation_here_without_a_retry() -> None:
    async with live() as (flow, verdicts):
        flow.answer = lambda event: cas(
            event, state=S.PREPARED, accepted=False, reason=ReasonCode.CAS_STATE_MISMATCH
        )
        flow.decide(S.PREPARED, attempt_generation=0, deadline_at_ms=None)
        await flow.worker.go_live(only={KEY})
        await settle(flow)
        assert verdicts == [(KEY, Verdict.LOST_CAS)]
        assert flow.counts == {"attempts": 1, "cas_conflicts": 1, "verdict_lost_cas": 1}


async def test_an_adapter_no_route_serves_is_given_up_as_no_provider_endpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with live() as (flow, verdicts):
        flow.worker.endpoints = ProviderRoutes([])
        flow.decide(S.PREPARED, attempt_generation=0, deadline_at_ms=None)
        with caplog.at_level(logging.ERROR, logger="turnledger.gateway.worker"):
            await flow.worker.go_live(only={KEY})
            await settle(flow)
        [give_up] = flow.events
        assert isinstance(give_up, CancelRequested) and give_up.reason_code == ReasonCode.NO_PROVIDER_ENDPOINT
        assert (
            give_up.reason
            == GIVE_UP_PREFIX + "no provider endpoint configured for adapter openai-responses@2"
        )
        assert verdicts == [(KEY, Verdict.GIVE_UP)]
        assert flow.counts == {"no_endpoint": 1, "verdict_give_up": 1}
        assert [r.getMessage() for r in caplog.records] == [
            "c1/op-1: no provider endpoint configured for adapter openai-responses@2 "
            "(model openai/gpt-4.1@2025-04); configured: []"
        ]


async def test_a_continued_attempt_s_provider_failure_is_not_kept_past_it() -> None:
    """The takeover's read failed (HTTP 503) and the fold terminated the attempt: the new generation goes
    at once, and nothing of the failure stays once the operation is done here."""
    async with live() as (flow, verdicts):
        flow.decide(S.UNKNOWN, **disconnected(response_handle=HANDLE, deadline_at_ms=None))

        def fold(event: IngressEvent) -> Sequence[Observed]:
            if isinstance(event, StreamEnded):
                return [decision("op-1", S.UNKNOWN, source_event_id=event.event_id, attempt_terminated=True)]
            return cas(event, state=S.PREPARED, accepted=False, reason=ReasonCode.CAS_STATE_MISMATCH)

        flow.answer = fold
        await flow.worker.go_live(only={KEY})
        assert flow.worker.busy == 0  # not PREPARED: the sweeper adopts it
        flow.worker._adopt(KEY)
        await settle(flow)
        assert verdicts == [(KEY, Verdict.LOST_CAS)]
        assert [type(e).__name__ for e in flow.events] == ["ResumeStarted", "StreamEnded", "DispatchAttempt"]
        assert flow.worker._provider_failures == {} and "pauses" not in flow.counts


async def test_a_journaled_operation_is_recovered_when_its_partition_is_taken() -> None:
    async with live() as (flow, verdicts):
        flow.decide(S.COMMITTED, attempt_terminated=True)
        flow.worker.journal.write(JournalEntry("op-1", "c1", 0, 1))
        flow.worker.take({("c1", "op-2")})
        assert flow.worker.busy == 0  # not this partition's
        flow.worker.take({KEY})
        await settle(flow)
        assert verdicts == [(KEY, Verdict.COMMITTED)] and flow.events == []
        assert flow.worker.journal.open_entries() == []


async def test_go_live_takes_every_operation_seen_and_journaled_and_starts_its_keepers() -> None:
    async with live(sweep=True) as (flow, verdicts):
        flow.answer = Generations(S.COMMITTED)
        flow.decide(S.PREPARED, attempt_generation=0, deadline_at_ms=None)
        await flow.worker.go_live()
        assert flow.worker.live
        assert [t.get_name() for t in flow.worker._background] == ["lease-keeper", "sweeper"]
        await settle(flow)
        assert verdicts == [(KEY, Verdict.COMMITTED)]
    async with live() as (flow, _):
        await flow.worker.go_live()
        assert [t.get_name() for t in flow.worker._background] == ["lease-keeper"]


async def test_an_operation_the_rollout_leaves_to_the_legacy_gateway_is_not_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with live() as (flow, _):
        flow.worker._takes = lambda manifest: False
        flow.decide(S.PREPARED, attempt_generation=0)
        with caplog.at_level(logging.DEBUG, logger="turnledger.gateway.worker"):
            await flow.worker.go_live(only={KEY})
        assert flow.worker.busy == 0 and flow.counts == {"not_taken": 1}
        assert [r.getMessage() for r in caplog.records] == ["c1/op-1: not taken (rollout stage all)"]
        flow.worker._adopt(KEY)  # the sweeper's adoption follows the rollout too
        assert flow.worker.busy == 0 and flow.counts == {"not_taken": 2, "adopted": 1}


async def test_a_failing_operation_is_counted_and_logged_and_its_task_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with live() as (flow, verdicts):

        def broken(event: IngressEvent) -> Sequence[Observed]:
            raise RuntimeError("the fold is down")

        flow.answer = broken
        flow.decide(S.PREPARED, attempt_generation=0, deadline_at_ms=None)
        with caplog.at_level(logging.ERROR, logger="turnledger.gateway.worker"):
            await flow.worker.go_live(only={KEY})
            await settle(flow)
        assert flow.counts == {"errors": 1} and verdicts == []
        assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
            ("dispatch of c1/op-1 failed", True)
        ]
        assert flow.worker._tasks == {} and flow.worker._holds == {}


# -- the worker's parts and its own HTTP client ------------------------------------------------------------


async def test_a_worker_wires_its_parts_with_its_settings() -> None:
    """One board, stats and event factory shared by the lease keeper, the reader and the sweeper, each
    with the worker's id and timings."""
    config = WorkerConfig(worker_id="w9", lease_s=12.0, claim_grace_s=2.5, sweep_tick_s=0.5, flush_s=0.2)
    sink = InMemoryLedger()
    worker = DispatchWorker(sink, endpoints_for(BASE, {}), config=config)
    assert worker.events.worker_id == "w9" and worker.events.sink is sink
    leases, reader, sweeper = worker.leases, worker.reader, worker.sweeper
    assert (leases.worker_id, leases.lease_s) == ("w9", 12.0)
    assert (leases._board, leases._events, leases._stats) == (worker.board, worker.events, worker.stats)
    worker._tasks[KEY] = asyncio.ensure_future(asyncio.sleep(0))
    assert list(leases._running()) == [KEY] and sweeper._running(KEY) and not sweeper._running(("c1", "x"))
    await worker._tasks.pop(KEY)
    assert (reader._flush_interval_s, reader._crash_hook, reader._stats) == (0.2, None, worker.stats)
    assert (reader._events, reader._board, reader._journal, reader._leases) == (
        worker.events, worker.board, worker.journal, worker.leases,
    )  # fmt: skip
    assert (sweeper.board, sweeper.events) == (worker.board, worker.events)
    assert (sweeper.grace_ms, sweeper.adopt_after_ms, sweeper.tick_s) == (2_500, 12_000, 0.5)
    assert sweeper._adopt == worker._adopt
    assert worker.busy == 0 and worker.live is False


async def test_a_worker_without_a_client_makes_its_own_and_closes_it(tmp_path: Path) -> None:
    config = WorkerConfig(read_timeout_s=7.0, connect_timeout_s=2.0, max_concurrency=3)
    journal = WorkerJournal(tmp_path / "journal")
    routes = endpoints_for(BASE, {})
    async with DispatchWorker(InMemoryLedger(), routes, config=config, journal=journal) as worker:
        own = worker._client()
        assert own.timeout == httpx.Timeout(7.0, connect=2.0)
        pool = own._transport._pool  # type: ignore[attr-defined]
        assert (pool._max_connections, pool._max_keepalive_connections) == (6, 0)
    assert own.is_closed and journal._file.closed


def test_a_worker_used_outside_async_with_says_how_to_start_it() -> None:
    worker = DispatchWorker(InMemoryLedger(), endpoints_for(BASE, {}))
    with pytest.raises(AssertionError) as refused:
        worker._client()
    assert str(refused.value) == "the worker's HTTP client starts with `async with`"


async def test_a_worker_leaves_a_client_it_was_given_open(flow: Flow) -> None:
    given = flow.worker._client()
    await flow.worker.close()
    assert not given.is_closed and flow.worker._stopping.is_set()


async def test_a_give_up_names_no_credential(flow: Flow) -> None:
    """The give-up's detail becomes an event: a credential quoted in it (a provider's error) is scrubbed."""
    await flow.worker._give_up(
        flow.manifest, "the provider said: bad key sk-test", ReasonCode.PROVIDER_REFUSED
    )
    [give_up] = flow.events
    assert isinstance(give_up, CancelRequested) and give_up.conversation_id == "c1"
    assert (give_up.operation_id, give_up.reason, give_up.reason_code, give_up.worker_gave_up) == (
        "op-1", GIVE_UP_PREFIX + "the provider said: bad key ***", ReasonCode.PROVIDER_REFUSED, True,
    )  # fmt: skip


async def test_tasks_that_end_with_an_error_when_stopped_are_logged_and_the_rest_named_ten_at_most(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    done = asyncio.Event()

    async def failing() -> None:
        try:
            await done.wait()
        except asyncio.CancelledError:
            raise RuntimeError("broke while stopping") from None

    async def stubborn() -> None:
        while not done.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await done.wait()

    tasks = [asyncio.create_task(failing(), name="dispatch-c1/failing")]
    tasks += [asyncio.create_task(stubborn(), name=f"dispatch-c1/op-{i:02}") for i in range(12)]
    tasks.append(asyncio.create_task(done.wait(), name="dispatch-c1/quiet"))
    await asyncio.sleep(0)
    flow.worker.config = replace(flow.worker.config, stop_within_s=0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
            await flow.worker._stop_tasks(tasks, "the test stops them")
    finally:
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    names = ", ".join(f"dispatch-c1/op-{i:02}" for i in range(10))
    assert [r.getMessage() for r in caplog.records] == [
        "dispatch-c1/failing ended with RuntimeError('broke while stopping')",
        f"12 tasks still running 0.05s after they were cancelled (the test stops them): {names}",
    ]


async def test_a_closing_worker_names_the_tasks_still_running_and_why(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    """`close` stops the operations' tasks as `release` does, and a task still running after
    `stop_within_s` is named in a warning that says the worker was closing."""
    done = asyncio.Event()

    async def stubborn() -> None:
        while not done.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await done.wait()

    task = flow.worker._tasks[KEY] = asyncio.create_task(stubborn(), name="dispatch-c1/op-1")
    await asyncio.sleep(0)
    flow.worker.config = replace(flow.worker.config, stop_within_s=0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
            await flow.worker.close()
    finally:
        done.set()
        await task
        flow.worker._tasks.clear()
    assert [r.getMessage() for r in caplog.records] == [
        "1 tasks still running 0.05s after they were cancelled (the worker closes): dispatch-c1/op-1"
    ]


async def test_stopping_no_tasks_returns_at_once(flow: Flow, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="turnledger.gateway.worker"):
        await flow.worker._stop_tasks([], "nothing runs")
        await flow.worker.release({KEY})
    assert caplog.records == [] and flow.counts == {"released": 1}


# -- every test here is bounded ------------------------------------------------------------------------------

TEST_BOUND_S = 5.0
"""A mutant that makes one of the worker's waits unbounded must fail its test, not hang the run (mutmut
runs without pytest-timeout, and the worker's waits use no CPU while they hang)."""


def _bounded(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    @functools.wraps(test)
    async def bounded(*args: Any, **kwargs: Any) -> None:
        async with asyncio.timeout(TEST_BOUND_S):
            await test(*args, **kwargs)

    return bounded


for _name, _test in list(globals().items()):
    if _name.startswith("test_") and inspect.iscoroutinefunction(_test):
        globals()[_name] = _bounded(_test)
