"""One read of a provider stream for one attempt: the HTTP request, the pump, and what it appends.

A read appends HandleBound (journaled first: the handle is what a restart resumes by), StreamDeltas
as the pump normalises them, and always a StreamEnded. It stops at once, between two appends, when
the board shows the operation CANCELLED or the lease of the generation it reads expired, and closes
the connection. It stops too, and closes the connection, once the pump says the stream ended
(`StreamPump.ended`):
- after the chunk that carried the provider's final event (message stop, error): the fold settles
  the attempt there, nothing after it is read as part of the answer (gateway/pump.py), and a
  provider (or a proxy) that sends more, or holds the connection open, would hold the operation's
  slot meanwhile;
- `unnamed_error_grace_s` after an error that came before anything named the response, when
  nothing named one since: the read ends PROVIDER_ERROR then, not when the provider closes.
An answer that is not the API's stream (`provider_failures.is_stream`: an error status, a redirect,
a 2xx whose content-type is another, such as a proxy's HTML page) is a PROVIDER_ERROR outcome, judged
before a byte of it is read as a stream, whose body is never kept (it may quote the credential); one
whose body cannot be read (cut, stalled, garbled) is still that status's PROVIDER_ERROR, never a
disconnect. So is a stream whose error event came before anything named its response, and nothing
named one after it (`StreamPump.unnamed_failure`): the fold takes no delta before `HandleBound`, so the
error is not appended; its names judge the read's failure as a mid-stream error's do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import httpx

from turnledger.gateway.board import DecisionBoard, key_of
from turnledger.gateway.cancel_watch import StopOnCancel
from turnledger.gateway.chunks import IdleTick, TimedChunks
from turnledger.gateway.client import WorkerEvents
from turnledger.gateway.endpoints import ProviderEndpoint
from turnledger.gateway.journal import WorkerJournal
from turnledger.gateway.lease_keeper import LeaseKeeper
from turnledger.gateway.provider_failures import (
    MAX_ERROR_BODY_BYTES,
    ProviderFailure,
    http_failure,
    is_stream,
    stream_failure,
)
from turnledger.gateway.provider_request import ProviderRequest
from turnledger.gateway.pump import UNNAMED_ERROR_GRACE_S, StreamPump
from turnledger.gateway.redaction import REDACTOR
from turnledger.gateway.worker_config import CrashHook, WorkerStats
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.model.events import StreamOutcome
from turnledger.model.manifest import DispatchManifest
from turnledger.observability import runtime_metrics as live

log = logging.getLogger(__name__)

OPERATION_EXTENSION = "turnledger.operation"
"""httpx request extension naming the operation (a transport may read it; it is never sent)."""


@dataclass
class Phase:
    """One read of one generation's stream: the events it appended, what it saw."""

    sources: set[str] = field(default_factory=set)
    handle: str | None = None
    acked: int = -1
    outcome: StreamOutcome = StreamOutcome.COMPLETED
    since: int = 0
    """The board's position when the phase began (expiries after it end the phase)."""
    failure: ProviderFailure | None = None
    """What the provider's error answer or the stream's error event says of trying again, if it failed so."""


async def error_body(response: httpx.Response) -> bytes:
    """An error answer's body, read for its error type only (it may quote the credential), and only
    up to one byte past what `http_failure` parses: a provider (or a proxy) sending an endless error
    page costs no more. Empty when it cannot be read whole (cut, stalled past the read timeout, a
    content-encoding it does not have): the status and the headers, already here, still judge it."""
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_ERROR_BODY_BYTES:
                break
    except (httpx.TransportError, httpx.DecodingError) as exc:
        log.debug("error body of HTTP %d not read: %r", response.status_code, exc)
        return b""
    return bytes(body)


def scrubbed(deltas: list[NormalizedDelta]) -> list[NormalizedDelta]:
    """The deltas with every credential the worker holds masked in the provider's error text (an error
    event's type and message, an undecodable event's bytes): they become a ledger event, and such text,
    like an error body, may quote the request's credential."""
    return [_scrubbed_error(d) if d.type is DeltaType.PROVIDER_ERROR else d for d in deltas]


def _scrubbed_error(delta: NormalizedDelta) -> NormalizedDelta:
    masked = {
        name: REDACTOR.scrub(text)
        for name, text in (("error_type", delta.error_type), ("error_message", delta.error_message))
        if text is not None and REDACTOR.scrub(text) != text
    }
    return delta.model_copy(update=masked) if masked else delta


class StreamReader:
    """Reads streams for one worker, appending through its events, board, journal and leases."""

    def __init__(
        self,
        http: Callable[[], httpx.AsyncClient],
        events: WorkerEvents,
        board: DecisionBoard,
        journal: WorkerJournal,
        leases: LeaseKeeper,
        stats: WorkerStats,
        crash_hook: CrashHook | None,
        flush_interval_s: float = 0.0,
        unnamed_error_grace_s: float = UNNAMED_ERROR_GRACE_S,
    ) -> None:
        self._http = http
        self._flush_interval_s = flush_interval_s
        self._unnamed_error_grace_s = unnamed_error_grace_s
        self._events, self._board, self._journal = events, board, journal
        self._leases, self._stats, self._crash_hook = leases, stats, crash_hook

    async def read(
        self,
        manifest: DispatchManifest,
        endpoint: ProviderEndpoint,
        generation: int,
        phase: Phase,
        request: ProviderRequest,
    ) -> None:
        """One HTTP read of the stream; appends HandleBound, StreamDeltas and StreamEnded."""
        conv, op = key = key_of(manifest)
        resumable = endpoint.resumable(manifest.request_body)

        async def on_handle(handle: str) -> None:
            phase.handle = handle
            entry = self._journal.get(key)
            if entry is not None:
                self._journal.write(replace(entry, handle=handle))
            if self._crash_hook is not None:
                self._crash_hook("journal-handle")
            self._leases.alive(key)
            bound = await self._events.handle_bound(
                conv, op, generation, handle, manifest.manifest_digest, resumable=resumable
            )
            phase.sources.add(bound.event_id)

        api = str(endpoint.api)
        sent_at = time.monotonic()
        first_delta = [True]

        async def on_deltas(deltas: list[NormalizedDelta]) -> None:
            if first_delta[0] and deltas:
                first_delta[0] = False
                live.PROVIDER_FIRST_DELTA_SECONDS.labels(api).observe(time.monotonic() - sent_at)
            self._leases.alive(key)
            event = await self._events.deltas(conv, op, generation, scrubbed(deltas))
            phase.sources.add(event.event_id)

        pump = StreamPump(
            endpoint.api,
            generation,
            on_handle=on_handle,
            on_deltas=on_deltas,
            response_handle=phase.handle,
            acked=phase.acked,
            flush_interval_s=self._flush_interval_s,
            unnamed_error_grace_s=self._unnamed_error_grace_s,
        )
        outcome = StreamOutcome.COMPLETED
        phase.failure = None
        why: str | None = None  # why the read ended, when not by the provider's final event
        lease_lost = self._board.lease_lost_signal(key, generation)
        stop = StopOnCancel(self._board.cancel_signal(key), lease_lost)
        live.PROVIDER_REQUESTS.labels(api, "resume" if request.method == "GET" else "send").inc()
        try:
            async with self._http().stream(
                request.method,
                request.url,
                content=request.content,
                headers=dict(request.headers),
                timeout=endpoint.route.timeout,
                extensions={OPERATION_EXTENSION: key},
            ) as response:
                live.PROVIDER_REQUEST_SECONDS.labels(api).observe(time.monotonic() - sent_at)
                if not is_stream(response.status_code, response.headers, endpoint.profile.framing):
                    live.PROVIDER_ERRORS.labels(api, str(response.status_code)).inc()
                    body = await error_body(response)
                    phase.failure = http_failure(
                        api, response.status_code, response.headers, body, time.time()
                    )
                    self._stats.bump(f"http_{response.status_code}")
                    outcome = StreamOutcome.PROVIDER_ERROR
                else:
                    with stop.feeding():
                        await pump.on_response_headers(response.headers)
                    chunks = TimedChunks(response.aiter_bytes())  # decoded: httpx asks for gzip
                    try:
                        while (chunk := await chunks.next(pump.next_wait())) is not None:
                            with stop.feeding():
                                if isinstance(chunk, IdleTick):
                                    await pump.flush()
                                else:
                                    await pump.feed(chunk)
                            if stop.fired or pump.ended:
                                break  # leaving the block closes the connection
                    finally:
                        await chunks.aclose()
                    if not stop.fired:
                        with stop.feeding():
                            await pump.close()
        except (httpx.TransportError, httpx.DecodingError) as exc:  # cut, stalled, or garbled
            if not stop.fired:
                with stop.feeding():
                    await pump.flush()  # what arrived before the cut is kept; a resume starts after it
            live.PROVIDER_ERRORS.labels(api, "disconnect").inc()
            self._stats.bump("disconnects")
            log.debug("%s generation %d: transport ended: %r", op, generation, exc)
            outcome = StreamOutcome.DISCONNECTED
            why = f"transport ended: {type(exc).__name__}"
        except asyncio.CancelledError:
            if not stop.absorb():
                raise
        finally:
            stop.close()
            self._board.release_cancel_signal(key)
            self._board.release_lease_lost_signal(key)
        live.PROVIDER_STREAM_SECONDS.labels(api).observe(time.monotonic() - sent_at)
        if pump.unnamed_failure:
            # An error before anything named the response, and nothing after it did (`StreamPump`):
            # the provider failed this request at once, closed or cut; nothing of it is kept.
            self._stats.bump("errors_before_handle")
            outcome = StreamOutcome.PROVIDER_ERROR
        if stop.fired and lease_lost.is_set() and not self._board.cancelled(key):
            # The lease expired: another worker continues a kept response, and a plain stream's
            # attempt is over (the fold keeps nothing more of it). Reading on would only pay for a
            # second stream of the same answer. The verdict is LOST_LEASE.
            self._stats.bump("lost_lease_reads")
            log.info("%s generation %d: lease lost, stopped reading", op, generation)
            outcome = StreamOutcome.DISCONNECTED
            why = "the lease was lost: stopped reading"
        elif stop.fired:
            # The operation is CANCELLED: nothing more it sends can be kept. The read stopped and the
            # connection is closed; the verdict CANCELLED confirms the attempt terminated.
            self._stats.bump("cancelled_reads")
            log.debug("%s generation %d: cancelled, stopped reading", op, generation)
            outcome = StreamOutcome.DISCONNECTED
            why = "cancelled: stopped reading"
        if pump.error_type is not None:
            phase.failure = stream_failure(api, pump.error_type, pump.error)
        self._stats.bump("late_deltas", pump.stats.late_deltas)
        self._stats.bump("wire_duplicates", pump.stats.wire_duplicates)
        if pump.stats.after_final:
            self._stats.bump("after_final", pump.stats.after_final)
        phase.acked = pump.acked
        phase.outcome = outcome
        phase.handle = pump.response_handle or phase.handle
        if pump.saw_final:
            # The provider's final event (message stop / error) already settled the attempt in the
            # fold; the StreamEnded below is then a no-op there, but every stream still reports its end.
            self._stats.bump("final_in_stream")
            self._leases.settled(key)
        ended = await self._events.ended(
            conv,
            op,
            generation,
            outcome,
            resumable=outcome == StreamOutcome.DISCONNECTED and phase.handle is not None and resumable,
            last_delta_sequence=phase.acked,
            detail=phase.failure.describe() if phase.failure is not None else why,
        )
        phase.sources.add(ended.event_id)
