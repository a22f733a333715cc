"""Workers share the manifests topic through a consumer group (`gateway/manifest_feed.py`).

- A restarted worker reads its partitions from the oldest open operation on: with a long settled
  history behind, it reads the records of the open work only.
- A worker SIGKILLed mid-stream loses its partitions to the survivor when its session times out:
  the survivor continues the stream it held (through the lease expiry) and attempts every new
  operation of the moved partition.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2

from turnledger.demo.run import _processor_caught_up, _start_processor, _stop_processor
from turnledger.fake_provider import FakeProvider, Fault, FaultKind, FaultPlan
from turnledger.gateway.client import GatewayClient
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_worker
from turnledger.gateway.tool_executor import DEMO_TOOLS
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.kafka.clients import close_client
from turnledger.kafka.reading import read_to_end, start_reader
from turnledger.kafka.tail import tail_topic
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchDecision, DispatchState
from turnledger.model.reasons import ReasonCode
from turnledger.processors.topics import ensure_topics
from turnledger.topology import Topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

S = DispatchState
ADAPTER, MODEL = "anthropic-messages@1", "anthropic/claude-sonnet-4@2025-05"


class Ledger:
    """Every dispatch decision of a test's manifests topic, as it arrives."""

    def __init__(self) -> None:
        self.decisions: list[DispatchDecision] = []

    async def on_batch(self, records: list[Frozen]) -> None:
        self.decisions.extend(r for r in records if isinstance(r, DispatchDecision))

    def final(self, operation_id: str) -> DispatchDecision | None:
        for d in reversed(self.decisions):
            if d.operation_id == operation_id and d.state == S.COMMITTED:
                return d
        return None

    def states(self, operation_id: str) -> list[tuple[DispatchState, ReasonCode | None, str]]:
        return [
            (d.state, d.reason, d.lease_owner or "") for d in self.decisions if d.operation_id == operation_id
        ]


async def wait_for(pred: Callable[[], bool], what: Callable[[], object], timeout: float = 120) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, what()
        await asyncio.sleep(0.05)


async def count_records(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = await start_reader(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return sum([len(chunk) async for chunk in read_to_end(consumer, tps)])
    finally:
        await close_client(consumer)


async def group_members(bootstrap: str, group: str) -> int:
    """How many members the consumer group has while it is Stable (0 while it rebalances)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
        _error, _id, state, _protocol_type, _protocol, members, *_ = response.groups[0]
        return len(members) if state == "Stable" else 0
    finally:
        await admin.close()


async def dispatch(client: GatewayClient, conversation: str, operation: str) -> None:
    await client.submit_user_turn(conversation, "weather in Oslo?")
    await client.request_dispatch(
        conversation, operation_id=operation, adapter=ADAPTER, provider="anthropic",
        model_revision=MODEL, tools=DEMO_TOOLS, max_output_tokens=256,
    )  # fmt: skip


def conversations_on(partition: int, partitions: int, count: int, tag: str) -> list[str]:
    """Conversation ids Kafka's default partitioner puts on `partition`."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        cid = f"conv-{tag}-{i}"
        if (murmur2(cid.encode()) & 0x7FFFFFFF) % partitions == partition:
            found.append(cid)
        i += 1
    return found


async def test_restarted_worker_reads_only_the_open_work(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = f"t-shard-{uuid.uuid4().hex[:8]}-"
    topics = Topics(prefix=prefix)
    await ensure_topics(kafka_bootstrap, topics, 2)
    processor = _start_processor(kafka_bootstrap, prefix)
    ledger = Ledger()
    stop_tail = asyncio.Event()
    history = 30
    try:
        async with (
            FakeProvider(seed=11) as fp,
            GatewayClient(kafka_bootstrap, topic=topics.ingress) as client,
        ):
            tail = asyncio.create_task(
                tail_topic(kafka_bootstrap, topics.manifests, ledger.on_batch, stop=stop_tail)
            )

            async def run_one_worker(
                name: str, until: Callable[[], bool], read_to: Callable[[], Awaitable[int]] | None = None
            ) -> DispatchWorker:
                """Run a worker until `until` holds, and (given `read_to`) until its own manifests feed
                has read that many records: the test's tail is another consumer, ahead or behind."""
                stop, started, box = asyncio.Event(), asyncio.Event(), list[DispatchWorker]()
                task = asyncio.create_task(
                    run_worker(
                        kafka_bootstrap, endpoints_for(fp.base_url, fp.keys.as_env()), stop=stop,
                        prefix=prefix, config=WorkerConfig(worker_id=name), journal_dir=tmp_path / name,
                        started=started, worker_box=box,
                    )
                )  # fmt: skip
                await wait_for(until, lambda: ledger.decisions[-5:])
                if read_to is not None:
                    want = await read_to()
                    counts = box[0].stats.counts
                    await wait_for(lambda: counts["manifest_records_read"] >= want, lambda: (counts, want))
                stop.set()
                await task
                return box[0]

            for i in range(history):
                await dispatch(client, f"conv-h{i}", f"op-h{i}")
            ids = [f"op-h{i}" for i in range(history)]
            first = await run_one_worker("w1", lambda: all(ledger.final(o) for o in ids))
            await _processor_caught_up(kafka_bootstrap, prefix)
            settled = await count_records(kafka_bootstrap, topics.manifests, 2)
            assert first.stats.counts["manifest_records_read"] >= settled - 5  # it read what it settled

            # one new operation while no worker runs: PREPARED, open
            await dispatch(client, "conv-new", "op-new")
            await wait_for(
                lambda: (S.PREPARED, None, "") in ledger.states("op-new"), lambda: ledger.decisions[-3:]
            )

            async def unsettled() -> int:
                await _processor_caught_up(kafka_bootstrap, prefix)
                return await count_records(kafka_bootstrap, topics.manifests, 2) - settled

            second = await run_one_worker("w2", lambda: ledger.final("op-new") is not None, unsettled)
            total = await count_records(kafka_bootstrap, topics.manifests, 2)
            stop_tail.set()
            await tail
    finally:
        _stop_processor(processor)
    read_on_restart = second.stats.counts["manifest_records_read"]
    # it read from the first record of the one open operation on, and nothing of the settled history
    assert read_on_restart == total - settled, (read_on_restart, total, settled)
    assert settled >= 10 * read_on_restart, (settled, read_on_restart)
    committed = ledger.final("op-new")
    assert committed is not None and committed.attempt_generation == 1


def _worker_cmd(bootstrap: str, prefix: str, url: str, name: str, journal: Path) -> list[str]:
    code = "import typer; from turnledger.gateway.cli import worker; typer.run(worker)"
    return [
        sys.executable, "-c", code, "--bootstrap", bootstrap, "--topic-prefix", prefix, "--provider-url", url,
        "--worker-id", name, "--journal-dir", str(journal / name), "--lease-seconds", "3",
        "--session-timeout-ms", "6000", "--log-level", "WARNING",
    ]  # fmt: skip


@pytest.mark.slow
async def test_a_killed_workers_partitions_move_to_the_survivor(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = f"t-shard-{uuid.uuid4().hex[:8]}-"
    topics = Topics(prefix=prefix)
    partitions = 2
    await ensure_topics(kafka_bootstrap, topics, partitions)
    processor = _start_processor(kafka_bootstrap, prefix)
    # the first two requests stream slowly (150 ms an event), so each worker is still mid-stream when one
    # is killed: the kill follows the STREAMING decisions only after a processor commit and the manifests
    # tail, which on 2 loaded CI cores took long enough for a 40 ms-an-event stream to end first (once)
    slow_ms = 150
    plan = FaultPlan(by_request={0: (Fault(FaultKind.SLOW, slow_ms),), 1: (Fault(FaultKind.SLOW, slow_ms),)})
    ledger = Ledger()
    stop_tail = asyncio.Event()
    workers: dict[str, subprocess.Popen[bytes]] = {}
    slow = [conversations_on(p, partitions, 1, f"slow{p}")[0] for p in range(partitions)]
    later = [c for p in range(partitions) for c in conversations_on(p, partitions, 2, f"later{p}")]
    try:
        async with (
            FakeProvider(seed=12, fault_plan=plan) as fp,
            GatewayClient(kafka_bootstrap, topic=topics.ingress) as client,
        ):
            tail = asyncio.create_task(
                tail_topic(kafka_bootstrap, topics.manifests, ledger.on_batch, stop=stop_tail)
            )
            env = {**os.environ, **fp.keys.as_env()}
            for name in ("wa", "wb"):
                cmd = _worker_cmd(kafka_bootstrap, prefix, fp.base_url, name, tmp_path)
                workers[name] = subprocess.Popen(cmd, start_new_session=True, env=env)
            members = 0
            deadline = asyncio.get_running_loop().time() + 90
            while members != 2:  # both in the group, the partitions dealt: one each
                assert asyncio.get_running_loop().time() < deadline, members
                await asyncio.sleep(0.2)
                members = await group_members(kafka_bootstrap, f"{prefix}turnledger-workers")
            for i, cid in enumerate(slow):
                await dispatch(client, cid, f"op-slow{i}")

            def streaming_owners() -> dict[str, str]:
                return {
                    d.operation_id: d.lease_owner or ""
                    for d in ledger.decisions
                    if d.state == S.STREAMING and d.operation_id.startswith("op-slow")
                }

            await wait_for(lambda: len(streaming_owners()) == 2, lambda: ledger.decisions[-6:])
            owners = streaming_owners()
            # the group dealt one partition to each worker: each streams the operation of its own
            assert sorted(owners.values()) == ["wa", "wb"], owners
            victim_op = next(op for op, owner in owners.items() if owner == "wb")
            os.kill(workers["wb"].pid, signal.SIGKILL)
            workers["wb"].wait()
            for i, cid in enumerate(later):
                await dispatch(client, cid, f"op-later{i}")
            ops = [*owners, *(f"op-later{i}" for i in range(len(later)))]
            await wait_for(
                lambda: all(ledger.final(o) for o in ops), lambda: {o: ledger.states(o) for o in ops}
            )
            await _processor_caught_up(kafka_bootstrap, prefix)
            stop_tail.set()
            await tail
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
        _stop_processor(processor)
    # the killed worker's stream: its lease expired and the survivor continued it to one answer
    victim = ledger.states(victim_op)
    assert (S.UNKNOWN, ReasonCode.LEASE_EXPIRED) in [(s, r) for s, r, _ in victim], victim
    final = ledger.final(victim_op)
    assert final is not None and final.lease_owner in ("wa", None, ""), victim
    assert sum(1 for s, _, _ in victim if s == S.COMMITTED) == 1
    # every later operation, on either partition, was attempted by the survivor alone
    for i in range(len(later)):
        attempted_by = {owner for s, _, owner in ledger.states(f"op-later{i}") if s == S.DISPATCHING}
        assert attempted_by == {"wa"}, (f"op-later{i}", ledger.states(f"op-later{i}"))
