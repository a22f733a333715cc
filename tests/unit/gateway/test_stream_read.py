"""One read of a provider stream (gateway/stream_read.py): the exact events it appends (the handle journaled
before it is bound, every delta once, always one StreamEnded), how it ends (completed, an error status, a
cut connection, a cancel, a lost lease) and what it counts. `StreamReader` runs against the real board,
pump and event factory, an in-memory sink and an `httpx.MockTransport` provider: no network."""

from __future__ import annotations

import asyncio
import email.utils
import gzip
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import REGISTRY

from tests.unit.gateway.decisions import decision, manifest_issued
from tests.unit.streaming.support import fixture
from turnledger.gateway import stream_read
from turnledger.gateway.board import DecisionBoard, OperationKey
from turnledger.gateway.client import WorkerEvents
from turnledger.gateway.endpoints import ProviderEndpoint, endpoints_for
from turnledger.gateway.journal import JournalEntry, WorkerJournal
from turnledger.gateway.provider_failures import MAX_ERROR_BODY_BYTES, ProviderFailure
from turnledger.gateway.provider_request import ProviderRequest
from turnledger.gateway.redaction import REDACTOR
from turnledger.gateway.stream_read import OPERATION_EXTENSION, Phase, StreamReader
from turnledger.gateway.worker_config import WorkerStats
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.model.events import (
    DispatchState,
    HandleBound,
    IngressEvent,
    StreamDeltas,
    StreamEnded,
    StreamOutcome,
)
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.runs import expand

S = DispatchState
KEY = ("c1", "op-1")
BASE = "http://provider.test"
RESPONSES = ("openai-responses@2", "openai/gpt-4.1@2025-04", '{"stream":true,"background":true}')
ANTHROPIC = ("anthropic-messages@2", "anthropic/claude-sonnet-4@2025-05", '{"stream":true}')
OPENAI_CHAT = ("openai-chat@2", "openai/gpt-4o@2024-08", '{"stream":true}')
RESPONSES_HANDLE = "resp_68a1f0c2b7e88190a1b2c3d4e5f60718"


def manifest_of(adapter: str, model: str, body: str) -> DispatchManifest:
    """The manifest the fold issues (sealed: the worker binds a handle to its digest)."""
    return (
        manifest_issued("op-1")
        .manifest.model_copy(update={"adapter": adapter, "model_revision": model, "request_body": body})
        .sealed()
    )


class Body(httpx.AsyncByteStream):
    """A response body: `chunks` in turn; then, if `hold` is given, waits for it (a provider that has
    not sent more yet); then ends, or raises `cut` (the connection dropped)."""

    def __init__(
        self, chunks: list[bytes], *, hold: asyncio.Event | None = None, cut: Exception | None = None
    ) -> None:
        self.chunks, self.hold, self.cut = chunks, hold, cut
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.hold is not None:
            await self.hold.wait()
        if self.cut is not None:
            raise self.cut

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class Leases:
    trace: list[tuple[str, Any]]

    def alive(self, key: OperationKey) -> None:
        self.trace.append(("alive", key))

    def settled(self, key: OperationKey) -> None:
        self.trace.append(("settled", key))


@dataclass
class Read:
    """A reader with everything it appends through, and what each part saw, in one `trace`."""

    manifest: DispatchManifest
    endpoint: ProviderEndpoint
    response: Callable[[httpx.Request], httpx.Response]
    flush_interval_s: float | None = None  # None: the reader's default
    unnamed_error_grace_s: float | None = None  # None: the reader's default
    trace: list[tuple[str, Any]] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)
    board: DecisionBoard = field(default_factory=DecisionBoard)
    stats: WorkerStats = field(default_factory=WorkerStats)
    journal: WorkerJournal = field(default_factory=lambda: WorkerJournal(None))
    events: list[IngressEvent] = field(default_factory=list)
    appended: asyncio.Event = field(default_factory=asyncio.Event)

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)
        self.trace.append(("append", type(event).__name__))
        self.appended.set()

    def crash_hook(self, point: str) -> None:
        entry = self.journal.get(KEY)
        self.trace.append((point, None if entry is None else entry.handle))

    def reader(self) -> StreamReader:
        def handler(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return self.response(request)

        return StreamReader(
            lambda: httpx.AsyncClient(transport=httpx.MockTransport(handler)),
            WorkerEvents(self, "w1"),
            self.board,
            self.journal,
            Leases(self.trace),  # type: ignore[arg-type]
            self.stats,
            self.crash_hook,
            **({} if self.flush_interval_s is None else {"flush_interval_s": self.flush_interval_s}),
            **(
                {}
                if self.unnamed_error_grace_s is None
                else {"unnamed_error_grace_s": self.unnamed_error_grace_s}
            ),
        )

    async def run(
        self, phase: Phase | None = None, generation: int = 2, method: str = "POST", url: str = ""
    ) -> Phase:
        phase = phase or Phase()
        request = ProviderRequest(
            method, url or self.endpoint.url, {"x-test": "1"}, b"{}" if method == "POST" else None
        )
        async with asyncio.timeout(10):
            await self.reader().read(self.manifest, self.endpoint, generation, phase, request)
        return phase

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


def reading(
    api: tuple[str, str, str], response: Callable[[httpx.Request], httpx.Response], **kw: Any
) -> Read:
    manifest = manifest_of(*api)
    routes = endpoints_for(
        BASE, {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-test", "GEMINI_API_KEY": "sk-test"}
    )
    return Read(manifest, routes.endpoint_for(manifest), response, **kw)


def events_of(data: bytes) -> list[bytes]:
    """SSE bytes as one chunk per event (each with its blank line, LF or CRLF)."""
    return re.findall(rb".*?(?:\r\n\r\n|\n\n)", data, re.DOTALL)


async def all_deltas(api: tuple[str, str, str], chunks: list[bytes]) -> list[int]:
    """The delta sequences a whole read of `chunks` appends (the reference for a read cut short)."""
    whole = reading(api, lambda request: httpx.Response(200, stream=Body(chunks)))
    await whole.run()
    return sequences(whole)


def sse(name: str, **kw: Any) -> Callable[[httpx.Request], httpx.Response]:
    """The fixture's bytes, one chunk per SSE event."""
    chunks = events_of(fixture(name))
    return lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Body(chunks, **kw)
    )


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def only_this_task() -> bool:
    """Within a few turns of the loop (a cancelled task and the waits it cancels end there), is this
    test's task the only one left?"""
    for _ in range(10):
        if asyncio.all_tasks() == {asyncio.current_task()}:
            return True
        await asyncio.sleep(0)
    return False


def sequences(read: Read) -> list[int]:
    """The delta sequences appended, runs expanded (`streaming/runs.py`)."""
    return [d.delta_sequence for e in read.of(StreamDeltas) for run in e.deltas for d in expand(run)]


# -- a whole read -----------------------------------------------------------------------------------


async def test_a_complete_read_journals_the_handle_binds_it_appends_every_delta_once_and_ends() -> None:
    """The handle is journaled before HandleBound is appended (a restart resumes by it); every delta
    from 0 is appended once; the provider's final event settles the lease; one StreamEnded COMPLETED,
    not resumable, naming the last delta; the phase holds every appended event's id."""
    read = reading(RESPONSES, sse("openai_responses_text.sse"))
    read.journal.write(JournalEntry("op-1", "c1", 1, generation=2))
    phase = await read.run()
    [bound] = read.of(HandleBound)
    [ended] = read.of(StreamEnded)
    assert bound.response_handle == RESPONSES_HANDLE and bound.attempt_generation == 2
    assert bound.manifest_digest == read.manifest.manifest_digest and bound.resumable is True
    assert read.journal.get(KEY) == JournalEntry("op-1", "c1", 1, generation=2, handle=RESPONSES_HANDLE)
    assert read.trace[:3] == [("journal-handle", RESPONSES_HANDLE), ("alive", KEY), ("append", "HandleBound")]
    total = len(sequences(read))
    assert total > 3 and sequences(read) == list(range(total))
    assert all(e.attempt_generation == 2 for e in read.of(StreamDeltas))
    assert (ended.outcome, ended.resumable, ended.last_delta_sequence, ended.detail) == (
        StreamOutcome.COMPLETED,
        False,
        total - 1,
        None,
    )
    assert (ended.attempt_generation, ended.operation_id, ended.conversation_id) == (2, "op-1", "c1")
    assert read.trace[-2:] == [("settled", KEY), ("append", "StreamEnded")]
    assert phase.sources == {e.event_id for e in read.events}
    assert (phase.handle, phase.acked, phase.outcome, phase.failure) == (
        RESPONSES_HANDLE,
        total - 1,
        StreamOutcome.COMPLETED,
        None,
    )
    assert read.stats.counts == {"final_in_stream": 1, "late_deltas": 0, "wire_duplicates": 0}
    assert await only_this_task()  # the cancel watcher is closed


async def test_by_default_each_chunk_s_deltas_are_appended_at_once() -> None:
    """Without a flush interval nothing is held back: one StreamDeltas per event that has a delta."""
    read = reading(ANTHROPIC, sse("anthropic_text.sse"))
    await read.run()
    assert [sum(len(expand(run)) for run in e.deltas) for e in read.of(StreamDeltas)] == [1] * 8


async def test_every_append_of_deltas_keeps_the_lease_alive_first() -> None:
    """Each StreamDeltas is preceded by a lease renewal mark, as is the HandleBound."""
    read = reading(ANTHROPIC, sse("anthropic_text.sse"))
    await read.run()
    appends = [i for i, t in enumerate(read.trace) if t[0] == "append" and t[1] != "StreamEnded"]
    assert appends and all(read.trace[i - 1] == ("alive", KEY) for i in appends)


async def test_a_handle_of_an_operation_not_journaled_is_not_journaled() -> None:
    """No journal entry (the worker did not start this attempt here): the handle is bound, not written."""
    read = reading(RESPONSES, sse("openai_responses_text.sse"))
    await read.run()
    assert read.journal.get(KEY) is None and len(read.of(HandleBound)) == 1
    assert ("journal-handle", None) in read.trace


async def test_the_request_is_sent_as_given_with_the_route_s_timeout_and_the_operation_extension() -> None:
    """Method, URL, headers and bytes of the `ProviderRequest`, the route's timeout, and the operation's
    key as an extension a transport may read."""
    read = reading(ANTHROPIC, sse("anthropic_text.sse"))
    await read.run()
    [request] = read.requests
    assert (request.method, str(request.url), request.headers["x-test"], request.content) == (
        "POST",
        read.endpoint.url,
        "1",
        b"{}",
    )
    assert request.extensions[OPERATION_EXTENSION] == KEY
    assert request.extensions["timeout"] == read.endpoint.route.timeout.as_dict()


async def test_a_resumed_read_appends_only_past_what_was_acked_and_keeps_the_handle() -> None:
    """A second read of the same generation (GET of the kept response) appends only the deltas after
    `acked`, binds no handle again, and counts as a resume."""
    first = reading(RESPONSES, sse("openai_responses_text.sse"))
    await first.run()
    total = len(sequences(first))
    read = reading(RESPONSES, sse("openai_responses_text.sse"))
    before = sample("turnledger_provider_requests_total", api="openai-responses", kind="resume")
    phase = await read.run(Phase(handle=RESPONSES_HANDLE, acked=2), method="GET")
    assert read.of(HandleBound) == [] and sequences(read) == list(range(3, total))
    assert phase.handle == RESPONSES_HANDLE and phase.acked == total - 1
    assert sample("turnledger_provider_requests_total", api="openai-responses", kind="resume") == before + 1
    assert read.requests[0].content == b""


async def test_the_read_counts_its_request_first_delta_and_stream_in_the_provider_metrics() -> None:
    """One request (a send), one time to first delta however many batches, one response time and one
    stream time."""
    read = reading(ANTHROPIC, sse("anthropic_text.sse"))
    api = "anthropic-messages"
    names = [
        ("turnledger_provider_requests_total", {"api": api, "kind": "send"}),
        ("turnledger_provider_time_to_first_delta_seconds_count", {"api": api}),
        ("turnledger_provider_request_seconds_count", {"api": api}),
        ("turnledger_provider_stream_seconds_count", {"api": api}),
    ]
    sums = [(name.removesuffix("_count") + "_sum", labels) for name, labels in names[1:]]
    before = [sample(name, **labels) for name, labels in names]
    before_sums = [sample(name, **labels) for name, labels in sums]
    await read.run()
    assert len(read.of(StreamDeltas)) > 1
    assert [sample(name, **labels) for name, labels in names] == [b + 1 for b in before]
    # each a time since the request was sent: more than nothing, less than the test's own timeout
    assert all(
        0 < sample(name, **labels) - b < 10 for (name, labels), b in zip(sums, before_sums, strict=True)
    )


# -- how a read ends ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 429])
async def test_an_error_status_is_a_provider_error_judged_by_its_status_headers_and_error_type(
    status: int,
) -> None:
    """An error status (400 and up): PROVIDER_ERROR, the failure judged from the status, the headers
    and the body's error type (the body's words are never kept), counted by status; nothing but the
    StreamEnded appended."""
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "sk-leak"}}
    read = reading(ANTHROPIC, lambda request: httpx.Response(status, headers={"retry-after": "7"}, json=body))
    before = sample("turnledger_provider_errors_total", api="anthropic-messages", error=str(status))
    phase = await read.run()
    [ended] = read.events
    assert isinstance(ended, StreamEnded)
    assert (ended.outcome, ended.resumable, ended.last_delta_sequence, ended.detail) == (
        StreamOutcome.PROVIDER_ERROR,
        False,
        -1,
        f"HTTP {status} rate_limit_error, retry after 7s",  # names only: never the body's words
    )
    assert phase.outcome == StreamOutcome.PROVIDER_ERROR
    assert phase.failure == ProviderFailure(
        retryable=True, rule="error type", status=status, error_type="rate_limit_error", retry_after_s=7.0
    )
    assert read.stats.counts == {f"http_{status}": 1, "late_deltas": 0, "wire_duplicates": 0}
    assert (
        sample("turnledger_provider_errors_total", api="anthropic-messages", error=str(status)) == before + 1
    )


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({}, lambda: Body([b'{"type": "error", "error": {"type": "authe'], cut=httpx.ReadError("reset"))),
        ({}, lambda: Body([], cut=httpx.ReadTimeout("no byte within the read timeout"))),
        ({"content-encoding": "gzip"}, lambda: Body([b'{"type": "error", "error": {"type": "api_error"}}'])),
    ],
    ids=["cut", "stalled", "not-the-encoding-it-names"],
)
async def test_an_error_status_whose_body_cannot_be_read_is_judged_by_its_status_and_headers(
    headers: dict[str, str], body: Callable[[], Body]
) -> None:
    """A 401 whose body is cut, stalls or is not the gzip it says: still PROVIDER_ERROR, refused by its
    status (not a disconnect, which would be read again and again); a 429's retry-after is kept."""
    read = reading(ANTHROPIC, lambda request: httpx.Response(401, headers=headers, stream=body()))
    phase = await read.run()
    [ended] = read.events
    assert isinstance(ended, StreamEnded)
    assert (ended.outcome, ended.resumable, phase.outcome) == (
        StreamOutcome.PROVIDER_ERROR,
        False,
        StreamOutcome.PROVIDER_ERROR,
    )
    assert phase.failure == ProviderFailure(retryable=False, rule="status", status=401)
    assert read.stats.counts == {"http_401": 1, "late_deltas": 0, "wire_duplicates": 0}
    throttled = reading(
        ANTHROPIC,
        lambda request: httpx.Response(
            429, headers={"retry-after": "7"}, stream=Body([b"{"], cut=httpx.ReadError("x"))
        ),
    )
    assert (await throttled.run()).failure == ProviderFailure(True, "status", 429, None, 7.0)


async def test_a_long_error_page_is_read_only_one_byte_past_what_is_parsed() -> None:
    """An error body is read until it passes `MAX_ERROR_BODY_BYTES` and no further (an endless page
    costs no memory); past the bound it is not parsed, so the status decides."""
    sent = [0]

    class Page(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for _ in range(1000):  # 4 MB
                sent[0] += 1
                yield b"<html>" + b" " * 4090

    read = reading(ANTHROPIC, lambda request: httpx.Response(503, stream=Page()))
    phase = await read.run()
    assert sent[0] == MAX_ERROR_BODY_BYTES // 4096 + 1
    assert phase.failure == ProviderFailure(retryable=True, rule="status", status=503)
    assert [type(e).__name__ for e in read.events] == ["StreamEnded"]


async def test_an_error_body_is_what_was_read_up_to_one_chunk_past_the_bound() -> None:
    """`error_body` keeps every byte it read, the chunk that passed the bound included, and no more."""
    chunk = b"<html>" + b" " * 4090
    page = Body([chunk] * 1000)
    body = await stream_read.error_body(httpx.Response(503, stream=page, request=httpx.Request("GET", BASE)))
    assert body == chunk * (MAX_ERROR_BODY_BYTES // 4096 + 1)


@pytest.mark.parametrize(
    ("headers", "stream", "logged"),
    [
        ({}, lambda: Body([b'{"type": "err'], cut=httpx.ReadError("reset")), "ReadError('reset')"),
        ({}, lambda: Body([], cut=httpx.ReadTimeout("stalled")), "ReadTimeout('stalled')"),
        (
            {"content-encoding": "gzip"},
            lambda: Body([b"{}"]),
            "DecodingError('Error -3 while decompressing data: incorrect header check')",
        ),
    ],
    ids=["cut", "stalled", "not-the-encoding-it-names"],
)
async def test_an_error_body_that_cannot_be_read_is_empty_and_says_why_at_debug(
    headers: dict[str, str],
    stream: Callable[[], Body],
    logged: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cut, stalled or garbled error body is no body at all (not the part that arrived), and the debug
    line names the status and the error."""
    response = httpx.Response(401, headers=headers, stream=stream(), request=httpx.Request("GET", BASE))
    with caplog.at_level(logging.DEBUG, logger=stream_read.__name__):
        assert await stream_read.error_body(response) == b""
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, f"error body of HTTP 401 not read: {logged}")
    ]


def test_an_error_delta_without_a_message_is_scrubbed_in_its_type_only() -> None:
    """A PROVIDER_ERROR delta may lack its type or message (the model allows None): the missing one stays
    None while a registered credential is masked in the other; a delta quoting none is kept as it is."""
    REDACTOR.register("sk-test")
    error = NormalizedDelta(
        response_handle="", generation=2, block_index=-1, delta_sequence=0, type=DeltaType.PROVIDER_ERROR
    )
    quoting = error.model_copy(update={"error_type": "sk-test"})
    plain = error.model_copy(update={"error_message": "overloaded"})
    assert stream_read.scrubbed([error, quoting, plain]) == [
        error,
        error.model_copy(update={"error_type": "***"}),
        plain,
    ]


async def test_a_retry_after_date_is_read_against_the_time_of_the_answer() -> None:
    """A `retry-after` HTTP date is a pause counted from when the error answer arrived (the clock's
    now), not from the epoch: 30 s ahead is a pause of at most 30 s."""
    ahead = email.utils.formatdate(time.time() + 30, usegmt=True)
    read = reading(ANTHROPIC, lambda request: httpx.Response(503, headers={"retry-after": ahead}))
    phase = await read.run()
    assert phase.failure is not None and phase.failure.retry_after_s is not None
    assert 28 < phase.failure.retry_after_s <= 30


@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 308, 399])
async def test_a_redirect_is_not_followed_nor_read_it_is_refused(status: int) -> None:
    """A 3xx, whatever its body (here a whole stream) and content-type: the route's URL is not the
    API's, which every generation would meet again: PROVIDER_ERROR, refused, counted by its status; the
    body is read as an error body is (for its error's names only), nothing but the StreamEnded
    appended, and the location never requested."""
    data = fixture("anthropic_text.sse")
    headers = {
        "location": "https://elsewhere.test/v1/messages?key=sk-test",
        "content-type": "text/event-stream",
    }
    read = reading(ANTHROPIC, lambda request: httpx.Response(status, headers=headers, stream=Body([data])))
    before = sample("turnledger_provider_errors_total", api="anthropic-messages", error=str(status))
    phase = await read.run()
    assert [type(e).__name__ for e in read.events] == ["StreamEnded"] and len(read.requests) == 1
    assert (read.events[0].outcome, phase.outcome) == (
        StreamOutcome.PROVIDER_ERROR,
        StreamOutcome.PROVIDER_ERROR,
    )
    assert phase.failure == ProviderFailure(False, "status", status, not_a_stream="a redirect not followed")
    assert phase.failure.describe() == f"HTTP {status}, a redirect not followed"
    assert read.stats.counts == {f"http_{status}": 1, "late_deltas": 0, "wire_duplicates": 0}
    assert (
        sample("turnledger_provider_errors_total", api="anthropic-messages", error=str(status)) == before + 1
    )


#: content-types of a 200 that is not the API's stream → what the failure repeats of it
NOT_A_STREAM = {
    "text/html; charset=utf-8": "text/html",
    "application/json": "application/json",
    "TEXT/PLAIN": "text/plain",
    "text/event-streams": "text/event-streams",
    "application/vnd.amazon.eventstream": "application/vnd.amazon.eventstream",  # Bedrock's, not this API's
    "sk-test is not a media type": "a content-type",
    "text/html/sk-test": "a content-type",
}


@pytest.mark.parametrize(("content_type", "shown"), NOT_A_STREAM.items(), ids=list(NOT_A_STREAM))
async def test_a_2xx_that_is_not_the_api_s_stream_is_a_provider_error_retried(
    content_type: str, shown: str
) -> None:
    """A 200 whose content-type is not the API's stream (a proxy's HTML page, a JSON object), whatever
    its body (here a whole stream): PROVIDER_ERROR before a byte is read as a stream, retried (a
    proxy's page is often transient), the failure naming the media type only when it has a media type's
    shape (the header is the provider's text: here quoting the credential)."""
    data = fixture("anthropic_text.sse")
    answer = httpx.Response(200, headers={"content-type": content_type}, stream=Body([data]))
    read = reading(ANTHROPIC, lambda request: answer)
    phase = await read.run()
    assert [type(e).__name__ for e in read.events] == ["StreamEnded"]
    assert (read.events[0].outcome, phase.outcome) == (
        StreamOutcome.PROVIDER_ERROR,
        StreamOutcome.PROVIDER_ERROR,
    )
    expected = ProviderFailure(True, "status", 200, not_a_stream=f"{shown} not the API's stream")
    assert phase.failure == expected and "sk-test" not in phase.failure.describe()
    assert phase.failure.describe() == f"HTTP 200, {shown} not the API's stream"
    assert read.stats.counts == {"http_200": 1, "late_deltas": 0, "wire_duplicates": 0}


async def test_a_2xx_that_is_not_a_stream_is_judged_by_its_error_s_names_and_headers_first() -> None:
    """A JSON error object under a 200 is judged as in an error body: by its known type, then as the
    provider's `x-should-retry` and delay say; its words are never kept."""
    body = {"error": {"type": "invalid_request_error", "message": "sk-test"}}
    refused = reading(ANTHROPIC, lambda request: httpx.Response(200, json=body))
    assert (await refused.run()).failure == ProviderFailure(
        False, "error type", 200, "invalid_request_error", None, "application/json not the API's stream"
    )
    headers = {"x-should-retry": "false", "retry-after": "3", "content-type": "text/html"}
    told = reading(ANTHROPIC, lambda request: httpx.Response(200, headers=headers, content=b"<html>"))
    assert (await told.run()).failure == ProviderFailure(
        False, "x-should-retry", 200, None, 3.0, "text/html not the API's stream"
    )


#: content-types the SSE APIs' streams are read under: none at all, and the stream's in any case, with
#: any parameters
READ_AS_A_STREAM = [
    None,
    "",
    "text/event-stream",
    "text/event-stream; charset=utf-8",
    " Text/Event-Stream ;charset=UTF-8",
]


@pytest.mark.parametrize("content_type", READ_AS_A_STREAM)
@pytest.mark.parametrize("status", [200, 299])
async def test_a_2xx_of_the_stream_s_type_or_of_none_is_read_as_the_stream(
    content_type: str | None, status: int
) -> None:
    data = fixture("anthropic_text.sse")
    expected = await all_deltas(ANTHROPIC, [data])
    headers = {} if content_type is None else {"content-type": content_type}
    read = reading(ANTHROPIC, lambda request: httpx.Response(status, headers=headers, stream=Body([data])))
    phase = await read.run()
    assert sequences(read) == expected and phase.failure is None
    assert (read.of(StreamEnded)[0].outcome, read.stats.counts[f"http_{status}"]) == (
        StreamOutcome.COMPLETED,
        0,
    )


async def test_a_previous_failure_is_cleared_by_a_read_that_does_not_fail() -> None:
    """`phase.failure` says what this read's error said, not the last one's."""
    read = reading(ANTHROPIC, sse("anthropic_text.sse"))
    phase = Phase(failure=object())  # type: ignore[arg-type]
    await read.run(phase)
    assert phase.failure is None


async def test_an_error_event_in_the_stream_is_the_read_s_failure() -> None:
    """The provider's error event ends the stream: its error type is the phase's failure."""
    read = reading(ANTHROPIC, sse("anthropic_error.sse"))
    phase = await read.run()
    assert phase.failure is not None and phase.failure.error_type == "overloaded_error"
    assert read.stats.counts["final_in_stream"] == 1


GEMINI = ("gemini@2", "google/gemini-2.5-pro@2025-06", '{"contents":[]}')

#: per API, a stream whose first event is the provider's error (nothing names a response), and the
#: failure its names make of it: refused at once, as the same error mid-stream is
EARLY_ERRORS = {
    "anthropic": (
        ANTHROPIC,
        b'event: error\ndata: {"type": "error", '
        b'"error": {"type": "billing_error", "message": "sk-test"}}\n\n',
        ProviderFailure(False, "error type", None, "billing_error"),
    ),
    "openai-chat": (
        OPENAI_CHAT,
        b'data: {"error": {"message": "m", "type": "requests", "param": null, '
        b'"code": "insufficient_quota"}}\n\n',
        ProviderFailure(False, "error type", None, "insufficient_quota"),
    ),
    "openai-responses": (
        RESPONSES,
        b'event: error\ndata: {"type": "error", "code": "insufficient_quota", "message": "m", "param": null, '
        b'"sequence_number": 0}\n\n',
        ProviderFailure(False, "error type", None, "insufficient_quota"),
    ),
    "gemini": (
        GEMINI,
        b'data: {"error": {"code": 429, "message": "m", "status": "RESOURCE_EXHAUSTED"}}\n\n',
        ProviderFailure(True, "error type", None, "RESOURCE_EXHAUSTED"),
    ),
}


def stream_of(chunks: list[bytes], cut: Exception | None = None) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Body(chunks, cut=cut)
    )


@pytest.mark.parametrize(("api", "event", "failure"), EARLY_ERRORS.values(), ids=list(EARLY_ERRORS))
async def test_an_error_before_anything_names_the_response_ends_the_read_as_a_provider_error(
    api: tuple[str, str, str], event: bytes, failure: ProviderFailure
) -> None:
    """It was dropped as an earlier stream's: the read ended COMPLETED with no failure, the fold said
    MISSING_STOP and the worker retried even `insufficient_quota`. Now it is this read's failure, judged
    by its names as a mid-stream error is; nothing is appended but the StreamEnded PROVIDER_ERROR (the
    fold takes no delta before a handle), not resumable, naming no delta."""
    read = reading(api, stream_of([event]))
    phase = await read.run()
    [ended] = read.events
    assert isinstance(ended, StreamEnded)
    assert (ended.outcome, ended.resumable, ended.last_delta_sequence) == (
        StreamOutcome.PROVIDER_ERROR,
        False,
        -1,
    )
    assert (phase.outcome, phase.failure, phase.handle) == (StreamOutcome.PROVIDER_ERROR, failure, None)
    assert read.stats.counts == {"errors_before_handle": 1, "late_deltas": 0, "wire_duplicates": 0}


@pytest.mark.parametrize(("api", "event", "failure"), EARLY_ERRORS.values(), ids=list(EARLY_ERRORS))
async def test_an_error_before_anything_names_the_response_ends_the_read_after_the_grace_not_the_close(
    api: tuple[str, str, str], event: bytes, failure: ProviderFailure
) -> None:
    """The provider sends its error and holds the connection open: the read waited until it closed.
    Now it waits `unnamed_error_grace_s` for the stream to name its response, then ends PROVIDER_ERROR,
    judged by the error, and closes the connection."""
    body = Body([event], hold=asyncio.Event())
    read = reading(api, lambda request: httpx.Response(200, stream=body), unnamed_error_grace_s=0.2)
    began = time.monotonic()
    phase = await read.run()
    [ended] = read.events
    assert isinstance(ended, StreamEnded) and 0.2 <= time.monotonic() - began < 4.0  # not the default 5 s
    assert (ended.outcome, phase.outcome, phase.failure, body.closed) == (
        StreamOutcome.PROVIDER_ERROR,
        StreamOutcome.PROVIDER_ERROR,
        failure,
        True,
    )
    assert read.stats.counts == {"errors_before_handle": 1, "late_deltas": 0, "wire_duplicates": 0}
    assert await only_this_task()


async def test_an_error_before_any_name_then_a_cut_is_a_provider_error_not_a_disconnect() -> None:
    """The connection dropped after the early error: there is no response to resume, the provider said
    why: PROVIDER_ERROR, judged by the error."""
    api, event, failure = EARLY_ERRORS["openai-chat"]
    read = reading(api, stream_of([event], cut=httpx.ReadError("peer reset")))
    phase = await read.run()
    [ended] = read.of(StreamEnded)
    assert (ended.outcome, phase.failure, len(read.events)) == (StreamOutcome.PROVIDER_ERROR, failure, 1)
    assert read.stats.counts["disconnects"] == 1 and read.stats.counts["errors_before_handle"] == 1


async def test_an_error_before_a_response_named_after_it_judges_nothing() -> None:
    """Late events of an earlier stream: the error came before this stream named its response, so it is
    not this read's failure; it reaches the fold under the empty handle and the read completes."""
    api, event, _ = EARLY_ERRORS["anthropic"]
    read = reading(api, stream_of([event, *events_of(fixture("anthropic_text.sse"))]))
    phase = await read.run()
    assert (phase.outcome, phase.failure) == (StreamOutcome.COMPLETED, None)
    assert len(read.of(HandleBound)) == 1 and read.stats.counts["late_deltas"] == 1
    assert read.stats.counts["errors_before_handle"] == 0


CHAT_CHUNK = (
    b'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o", '
    b'"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]}\n\n'
)

#: an OpenAI error object's (type, code) → the name that decides and whether it is retried: the first
#: of `code`, `type` that the API's row knows, in an HTTP error body and in a stream's error event alike
OPENAI_ERROR_NAMES = {
    "code-known": (("requests", "insufficient_quota"), "insufficient_quota", False),
    "type-known": (("invalid_request_error", "unsupported_value"), "invalid_request_error", False),
    "both-code-retries": (("invalid_request_error", "rate_limit_exceeded"), "rate_limit_exceeded", True),
    "both-code-refuses": (("server_error", "insufficient_quota"), "insufficient_quota", False),
}


def openai_error(kind: str, code: str) -> bytes:
    return orjson.dumps({"error": {"message": "sk-leak", "type": kind, "param": None, "code": code}})


@pytest.mark.parametrize(
    ("names", "decides", "retried"), OPENAI_ERROR_NAMES.values(), ids=list(OPENAI_ERROR_NAMES)
)
async def test_an_openai_error_is_judged_by_its_first_known_name_in_a_stream_and_in_an_error_body(
    names: tuple[str, str], decides: str, retried: bool
) -> None:
    """`{"type": "requests", "code": "insufficient_quota"}` mid-stream is refused as the same error in a
    429 body is: both read the error's `code`, then its `type`, and the first name the row knows decides
    (an unknown code under a known type is judged by the type)."""
    event = b"data: " + openai_error(*names) + b"\n\n"
    streamed = reading(OPENAI_CHAT, lambda request: httpx.Response(200, stream=Body([CHAT_CHUNK, event])))
    answered = reading(OPENAI_CHAT, lambda request: httpx.Response(429, content=openai_error(*names)))
    assert (await streamed.run()).failure == ProviderFailure(retried, "error type", None, decides)
    assert (await answered.run()).failure == ProviderFailure(retried, "error type", 429, decides)
    assert streamed.stats.counts["final_in_stream"] == 1


async def test_an_openai_error_with_no_known_name_keeps_each_path_s_default() -> None:
    """Neither its `code` nor its `type` known: a stream's error is retried, an error body's status
    decides."""
    body = openai_error("requests", "some_new_code")
    event = b"data: " + body + b"\n\n"
    streamed = reading(OPENAI_CHAT, lambda request: httpx.Response(200, stream=Body([CHAT_CHUNK, event])))
    assert (await streamed.run()).failure == ProviderFailure(True, "stream error")
    for status, retryable in ((400, False), (503, True)):
        answered = reading(OPENAI_CHAT, lambda request, status=status: httpx.Response(status, content=body))
        assert (await answered.run()).failure == ProviderFailure(retryable, "status", status)


async def test_the_read_stops_after_the_chunk_that_carried_the_final_event() -> None:
    """A provider that sends more after its final event and then holds the connection open: the read
    ends with the chunk that carried the final event (COMPLETED, the connection closed), and nothing the
    provider sent after it is appended."""
    data = fixture("anthropic_text.sse")
    expected = await all_deltas(ANTHROPIC, events_of(data))
    after = events_of(data)[1:4]  # a block of the same answer again, after its message stop
    body = Body([*events_of(data), *after], hold=asyncio.Event())
    read = reading(ANTHROPIC, lambda request: httpx.Response(200, stream=body))
    async with asyncio.timeout(2):
        phase = await read.run()
    [ended] = read.of(StreamEnded)
    assert sequences(read) == expected and ended.last_delta_sequence == expected[-1]
    assert (phase.outcome, ended.outcome, body.closed) == (
        StreamOutcome.COMPLETED,
        StreamOutcome.COMPLETED,
        True,
    )
    assert read.stats.counts["final_in_stream"] == 1 and read.stats.counts["disconnects"] == 0
    assert await only_this_task()


async def test_an_error_after_the_final_event_in_its_chunk_judges_nothing() -> None:
    """An error event after the message stop, in the same chunk, and a ping: the read completed, with no
    failure (the error was the read's failure, named in its StreamEnded), and nothing after the stop is
    appended; the worker counts the two events (`after_final`)."""
    data = fixture("anthropic_text.sse")
    expected = await all_deltas(ANTHROPIC, events_of(data))
    error = (
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "m"}}\n\n'
    )
    body = Body([data + error + b'event: ping\ndata: {"type": "ping"}\n\n'], hold=asyncio.Event())
    read = reading(ANTHROPIC, lambda request: httpx.Response(200, stream=body))
    phase = await read.run()
    [ended] = read.of(StreamEnded)
    assert sequences(read) == expected
    assert (phase.outcome, phase.failure, ended.outcome, ended.detail, body.closed) == (
        StreamOutcome.COMPLETED,
        None,
        StreamOutcome.COMPLETED,
        None,
        True,
    )
    assert read.stats.counts["after_final"] == 2


async def test_a_credential_quoted_by_an_error_event_is_masked_before_it_is_appended() -> None:
    """The route's key (`sk-test`) quoted in an error event's type and message, and in an undecodable
    event, reaches the ledger as `***`; the rest of the text, and every other delta, as sent."""
    data = fixture("anthropic_text.sse")
    start = events_of(data)[0]
    quoting = (
        b'event: error\ndata: {"type": "error", "error": {"type": "sk-test", '
        b'"message": "key sk-test refused; sk-tes is not it"}}\n\n'
    )
    read = reading(ANTHROPIC, lambda request: httpx.Response(200, stream=Body([start, quoting])))
    phase = await read.run()
    errors = [
        (d.error_type, d.error_message)
        for e in read.of(StreamDeltas)
        for run in e.deltas
        for d in expand(run)
        if d.error_type is not None
    ]
    assert errors == [("***", "key *** refused; sk-tes is not it")]
    assert phase.failure == ProviderFailure(True, "stream error")
    garbage = reading(
        ANTHROPIC, lambda request: httpx.Response(200, stream=Body([start, b"data: sk-test\n\n"]))
    )
    await garbage.run()
    [*_, undecodable] = [d for e in garbage.of(StreamDeltas) for run in e.deltas for d in expand(run)]
    assert (undecodable.error_type, undecodable.error_message) == ("undecodable_event", "***")


async def test_a_cut_connection_keeps_what_arrived_and_ends_disconnected_and_resumable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A transport error mid-stream: the deltas before the cut are appended (flushed), the read ends
    DISCONNECTED, resumable since the response has a handle and the request asked for a kept response."""
    data = fixture("openai_responses_text.sse")
    head = events_of(data[: data.index(b"event: response.output_text.done")])
    expected = await all_deltas(RESPONSES, head)
    read = reading(
        RESPONSES,
        lambda request: httpx.Response(200, stream=Body(head, cut=httpx.ReadError("peer reset"))),
        flush_interval_s=3600.0,  # coalescing: after the first, nothing is appended until a flush
    )
    before = sample("turnledger_provider_errors_total", api="openai-responses", error="disconnect")
    with caplog.at_level(logging.DEBUG, logger=stream_read.__name__):
        phase = await read.run()
    assert [r.getMessage() for r in caplog.records] == [
        "op-1 generation 2: transport ended: ReadError('peer reset')"
    ]
    ended = read.events[-1]
    assert isinstance(ended, StreamEnded)
    got = sequences(read)
    assert got == expected and len(got) > 2
    assert (ended.outcome, ended.resumable, ended.last_delta_sequence, ended.detail) == (
        StreamOutcome.DISCONNECTED,
        True,
        got[-1],
        "transport ended: ReadError",  # the exception's words (here "peer reset") are not kept
    )
    assert phase.outcome == StreamOutcome.DISCONNECTED and phase.acked == got[-1]
    assert read.stats.counts["disconnects"] == 1 and read.stats.counts["final_in_stream"] == 0
    assert ("settled", KEY) not in read.trace
    assert (
        sample("turnledger_provider_errors_total", api="openai-responses", error="disconnect") == before + 1
    )


async def test_a_gzip_stream_is_read_as_the_stream_it_encodes() -> None:
    """httpx asks for gzip (`accept-encoding`), so a provider or a proxy may send the stream so: its
    events are decoded before the pump reads them, and the answer is the one a plain stream gives."""
    data = fixture("anthropic_text.sse")
    expected = await all_deltas(ANTHROPIC, events_of(data))
    packed = gzip.compress(data)
    chunks = [packed[i : i + 64] for i in range(0, len(packed), 64)]
    read = reading(
        ANTHROPIC,
        lambda request: httpx.Response(200, headers={"content-encoding": "gzip"}, stream=Body(chunks)),
    )
    phase = await read.run()
    assert sequences(read) == expected and len(expected) > 3
    assert (phase.outcome, phase.failure, read.stats.counts["final_in_stream"]) == (
        StreamOutcome.COMPLETED,
        None,
        1,
    )


async def test_a_stream_garbled_in_its_content_encoding_keeps_what_arrived_and_ends_disconnected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """gzip that breaks off into garbage mid-way: the events decoded before it are appended, the read
    ends DISCONNECTED (counted as such), not with an exception out of the read."""
    data = fixture("openai_responses_text.sse")
    head = data[: data.index(b"event: response.output_text.done")]
    packer = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    packed = packer.compress(head) + packer.flush(zlib.Z_SYNC_FLUSH)
    expected = await all_deltas(RESPONSES, [head])
    read = reading(
        RESPONSES,
        lambda request: httpx.Response(
            200, headers={"content-encoding": "gzip"}, stream=Body([packed, b"\xff" * 32])
        ),
    )
    with caplog.at_level(logging.DEBUG, logger=stream_read.__name__):
        phase = await read.run()
    ended = read.events[-1]
    assert isinstance(ended, StreamEnded)
    assert sequences(read) == expected and len(expected) > 2
    assert (ended.outcome, ended.resumable, ended.last_delta_sequence) == (
        StreamOutcome.DISCONNECTED,
        True,
        expected[-1],
    )
    assert read.stats.counts["disconnects"] == 1 and phase.failure is None
    assert [r.getMessage() for r in caplog.records] == [
        "op-1 generation 2: transport ended: "
        "DecodingError('Error -3 while decompressing data: invalid block type')"
    ]


async def test_a_cut_before_any_handle_is_not_resumable() -> None:
    """Disconnected without a handle: nothing to resume from."""
    read = reading(RESPONSES, lambda request: httpx.Response(200, stream=Body([], cut=httpx.ReadError("x"))))
    phase = await read.run()
    [ended] = read.events
    assert isinstance(ended, StreamEnded)
    assert (ended.outcome, ended.resumable) == (StreamOutcome.DISCONNECTED, False) and phase.handle is None


async def test_a_cut_of_a_request_that_is_not_resumable_is_not_resumable() -> None:
    """A handle, but a request that did not ask for a kept response (no background): not resumable."""
    data = fixture("openai_responses_text.sse")
    head = data[: data.index(b"event: response.output_text.done")]
    read = reading(
        (RESPONSES[0], RESPONSES[1], '{"stream":true}'),
        lambda request: httpx.Response(200, stream=Body([head], cut=httpx.ReadError("x"))),
    )
    phase = await read.run()
    ended = read.events[-1]
    assert isinstance(ended, StreamEnded)
    assert (ended.outcome, ended.resumable, phase.handle) == (
        StreamOutcome.DISCONNECTED,
        False,
        RESPONSES_HANDLE,
    )
    assert read.of(HandleBound)[0].resumable is False


async def test_an_idle_provider_gets_its_coalesced_deltas_flushed_on_time() -> None:
    """With a flush interval, deltas held for coalescing are appended once the provider goes quiet,
    without waiting for more bytes."""
    data = fixture("anthropic_text.sse")
    head = events_of(data[: data.index(b"event: content_block_stop")])
    expected = await all_deltas(ANTHROPIC, head)
    hold = asyncio.Event()
    read = reading(
        ANTHROPIC, lambda request: httpx.Response(200, stream=Body(head, hold=hold)), flush_interval_s=0.01
    )
    task = asyncio.create_task(read.run())
    async with asyncio.timeout(5):
        while sequences(read) != expected:
            await read.appended.wait()
            read.appended.clear()
    assert not task.done() and len(read.of(StreamDeltas)) > 1  # the first at once, the rest when idle
    hold.set()
    await task
    assert sequences(read) == expected


# -- a read stopped from outside --------------------------------------------------------------------


async def stopped(api: tuple[str, str, str], stop: Callable[[Read], None]) -> tuple[Read, Phase, Body]:
    """A read whose provider sends part of the stream and then nothing; `stop` is called once the
    first deltas are appended."""
    data = fixture("openai_responses_text.sse")
    head = data[: data.index(b"event: response.output_text.done")]
    body = Body([head], hold=asyncio.Event())
    read = reading(api, lambda request: httpx.Response(200, stream=body))
    read.board.apply_nowait(decision("op-1", S.STREAMING, attempt_generation=2))
    task = asyncio.create_task(read.run())
    async with asyncio.timeout(5):
        while not read.of(StreamDeltas):
            await read.appended.wait()
            read.appended.clear()
    stop(read)
    phase = await task
    assert await only_this_task()  # no read of the body left behind
    return read, phase, body


async def test_a_cancelled_operation_stops_the_read_and_closes_the_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """CANCELLED: the read stops at once (the provider never sends more), the connection is closed, and
    the StreamEnded says DISCONNECTED, not resumable."""
    with caplog.at_level(logging.DEBUG, logger=stream_read.__name__):
        read, phase, body = await stopped(
            RESPONSES,
            lambda read: read.board.apply_nowait(decision("op-1", S.CANCELLED, attempt_generation=2)),
        )
    ended = read.events[-1]
    assert isinstance(ended, StreamEnded)
    assert (ended.outcome, ended.resumable, ended.detail) == (
        StreamOutcome.DISCONNECTED,
        True,
        "cancelled: stopped reading",
    )
    assert phase.outcome == StreamOutcome.DISCONNECTED and body.closed
    assert read.stats.counts["cancelled_reads"] == 1 and read.stats.counts["lost_lease_reads"] == 0
    assert read.stats.counts["disconnects"] == 0
    assert read.board._cancel_signals == {} and read.board._lease_signals == {}
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == stream_read.__name__] == [
        (logging.DEBUG, "op-1 generation 2: cancelled, stopped reading")
    ]


async def test_a_lost_lease_stops_the_read(caplog: pytest.LogCaptureFixture) -> None:
    """This generation's lease expired (another worker claimed it): the read stops, DISCONNECTED, counted
    as a lost lease, not a cancel."""

    def expire(read: Read) -> None:
        read.board.apply_nowait(
            decision(
                "op-1",
                S.UNKNOWN,
                attempt_generation=2,
                reason=ReasonCode.LEASE_EXPIRED,
                source_event_id="claim",
            )
        )

    with caplog.at_level(logging.DEBUG, logger=stream_read.__name__):
        read, _, body = await stopped(RESPONSES, expire)
    ended = read.events[-1]
    assert isinstance(ended, StreamEnded) and ended.outcome == StreamOutcome.DISCONNECTED
    assert ended.detail == "the lease was lost: stopped reading"
    assert read.stats.counts["lost_lease_reads"] == 1 and read.stats.counts["cancelled_reads"] == 0
    assert body.closed and read.board._lease_signals == {}
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == stream_read.__name__] == [
        (logging.INFO, "op-1 generation 2: lease lost, stopped reading")
    ]


async def test_a_lease_lost_and_then_cancelled_counts_as_cancelled() -> None:
    """Both signals: a CANCELLED operation is a cancelled read whatever its lease did."""

    def both(read: Read) -> None:
        read.board.apply_nowait(
            decision(
                "op-1", S.UNKNOWN, attempt_generation=2, reason=ReasonCode.LEASE_EXPIRED, source_event_id="x"
            )
        )
        read.board.apply_nowait(decision("op-1", S.CANCELLED, attempt_generation=2))

    read, _, _ = await stopped(RESPONSES, both)
    assert read.stats.counts["cancelled_reads"] == 1 and read.stats.counts["lost_lease_reads"] == 0


async def test_a_cancel_of_the_reader_itself_is_not_swallowed_and_the_phase_keeps_what_it_saw() -> None:
    """The worker's own cancel of the reading task (shutting down) propagates, no StreamEnded is
    appended, and the phase already holds the handle bound and the events appended before it."""
    data = fixture("openai_responses_text.sse")
    head = data[: data.index(b"event: response.output_text.done")]
    read = reading(RESPONSES, lambda request: httpx.Response(200, stream=Body([head], hold=asyncio.Event())))
    phase = Phase()
    task = asyncio.create_task(read.run(phase))
    async with asyncio.timeout(5):
        while not read.of(StreamDeltas):
            await read.appended.wait()
            read.appended.clear()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert read.of(StreamEnded) == [] and read.board._cancel_signals == {}
    assert phase.handle == RESPONSES_HANDLE and phase.sources == {e.event_id for e in read.events}


async def test_deltas_held_for_coalescing_are_appended_when_the_stream_ends() -> None:
    """A long flush interval holds deltas back; a stream that ends without a final event (which would
    append them at once) gets them appended by the end of the read (the pump's close)."""
    data = fixture("anthropic_text.sse")
    head = events_of(data[: data.index(b"event: content_block_stop")])
    expected = await all_deltas(ANTHROPIC, head)
    read = reading(ANTHROPIC, lambda request: httpx.Response(200, stream=Body(head)), flush_interval_s=3600.0)
    await read.run()
    [ended] = read.of(StreamEnded)
    assert len(expected) > 3 and sequences(read) == expected and ended.last_delta_sequence == expected[-1]
    assert len(read.of(StreamDeltas)) == 2  # the first at once, the rest held until the end


def bedrock_read(content_type: str | None) -> Read:
    manifest = manifest_of("bedrock-converse@1", "bedrock/anthropic.claude-sonnet-4@2025-05", "{}")
    routes = endpoints_for(
        BASE, {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_REGION": "us-east-1"}
    )
    headers = {"x-amzn-requestid": "req-9"}
    if content_type is not None:
        headers["content-type"] = content_type
    return Read(
        manifest,
        routes.endpoint_for(manifest),
        lambda request: httpx.Response(200, headers=headers, stream=Body([])),
    )


@pytest.mark.parametrize("content_type", [None, "application/vnd.amazon.eventstream"])
async def test_an_api_that_names_its_response_in_a_header_is_bound_by_it(content_type: str | None) -> None:
    """Bedrock's stream names no response: the `x-amzn-requestid` header is the handle bound."""
    read = bedrock_read(content_type)
    phase = await read.run()
    [bound] = read.of(HandleBound)
    assert bound.response_handle == "req-9" and phase.handle == "req-9"
    assert phase.failure is None


async def test_a_bedrock_answer_that_is_not_its_event_stream_binds_no_handle() -> None:
    """An SSE stream's type is not Bedrock's: judged before its headers are read, so the request id of
    an answer that is not the stream is bound to nothing."""
    read = bedrock_read("text/event-stream")
    phase = await read.run()
    assert [type(e).__name__ for e in read.events] == ["StreamEnded"] and phase.handle is None
    assert phase.failure == ProviderFailure(
        True, "status", 200, not_a_stream="text/event-stream not the API's stream"
    )


async def test_a_cancel_seen_during_an_append_stops_the_read_right_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A CANCELLED decision that arrives while deltas are being appended lets that append finish and
    stops the read before the next chunk: one StreamDeltas, then the StreamEnded."""
    read = reading(ANTHROPIC, sse("anthropic_text.sse"))
    appended = read.append

    async def append_then_cancel(event: IngressEvent) -> None:
        await appended(event)
        if isinstance(event, StreamDeltas):
            read.board.apply_nowait(decision("op-1", S.CANCELLED, attempt_generation=2))
            for _ in range(5):  # an append yields to the loop (Kafka's does): the watch sees the cancel
                await asyncio.sleep(0)

    read.append = append_then_cancel  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger=stream_read.__name__):
        await read.run()
    assert [type(e).__name__ for e in read.events] == ["HandleBound", "StreamDeltas", "StreamEnded"]
    assert read.stats.counts["cancelled_reads"] == 1 and read.stats.counts["final_in_stream"] == 0
    assert [r.getMessage() for r in caplog.records] == ["op-1 generation 2: cancelled, stopped reading"]
    assert await only_this_task()
