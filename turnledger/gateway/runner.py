"""Running the worker and the tool executor against Kafka (used by the CLI and by `turnledger demo`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from turnledger.gateway.client import GatewayClient
from turnledger.gateway.endpoints import ProviderRoutes
from turnledger.gateway.journal import WorkerJournal
from turnledger.gateway.manifest_feed import ManifestFeed
from turnledger.gateway.refusal_feed import RefusalFeed
from turnledger.gateway.rollout import RolloutStage
from turnledger.gateway.tool_executor import DEMO_IMPLEMENTATIONS, ToolExecutor, ToolFn
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.kafka.clients import kafka_outage, start_client
from turnledger.kafka.group_timing import worker_heartbeat_ms
from turnledger.kafka.tail import tail_topic
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchDecision, IngressEvent, ManifestIssued, ToolCallReady
from turnledger.observability.server import serving
from turnledger.processors.limits_config import load_limits  # the processor's TURNLEDGER_MAX_*
from turnledger.retry import FOREVER, Backoff, StopRequested, ride_out
from turnledger.topology import Topics


def journal_path(journal_dir: Path | None, worker_id: str) -> Path | None:
    return None if journal_dir is None else journal_dir / f"{worker_id}.jsonl"


class RidingSink:
    """The worker's ingress producer, riding out Kafka outages: an append waits (with backoff, logging
    what it waits for) until Kafka takes it. A retried append may land twice; every worker event is
    safe to see twice (a second CAS is refused, a repeated delta is dropped by its sequence number)."""

    def __init__(self, client: GatewayClient, bootstrap: str, stop: asyncio.Event, backoff: Backoff) -> None:
        self.client, self.stop, self.backoff = client, stop, backoff
        self._classify = kafka_outage(bootstrap, f"append to {client.topic!r}")
        self._waiting_for = f"Kafka at {bootstrap} to append to {client.topic!r}"

    async def append(self, event: IngressEvent) -> None:
        await ride_out(
            lambda: self.client.append(event),
            waiting_for=self._waiting_for,
            classify=self._classify,
            backoff=self.backoff,
            stop=self.stop,
        )


async def run_worker(
    bootstrap: str,
    endpoints: ProviderRoutes,
    *,
    stop: asyncio.Event,
    prefix: str = "",
    config: WorkerConfig | None = None,
    journal_dir: Path | None = None,
    started: asyncio.Event | None = None,
    worker_box: list[DispatchWorker] | None = None,
    outage: Backoff = FOREVER,
    group_id: str | None = "",
    session_timeout_ms: int = 10_000,
    metrics_port: int = 0,
) -> None:
    """`metrics_port`: serve /metrics, /healthz and /readyz (ready once caught up and live); 0: off.

    Follow this worker's share of the manifests topic (`gateway/manifest_feed.py`: a consumer group,
    default `<prefix>turnledger-workers`; `group_id=None`: every partition from the beginning, alone);
    go live (recover, then attempt) once caught up.

    Kafka outages are ridden out as `outage` says: at start, while reading, and while appending
    (an attempt whose appends wait too long loses its lease, and another worker continues it)."""
    box: list[DispatchWorker] = worker_box if worker_box is not None else []

    def readiness() -> str | None:
        if not box:
            return "waiting for Kafka to start the ingress producer"
        return None if box[-1].live else "catching up on the manifests topic"

    async with serving(metrics_port, readiness):
        await _run_worker(
            bootstrap, endpoints, stop, prefix, config or WorkerConfig(), journal_dir, started, box, outage,
            group_id, session_timeout_ms,
        )  # fmt: skip


async def _run_worker(
    bootstrap: str,
    endpoints: ProviderRoutes,
    stop: asyncio.Event,
    prefix: str,
    config: WorkerConfig,
    journal_dir: Path | None,
    started: asyncio.Event | None,
    worker_box: list[DispatchWorker],
    outage: Backoff,
    group_id: str | None,
    session_timeout_ms: int,
) -> None:
    topics = Topics(prefix)
    journal = WorkerJournal(journal_path(journal_dir, config.worker_id))
    try:
        client = await start_client(
            lambda: GatewayClient(
                bootstrap, topic=topics.ingress, client_id=config.worker_id, limits=load_limits()
            ),
            bootstrap=bootstrap,
            action="start the worker's ingress producer",
            backoff=outage,
            stop=stop,
        )
    except StopRequested:
        journal.close()
        return
    try:
        async with DispatchWorker(
            RidingSink(client, bootstrap, stop, outage), endpoints, config=config, journal=journal
        ) as worker:
            worker_box.append(worker)
            refusals = RefusalFeed(
                worker.board,
                worker.observe,
                bootstrap,
                topics.rejections,
                stop=stop,
                outage=outage,
                client_id=f"{config.worker_id}-rejections",
            )
            async with refusals.following() as positioned:
                if not positioned:
                    return
                await _follow_manifests(
                    worker, bootstrap, topics, stop, started, outage, group_id, session_timeout_ms, prefix
                )
    finally:
        await client.stop()


async def _follow_manifests(
    worker: DispatchWorker,
    bootstrap: str,
    topics: Topics,
    stop: asyncio.Event,
    started: asyncio.Event | None,
    outage: Backoff,
    group_id: str | None,
    session_timeout_ms: int,
    prefix: str,
) -> None:
    """The worker's share of the manifests (a consumer group), or all of them (`group_id=None`)."""
    config = worker.config

    async def on_batch(records: list[Frozen]) -> None:
        await worker.observe([r for r in records if isinstance(r, ManifestIssued | DispatchDecision)])

    async def on_caught_up() -> None:
        if not worker.live:
            await worker.go_live()
        if started is not None:
            started.set()

    if group_id is not None:
        group = group_id or f"{prefix}turnledger-workers"
        feed = ManifestFeed(
            worker,
            bootstrap,
            topics.manifests,
            group,
            stop=stop,
            outage=outage,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=worker_heartbeat_ms(session_timeout_ms),
            on_live=on_caught_up,
        )
        await feed.run()
        return
    await tail_topic(
        bootstrap,
        topics.manifests,
        on_batch,
        stop=stop,
        on_caught_up=on_caught_up,
        client_id=config.worker_id,
        backoff=outage,
    )


async def run_tool_executor(
    bootstrap: str,
    *,
    stop: asyncio.Event,
    prefix: str = "",
    tools: Mapping[str, ToolFn] = DEMO_IMPLEMENTATIONS,
    group_id: str = "turnledger-tool-executor",
    executor_box: list[ToolExecutor] | None = None,
    rollout_stage: RolloutStage = RolloutStage.ALL,
    outage: Backoff = FOREVER,
    metrics_port: int = 0,
    started: asyncio.Event | None = None,
    session_timeout_ms: int = 10_000,
    heartbeat_interval_ms: int = 3_000,
) -> None:
    """Consume canonical tool calls (a consumer group: each call is run by one executor, a member with
    `session_timeout_ms` and `heartbeat_interval_ms`).
    `metrics_port`: serve /metrics, /healthz and /readyz (ready after its first poll); 0: off.
    `started`: set after the first poll, as readiness.

    Kafka outages are ridden out as `outage` says: at start, while reading, and while appending a
    turn's results (the append is retried, never the tools: each batch's calls run once here; a
    retried append that had landed is refused as DUPLICATE_TURN, its turn id deriving from the call
    ids, so no result is added twice)."""
    polled = asyncio.Event()
    async with serving(metrics_port, lambda: None if polled.is_set() else "waiting for Kafka"):
        await _run_tool_executor(
            bootstrap, stop, prefix, tools, group_id, executor_box, rollout_stage, outage, polled, started,
            session_timeout_ms, heartbeat_interval_ms,
        )  # fmt: skip


async def _run_tool_executor(
    bootstrap: str,
    stop: asyncio.Event,
    prefix: str,
    tools: Mapping[str, ToolFn],
    group_id: str,
    executor_box: list[ToolExecutor] | None,
    rollout_stage: RolloutStage,
    outage: Backoff,
    polled: asyncio.Event,
    started: asyncio.Event | None,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
) -> None:
    topics = Topics(prefix)

    async def on_polled() -> None:
        polled.set()
        if started is not None:
            started.set()

    try:
        client = await start_client(
            lambda: GatewayClient(
                bootstrap, topic=topics.ingress, client_id="turnledger-tool-executor", limits=load_limits()
            ),
            bootstrap=bootstrap,
            action="start the tool executor's ingress producer",
            backoff=outage,
            stop=stop,
        )
    except StopRequested:
        return
    try:
        executor = ToolExecutor(RidingSink(client, bootstrap, stop, outage), tools, rollout_stage)
        if executor_box is not None:
            executor_box.append(executor)

        async def on_batch(records: list[Frozen]) -> None:
            await executor.handle([r for r in records if isinstance(r, ToolCallReady)])

        await tail_topic(
            bootstrap,
            topics.tool_calls,
            on_batch,
            stop=stop,
            group_id=f"{prefix}{group_id}",
            client_id="turnledger-tool-executor",
            backoff=outage,
            on_caught_up=on_polled,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
    except StopRequested:
        return
    finally:
        await client.stop()
