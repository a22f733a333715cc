"""The dispatch worker: sends accepted manifests to providers and streams the answers back as events.

It never decides and never writes history. For a PREPARED operation it asks the
fold for the send acceptance point (DispatchAttempt → the CAS decision); only an
accepted attempt is sent, with the manifest's exact request bytes and the idempotency
key the CAS allocated. Everything the provider says goes back as ingress events; the
fold decides what becomes canonical.

Every read of a stream ends with a StreamEnded (after a provider's final event the
fold has already settled the attempt and takes it as a no-op). Then the worker waits
for the fold's verdict on that phase:
- COMMITTED or CANCELLED: done.
- UNKNOWN after a disconnect: if the request bytes make the response resumable
  (OpenAI Responses with `background` and `stream`: the provider keeps it by id),
  ResumeStarted and read it again from the start under the same generation (the
  fold's assembler drops deltas it already has, and the pump does not resend them);
  otherwise AttemptTerminated (the connection is closed and nothing is kept, so the
  attempt can produce nothing more) and a new DispatchAttempt from the same manifest.
- UNKNOWN for an incomplete or invalid response (terminated by the fold): a new
  DispatchAttempt, up to `max_attempts` in all.

Which manifests it takes follows the rollout stage (gateway/rollout.py): at `all`
every PREPARED operation, at `without-tools` only requests without tools, at
`manifests-only` none; the rest is left to the legacy gateway (`not_taken` in the
stats). A `takes` predicate replaces the stage's rule (the legacy recorder takes the
operations it has responses for).

A stream is not read past a cancel: as soon as the worker sees the operation's
CANCELLED decision it stops reading and closes the connection (an append in progress
finishes first), then reports StreamEnded(disconnected, not resumable), a no-op in the
fold after CANCELLED. Nothing the provider still sends could be kept anyway.

When it gives up on an operation (attempts exhausted, no verdict in time, a manifest
it cannot stream, an adapter no configured route serves) the worker says so in the
ledger: a CancelRequested marked `workerGaveUp`, whose reason starts with
`GIVE_UP_PREFIX` and names the last failure. The operation settles as CANCELLED with
reason WORKER_GAVE_UP (previews retracted, late blocks quarantined, no commit after
it), and whoever waits for it learns at once from the decision stream instead of a
timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial

import httpx

from turnledger.gateway.board import FINAL, DecisionBoard, OperationKey, key_of
from turnledger.gateway.client import IngressSink, WorkerEvents
from turnledger.gateway.endpoints import ProviderEndpoint, ProviderRoutes, UnknownEndpointError
from turnledger.gateway.journal import JournalEntry, WorkerJournal
from turnledger.gateway.provider_request import ProviderRequest, resume_request, send_request
from turnledger.gateway.pump import StreamPump
from turnledger.gateway.redaction import REDACTOR
from turnledger.gateway.rollout import RolloutStage, protocol_sends
from turnledger.model.deltas import NormalizedDelta
from turnledger.model.events import DispatchDecision, DispatchState, ManifestIssued, StreamOutcome
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode

log = logging.getLogger(__name__)
S = DispatchState

NOT_TERMINATED_REASONS = frozenset({ReasonCode.STREAM_DISCONNECTED, ReasonCode.WORKER_RECOVERED})
OPERATION_EXTENSION = "turnledger.operation"
"""httpx request extension naming the operation (a transport may read it; it is never sent)."""
GIVE_UP_PREFIX = "worker gave up: "
"""Start of the reason of the CancelRequested a worker appends when it abandons an operation."""


def gave_up(decision: DispatchDecision) -> bool:
    """Is this the CANCELLED decision of an operation a worker abandoned? Decisions written before the
    typed give-up (reason WORKER_GAVE_UP) are recognized by the detail's prefix."""
    if decision.state != S.CANCELLED:
        return False
    return decision.reason == ReasonCode.WORKER_GAVE_UP or (
        decision.reason is None and decision.detail.startswith(GIVE_UP_PREFIX)
    )


def describe(decision: DispatchDecision | None) -> str:
    if decision is None:
        return "no decision"
    reason = f" {decision.reason.value}" if decision.reason else ""
    detail = f" ({decision.detail})" if decision.detail else ""
    return f"{decision.state.value}{reason}{detail} at generation {decision.attempt_generation}"


class Verdict(StrEnum):
    COMMITTED = "committed"
    CANCELLED = "cancelled"
    RETRY = "retry"  # the attempt is terminated: a new generation may start
    GIVE_UP = "give_up"
    LOST_CAS = "lost_cas"  # the CAS refused our attempt (another sender's, a newer revision, a cancel)


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: str = "worker-1"
    max_attempts: int = 4
    max_resumes: int = 3
    cas_timeout_s: float = 30.0
    settle_timeout_s: float = 60.0
    max_concurrency: int = 64
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    rollout_stage: RolloutStage = RolloutStage.ALL


@dataclass
class WorkerStats:
    counts: Counter[str] = field(default_factory=Counter)

    def bump(self, name: str, n: int = 1) -> None:
        self.counts[name] += n


@dataclass
class _Phase:
    """One read of one generation's stream: the events it appended, what it saw."""

    sources: set[str] = field(default_factory=set)
    handle: str | None = None
    acked: int = -1
    outcome: StreamOutcome = StreamOutcome.COMPLETED


class _StopOnCancel:
    """Stops one read of a stream as soon as its operation is CANCELLED.

    A watcher task waits for the board's cancel signal. When it fires, a reader waiting
    on the network is interrupted at once (its task is cancelled, and `absorb` turns that
    cancellation back into a normal end of the read); a reader in the middle of appending
    events (`feeding`) is left to finish that append and stops right after it (`fired`),
    so an append to the ledger is never cut in half.
    """

    def __init__(self, signal: asyncio.Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        self._signal = signal
        self._feeding = False
        self._interrupted = False
        self.fired = False
        self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        await self._signal.wait()
        self.fired = True
        if not self._feeding:
            self._interrupted = True
            self._task.cancel()

    @contextlib.contextmanager
    def feeding(self) -> Iterator[None]:
        self._feeding = True
        try:
            yield
        finally:
            self._feeding = False

    def absorb(self) -> bool:
        """On a CancelledError in the reader: was it only ours? (Then the read just ends.)"""
        if not self._interrupted:
            return False
        self._interrupted = False
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        self._watcher.cancel()


class DispatchWorker:
    def __init__(
        self,
        sink: IngressSink,
        endpoints: ProviderRoutes,
        *,
        config: WorkerConfig | None = None,
        journal: WorkerJournal | None = None,
        http: httpx.AsyncClient | None = None,
        takes: Callable[[DispatchManifest], bool] | None = None,
        on_verdict: Callable[[OperationKey, Verdict], None] | None = None,
    ) -> None:
        self.config = config or WorkerConfig()
        self._takes = takes or partial(protocol_sends, self.config.rollout_stage)
        self._on_verdict = on_verdict
        self.events = WorkerEvents(sink, self.config.worker_id)
        self.endpoints = endpoints
        self.journal = journal or WorkerJournal(None)
        self.board = DecisionBoard()
        self.stats = WorkerStats()
        self._http = http
        self._own_http = http is None
        self._tasks: dict[OperationKey, asyncio.Task[None]] = {}
        self._failures: dict[OperationKey, DispatchDecision] = {}  # the decision that ended its last attempt
        self._slots = asyncio.Semaphore(self.config.max_concurrency)
        self._live = False

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> DispatchWorker:
        if self._http is None:
            timeout = httpx.Timeout(self.config.read_timeout_s, connect=self.config.connect_timeout_s)
            limits = httpx.Limits(
                max_connections=self.config.max_concurrency * 2, max_keepalive_connections=0
            )
            self._http = httpx.AsyncClient(timeout=timeout, limits=limits)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._own_http and self._http is not None:
            await self._http.aclose()
        self.journal.close()

    @property
    def busy(self) -> int:
        return len(self._tasks)

    # -- input ---------------------------------------------------------------------------

    async def observe(self, records: list[ManifestIssued | DispatchDecision]) -> None:
        """Records of the manifests topic, in order. Live: PREPARED operations get an attempt."""
        await self.board.apply(records)
        if not self._live:
            return
        for record in records:
            if isinstance(record, DispatchDecision) and record.state == S.PREPARED and record.accepted:
                self._spawn(key_of(record))

    async def go_live(self) -> None:
        """Catch-up is over: recover what this worker id owned, then attempt every PREPARED operation."""
        self._live = True
        for entry in self.journal.open_entries():
            self._spawn(entry.key, entry)
        for key, decision in list(self.board.latest.items()):
            if decision.state == S.PREPARED and decision.accepted:
                self._spawn(key)

    def _spawn(self, key: OperationKey, recovering: JournalEntry | None = None) -> None:
        if key in self._tasks:
            return
        manifest = self.board.manifests.get(key)
        if recovering is None and manifest is not None and not self._takes(manifest):
            self.stats.bump("not_taken")
            log.debug("%s/%s: not taken (rollout stage %s)", *key, self.config.rollout_stage.value)
            return
        task = asyncio.create_task(self._guarded(key, recovering), name=f"dispatch-{key[0]}/{key[1]}")
        self._tasks[key] = task

    async def _guarded(self, key: OperationKey, recovering: JournalEntry | None) -> None:
        try:
            async with self._route_slots(key), self._slots:
                await self._run(key, recovering)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.bump("errors")
            log.exception("dispatch of %s/%s failed", *key)
        finally:
            self._tasks.pop(key, None)

    def _route_slots(self, key: OperationKey) -> contextlib.AbstractAsyncContextManager[object]:
        """The concurrency limit of the route that serves the operation (taken before a worker slot,
        so operations waiting for a busy provider do not hold slots others could use)."""
        manifest = self.board.manifests.get(key)
        if manifest is None:
            return contextlib.nullcontext()
        try:
            return self.endpoints.endpoint_for(manifest).route.slots
        except UnknownEndpointError:
            return contextlib.nullcontext()

    # -- one operation -------------------------------------------------------------------

    async def _run(self, key: OperationKey, recovering: JournalEntry | None) -> None:
        manifest = self.board.manifests.get(key)
        if manifest is None:
            log.warning("no manifest for %s/%s; skipped", *key)
            return
        try:
            endpoint = self.endpoints.endpoint_for(manifest)
        except UnknownEndpointError as exc:
            # never PREPARED for ever: the operation settles as CANCELLED (WORKER_GAVE_UP), naming the adapter
            self.stats.bump("no_endpoint")
            log.error("%s/%s: %s", *key, exc)
            await self._give_up(manifest, f"no provider endpoint configured for adapter {manifest.adapter}")
            self._finish(manifest, Verdict.GIVE_UP)
            return
        if not endpoint.streams(manifest.request_body):
            # A body without `"stream": true` gets one JSON reply that no stream parser reads.
            self.stats.bump("not_streaming")
            await self._give_up(manifest, "the manifest's request does not stream (dispatch policy stream)")
            self._finish(manifest, Verdict.GIVE_UP)
            return
        attempts = 0
        if recovering is not None:
            verdict = await self._recover(manifest, endpoint, recovering)
            if verdict is not Verdict.RETRY:
                self._finish(manifest, verdict)
                return
        while attempts < self.config.max_attempts:
            attempts += 1
            verdict = await self._attempt(manifest, endpoint)
            if verdict is not Verdict.RETRY:
                self._finish(manifest, verdict)
                return
            self.stats.bump("retries")
        self.stats.bump("gave_up")
        last = describe(self._failures.pop(key, None))
        log.warning("%s/%s: giving up after %d attempts; last: %s", *key, attempts, last)
        await self._give_up(manifest, f"{attempts} attempts failed; last {last}")
        self._finish(manifest, Verdict.GIVE_UP)

    async def _give_up(self, manifest: DispatchManifest, why: str) -> None:
        """Abandon the operation in the ledger: it settles as CANCELLED, with why in its detail."""
        await self.events.give_up(
            manifest.conversation_id, manifest.operation_id, REDACTOR.scrub(GIVE_UP_PREFIX + why)
        )

    def _finish(self, manifest: DispatchManifest, verdict: Verdict) -> None:
        key = key_of(manifest)
        self._failures.pop(key, None)
        self.stats.bump(f"verdict_{verdict.value}")
        entry = self.journal.get(key)
        if entry is not None:
            self.journal.write(replace(entry, done=True))
        if verdict in (Verdict.COMMITTED, Verdict.CANCELLED):
            self.board.forget(key)
        if self._on_verdict is not None:
            self._on_verdict(key, verdict)

    async def _attempt(self, manifest: DispatchManifest, endpoint: ProviderEndpoint) -> Verdict:
        """One generation: CAS, send, stream, and whatever follows the stream."""
        conv, op = manifest.conversation_id, manifest.operation_id
        current = self.board.latest.get(key_of(manifest))
        after = current.attempt_generation if current else 0
        self.journal.write(JournalEntry(op, conv, after))
        attempt = await self.events.attempt(
            conv, op, manifest.conversation_revision, manifest.cancel_generation
        )
        self.stats.bump("attempts")
        answer = await self.board.cas_answer(attempt.event_id, self.config.cas_timeout_s)
        if answer is None:
            self.stats.bump("cas_timeouts")
            await self._give_up(manifest, f"no CAS answer within {self.config.cas_timeout_s}s")
            return Verdict.GIVE_UP
        if not answer.accepted or answer.state != S.DISPATCHING:
            self.stats.bump("cas_conflicts")
            log.info("%s: CAS conflict %s (%s)", op, answer.reason, answer.detail)
            return Verdict.LOST_CAS
        generation = answer.attempt_generation
        idempotency_key = answer.idempotency_key or ""
        self.journal.write(JournalEntry(op, conv, after, generation))
        phase = _Phase()
        sent = await self.events.sent(conv, op, generation)
        phase.sources.add(sent.event_id)
        request = send_request(endpoint, manifest, idempotency_key)
        await self._stream(manifest, endpoint, generation, phase, request)
        return await self._after_stream(manifest, endpoint, generation, phase)

    async def _stream(
        self,
        manifest: DispatchManifest,
        endpoint: ProviderEndpoint,
        generation: int,
        phase: _Phase,
        request: ProviderRequest,
    ) -> None:
        """One HTTP read of the stream; appends HandleBound, StreamDeltas and StreamEnded."""
        conv, op = key = key_of(manifest)
        assert self._http is not None

        async def on_handle(handle: str) -> None:
            phase.handle = handle
            entry = self.journal.get(key)
            if entry is not None:
                self.journal.write(replace(entry, handle=handle))
            bound = await self.events.handle_bound(conv, op, generation, handle, manifest.manifest_digest)
            phase.sources.add(bound.event_id)

        async def on_deltas(deltas: list[NormalizedDelta]) -> None:
            event = await self.events.deltas(conv, op, generation, deltas)
            phase.sources.add(event.event_id)

        pump = StreamPump(
            endpoint.api,
            generation,
            on_handle=on_handle,
            on_deltas=on_deltas,
            response_handle=phase.handle,
            acked=phase.acked,
        )
        outcome = StreamOutcome.COMPLETED
        stop = _StopOnCancel(self.board.cancel_signal(key))
        try:
            async with self._http.stream(
                request.method,
                request.url,
                content=request.content,
                headers=dict(request.headers),
                timeout=endpoint.route.timeout,
                extensions={OPERATION_EXTENSION: key},
            ) as response:
                if response.status_code >= 400:
                    await response.aread()  # never kept: an error body may quote the credential
                    self.stats.bump(f"http_{response.status_code}")
                    outcome = StreamOutcome.PROVIDER_ERROR
                else:
                    with stop.feeding():
                        await pump.on_response_headers(response.headers)
                    async for chunk in response.aiter_raw():
                        with stop.feeding():
                            await pump.feed(chunk)
                        if stop.fired:
                            break  # leaving the block closes the connection
                    if not stop.fired:
                        with stop.feeding():
                            await pump.close()
        except httpx.TransportError as exc:
            self.stats.bump("disconnects")
            log.debug("%s generation %d: transport ended: %r", op, generation, exc)
            outcome = StreamOutcome.DISCONNECTED
        except asyncio.CancelledError:
            if not stop.absorb():
                raise
        finally:
            stop.close()
            self.board.release_cancel_signal(key)
        if stop.fired:
            # The operation is CANCELLED: nothing more it sends can be kept. The read stopped and the
            # connection is closed; the StreamEnded below is a no-op in the fold (no AttemptTerminated
            # is needed: the verdict is CANCELLED).
            self.stats.bump("cancelled_reads")
            log.debug("%s generation %d: cancelled, stopped reading", op, generation)
            outcome = StreamOutcome.DISCONNECTED
        self.stats.bump("late_deltas", pump.stats.late_deltas)
        self.stats.bump("wire_duplicates", pump.stats.wire_duplicates)
        phase.acked = pump.acked
        phase.outcome = outcome
        phase.handle = pump.response_handle or phase.handle
        if pump.saw_final:
            # The provider's final event (message stop / error) already settled the attempt in the
            # fold; the StreamEnded below is then a no-op there, but every stream still reports its end.
            self.stats.bump("final_in_stream")
        resumable = (
            outcome == StreamOutcome.DISCONNECTED
            and phase.handle is not None
            and endpoint.resumable(manifest.request_body)
        )
        ended = await self.events.ended(
            conv, op, generation, outcome, resumable=resumable, last_delta_sequence=phase.acked
        )
        phase.sources.add(ended.event_id)

    async def _after_stream(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, generation: int, phase: _Phase
    ) -> Verdict:
        conv, op = key = key_of(manifest)
        resumes = 0
        while True:
            decision = await self.board.settled(key, generation, phase.sources, self.config.settle_timeout_s)
            if decision is None:
                self.stats.bump("settle_timeouts")
                log.warning(
                    "%s generation %d: no verdict within %ss", op, generation, self.config.settle_timeout_s
                )
                await self._give_up(
                    manifest, f"no verdict on generation {generation} within {self.config.settle_timeout_s}s"
                )
                return Verdict.GIVE_UP
            if decision.state == S.COMMITTED:
                if resumes:
                    self.stats.bump("resumed_commits")
                return Verdict.COMMITTED
            if decision.state == S.CANCELLED:
                return Verdict.CANCELLED
            self._failures[key] = decision
            if decision.reason not in NOT_TERMINATED_REASONS:
                self.stats.bump("incomplete")
                return Verdict.RETRY  # the fold terminated the attempt (incomplete, invalid, error)
            handle = phase.handle
            request = resume_request(endpoint, handle) if handle is not None else None
            can_resume = (
                handle is not None
                and request is not None
                and endpoint.resumable(manifest.request_body)
                and resumes < self.config.max_resumes
            )
            if handle is None or request is None or not can_resume:
                return await self._terminate(manifest, generation)
            resumes += 1
            self.stats.bump("resumes")
            resumed = await self.events.resume_started(conv, op, generation, handle)
            phase = _Phase(sources={resumed.event_id}, handle=handle, acked=phase.acked)
            await self._stream(manifest, endpoint, generation, phase, request)

    async def _terminate(self, manifest: DispatchManifest, generation: int) -> Verdict:
        """Our connection is closed and the provider keeps nothing: the attempt can produce no more."""
        conv, op = key = key_of(manifest)
        event = await self.events.terminated(conv, op, generation)
        self.stats.bump("terminated")
        await self.board.state_after(key, event.event_id, self.config.settle_timeout_s)
        latest = self.board.latest.get(key)
        if latest is not None and latest.state in FINAL:
            return Verdict.COMMITTED if latest.state == S.COMMITTED else Verdict.CANCELLED
        return Verdict.RETRY

    # -- crash recovery ------------------------------------------------------------------

    async def _recover(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, entry: JournalEntry
    ) -> Verdict:
        """An operation this worker id owned before a restart: report it, then resume or terminate."""
        conv, op = key = key_of(manifest)
        latest = self.board.latest.get(key)
        if latest is None:
            return Verdict.RETRY
        if latest.state in FINAL:
            return Verdict.COMMITTED if latest.state == S.COMMITTED else Verdict.CANCELLED
        if latest.state == S.PREPARED or latest.attempt_generation <= entry.after:
            return Verdict.RETRY  # our attempt never got accepted: start one
        generation = latest.attempt_generation
        self.stats.bump("recoveries")
        phase = _Phase(handle=entry.handle if entry.generation == generation else None)
        if latest.state in (S.DISPATCHING, S.SENT, S.STREAMING):
            event = await self.events.recovered(conv, op, generation)
            phase.sources.add(event.event_id)
        else:  # UNKNOWN already: the verdict is known
            phase.sources.add(latest.source_event_id)
        # everything is re-read from the start: the fold's assembler drops what it already has
        phase.acked = -1
        return await self._after_stream(manifest, endpoint, generation, phase)
