"""One demo run: topics, processor (own process), fake provider, worker, tool executor, driver.

Everything but the processor runs in this process's event loop; the processor runs
as a subprocess so a 2-core machine uses both cores. Every run has its own topic
prefix, so runs never see each other's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from turnledger.demo.checks import Check, all_checks
from turnledger.demo.collect import Evidence, read_all
from turnledger.demo.driver import Driver, DriverStats
from turnledger.demo.metrics import Metrics, compute
from turnledger.gateway.client import GatewayClient
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.fake_provider import FakeProvider, Fault, FaultKind, FaultPlan
from turnledger.gateway.runner import run_tool_executor, run_worker, topic_name
from turnledger.gateway.tail import tail_topic, topic_partitions
from turnledger.gateway.worker import DispatchWorker, WorkerConfig


@dataclass(frozen=True)
class DemoOptions:
    conversations: int = 300
    turns: int = 2
    fault_rate: float = 0.04
    invalid_rate: float = 0.08
    seed: int = 7
    partitions: int = 4
    concurrency: int = 48
    timeout_s: float = 200.0
    prefix: str = ""
    #: one scripted fault of each kind on the first requests (besides the random ones)
    every_fault_kind: bool = False


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
    tool_calls_run: int = 0
    evidence: Evidence = field(default_factory=Evidence)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


Progress = Callable[[int, int], None]


async def run_demo(bootstrap: str, options: DemoOptions, progress: Progress | None = None) -> DemoResult:
    from turnledger.processors.topics import Topics, ensure_topics

    prefix = options.prefix or f"demo-{uuid.uuid4().hex[:8]}-"
    await ensure_topics(bootstrap, Topics(prefix=prefix), options.partitions)
    started_at = time.monotonic()
    processor = _start_processor(bootstrap, prefix)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        plan = _fault_plan(options)
        async with FakeProvider(
            seed=options.seed, fault_plan=plan, assume_stream=True, retain_responses=True
        ) as fp:
            workers: list[DispatchWorker] = []
            executors: list = []  # type: ignore[type-arg]
            worker_ready = asyncio.Event()
            journal_dir = Path(tempfile.mkdtemp(prefix="turnledger-demo-journal-"))
            tasks.append(
                asyncio.create_task(
                    run_worker(
                        bootstrap,
                        endpoints_for(fp.base_url, retains_responses=True),
                        stop=stop,
                        prefix=prefix,
                        config=WorkerConfig(worker_id="demo-worker"),
                        journal_dir=journal_dir,
                        started=worker_ready,
                        worker_box=workers,
                    )
                )
            )
            tasks.append(
                asyncio.create_task(
                    run_tool_executor(bootstrap, stop=stop, prefix=prefix, executor_box=executors)
                )
            )
            async with GatewayClient(bootstrap, topic=topic_name(prefix, "ingress")) as client:
                driver = Driver(
                    client, seed=options.seed, turns=options.turns, invalid_rate=options.invalid_rate
                )
                for stream in ("committed", "manifests"):
                    tasks.append(
                        asyncio.create_task(
                            tail_topic(bootstrap, topic_name(prefix, stream), driver.observe, stop=stop)
                        )
                    )
                await _wait_or_fail(worker_ready, tasks, 60)
                await _drive(driver, options, progress)
                await _quiesce(workers, options)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            requests = list(fp.requests)
            faults: dict[str, int] = {}
            for record in fp.fault_log:
                faults[record.fault.kind.value] = faults.get(record.fault.kind.value, 0) + 1
            await _processor_caught_up(bootstrap, prefix)
    finally:
        stop.set()
        _stop_processor(processor)
    seconds = time.monotonic() - started_at
    evidence = await read_all(bootstrap, prefix)
    checks = all_checks(evidence, requests, prefix)
    metrics = compute(evidence, now_ms=int(time.time() * 1000), partial_tool_dispatches=checks[1].violations)
    return DemoResult(
        options=options,
        prefix=prefix,
        seconds=seconds,
        driver=driver.stats,
        worker_counts=dict(workers[0].stats.counts) if workers else {},
        faults=faults,
        requests=len(requests),
        checks=checks,
        metrics=metrics,
        tool_calls_run=executors[0].calls_run if executors else 0,
        evidence=evidence,
    )


def _fault_plan(options: DemoOptions) -> FaultPlan:
    rates = FaultPlan.uniform(options.fault_rate).rates if options.fault_rate > 0 else {}
    scripted = {i: (Fault(kind),) for i, kind in enumerate(FaultKind)} if options.every_fault_kind else {}
    return FaultPlan(rates=rates, by_request=scripted)


async def _drive(driver: Driver, options: DemoOptions, progress: Progress | None) -> None:
    slots = asyncio.Semaphore(options.concurrency)
    done = 0

    async def one(i: int) -> None:
        nonlocal done
        async with slots:
            await driver.conversation(i)
        done += 1
        if progress is not None:
            progress(done, options.conversations)

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(options.conversations))), options.timeout_s)


async def _quiesce(workers: list[DispatchWorker], options: DemoOptions) -> None:
    """Let in-flight attempts (e.g. of a conversation that stalled) settle before reading the topics."""
    deadline = time.monotonic() + 30
    while workers and workers[0].busy and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # the processor's last transaction


async def _processor_caught_up(bootstrap: str, prefix: str, timeout_s: float = 60) -> None:
    """Wait until the processor has committed every ingress offset (its offsets group is its app id)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    topic = topic_name(prefix, "ingress")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            parts = await topic_partitions(consumer, topic)
            ends = await consumer.end_offsets(parts)
            committed = await admin.list_consumer_group_offsets(f"{prefix}turnledger")
            if parts and all(tp in committed and committed[tp].offset >= end for tp, end in ends.items()):
                return
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
        await admin.close()


async def _wait_or_fail(event: asyncio.Event, tasks: list[asyncio.Task[None]], timeout_s: float) -> None:
    waiter = asyncio.create_task(event.wait())
    done, _ = await asyncio.wait([waiter, *tasks], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    if waiter not in done:
        waiter.cancel()
        for task in done:
            task.result()  # re-raise a service's failure (e.g. BrokerUnavailable)
        raise TimeoutError(f"the worker did not catch up within {timeout_s}s")


def _start_processor(bootstrap: str, prefix: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    return subprocess.Popen(
        [sys.executable, "-m", "turnledger.demo.processor", bootstrap, prefix],
        env=env,
        start_new_session=True,
    )


def _stop_processor(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
