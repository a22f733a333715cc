"""The legacy recorder's parts on their own: the exchanges file's exact refusals, the recorded provider's
answers, what each verdict reports, when the recorder counts as busy, and the wait for the verdicts.

`test_rollout.py` runs the recorder end to end against the real fold; these tests pin the rules it
could not tell apart. No Kafka: the recorder's board is fed decisions directly (before `go_live`, so
nothing is sent), the provider is called through httpx, `_until_done` gets a fake recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tests.unit.gateway.ledger import InMemoryLedger
from tests.unit.gateway.test_rollout import _harness as _rollout_harness
from tests.unit.gateway.test_rollout import _legacy_send, _manifest
from turnledger.errors import KafkaUnavailableError
from turnledger.gateway import legacy
from turnledger.gateway.legacy import (
    RECORDER_ID,
    LegacyExchange,
    LegacyExchangeError,
    LegacyRecorder,
    RecordedProvider,
    RecordOutcome,
    RecordResult,
    _until_done,
    parse_exchanges,
    read_exchanges,
)
from turnledger.gateway.rollout import RolloutStage
from turnledger.gateway.stream_read import OPERATION_EXTENSION
from turnledger.gateway.verdicts import Verdict
from turnledger.model.events import DispatchAttempt, DispatchDecision, DispatchState, IngressEvent, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.retry import NO_WAIT
from turnledger.topology import Stream

S = DispatchState
OUT = RecordOutcome


class Sink:
    async def append(self, event: IngressEvent) -> None:
        raise AssertionError(f"nothing may be appended here: {event}")


def decision(conversation: str, op: str, state: DispatchState, detail: str = "") -> DispatchDecision:
    return DispatchDecision(
        conversation_id=conversation, operation_id=op, state=state, conversation_revision=1,
        cancel_generation=0, source_event_id=f"{conversation}-{op}-{state.value}", occurred_at_ms=1,
        detail=detail,
    )  # fmt: skip


def exchange(
    conversation: str, op: str = "op-1", body: bytes = b"data: {}\n\n", status: int = 200
) -> LegacyExchange:
    return LegacyExchange(conversation, op, body, status)


@pytest.fixture
async def recorder() -> AsyncIterator[LegacyRecorder]:
    exchanges = [exchange(c) for c in ("done", "waiting", "taken", "gone")]
    async with LegacyRecorder(Sink(), exchanges, recorder_id="rec-7", settle_timeout_s=3.5) as r:
        yield r


# -- the exchanges file --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON (unexpected character, expected a string key: line 1 column 2 (char 1))"),
        ('"a string"', "not a JSON object"),
        ('{"operationId": "o"}', "missing or empty string field(s): conversationId, response"),
        ('{"conversationId": "c", "operationId": "", "response": "x"}',
         "missing or empty string field(s): operationId"),
        ('{"conversationId": "c", "operationId": "o", "response": "x", "status": 600}',
         "status must be an HTTP status code, got 600"),
        ('{"conversationId": "c", "operationId": "o", "response": "x", "status": "200"}',
         "status must be an HTTP status code, got '200'"),
        ('{"conversationId": "c", "operationId": "o", "response": "x", "status": null}',
         "status must be an HTTP status code, got None"),
    ],
)  # fmt: skip
def test_a_bad_line_is_refused_with_its_exact_reason(line: str, reason: str) -> None:
    """The refusal names the source, the line number (blank lines counted) and exactly what is wrong."""
    with pytest.raises(LegacyExchangeError) as info:
        parse_exchanges(["", line], "x.jsonl")
    assert (info.value.source, info.value.line, info.value.reason) == ("x.jsonl", 2, reason)
    assert str(info.value) == f"x.jsonl:2: {reason}"


def test_the_status_bounds_and_the_response_bytes() -> None:
    """100 and 599 are statuses; the response is kept as its UTF-8 bytes; the default source is named."""
    lines = [
        '{"conversationId": "c1", "operationId": "o", "response": "data: é\\n\\n", "status": 100}',
        "  ",
        '{"conversationId": "c2", "operationId": "o", "response": "x", "status": 599}',
    ]
    assert parse_exchanges(lines) == [
        LegacyExchange("c1", "o", b"data: \xc3\xa9\n\n", 100),
        LegacyExchange("c2", "o", b"x", 599),
    ]
    with pytest.raises(LegacyExchangeError) as info:
        parse_exchanges(['{"conversationId": "c", "operationId": "o", "response": "x", "status": 99}'])
    assert str(info.value) == "<exchanges>:1: status must be an HTTP status code, got 99"


def test_the_same_operation_in_another_conversation_is_another_exchange() -> None:
    """An operation is named by conversation and operation id: only both together are a repeat."""
    lines = [
        '{"conversationId": "c1", "operationId": "o", "response": "a"}',
        '{"conversationId": "c2", "operationId": "o", "response": "b"}',
        '{"conversationId": "c1", "operationId": "p", "response": "c"}',
    ]
    assert [e.key for e in parse_exchanges(lines)] == [("c1", "o"), ("c2", "o"), ("c1", "p")]


def test_read_exchanges_names_the_file_in_its_refusals(tmp_path: Path, ascii_locale: None) -> None:
    """A file is read as UTF-8 lines whatever the locale; a refusal names its path and line."""
    path = tmp_path / "legacy.jsonl"
    path.write_text('{"conversationId": "c", "operationId": "o", "response": "é"}\n\n[1]\n', encoding="utf-8")
    with pytest.raises(LegacyExchangeError) as info:
        read_exchanges(path)
    assert str(info.value) == f"{path}:3: not a JSON object"
    path.write_text('{"conversationId": "c", "operationId": "o", "response": "é"}\n', encoding="utf-8")
    assert read_exchanges(path) == [LegacyExchange("c", "o", "é".encode())]


# -- the recorded provider ------------------------------------------------------------------


async def test_the_provider_serves_each_recording_as_an_event_stream_and_nothing_else() -> None:
    """A POST for a listed operation gets its recorded status and bytes as text/event-stream and is
    noted as served; any other request is a 404 that serves nothing."""
    provider = RecordedProvider([exchange("c1", body=b"data: 1\n\n", status=529)])
    async with httpx.AsyncClient(transport=provider, base_url="http://legacy-recorded.invalid") as http:
        answer = await http.post("/v1/messages", extensions={OPERATION_EXTENSION: ("c1", "op-1")})
        assert (answer.status_code, answer.headers["content-type"], answer.content) == (
            529, "text/event-stream", b"data: 1\n\n",
        )  # fmt: skip
        refused = [
            await http.get("/v1/messages", extensions={OPERATION_EXTENSION: ("c1", "op-1")}),
            await http.post("/v1/messages", extensions={OPERATION_EXTENSION: ("c2", "op-1")}),
            await http.post("/v1/messages", extensions={OPERATION_EXTENSION: ["c1", "op-1"]}),
            await http.post("/v1/messages"),
        ]
    assert [(r.status_code, r.content) for r in refused] == [(404, b"no recorded legacy response")] * 4
    assert provider.served == [("c1", "op-1")]


async def test_the_providers_answers_name_the_request_they_answer() -> None:
    """Called as a transport (no client to fill it in), each response carries its request."""
    provider = RecordedProvider([exchange("c1")])
    served = httpx.Request("POST", "http://legacy-recorded.invalid/v1/messages")
    served.extensions[OPERATION_EXTENSION] = ("c1", "op-1")
    missing = httpx.Request("POST", "http://legacy-recorded.invalid/v1/messages")
    for request, status in ((served, 200), (missing, 404)):
        response = await provider.handle_async_request(request)
        assert (response.status_code, response.request) == (status, request)


# -- what the recorder reports --------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "state", "ok"),
    [
        (OUT.COMMITTED, "COMMITTED", True),
        (OUT.COMMITTED, None, True),
        (OUT.ALREADY_FINAL, "COMMITTED", True),
        (OUT.LOST_CAS, "COMMITTED", True),
        (OUT.ALREADY_FINAL, "CANCELLED", False),
        (OUT.LOST_CAS, "STREAMING", False),
        (OUT.GAVE_UP, "COMMITTED", False),
        (OUT.UNSETTLED, "COMMITTED", False),
        (OUT.NOT_PREPARED, "COMMITTED", False),
    ],
)
def test_ok_means_an_answer_is_in_the_history(outcome: RecordOutcome, state: str | None, ok: bool) -> None:
    """Ours, or one committed before us or by another sender; nothing else."""
    assert RecordResult("c", "o", outcome, state).ok is ok


async def test_results_report_each_exchange_by_what_the_recorder_saw(recorder: LegacyRecorder) -> None:
    """Never seen: not found; final before the recorder: already final; seen but not PREPARED (so not
    taken): not prepared; taken without a verdict: unsettled; with one, its outcome. Each result names
    the latest state and its detail."""
    await recorder.observe([
        decision("done", "op-1", S.COMMITTED, "ok"), decision("waiting", "op-1", S.WAITING, "tools"),
        decision("taken", "op-1", S.STREAMING),
    ])  # fmt: skip
    assert recorder._takes(_key_only("taken")) is True
    assert recorder._takes(_key_only("nobody")) is False
    assert recorder.taken == {("taken", "op-1")}
    assert [
        (r.conversation_id, r.operation_id, r.outcome, r.state, r.detail) for r in recorder.results()
    ] == [
        ("done", "op-1", OUT.ALREADY_FINAL, "COMMITTED", "ok"),
        ("waiting", "op-1", OUT.NOT_PREPARED, "WAITING", "tools"),
        ("taken", "op-1", OUT.UNSETTLED, "STREAMING", ""),
        ("gone", "op-1", OUT.NOT_FOUND, None, ""),
    ]
    for verdict, outcome in [
        (Verdict.COMMITTED, OUT.COMMITTED), (Verdict.CANCELLED, OUT.GAVE_UP), (Verdict.GIVE_UP, OUT.GAVE_UP),
        (Verdict.RETRY, OUT.GAVE_UP), (Verdict.LOST_CAS, OUT.LOST_CAS), (Verdict.LOST_LEASE, OUT.LOST_LEASE),
    ]:  # fmt: skip
        recorder.verdicts[("taken", "op-1")] = verdict
        assert recorder.results()[2].outcome is outcome, verdict


async def test_a_lost_lease_is_reported_and_ok_once_the_operation_committed(recorder: LegacyRecorder) -> None:
    """The worker ends a phase as LOST_LEASE when another worker holds the attempt: the recorder reports
    it (results used to raise KeyError on it, losing every line of the report) and, as for a lost CAS,
    counts it as ok only when the operation committed."""
    recorder.taken.add(("taken", "op-1"))
    recorder.verdicts[("taken", "op-1")] = Verdict.LOST_LEASE
    await recorder.observe([decision("taken", "op-1", S.UNKNOWN)])
    [result] = [r for r in recorder.results() if r.conversation_id == "taken"]
    assert (result.outcome, result.outcome.value, result.ok) == (OUT.LOST_LEASE, "lost-lease", False)
    await recorder.observe([decision("taken", "op-1", S.COMMITTED)])
    [result] = [r for r in recorder.results() if r.conversation_id == "taken"]
    assert (result.outcome, result.state, result.ok) == (OUT.LOST_LEASE, "COMMITTED", True)


async def test_a_give_up_keeps_the_recorder_busy_until_its_cancel_is_seen(recorder: LegacyRecorder) -> None:
    """An exchange given up is busy until the ledger shows a final state for it; other verdicts, and
    operations not taken, never are."""
    assert recorder.busy == 0
    recorder.taken.update({("taken", "op-1"), ("waiting", "op-1")})
    recorder.verdicts[("taken", "op-1")] = Verdict.GIVE_UP
    recorder.verdicts[("waiting", "op-1")] = Verdict.RETRY
    recorder.verdicts[("done", "op-1")] = Verdict.GIVE_UP  # not taken
    assert recorder.busy == 1
    await recorder.observe([decision("taken", "op-1", S.STREAMING), decision("waiting", "op-1", S.UNKNOWN)])
    assert recorder.busy == 1
    await recorder.observe([decision("taken", "op-1", S.CANCELLED)])
    assert recorder.busy == 0


async def test_the_recorder_is_a_worker_of_its_own_id_with_one_attempt_and_no_resume(
    recorder: LegacyRecorder,
) -> None:
    """Replaying the same bytes again cannot complete them: one attempt, no resume, its id as sender."""
    config = recorder.worker.config
    assert (config.worker_id, config.max_attempts, config.max_resumes, config.settle_timeout_s) == (
        "rec-7", 1, 0, 3.5,
    )  # fmt: skip
    async with LegacyRecorder(Sink(), []) as default:
        assert (default.worker.config.worker_id, default.worker.config.settle_timeout_s) == (
            RECORDER_ID,
            60.0,
        )
        assert default.results() == []


def _key_only(conversation: str) -> Any:
    return SimpleNamespace(conversation_id=conversation, operation_id="op-1")


# -- the wait for the verdicts --------------------------------------------------------------


class FakeRecorder:
    """What `_until_done` reads of a recorder: its exchanges and how many are busy."""

    def __init__(self, busy: int, total: int) -> None:
        self.provider = SimpleNamespace(exchanges=dict.fromkeys(range(total)))
        self.busy = busy


async def test_until_done_reports_progress_once_caught_up_and_returns_when_nothing_is_busy() -> None:
    """Before the tail caught up nothing is reported; then (done, total) each round until none is busy
    (here each report finishes one exchange)."""
    progress: list[tuple[int, int]] = []
    caught_up = asyncio.Event()
    tail = asyncio.create_task(asyncio.Event().wait())
    recorder = FakeRecorder(2, total=3)

    def report(done: int, total: int) -> None:
        progress.append((done, total))
        recorder.busy -= 1

    asyncio.get_running_loop().call_soon(caught_up.set)
    try:
        await _until_done(recorder, tail, caught_up, 3.0, report)  # type: ignore[arg-type]
    finally:
        tail.cancel()
    assert progress == [(1, 3), (2, 3)]


async def test_until_done_raises_what_stopped_the_tail_and_returns_when_it_ended() -> None:
    """A tail that failed raises its error; one that ended returns at once, busy or not."""

    async def fail() -> None:
        raise ConnectionError("kafka went away")

    for body, raised in ((fail(), True), (asyncio.sleep(0), False)):
        tail: asyncio.Task[None] = asyncio.create_task(body)  # type: ignore[arg-type]
        await asyncio.wait([tail])
        if raised:
            with pytest.raises(ConnectionError, match="kafka went away"):
                await _until_done(FakeRecorder(1, 1), tail, asyncio.Event(), 30.0, None)  # type: ignore[arg-type]
        else:
            await _until_done(FakeRecorder(1, 1), tail, asyncio.Event(), 30.0, None)  # type: ignore[arg-type]


async def test_until_done_polls_every_50_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two looks at the tail and the recorder it waits 50 ms (recorded, not waited here)."""
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        delays.append(delay)
        await real_sleep(0)

    tail = asyncio.create_task(asyncio.Event().wait())
    monkeypatch.setattr(legacy.asyncio, "sleep", sleep)
    try:
        await _until_done(FakeRecorder(1, 1), tail, asyncio.Event(), 0.05, None)  # type: ignore[arg-type]
    finally:
        monkeypatch.undo()
        tail.cancel()
    assert delays and set(delays) == {0.05}


async def test_until_done_gives_up_at_its_deadline_while_still_busy() -> None:
    """Still busy at the deadline: it returns (the results say what is unsettled), without progress
    reported while the tail has not caught up."""
    tail = asyncio.create_task(asyncio.Event().wait())
    loop = asyncio.get_running_loop()
    started = loop.time()
    progress: list[tuple[int, int]] = []
    try:
        await _until_done(
            FakeRecorder(1, 2), tail, asyncio.Event(), 0.2, lambda d, t: progress.append((d, t))
        )  # type: ignore[arg-type]
    finally:
        tail.cancel()
    assert 0.2 <= loop.time() - started < 5.0
    assert progress == []


# -- record_legacy over fakes of its Kafka parts -------------------------------------------


class Kafka:
    """Fakes of what `record_legacy` reads and writes through Kafka, over one in-memory ledger: the
    producer client, the manifests tail and the refusal feed. Each records how it was made."""

    def __init__(self, ledger: InMemoryLedger, tail_error: Exception | None = None) -> None:
        self.ledger, self.tail_error = ledger, tail_error
        self.made: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.stop: asyncio.Event | None = None
        self.deliver: Any = None
        self.recorders: list[LegacyRecorder] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(legacy, "GatewayClient", self.client)
        monkeypatch.setattr(legacy, "tail_topic", self.tail)
        monkeypatch.setattr(legacy, "RefusalFeed", self.refusals)
        recorders = self.recorders

        class Recorder(LegacyRecorder):
            def __init__(self, *args: Any, **kw: Any) -> None:
                super().__init__(*args, **kw)
                recorders.append(self)

        monkeypatch.setattr(legacy, "LegacyRecorder", Recorder)

    @contextlib.asynccontextmanager
    async def client(self, *args: Any, **kw: Any) -> AsyncIterator[InMemoryLedger]:
        self.made.append(("client", args, kw))
        yield self.ledger

    async def tail(self, *args: Any, stop: asyncio.Event, on_caught_up: Any, **kw: Any) -> None:
        bootstrap, topic, on_batch = args
        self.made.append(("tail", (bootstrap, topic), kw))
        self.stop = stop
        if self.tail_error is not None:
            raise self.tail_error
        await on_batch([*self.ledger.records(Stream.MANIFESTS), Rejected(reason=ReasonCode.DUPLICATE_TURN)])
        self.ledger.subscribe(Stream.MANIFESTS, on_batch)
        await on_caught_up()
        await stop.wait()

    def refusals(self, board: Any, deliver: Any, *args: Any, **kw: Any) -> Any:
        self.made.append(("refusals", (type(board).__name__, *args), kw))
        self.deliver = deliver

        @contextlib.asynccontextmanager
        async def following() -> AsyncIterator[bool]:
            self.ledger.subscribe(Stream.REJECTIONS, deliver)
            yield True

        return SimpleNamespace(following=following)


async def test_record_legacy_follows_its_prefixes_topics_and_commits_the_recorded_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The recorder appends to the prefix's ingress, tails its manifests and follows its rejections
    under its own client ids, reports progress, stops its readers and returns one result per exchange."""
    progress: list[tuple[int, int]] = []

    def report(done: int, total: int) -> None:
        progress.append((done, total))

    async for h in _rollout_harness(RolloutStage.MANIFESTS_ONLY):
        await h.converse("c1", "anthropic-messages@1", tools=True)
        await h.wait_state("op-1", S.PREPARED)
        answer = await _legacy_send(h, _manifest("c1", h))
        kafka = Kafka(h.ledger)
        kafka.install(monkeypatch)
        results = await legacy.record_legacy(
            "k:9092", [LegacyExchange("c1", "op-1", answer)], prefix="t7.", recorder_id="rec-3",
            timeout_s=10.0, on_progress=report,
        )  # fmt: skip
        assert [(r.conversation_id, r.operation_id, r.outcome, r.state) for r in results] == [
            ("c1", "op-1", OUT.COMMITTED, "COMMITTED")
        ]
        assert kafka.made == [
            ("client", ("k:9092",), {"topic": "t7.turnledger.ingress", "client_id": "rec-3"}),
            ("refusals", ("DecisionBoard", "k:9092", "t7.turnledger.rejections"),
             {"stop": kafka.stop, "outage": NO_WAIT, "client_id": "rec-3-rejections"}),
            ("tail", ("k:9092", "t7.turnledger.manifests"), {"client_id": "rec-3"}),
        ]  # fmt: skip
        assert kafka.stop is not None and kafka.stop.is_set()
        [recorder] = kafka.recorders
        assert (kafka.deliver, recorder.worker.config.settle_timeout_s) == (recorder.observe, 10.0)
        assert progress[-1] == (1, 1) and set(progress) <= {(0, 1), (1, 1)}
        attempts = [e for e in h.ledger.ingress if isinstance(e, DispatchAttempt)]
        assert [(a.worker_id, a.operation_id) for a in attempts] == [("rec-3", "op-1")]


async def test_record_legacy_raises_what_stopped_its_manifests_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka gone while the manifests are read: the error reaches the caller (the CLI's exit 2). The
    default prefix and recorder id name the topics and clients."""
    kafka = Kafka(InMemoryLedger(), tail_error=KafkaUnavailableError("no broker at k:9092"))
    kafka.install(monkeypatch)
    with pytest.raises(KafkaUnavailableError, match="no broker at k:9092"):
        await legacy.record_legacy("k:9092", [exchange("c1")])
    [recorder] = kafka.recorders
    assert recorder.worker.config.settle_timeout_s == 120.0  # the default wait, for every verdict too
    assert [(what, kw.get("client_id")) for what, _, kw in kafka.made] == [
        ("client", RECORDER_ID), ("refusals", f"{RECORDER_ID}-rejections"), ("tail", RECORDER_ID),
    ]  # fmt: skip
    assert [args[1:] for what, args, _ in kafka.made if what != "client"] == [
        ("k:9092", "turnledger.rejections"), ("turnledger.manifests",),
    ]  # fmt: skip


def test_every_verdict_of_the_worker_has_a_recorded_outcome() -> None:
    """A verdict the worker can end a phase with and the table lacks lost the whole report to a
    KeyError (LOST_LEASE did, until session 35): the table covers every verdict."""
    assert set(legacy.VERDICT_OUTCOMES) == set(Verdict)
