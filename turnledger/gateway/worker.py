"""The dispatch worker: sends accepted manifests to providers and streams the answers back as events.

It never decides and never writes history. For a PREPARED operation it asks the
fold for the send acceptance point (DispatchAttempt → the CAS decision); only an
accepted attempt is sent, with the manifest's exact request bytes and the idempotency
key the CAS allocated. Everything the provider says goes back as ingress events; the
fold decides what becomes canonical.

An accepted attempt is this worker's for a lease (`lease_s`), renewed by every event it
appends for it and, when it has appended nothing for a third of the lease, by a
LeaseRenewed. Every worker runs an `ExpirySweeper`: it claims the expired leases and
passed deadlines of operations it does not run, and adopts work nobody is doing, so
an operation whose worker died is continued elsewhere (gateway/sweeper.py).

Every read of a stream ends with a StreamEnded (after a provider's final event the
fold has already settled the attempt and takes it as a no-op). Then the worker waits
for the fold's verdict on that phase:
- COMMITTED: done. CANCELLED: done, once the attempt is confirmed terminated (a kept
  response is cancelled at the provider first, then AttemptTerminated).
- UNKNOWN after a disconnect (or a recovery, or a takeover after a lease expiry): the
  attempt is continued under the same generation if the provider keeps it — resumed
  from its bound handle (ResumeStarted, then a GET of the stream from the start; the
  fold's assembler drops deltas it already has), or replayed with its idempotency key
  where the route's provider keeps keys (ReplayStarted, then the same POST) — and
  otherwise confirmed terminated (AttemptTerminated) and followed by a new
  DispatchAttempt from the same manifest.
- UNKNOWN for an incomplete or invalid response (terminated by the fold): a new
  DispatchAttempt, up to `max_attempts` in all.
- its generation's lease expired: another worker continues (LOST_LEASE).
An event of the worker that the fold refuses gets a rejection, not a decision; the board sees
the refusals of its conversations too, so no wait outlives one. A refused replay or handle is
not used; a phase whose own event is refused because another worker holds the attempt, or a
newer generation started, ends as LOST_LEASE at once.
A request for a handle is only ever sent once the ledger shows the handle bound to the
operation's manifest: a handle the worker journaled before a crash is bound through the
ledger first, or never used.

A CAS refused with CONVERSATION_BUSY (another operation of the conversation may still
produce output) is asked again once the board shows it confirmed terminated.

Which manifests it takes follows the rollout stage (gateway/rollout.py): at `all`
every PREPARED operation, at `without-tools` only requests without tools, at
`manifests-only` none; the rest is left to the legacy gateway (`not_taken` in the
stats). A `takes` predicate replaces the stage's rule (the legacy recorder takes the
operations it has responses for).

A stream is not read past a cancel: as soon as the worker sees the operation's
CANCELLED decision it stops reading and closes the connection (an append in progress
finishes first), reports StreamEnded(disconnected), and confirms the attempt terminated.

When it gives up on an operation (attempts exhausted, no verdict in time, a manifest
it cannot stream, an adapter no configured route serves) the worker says so in the
ledger: a CancelRequested marked `workerGaveUp`, whose reason starts with
`GIVE_UP_PREFIX` and names the last failure. The operation settles as CANCELLED with
reason WORKER_GAVE_UP (or NO_PROVIDER_ENDPOINT), and whoever waits for it learns at
once from the decision stream instead of a timeout.

This module is the per-operation flow (CAS, stream, verdict, continue or retry, recovery). Its
parts: `worker_config.py` (settings, counters), `stream_read.py` (one HTTP read of a stream and
what it appends), `lease_keeper.py`, `sweeper.py` (claims and adoption), `verdicts.py`,
`board.py` (the view of the manifests topic) and `manifest_feed.py` (this worker's share of it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import httpx

from turnledger.gateway.board import (
    FINAL,
    PHASE_ENDING_REFUSALS,
    DecisionBoard,
    Observed,
    OperationKey,
    key_of,
    may_produce_output,
)
from turnledger.gateway.client import IngressSink, WorkerEvents, now_ms
from turnledger.gateway.endpoints import ProviderEndpoint, ProviderRoutes, UnknownEndpointError
from turnledger.gateway.journal import JournalEntry, WorkerJournal
from turnledger.gateway.lease_keeper import LeaseKeeper
from turnledger.gateway.provider_failures import ProviderFailure
from turnledger.gateway.provider_request import (
    cancel_request,
    resume_request,
    send_request,
)
from turnledger.gateway.redaction import REDACTOR
from turnledger.gateway.rollout import protocol_sends
from turnledger.gateway.slot_hold import SlotHold
from turnledger.gateway.stream_read import OPERATION_EXTENSION, Phase, StreamReader
from turnledger.gateway.sweeper import ExpirySweeper
from turnledger.gateway.verdicts import GIVE_UP_PREFIX, Verdict, describe, fold_terminated, gave_up
from turnledger.gateway.worker_config import CrashHook, WorkerConfig, WorkerStats
from turnledger.model.events import DispatchDecision, DispatchState, Rejected
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.observability import runtime_metrics as live

log = logging.getLogger(__name__)
S = DispatchState

__all__ = [
    "GIVE_UP_PREFIX",
    "OPERATION_EXTENSION",
    "CrashHook",
    "DispatchWorker",
    "Verdict",
    "WorkerConfig",
    "WorkerStats",
    "gave_up",
]


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
        self._provider_failures: dict[OperationKey, ProviderFailure] = {}  # what its provider last said
        self._holds: dict[OperationKey, SlotHold] = {}
        self._signed_with: dict[OperationKey, int] = {}  # the route's credential_changes at its last request
        self._slots = asyncio.Semaphore(self.config.max_concurrency)
        self._live = False
        self.leases = LeaseKeeper(
            self.config.worker_id, self.config.lease_s, self.board, self.events, self.stats, self._tasks.keys
        )
        self.reader = StreamReader(
            self._client,
            self.events,
            self.board,
            self.journal,
            self.leases,
            self.stats,
            self.config.crash_hook,
            flush_interval_s=self.config.flush_s,
            unnamed_error_grace_s=self.config.unnamed_error_grace_s,
        )
        self._background: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        lease_ms = self.config.lease_ms
        self.sweeper = ExpirySweeper(
            self.board,
            self.events,
            running=self._tasks.__contains__,
            adopt=self._adopt,
            grace_ms=int(self.config.claim_grace_s * 1000),
            adopt_after_ms=lease_ms,
            tick_s=self.config.sweep_tick_s,
        )

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
        self._stopping.set()
        await self._stop_tasks([*self._background, *self._tasks.values()], "the worker closes")
        if self._own_http and self._http is not None:
            await self._http.aclose()
        self.journal.close()

    def _client(self) -> httpx.AsyncClient:
        assert self._http is not None, "the worker's HTTP client starts with `async with`"
        return self._http

    @property
    def busy(self) -> int:
        return len(self._tasks)

    # -- input ---------------------------------------------------------------------------

    async def observe(self, records: Sequence[Observed]) -> None:
        """Records of the manifests topic, in order, and the fold's rejections of the conversations the
        board follows. Live: PREPARED operations get an attempt."""
        await self.board.apply(records)
        if not self._live:
            return
        for record in records:
            if isinstance(record, DispatchDecision) and record.state == S.PREPARED and record.accepted:
                self._spawn(key_of(record))

    @property
    def live(self) -> bool:
        return self._live

    async def go_live(self, only: set[OperationKey] | None = None) -> None:
        """Catch-up is over: recover what this worker id owned, attempt every PREPARED operation, and
        start keeping leases and sweeping for expired ones. `only`: the operations of this worker's
        partitions (all it has seen when None)."""
        self._live = True
        self.take(
            set(self.board.latest) | {e.key for e in self.journal.open_entries()} if only is None else only
        )
        self._background.append(asyncio.create_task(self.leases.run(self._stopping), name="lease-keeper"))
        if self.config.sweep:
            self._background.append(asyncio.create_task(self.sweeper.run(self._stopping), name="sweeper"))

    def take(self, keys: set[OperationKey]) -> None:
        """Take up the work among `keys` (a partition this worker now owns): recover what its journal
        says it owned, attempt what is PREPARED; the sweeper finds the rest."""
        for entry in self.journal.open_entries():
            if entry.key in keys:
                self._spawn(entry.key, entry)
        for key in keys:
            decision = self.board.latest.get(key)
            if decision is not None and decision.state == S.PREPARED:
                self._spawn(key)  # a refused CAS (CONVERSATION_BUSY) leaves it PREPARED: its asker is gone

    async def release(self, keys: set[OperationKey]) -> None:
        """Another worker owns these operations now: their tasks stop where they stand (no event is
        appended; their leases hand them over) and the board forgets them."""
        await self._stop_tasks([self._tasks[k] for k in keys if k in self._tasks], "their partition moved")
        self.board.drop(keys)
        self.stats.bump("released", len(keys))

    async def _stop_tasks(self, tasks: list[asyncio.Task[None]], why: str) -> None:
        """Cancel the tasks and wait until they have unwound, at most `stop_within_s`: a consumer group's
        rebalance waits for `release`. A task still running then is named in a warning (it would act
        blind: its operation's records no longer reach this worker)."""
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        ended, running = await asyncio.wait(tasks, timeout=self.config.stop_within_s)
        for task in ended:
            if not task.cancelled() and task.exception() is not None:
                log.warning("%s ended with %r", task.get_name(), task.exception())
        if running:
            names = sorted(task.get_name() for task in running)
            log.warning(
                "%d tasks still running %ss after they were cancelled (%s): %s",
                len(running), self.config.stop_within_s, why, ", ".join(names[:10]),
            )  # fmt: skip

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

    def _adopt(self, key: OperationKey) -> None:
        """The sweeper found work nobody does: run it here (the ledger decides who continues)."""
        self.stats.bump("adopted")
        self._spawn(key)

    async def _guarded(self, key: OperationKey, recovering: JournalEntry | None) -> None:
        hold = self._holds[key] = SlotHold([*self._route_slots(key), self._slots])
        try:
            await hold.take()
            await self._run(key, recovering)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.bump("errors")
            log.exception("dispatch of %s/%s failed", *key)
        finally:
            hold.give_back()
            self._holds.pop(key, None)
            self._signed_with.pop(key, None)
            self._tasks.pop(key, None)
            self.leases.forget(key)

    def _route_slots(self, key: OperationKey) -> list[asyncio.Semaphore]:
        """The concurrency limit of the route that serves the operation (taken before a worker slot,
        so operations waiting for a busy provider do not hold slots others could use)."""
        manifest = self.board.manifests.get(key)
        if manifest is None:
            return []
        try:
            return [self.endpoints.endpoint_for(manifest).route.slots]
        except UnknownEndpointError:
            return []

    # -- one operation -------------------------------------------------------------------

    async def _run(self, key: OperationKey, recovering: JournalEntry | None) -> None:
        manifest = self.board.manifests.get(key)
        if manifest is None:
            if recovering is not None:
                self._settled_before_catch_up(recovering)
            else:
                log.warning("no manifest for %s/%s; skipped", *key)
            return
        try:
            endpoint = self.endpoints.endpoint_for(manifest)
        except UnknownEndpointError as exc:
            # never PREPARED for ever: the operation settles as CANCELLED (NO_PROVIDER_ENDPOINT)
            self.stats.bump("no_endpoint")
            log.error("%s/%s: %s", *key, exc)
            why = f"no provider endpoint configured for adapter {manifest.adapter}"
            await self._give_up(manifest, why, ReasonCode.NO_PROVIDER_ENDPOINT)
            self._finish(manifest, Verdict.GIVE_UP)
            return
        if not endpoint.streams(manifest.request_body):
            # A body without `"stream": true` gets one JSON reply that no stream parser reads.
            self.stats.bump("not_streaming")
            await self._give_up(manifest, "the manifest's request does not stream (dispatch policy stream)")
            self._finish(manifest, Verdict.GIVE_UP)
            return
        verdict = await self._continue(manifest, endpoint, recovering)
        self._provider_failures.pop(key, None)  # a continued attempt's: the first new one goes at once
        attempts = 0
        while verdict is Verdict.RETRY:
            attempts += 1
            verdict = await self._attempt(manifest, endpoint)
            if verdict is not Verdict.RETRY:
                break
            self.stats.bump("retries")
            verdict = await self._after_failed_attempt(manifest, endpoint, attempts)
        self._finish(manifest, verdict)

    async def _after_failed_attempt(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, attempts: int
    ) -> Verdict:
        """A generation failed: stop if the provider refused the request for what it is or the attempts
        are spent, else pause (the provider's Retry-After, or the backoff) and RETRY."""
        key = key_of(manifest)
        failure = self._provider_failures.pop(key, None)
        last = describe(self._failures.pop(key, None))
        if failure is not None and not failure.retryable and await self._credential_replaced(key, endpoint):
            self.stats.bump("refusals_of_a_replaced_credential")
            log.info("%s/%s: %s met a credential since replaced: sent again", *key, failure.describe())
            failure = replace(failure, retryable=True)
        if failure is not None and not failure.retryable:
            self.stats.bump("provider_refused")
            live.PROVIDER_FAILURES.labels(endpoint.api, "refused").inc()
            why = f"the provider refused the request ({failure.describe()}); not sent again: it would be too"
            log.warning("%s/%s: %s", *key, why)
            await self._give_up(manifest, why, ReasonCode.PROVIDER_REFUSED)
            return Verdict.GIVE_UP
        if attempts >= self.config.max_attempts:
            self.stats.bump("gave_up")
            if failure is not None:
                last += f"; {failure.describe()}"
            log.warning("%s/%s: giving up after %d attempts; last: %s", *key, attempts, last)
            await self._give_up(manifest, f"{attempts} attempts failed; last {last}")
            return Verdict.GIVE_UP
        if failure is not None:
            live.PROVIDER_FAILURES.labels(endpoint.api, "retried").inc()
        seconds = (
            failure.pause_s(attempts, self.config.backoff, self.config.jitter())
            if failure is not None
            else self.config.backoff.pause_s(attempts, self.config.jitter())
        )
        if failure is not None and failure.retry_after_s is not None:
            endpoint.route.cool_down(endpoint.model, failure.retry_after_s, time.monotonic())
        why = failure.describe() if failure is not None else last
        return await self._pause(manifest, endpoint, seconds, why) or Verdict.RETRY

    async def _pause(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, seconds: float, why: str
    ) -> Verdict | None:
        """Wait `seconds` before the next generation, holding no slot; None when it may go. Gives up at
        once when the wait would pass the operation's deadline (the sweeper would cancel it there), and
        ends early as CANCELLED when the operation is cancelled meanwhile (its attempt is terminated)."""
        key = key_of(manifest)
        latest = self.board.latest.get(key)
        deadline = latest.deadline_at_ms if latest is not None else None
        if deadline is not None and now_ms() + seconds * 1000 >= deadline:
            self.stats.bump("pauses_past_deadline")
            await self._give_up(
                manifest, f"{why}: waiting {seconds:.3g}s more would pass the operation's deadline"
            )
            return Verdict.GIVE_UP
        self.stats.bump("pauses")
        live.PROVIDER_RETRY_PAUSE_SECONDS.labels(endpoint.api).observe(seconds)
        log.info("%s/%s: next generation in %.3gs (%s)", *key, seconds, why)
        hold = self._holds.get(key)
        if hold is not None:
            hold.give_back()
        try:
            cancelled = await self.board.wait_until(lambda: self.board.cancelled(key), seconds)
        finally:
            if hold is not None:
                await hold.take()
        return Verdict.CANCELLED if cancelled else None

    async def _fresh_credential(self, key: OperationKey, endpoint: ProviderEndpoint) -> None:
        """Before a request is built: the route's credential as its source holds it now (a rotated key
        file, refreshed AWS keys), noted so a refusal can tell which one the request carried."""
        self._signed_with[key] = await endpoint.route.refresh_credential()

    async def _credential_replaced(self, key: OperationKey, endpoint: ProviderEndpoint) -> bool:
        """Did the route's credential change since the operation's last request was signed? Then a
        refusal may be of the old credential, and the request goes once more with the new one."""
        signed_with = self._signed_with.get(key)
        return signed_with is not None and await endpoint.route.refresh_credential() != signed_with

    async def _route_ready(self, manifest: DispatchManifest, endpoint: ProviderEndpoint) -> Verdict | None:
        """Wait while the route cools down for the model (a provider's Retry-After to any operation of
        the route that asked for it)."""
        route, model = endpoint.route, endpoint.model
        while (left := route.cooling_until(model) - time.monotonic()) > 0:
            self.stats.bump("route_cooldown_waits")
            why = f"route {route.name} cooling down for {model}"
            verdict = await self._pause(manifest, endpoint, left, why)
            if verdict is not None:
                return verdict
        return None

    async def _continue(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, recovering: JournalEntry | None
    ) -> Verdict:
        """Before a new generation: what the ledger says of the operation's attempt so far.

        An attempt this worker journaled before a restart is recovered; one still open (UNKNOWN, not
        terminated) is continued if its lease is free or ours; RETRY means a new generation may start."""
        key = key_of(manifest)
        if recovering is not None:
            return await self._recover(manifest, endpoint, recovering)
        latest = self.board.latest.get(key)
        if latest is None or latest.state != S.UNKNOWN or latest.attempt_terminated:
            return Verdict.RETRY
        if latest.lease_owner not in (None, "", self.config.worker_id):
            return Verdict.LOST_LEASE
        self.stats.bump("takeovers")
        phase = Phase(
            sources={latest.source_event_id}, handle=latest.response_handle, since=self.board.position
        )
        return await self._after_stream(manifest, endpoint, latest.attempt_generation, phase)

    async def _give_up(
        self, manifest: DispatchManifest, why: str, reason_code: ReasonCode | None = None
    ) -> None:
        """Abandon the operation in the ledger: it settles as CANCELLED, with why in its detail."""
        await self.events.give_up(
            manifest.conversation_id,
            manifest.operation_id,
            REDACTOR.scrub(GIVE_UP_PREFIX + why),
            reason_code,
        )

    def _refused(self, rejection: Rejected | None) -> None:
        """Count and log a refusal of one of this worker's events (its wait ended on it)."""
        if rejection is None:
            return
        self.stats.bump(f"refused_{rejection.reason.value}")
        log.info(
            "%s/%s: %s refused: %s (%s)",
            rejection.conversation_id, rejection.operation_id, rejection.event_type, rejection.reason.value,
            rejection.detail,
        )  # fmt: skip

    def _settled_before_catch_up(self, entry: JournalEntry) -> None:
        """A journaled operation whose manifest the board never saw: a partition is read from the first
        record of its oldest open operation (`manifest_feed.py`), so this one was final before that, and
        another worker ended it. Its entry is done; left open, it was taken up again (and warned of) at
        every move of its partition, for ever."""
        self.stats.bump("journaled_settled_elsewhere")
        log.info("%s/%s: journaled, but final before this worker's catch-up; entry closed", *entry.key)
        self.journal.write(replace(entry, done=True))

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
        conv, op = key = key_of(manifest)
        waited = await self._route_ready(manifest, endpoint)
        if waited is not None:
            return waited
        current = self.board.latest.get(key)
        after = current.attempt_generation if current else 0
        self.journal.write(JournalEntry(op, conv, after))
        answer = await self._cas(manifest, endpoint)
        if answer is None:
            self.stats.bump("cas_timeouts")
            await self._give_up(manifest, f"no CAS answer within {self.config.cas_timeout_s}s")
            return Verdict.GIVE_UP
        if isinstance(answer, Rejected):
            self._refused(answer)
            return Verdict.LOST_CAS
        if not answer.accepted or answer.state != S.DISPATCHING:
            self.stats.bump("cas_conflicts")
            log.info("%s: CAS conflict %s (%s)", op, answer.reason, answer.detail)
            return Verdict.LOST_CAS
        generation = answer.attempt_generation
        idempotency_key = answer.idempotency_key or ""
        self.journal.write(JournalEntry(op, conv, after, generation))
        phase = Phase(since=self.board.position)
        self.leases.alive(key)
        sent = await self.events.sent(conv, op, generation)
        phase.sources.add(sent.event_id)
        await self._fresh_credential(key, endpoint)
        request = send_request(endpoint, manifest, idempotency_key)
        await self.reader.read(manifest, endpoint, generation, phase, request)
        return await self._after_stream(manifest, endpoint, generation, phase)

    async def _cas(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint
    ) -> DispatchDecision | Rejected | None:
        """The CAS answer to our DispatchAttempt; asked again while the conversation is busy (another
        operation's attempt may still produce output) once the board shows it confirmed terminated."""
        conv, op = key_of(manifest)
        while True:
            attempt = await self.events.attempt(
                conv,
                op,
                manifest.conversation_revision,
                manifest.cancel_generation,
                lease_ms=self.config.lease_ms,
                replayable=endpoint.replayable,
            )
            self.stats.bump("attempts")
            answer = await self.board.cas_answer(attempt.event_id, self.config.cas_timeout_s)
            if not isinstance(answer, DispatchDecision) or answer.reason != ReasonCode.CONVERSATION_BUSY:
                return answer
            self.stats.bump("conversation_busy")
            deadline = answer.deadline_at_ms
            log.info("%s/%s: conversation busy (%s); waiting", conv, op, answer.detail)
            freed = await self.board.wait_until(
                lambda: not self.board.busy_operations(conv, op), self.config.settle_timeout_s
            )
            if not freed and deadline is not None and time.time() * 1000 >= deadline:
                return answer  # the next CAS would be refused for the deadline anyway

    async def _after_stream(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, generation: int, phase: Phase
    ) -> Verdict:
        key = key_of(manifest)
        op = key[1]
        continued = 0
        while True:
            decision = await self.board.settled(
                key, generation, phase.sources, self.config.settle_timeout_s, since=phase.since
            )
            if phase.failure is not None:
                self._provider_failures[key] = phase.failure
            else:
                self._provider_failures.pop(key, None)
            if decision is None:
                self.stats.bump("settle_timeouts")
                log.warning(
                    "%s generation %d: no verdict within %ss", op, generation, self.config.settle_timeout_s
                )
                await self._give_up(
                    manifest, f"no verdict on generation {generation} within {self.config.settle_timeout_s}s"
                )
                return Verdict.GIVE_UP
            if isinstance(decision, Rejected):
                self._refused(decision)
                self.stats.bump("lost_leases")  # refused as not its own: the worker that owns it continues
                return Verdict.LOST_LEASE
            if decision.state == S.COMMITTED:
                if continued:
                    self.stats.bump("resumed_commits")
                return Verdict.COMMITTED
            if decision.state == S.CANCELLED:
                await self._confirm_cancelled(manifest, endpoint, generation, phase.handle)
                return Verdict.CANCELLED
            self._failures[key] = decision
            if decision.reason == ReasonCode.LEASE_EXPIRED and decision.source_event_id not in phase.sources:
                self.stats.bump("lost_leases")  # another worker's claim: whoever adopts it continues
                return Verdict.LOST_LEASE
            if fold_terminated(decision):
                self.stats.bump("incomplete")
                return Verdict.RETRY  # the fold terminated the attempt (incomplete, invalid, error)
            if continued >= self.config.max_resumes:
                return await self._terminate(manifest, generation)
            continued += 1
            next_phase = await self._continue_open(manifest, endpoint, generation, phase)
            if next_phase is None:
                return await self._terminate(manifest, generation)
            phase = next_phase

    async def _continue_open(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, generation: int, phase: Phase
    ) -> Phase | None:
        """Read an open attempt again under its generation: resumed from its bound handle, or replayed
        with its idempotency key; None when the provider keeps neither."""
        conv, op = key = key_of(manifest)
        bound = self.board.latest[key].response_handle
        handle = phase.handle if phase.handle is not None and phase.handle == bound else None
        await self._fresh_credential(key, endpoint)
        resume = resume_request(endpoint, handle) if handle is not None else None
        if handle is not None and resume is not None and endpoint.resumable(manifest.request_body):
            self.stats.bump("resumes")
            self.leases.alive(key)
            resumed = await self.events.resume_started(conv, op, generation, handle)
            next_phase = Phase(
                sources={resumed.event_id}, handle=handle, acked=phase.acked, since=self.board.position
            )
            await self.reader.read(manifest, endpoint, generation, next_phase, resume)
            return next_phase
        if endpoint.replayable:
            self.stats.bump("replays")
            self.leases.alive(key)
            since = self.board.position  # a lease expiry after the replay ends its read
            replayed = await self.events.replay_started(conv, op, generation)
            await self.board.state_after(key, replayed.event_id, self.config.cas_timeout_s, or_cancel=True)
            self._refused(self.board.refusal(replayed.event_id))
            answer = self.board.answer(key, replayed.event_id)
            if answer is None or answer.state != S.SENT or self.board.cancelled(key):
                return None  # refused: the attempt was terminated or taken meanwhile
            key_text = answer.idempotency_key or ""
            next_phase = Phase(sources={replayed.event_id}, since=since)  # read from scratch
            await self.reader.read(
                manifest, endpoint, generation, next_phase, send_request(endpoint, manifest, key_text)
            )
            return next_phase
        return None

    async def _terminate(self, manifest: DispatchManifest, generation: int) -> Verdict:
        """Our connection is closed and the provider keeps nothing: the attempt can produce no more."""
        conv, op = key = key_of(manifest)
        event = await self.events.terminated(conv, op, generation)
        self.stats.bump("terminated")
        await self.board.state_after(key, event.event_id, self.config.settle_timeout_s)
        refused = self.board.refusal(event.event_id)
        self._refused(refused)
        if refused is not None and refused.reason in PHASE_ENDING_REFUSALS:
            return Verdict.LOST_LEASE  # the attempt is another worker's now: it ends it there
        latest = self.board.latest.get(key)
        if latest is not None and latest.state in FINAL:
            return Verdict.COMMITTED if latest.state == S.COMMITTED else Verdict.CANCELLED
        return Verdict.RETRY

    async def _confirm_cancelled(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, generation: int, handle: str | None
    ) -> None:
        """A cancelled attempt of ours holds the conversation until it is confirmed terminated: a kept
        response is stopped at the provider, then AttemptTerminated (our connection is closed)."""
        key = key_of(manifest)
        latest = self.board.latest.get(key)
        if (
            latest is None
            or latest.state != S.CANCELLED
            or latest.attempt_generation != generation
            or not may_produce_output(latest)
            or latest.lease_owner not in (None, "", self.config.worker_id)
        ):
            return
        bound = handle if handle is not None and handle == latest.response_handle else None
        await self._fresh_credential(key, endpoint)
        stop = cancel_request(endpoint, bound) if bound is not None else None
        if stop is not None and endpoint.resumable(manifest.request_body):
            assert self._http is not None
            try:
                response = await self._http.request(
                    stop.method,
                    stop.url,
                    content=stop.content,
                    headers=dict(stop.headers),
                    timeout=endpoint.route.timeout,
                )
                self.stats.bump(f"provider_cancel_{response.status_code}")
            except httpx.HTTPError as exc:
                # the lease expiry confirms it later; a kept response may run on at the provider meanwhile
                self.stats.bump("provider_cancel_failed")
                log.warning("%s/%s: cancelling %s at the provider failed: %r", *key, bound, exc)
                return
        self.stats.bump("cancel_confirmed")
        event = await self.events.terminated(*key, generation)
        await self.board.state_after(key, event.event_id, self.config.settle_timeout_s)
        self._refused(self.board.refusal(event.event_id))

    # -- crash recovery ------------------------------------------------------------------

    async def _recover(
        self, manifest: DispatchManifest, endpoint: ProviderEndpoint, entry: JournalEntry
    ) -> Verdict:
        """An operation this worker id owned before a restart: report it, then resume or terminate.

        A handle journaled but never bound (the crash came between the two) is bound through the
        ledger first, which checks it against the manifest digest; if the ledger does not bind it,
        it is never used."""
        conv, op = key = key_of(manifest)
        latest = self.board.latest.get(key)
        if latest is None:
            return Verdict.RETRY
        if latest.state in FINAL:
            if latest.state == S.CANCELLED:
                await self._confirm_cancelled(manifest, endpoint, latest.attempt_generation, entry.handle)
            return Verdict.COMMITTED if latest.state == S.COMMITTED else Verdict.CANCELLED
        if latest.state == S.PREPARED or latest.attempt_generation <= entry.after:
            return Verdict.RETRY  # our attempt never got accepted: start one
        if latest.lease_owner not in (None, "", self.config.worker_id):
            return Verdict.LOST_LEASE  # another worker continues it
        generation = latest.attempt_generation
        self.stats.bump("recoveries")
        handle = entry.handle if entry.generation == generation else None
        if handle is not None and latest.state == S.SENT and latest.response_handle is None:
            bound = await self.events.handle_bound(
                conv,
                op,
                generation,
                handle,
                manifest.manifest_digest,
                resumable=endpoint.resumable(manifest.request_body),
            )
            self.stats.bump("journaled_handles_bound")
            await self.board.state_after(key, bound.event_id, self.config.settle_timeout_s, or_cancel=True)
            self._refused(self.board.refusal(bound.event_id))
            latest = self.board.latest[key]
        if handle is not None and latest.response_handle != handle:
            self.stats.bump("unbound_handles_dropped")
            handle = None
        phase = Phase(handle=handle, since=self.board.position)
        if latest.state in (S.DISPATCHING, S.SENT, S.STREAMING):
            event = await self.events.recovered(conv, op, generation)
            phase.sources.add(event.event_id)
        elif latest.state == S.UNKNOWN and not latest.attempt_terminated:
            phase.sources.add(latest.source_event_id)
        else:
            return Verdict.RETRY  # terminated already: a new generation may start
        # everything is re-read from the start: the fold's assembler drops what it already has
        phase.acked = -1
        return await self._after_stream(manifest, endpoint, generation, phase)
