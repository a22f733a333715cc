"""One demo run: topics, processor and projector (own processes), fake provider, two workers, tool executor,
driver; then the invariants against the topics, the Redis projections and a replay audit.

One of the two workers is killed a third of the way through (no goodbye: its tasks are cancelled
where they stand); the other takes its operations over once their leases expire. Some
conversations cancel mid-stream, some interject (the user speaks while the model streams), some move
between APIs. The fake provider's Gemini is Gemini 3 (`gemini_strict_signatures`).

The worker, the tool executor, the fake provider and the driver run in this process's
event loop; the processor and the projector run as subprocesses (`turnledger project`),
so a 2-core machine uses both cores. Every run has its own topic prefix and Redis key
prefix, so runs never see each other's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from turnledger.demo.checks import Check, all_checks, check_audit, check_projections
from turnledger.demo.driver import (
    OBSERVED_STREAMS,
    SLOW_MARKER,
    Driver,
    DriverStats,
    fault_marker,
    plain_conversations,
    throttled,
    throttled_marker,
)
from turnledger.dispatch.state import FINAL_STATES
from turnledger.fake_provider import FakeProvider, Fault, FaultKind, FaultPlan, ReceivedRequest
from turnledger.fake_provider.server import target_of
from turnledger.gateway.client import GatewayClient
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_tool_executor, run_worker
from turnledger.gateway.tool_executor import ToolExecutor
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.kafka.connection import kafka_options
from turnledger.kafka.reading import wait_for_partitions
from turnledger.kafka.tail import tail_topic
from turnledger.model.events import DispatchDecision, DispatchRequested
from turnledger.replay.evidence import Evidence, read_all
from turnledger.replay.metrics import Metrics, compute
from turnledger.topology import Topics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoOptions:
    conversations: int = 300
    turns: int = 2
    fault_rate: float = 0.04
    invalid_rate: float = 0.08
    #: share of conversations that cancel their first dispatch mid-stream
    cancel_rate: float = 0.05
    #: share of conversations whose user speaks again while the model streams its first answer
    interject_rate: float = 0.05
    #: share of conversations whose first provider request is refused with a 429 naming `throttle_ms`
    throttle_rate: float = 0.03
    throttle_ms: int = 1000
    #: share of conversations that move between APIs, asking each to think where it can (demo/moving.py)
    move_rate: float = 0.1
    #: kill one of the two workers once this share of the conversations is done (None: never)
    crash_worker_at: float | None = 1 / 3
    lease_s: float = 3.0
    #: per-event delay (ms) of the answer to the user turn that asks for it (`SLOW_MARKER`), which is what
    #: the cancelling and interjecting conversations act on: their first dispatch, which the fake model
    #: answers with tool calls (7-13 events, no preview, so the driver waits out PREVIEW_WAIT_S, 1 s, after
    #: STREAMING): 300 ms streams those for 2.1-4 s (or, for one cancel in two, `driver.cancels_text`, with
    #: text of 16-24 words in deltas of 1-3, which the driver cancels just after its first preview).
    #: At 40 ms a fast processor committed every such answer
    #: first (a CI run with no cancel at all, test_gateway_e2e); at 150 ms a 7-event answer ended about
    #: when the driver's wait did. Only requests whose last turn is that user text are slow
    #: (`FaultPlan.by_last_user_marker`): with every request carrying the marker in its history slowed,
    #: an operation that also met a fault and the worker's crash took 38 s to settle at 400 ms
    slow_ms: int = 300
    seed: int = 7
    partitions: int = 4
    concurrency: int = 48
    timeout_s: float = 200.0
    op_timeout_s: float = 60.0
    prefix: str = ""
    #: one scripted fault of each kind on the first requests (besides the random ones); the faults that
    #: need a particular answer by a chosen conversation's marker (`MARKED_FAULTS`)
    every_fault_kind: bool = False
    #: run `turnledger serve` (the web page) on this run's projection while the demo runs
    serve: bool = True


@dataclass
class DemoResult:
    options: DemoOptions
    prefix: str
    seconds: float
    driver: DriverStats
    worker_counts: dict[str, int]
    faults: dict[str, int]
    requests: int
    checks: list[Check]
    metrics: Metrics
    key_prefix: str = ""
    audit_seconds: float = 0.0
    tool_calls_run: int = 0
    evidence: Evidence = field(default_factory=Evidence)
    worker_crashed_after: int | None = None
    """Conversations done when the worker was killed."""
    settle: SettleTimes = field(default_factory=lambda: SettleTimes(0, 0, 0.0, ""))
    requests_by_api: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


Progress = Callable[[int, int], None]


async def run_demo(
    bootstrap: str,
    redis_url: str,
    options: DemoOptions,
    progress: Progress | None = None,
    announce: Callable[[str], None] | None = None,
) -> DemoResult:
    """`announce` is told the web page's URL once `turnledger serve` answers (with `options.serve`)."""
    from turnledger.processors.topics import ensure_topics
    from turnledger.projections.keys import ProjectionKeys
    from turnledger.projections.projector import Projector
    from turnledger.projections.reader import ProjectionReader
    from turnledger.redisconn.client import redis_client
    from turnledger.replay.audit import audit
    from turnledger.topology import Topics

    prefix = options.prefix or f"demo-{uuid.uuid4().hex[:8]}-"
    key_prefix = f"tl:{prefix}"
    topics = Topics(prefix=prefix)
    await ensure_topics(bootstrap, topics, options.partitions)
    started_at = time.monotonic()
    logs = Path(tempfile.mkdtemp(prefix="turnledger-demo-"))
    processor = _start_processor(bootstrap, prefix)
    projector = _start_projector(bootstrap, redis_url, prefix, key_prefix, logs / "projector.log")
    server = (
        _start_serve(bootstrap, redis_url, prefix, key_prefix, logs / "serve.log") if options.serve else None
    )
    if server is not None and announce is not None:
        if await _answers(server, timeout_s=90):  # it starts beside three others on 2 cores
            announce(f"web page (while the demo runs): {server.url}")
        else:
            announce(f"turnledger serve did not answer at {server.url}; its log: {logs / 'serve.log'}")
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        plan = _fault_plan(options)
        # Gemini as Gemini 3: a call of another API's answer sent without a signature is refused
        async with FakeProvider(seed=options.seed, fault_plan=plan, gemini_strict_signatures=True) as fp:
            workers: list[DispatchWorker] = []
            executors: list[ToolExecutor] = []
            ready = [asyncio.Event(), asyncio.Event()]
            worker_tasks = [
                asyncio.create_task(
                    run_worker(
                        bootstrap,
                        endpoints_for(fp.base_url, fp.keys.as_env(), keeps_idempotency_keys=True),
                        stop=stop,
                        prefix=prefix,
                        config=WorkerConfig(worker_id=f"demo-worker-{name}", lease_s=options.lease_s),
                        journal_dir=logs / "journal",
                        started=started,
                        worker_box=workers,
                    ),
                    name=f"demo-worker-{name}",
                )
                for name, started in zip("ab", ready, strict=True)
            ]
            tasks.extend(worker_tasks)
            tasks.append(
                asyncio.create_task(
                    run_tool_executor(bootstrap, stop=stop, prefix=prefix, executor_box=executors)
                )
            )
            async with GatewayClient(bootstrap, topic=Topics(prefix).ingress) as client:
                driver = Driver(
                    client,
                    seed=options.seed,
                    turns=options.turns,
                    invalid_rate=options.invalid_rate,
                    cancel_rate=options.cancel_rate,
                    interject_rate=options.interject_rate,
                    throttle_rate=options.throttle_rate,
                    move_rate=options.move_rate,
                    markers={i: fault_marker(m.kind.value, i) for i, m in _marked(options).items()},
                    op_timeout_s=options.op_timeout_s,
                )
                for stream in OBSERVED_STREAMS:
                    tasks.append(
                        asyncio.create_task(
                            tail_topic(bootstrap, Topics(prefix).name(stream), driver.observe, stop=stop)
                        )
                    )
                for started in ready:
                    await _wait_or_fail(started, tasks, 60)
                crash = _WorkerCrash(worker_tasks[0], options)
                await _drive(driver, options, crash.progress(progress))
                await _quiesce(workers, driver)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            requests = list(fp.requests)
            faults: dict[str, int] = {}
            for record in fp.fault_log:
                faults[record.fault.kind.value] = faults.get(record.fault.kind.value, 0) + 1
            await _processor_caught_up(bootstrap, prefix)
    finally:
        stop.set()
        _stop_process(processor)
        _stop_process(projector)
        if server is not None:
            _stop_process(server.proc)
    seconds = time.monotonic() - started_at
    redis = redis_client(redis_url)
    try:
        # the live projector was stopped wherever it was; the rest is applied exactly once here
        await Projector(redis, bootstrap, topics, ProjectionKeys.of(key_prefix, redis)).run_to_end()
        evidence = await read_all(bootstrap, prefix)
        checks = all_checks(evidence, requests, moving=driver.stats.moving)
        checks += await check_projections(evidence, await ProjectionReader.open(redis, key_prefix))
    finally:
        await redis.aclose()
    report = await audit(bootstrap, topics)
    checks.append(check_audit(report))
    metrics = compute(evidence, now_ms=int(time.time() * 1000), partial_tool_dispatches=checks[1].violations)
    return DemoResult(
        options=options,
        prefix=prefix,
        seconds=seconds,
        driver=driver.stats,
        worker_counts=dict(sum((Counter(w.stats.counts) for w in workers), Counter())),
        faults=faults,
        requests=len(requests),
        requests_by_api=_by_api(requests),
        checks=checks,
        metrics=metrics,
        key_prefix=key_prefix,
        audit_seconds=report.seconds,
        tool_calls_run=executors[0].calls_run if executors else 0,
        evidence=evidence,
        worker_crashed_after=crash.after,
        settle=settle_times(evidence),
    )


@dataclass(frozen=True)
class SettleTimes:
    """How long operations took from their DispatchRequested to their first final decision."""

    operations: int
    not_final: int
    longest_s: float
    longest: str  # conversation/operation


def settle_times(evidence: Evidence) -> SettleTimes:
    requested = {
        (e.conversation_id, e.operation_id): e.occurred_at_ms
        for e in evidence.of("ingress", DispatchRequested)
    }
    final_at: dict[tuple[str, str], int] = {}
    for d in evidence.of("manifests", DispatchDecision):
        key = (d.conversation_id, d.operation_id)
        if d.state in FINAL_STATES and key not in final_at:
            final_at[key] = d.occurred_at_ms
    waits = {key: (final_at[key] - at) / 1000 for key, at in requested.items() if key in final_at}
    longest = max(waits, key=waits.__getitem__, default=None)
    return SettleTimes(
        operations=len(requested),
        not_final=len(requested) - len(waits),
        longest_s=waits[longest] if longest else 0.0,
        longest="/".join(longest) if longest else "",
    )


class _WorkerCrash:
    """Kills the first worker (its task cancelled where it stands: nothing more is appended for its
    attempts) once the given share of the conversations is done."""

    def __init__(self, task: asyncio.Task[None], options: DemoOptions) -> None:
        self.task = task
        self.at = (
            None if options.crash_worker_at is None else int(options.conversations * options.crash_worker_at)
        )
        self.after: int | None = None

    def progress(self, inner: Progress | None) -> Progress:
        def report(done: int, total: int) -> None:
            if self.at is not None and self.after is None and done >= self.at:
                self.after = done
                self.task.cancel()
            if inner is not None:
                inner(done, total)

        return report


def _by_api(requests: list[ReceivedRequest]) -> dict[str, int]:
    """How many requests each API received (a resume GET counts for OpenAI Responses)."""
    counts: Counter[str] = Counter()
    for r in requests:
        target = target_of(r.path, {})
        counts[target.api.name if target is not None else "openai-responses"] += 1
    return dict(counts)


@dataclass(frozen=True)
class MarkedFault:
    """A fault the every-fault-kind run gives one chosen conversation's first answer, by the marker in its
    first question (`driver.fault_marker`), not by request number: by number it fell on whatever request
    arrived n-th, which could be a tool round's reply (a text answer: no call to cut), a throttled
    request (refused before anything is generated), a resume (no content fault) or the answer of
    thinking alone (no call left), and then was not applied at all."""

    kind: FaultKind
    every_attempt: bool
    """Scripted for every attempt at the question (`by_last_user_marker`), or for its first request only
    (`first_with_marker`: the retry is left alone)."""


MARKED_FAULTS = (
    MarkedFault(FaultKind.MAX_TOKENS_IN_CALL, every_attempt=False),
    # an answer of thinking alone ends its operation with no turn, which the driver expects of this one
    # conversation: every attempt, so that a drawn delivery fault on the first does not lose it
    MarkedFault(FaultKind.THINKING_ONLY, every_attempt=True),
    MarkedFault(FaultKind.TRUNCATED_ARGS, every_attempt=False),
    # refused before anything is generated: by request number, a refusal could fall on a marked
    # conversation's first request and take the content fault it was to carry with it
    MarkedFault(FaultKind.RATE_LIMITED, every_attempt=False),
    MarkedFault(FaultKind.HTTP_STATUS, every_attempt=False),
)
BY_MARKER_ONLY = frozenset(m.kind for m in MARKED_FAULTS)


def _marked(options: DemoOptions) -> dict[int, MarkedFault]:
    """With every fault kind: the conversations given a marked fault, each one that neither cancels,
    interjects nor is throttled (`driver.plain_conversations`), in `MARKED_FAULTS`' order."""
    if not options.every_fault_kind:
        return {}
    plain = plain_conversations(
        options.seed,
        options.conversations,
        cancel_rate=options.cancel_rate,
        interject_rate=options.interject_rate,
        throttle_rate=options.throttle_rate,
    )
    if len(plain) < len(MARKED_FAULTS):
        raise ValueError(
            f"every fault kind needs {len(MARKED_FAULTS)} conversations that neither cancel, interject nor "
            f"meet a 429 (one a marked fault), this run has {len(plain)}: more conversations or lower rates"
        )
    return dict(zip(plain, MARKED_FAULTS, strict=False))


def _fault_plan(options: DemoOptions) -> FaultPlan:
    rates = FaultPlan.uniform(options.fault_rate).rates if options.fault_rate > 0 else {}
    scripted = (
        {i: (Fault(kind),) for i, kind in enumerate(FaultKind) if kind not in BY_MARKER_ONLY}
        if options.every_fault_kind
        else {}
    )
    by_last_user: dict[str, tuple[Fault, ...]] = (
        {SLOW_MARKER: (Fault(FaultKind.SLOW, options.slow_ms),)}
        if options.cancel_rate or options.interject_rate
        else {}
    )
    throttle = Fault(FaultKind.RATE_LIMITED, options.throttle_ms)
    first_requests: dict[str, tuple[Fault, ...]] = {
        throttled_marker(i): (throttle,)
        for i in range(options.conversations)
        if throttled(options.seed, i, options.throttle_rate)
    }
    for i, marked in _marked(options).items():
        scripted_for = by_last_user if marked.every_attempt else first_requests
        scripted_for[fault_marker(marked.kind.value, i)] = (Fault(marked.kind),)
    return FaultPlan(
        rates=rates,
        by_unmarked_request=scripted,
        by_last_user_marker=by_last_user,
        first_with_marker=first_requests,
    )


async def _drive(driver: Driver, options: DemoOptions, progress: Progress | None) -> None:
    """Every conversation, `concurrency` at a time. One still running at the deadline is counted as
    stalled (and the run goes on to its report) instead of failing the whole run."""
    slots = asyncio.Semaphore(options.concurrency)
    done = 0

    async def one(i: int) -> None:
        nonlocal done
        async with slots:
            await driver.conversation(i)
        done += 1
        if progress is not None:
            progress(done, options.conversations)

    tasks = [asyncio.create_task(one(i)) for i in range(options.conversations)]
    _, pending = await asyncio.wait(tasks, timeout=options.timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    driver.stats.stalled += len(pending)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def _quiesce(workers: list[DispatchWorker], driver: Driver, timeout_s: float = 60) -> None:
    """Let in-flight attempts (e.g. of a conversation that stalled) settle before reading the topics:
    until no worker is busy and every operation the manifests topic has decided on is final, at most
    `timeout_s` (what is still open then is what the checks report). An operation can be open with
    no worker busy: e.g. the next dispatch of a conversation whose cancelled attempt is not yet
    confirmed terminated (CONVERSATION_BUSY), which a worker takes again once it is; on a slow machine
    that took longer than the half second this waited before (a CI run's demo left one PREPARED)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (any(w.busy for w in workers) or driver.open_operations()):
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # the processor's last transaction


async def _processor_caught_up(bootstrap: str, prefix: str, timeout_s: float = 60) -> None:
    """Wait until the processor has committed every ingress offset (its offsets group is its app id)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import OffsetAndMetadata

    topic = Topics(prefix).ingress
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_options())
    await admin.start()
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        ends: dict[TopicPartition, int] = {}
        committed: dict[TopicPartition, OffsetAndMetadata] = {}
        while time.monotonic() < deadline:
            parts = await wait_for_partitions(consumer, bootstrap, topic)
            ends = await consumer.end_offsets(parts)
            committed = await admin.list_consumer_group_offsets(f"{prefix}turnledger")
            if parts and all(tp in committed and committed[tp].offset >= end for tp, end in ends.items()):
                return
            await asyncio.sleep(0.2)
        log.warning(
            "the processor of %s has not committed every ingress offset after %.0f s (ends %s, committed %s):"
            " what is read next may be partial",
            prefix, timeout_s, {tp.partition: e for tp, e in ends.items()},
            {tp.partition: o.offset for tp, o in committed.items()},
        )  # fmt: skip
    finally:
        await consumer.stop()
        await admin.close()


async def _wait_or_fail(event: asyncio.Event, tasks: list[asyncio.Task[None]], timeout_s: float) -> None:
    waiter = asyncio.create_task(event.wait())
    done, _ = await asyncio.wait([waiter, *tasks], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    if waiter not in done:
        waiter.cancel()
        for task in done:
            task.result()  # re-raise a service's failure (e.g. KafkaUnavailableError)
        raise TimeoutError(f"the worker did not catch up within {timeout_s}s")


def _start_processor(bootstrap: str, prefix: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    return subprocess.Popen(
        [sys.executable, "-m", "turnledger.demo.processor", bootstrap, prefix],
        env=env,
        start_new_session=True,
    )


def _start_projector(
    bootstrap: str, redis_url: str, prefix: str, key_prefix: str, log: Path
) -> subprocess.Popen[bytes]:
    """`turnledger project` on this run's topics and key prefix (its log goes to `log`)."""
    cmd = [
        sys.executable, "-m", "turnledger.cli", "project", "--bootstrap", bootstrap, "--redis-url", redis_url,
        "--topic-prefix", prefix, "--key-prefix", key_prefix,
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=out, start_new_session=True)


@dataclass(frozen=True)
class _Serve:
    proc: subprocess.Popen[bytes]
    url: str


def _start_serve(bootstrap: str, redis_url: str, prefix: str, key_prefix: str, log: Path) -> _Serve:
    """`turnledger serve` on a free loopback port, on this run's topics and projection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [
        sys.executable, "-m", "turnledger.cli", "serve", "--bootstrap", bootstrap, "--redis-url", redis_url,
        "--topic-prefix", prefix, "--key-prefix", key_prefix, "--port", str(port),
    ]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, start_new_session=True)
    return _Serve(proc, f"http://127.0.0.1:{port}/")


async def _answers(server: _Serve, timeout_s: float) -> bool:
    """Until the page's API answers, the process exits, or `timeout_s` passes."""
    import httpx

    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline and server.proc.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(server.url + "api/conversations")).status_code == 200:
                    return True
            await asyncio.sleep(0.2)
    return False


def _stop_processor(proc: subprocess.Popen[bytes]) -> None:
    _stop_process(proc)


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
