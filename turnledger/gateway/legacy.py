"""Answers the legacy gateway got, recorded into the ledger through the canonical CAS.

In the rollout stages `manifests-only` and `without-tools` (gateway/rollout.py) the
legacy gateway sends some requests itself. Their answers must still become history,
or every later manifest of the conversation would lack them and differ from the legacy
request. They enter the way ours do. The recorder is a dispatch worker (worker id
`legacy-recorder`) whose provider replays the raw response the legacy gateway received,
in the provider's SSE wire format. So:
- the CAS allocates the generation, and the DispatchAttempt names the recorder as the
  sender;
- the handle is bound to the manifest;
- the deltas go through the same parsers and the same assembler;
- only a complete response is committed.

A truncated or invalid legacy stream gives one failed attempt and a give-up
(CANCELLED), never partial history. There is one attempt per operation, because
replaying the same bytes again could not complete them.

An exchange names its operation by conversation and operation id. The manifest must
be PREPARED when the recorder runs; anything else is reported, not forced.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import httpx
import orjson

from turnledger.errors import InputFileError
from turnledger.gateway.board import FINAL, Observed, OperationKey, key_of
from turnledger.gateway.client import GatewayClient, IngressSink
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.refusal_feed import RefusalFeed
from turnledger.gateway.worker import OPERATION_EXTENSION, DispatchWorker, Verdict, WorkerConfig
from turnledger.kafka.tail import tail_topic
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchDecision, DispatchState, ManifestIssued
from turnledger.model.manifest import DispatchManifest
from turnledger.retry import NO_WAIT
from turnledger.topology import Topics

S = DispatchState
RECORDER_ID = "legacy-recorder"
RECORDED_BASE_URL = "http://legacy-recorded.invalid"
"""Never contacted: the recorder's transport serves the recorded bytes."""


class LegacyExchangeError(InputFileError):
    """A line of an exchanges file that is not a usable exchange; names the line and what is wrong."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        self.source, self.line, self.reason = source, line, reason
        super().__init__(f"{source}:{line}: {reason}")


@dataclass(frozen=True, slots=True)
class LegacyExchange:
    conversation_id: str
    operation_id: str
    response: bytes  # the provider's response body as the legacy gateway received it (SSE)
    status: int = 200

    @property
    def key(self) -> OperationKey:
        return (self.conversation_id, self.operation_id)


def parse_exchanges(lines: Iterable[str], source: str = "<exchanges>") -> list[LegacyExchange]:
    """JSON lines `{"conversationId", "operationId", "response", "status"?}`; blank lines are skipped.

    An operation named twice is an error: the ledger can hold one answer per attempt, and
    choosing one of two recorded answers silently would hide a legacy double send.
    """
    out: dict[OperationKey, LegacyExchange] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        exchange = _exchange(line, source, number)
        if exchange.key in out:
            raise LegacyExchangeError(
                source, number, f"operation {exchange.operation_id!r} of {exchange.conversation_id!r} twice"
            )
        out[exchange.key] = exchange
    return list(out.values())


def _exchange(line: str, source: str, number: int) -> LegacyExchange:
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise LegacyExchangeError(source, number, f"not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise LegacyExchangeError(source, number, "not a JSON object")
    fields = {name: raw.get(name) for name in ("conversationId", "operationId", "response")}
    missing = [name for name, value in fields.items() if not isinstance(value, str) or not value]
    if missing:
        raise LegacyExchangeError(source, number, f"missing or empty string field(s): {', '.join(missing)}")
    status = raw.get("status", 200)
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise LegacyExchangeError(source, number, f"status must be an HTTP status code, got {status!r}")
    return LegacyExchange(
        conversation_id=str(fields["conversationId"]),
        operation_id=str(fields["operationId"]),
        response=str(fields["response"]).encode("utf-8"),
        status=status,
    )


def read_exchanges(path: Path) -> list[LegacyExchange]:
    with path.open(encoding="utf-8") as f:
        return parse_exchanges(f, str(path))


class RecordedProvider(httpx.AsyncBaseTransport):
    """Serves each operation's recorded response; nothing else (no resume, no second body)."""

    def __init__(self, exchanges: Iterable[LegacyExchange]) -> None:
        self.exchanges = {e.key: e for e in exchanges}
        self.served: list[OperationKey] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = request.extensions.get(OPERATION_EXTENSION)
        exchange = self.exchanges.get(key) if isinstance(key, tuple) and request.method == "POST" else None
        if exchange is None:
            return httpx.Response(404, content=b"no recorded legacy response", request=request)
        self.served.append(exchange.key)
        headers = {"content-type": "text/event-stream"}
        body = httpx.ByteStream(exchange.response)  # unread, as off the wire: the worker streams it
        return httpx.Response(exchange.status, headers=headers, stream=body, request=request)


class RecordOutcome(StrEnum):
    COMMITTED = "committed"  # the legacy response is the operation's canonical answer
    GAVE_UP = "gave-up"  # incomplete or invalid response (or cancelled meanwhile): nothing committed
    LOST_CAS = "lost-cas"  # another sender's attempt won the CAS (the legacy gateway sent it twice?)
    LOST_LEASE = "lost-lease"  # another worker holds the attempt now (its lease expired): it continues there
    ALREADY_FINAL = "already-final"  # settled before: COMMITTED, REJECTED or CANCELLED, left as it was
    NOT_PREPARED = "not-prepared"  # WAITING, PAUSED or in flight with another worker: not recorded
    NOT_FOUND = "not-found"  # the manifests topic has no decision for this operation
    UNSETTLED = "unsettled"  # taken, but no verdict before the time ran out


@dataclass(frozen=True, slots=True)
class RecordResult:
    conversation_id: str
    operation_id: str
    outcome: RecordOutcome
    state: str | None  # the operation's latest dispatch state
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Is the operation settled with an answer in the history (ours, or another sender's)?"""
        if self.outcome == RecordOutcome.COMMITTED:
            return True
        return (
            self.outcome in (RecordOutcome.ALREADY_FINAL, RecordOutcome.LOST_CAS, RecordOutcome.LOST_LEASE)
            and self.state == S.COMMITTED.value
        )


class LegacyRecorder:
    """A dispatch worker that takes exactly the listed operations and "sends" them to their recording."""

    def __init__(
        self,
        sink: IngressSink,
        exchanges: Iterable[LegacyExchange],
        *,
        recorder_id: str = RECORDER_ID,
        settle_timeout_s: float = 60.0,
    ) -> None:
        self.provider = RecordedProvider(exchanges)
        self.taken: set[OperationKey] = set()
        self.verdicts: dict[OperationKey, Verdict] = {}
        config = WorkerConfig(
            worker_id=recorder_id, max_attempts=1, max_resumes=0, settle_timeout_s=settle_timeout_s
        )
        self._http = httpx.AsyncClient(transport=self.provider)
        self.worker = DispatchWorker(
            sink,
            endpoints_for(RECORDED_BASE_URL),
            config=config,
            http=self._http,
            takes=self._takes,
            on_verdict=self.verdicts.__setitem__,
        )

    def _takes(self, manifest: DispatchManifest) -> bool:
        key = key_of(manifest)
        if key not in self.provider.exchanges:
            return False
        self.taken.add(key)
        return True

    async def __aenter__(self) -> LegacyRecorder:
        await self.worker.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.close()
        await self._http.aclose()

    async def observe(self, records: Sequence[Observed]) -> None:
        await self.worker.observe(records)

    async def go_live(self) -> None:
        await self.worker.go_live()

    @property
    def busy(self) -> int:
        """Exchanges still being recorded: running, or given up while their cancel has not come back
        from the ledger yet (so that results never report the state from before the give-up)."""
        return self.worker.busy + sum(1 for key in self.taken if self._awaiting_cancel(key))

    def _awaiting_cancel(self, key: OperationKey) -> bool:
        latest = self.worker.board.latest.get(key)
        return self.verdicts.get(key) is Verdict.GIVE_UP and (latest is None or latest.state not in FINAL)

    def results(self) -> list[RecordResult]:
        return [self._result(key) for key in self.provider.exchanges]

    def _result(self, key: OperationKey) -> RecordResult:
        latest = self.worker.board.latest.get(key)
        state = latest.state.value if latest is not None else None
        detail = latest.detail if latest is not None else ""
        outcome = _outcome(key in self.taken, self.verdicts.get(key), latest)
        return RecordResult(key[0], key[1], outcome, state, detail)


VERDICT_OUTCOMES: Mapping[Verdict, RecordOutcome] = {
    Verdict.COMMITTED: RecordOutcome.COMMITTED,
    Verdict.CANCELLED: RecordOutcome.GAVE_UP,
    Verdict.GIVE_UP: RecordOutcome.GAVE_UP,
    Verdict.RETRY: RecordOutcome.GAVE_UP,
    Verdict.LOST_CAS: RecordOutcome.LOST_CAS,
    Verdict.LOST_LEASE: RecordOutcome.LOST_LEASE,
}


def _outcome(taken: bool, verdict: Verdict | None, latest: DispatchDecision | None) -> RecordOutcome:
    if latest is None:
        return RecordOutcome.NOT_FOUND
    if not taken:
        return RecordOutcome.ALREADY_FINAL if latest.state in FINAL else RecordOutcome.NOT_PREPARED
    return RecordOutcome.UNSETTLED if verdict is None else VERDICT_OUTCOMES[verdict]


async def record_legacy(
    bootstrap: str,
    exchanges: list[LegacyExchange],
    *,
    prefix: str = "",
    recorder_id: str = RECORDER_ID,
    timeout_s: float = 120.0,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[RecordResult]:
    """Read the manifests topic up to its end, record every listed exchange, wait for the verdicts."""
    stop, caught_up = asyncio.Event(), asyncio.Event()
    async with (
        GatewayClient(bootstrap, topic=Topics(prefix).ingress, client_id=recorder_id) as client,
        LegacyRecorder(client, exchanges, recorder_id=recorder_id, settle_timeout_s=timeout_s) as recorder,
    ):

        async def on_batch(records: list[Frozen]) -> None:
            await recorder.observe([r for r in records if isinstance(r, ManifestIssued | DispatchDecision)])

        async def on_caught_up() -> None:
            await recorder.go_live()
            caught_up.set()

        refusals = RefusalFeed(
            recorder.worker.board,
            recorder.observe,
            bootstrap,
            Topics(prefix).rejections,
            stop=stop,
            outage=NO_WAIT,
            client_id=f"{recorder_id}-rejections",
        )
        async with refusals.following():
            tail = asyncio.create_task(
                tail_topic(
                    bootstrap,
                    Topics(prefix).manifests,
                    on_batch,
                    stop=stop,
                    on_caught_up=on_caught_up,
                    client_id=recorder_id,
                )
            )
            try:
                await _until_done(recorder, tail, caught_up, timeout_s, on_progress)
            finally:
                stop.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await tail
        return recorder.results()


async def _until_done(
    recorder: LegacyRecorder,
    tail: asyncio.Task[None],
    caught_up: asyncio.Event,
    timeout_s: float,
    on_progress: Callable[[int, int], None] | None,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    total = len(recorder.provider.exchanges)
    while loop.time() < deadline:
        if tail.done():
            tail.result()  # raises what stopped the reader (e.g. KafkaUnavailableError)
            return
        if caught_up.is_set():
            if on_progress is not None:
                on_progress(total - recorder.busy, total)
            if not recorder.busy:
                return
        await asyncio.sleep(0.05)
