"""Every API end to end on the real broker, with credentials configured: a commit, a tool round, a
disconnect and retry, truncated arguments; and a planted credential searched for in every output.

The processor runs as its own process; the worker and the tool executor run here (first test) or
the worker runs as `turnledger worker` at DEBUG with its credentials in the environment (redaction
test), against the fake provider, which checks each API's credential as the real APIs do.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from turnledger.demo.checks import all_checks
from turnledger.demo.run import _processor_caught_up, _start_processor, _stop_process, _stop_processor
from turnledger.fake_provider import FakeProvider, Fault, FaultKind, FaultPlan
from turnledger.fake_provider.auth import FakeKeys
from turnledger.gateway.client import GatewayClient
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_tool_executor, run_worker
from turnledger.gateway.tool_executor import DEMO_TOOLS
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.kafka.tail import tail_topic
from turnledger.model.base import Frozen
from turnledger.model.events import CommittedTurn, DispatchDecision, DispatchState, ToolCallReady
from turnledger.model.graph import BlockKind
from turnledger.model.reasons import ReasonCode
from turnledger.replay.evidence import read_all
from turnledger.topology import Stream, Topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

S = DispatchState
APIS = {
    "anthropic-messages@2": ("anthropic", "anthropic/claude-sonnet-4@2025-05"),
    "openai-chat@2": ("openai", "openai/gpt-4o@2024-08"),
    "openai-responses@2": ("openai", "openai/gpt-4.1@2025-04"),
    "gemini@2": ("google", "google/gemini-2.5-pro@2025-06"),
    "bedrock-converse@1": ("bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05"),
}


class Outputs:
    """What the output topics said, as the tests wait for it. Each topic has its own tail, so a
    decision can arrive before the turn committed in the same transaction: `tails_turns` says whether
    `_settle` should also wait for that turn."""

    def __init__(self, tails_turns: bool) -> None:
        self.tails_turns = tails_turns
        self.latest: dict[tuple[str, str], DispatchDecision] = {}
        self.turns: list[CommittedTurn] = []

    async def on_batch(self, records: list[Frozen]) -> None:
        for r in records:
            if isinstance(r, DispatchDecision):
                self.latest[(r.conversation_id, r.operation_id)] = r
            elif isinstance(r, CommittedTurn):
                self.turns.append(r)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 120) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            states = {k: (v.state, v.reason) for k, v in self.latest.items()}
            assert asyncio.get_running_loop().time() < deadline, states
            await asyncio.sleep(0.05)

    def final(self, conv: str, op: str) -> DispatchDecision | None:
        d = self.latest.get((conv, op))
        return d if d is not None and d.state in (S.COMMITTED, S.CANCELLED, S.REJECTED, S.PAUSED) else None

    def assistant(self, conv: str) -> list[CommittedTurn]:
        return [t for t in self.turns if t.conversation_id == conv and t.operation_id]


async def _settle(
    client: GatewayClient, out: Outputs, conv: str, op: str, adapter: str, tools: bool
) -> DispatchDecision:
    provider, model = APIS[adapter]
    await client.request_dispatch(
        conv, operation_id=op, adapter=adapter, provider=provider, model_revision=model,
        tools=DEMO_TOOLS if tools else (), max_output_tokens=512,
    )  # fmt: skip
    await out.wait_for(lambda: out.final(conv, op) is not None)
    final = out.final(conv, op)
    assert final is not None
    if out.tails_turns and final.state == S.COMMITTED:
        await out.wait_for(lambda: any(t.operation_id == op for t in out.assistant(conv)))
    return final


async def _finish(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for the test's tasks once `stop` is set, cancelling any left after a minute: a failed test
    then reports its failure rather than leaving them to its event loop's teardown."""
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=60)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=30)


@pytest.mark.parametrize("adapter", list(APIS))
async def test_commit_tool_round_disconnect_and_truncation_per_api(
    kafka_bootstrap: str, adapter: str
) -> None:
    from turnledger.processors.topics import ensure_topics

    prefix = f"t-api-{uuid.uuid4().hex[:8]}-"
    # one partition: every partition gets records, so the processor's committed offsets reach the ends
    await ensure_topics(kafka_bootstrap, Topics(prefix=prefix), 1)
    processor = _start_processor(kafka_bootstrap, prefix)
    out = Outputs(tails_turns=True)
    stop = asyncio.Event()
    # each fault hits the first request of its conversation, whatever else arrives before it
    plan = FaultPlan(
        first_with_marker={
            "tell me something": (Fault(FaultKind.DISCONNECT, 600),),
            "weather in Lima?": (Fault(FaultKind.TRUNCATED_ARGS),),
            "are you busy?": (Fault(FaultKind.RATE_LIMITED, 1000),),
            "a request it refuses": (Fault(FaultKind.HTTP_STATUS, 400),),
        }
    )
    tasks: list[asyncio.Task[None]] = []
    try:
        async with FakeProvider(seed=21, fault_plan=plan) as fp:
            started = asyncio.Event()
            box: list[DispatchWorker] = []
            routes = endpoints_for(fp.base_url, fp.keys.as_env())
            tasks += [
                asyncio.create_task(
                    run_worker(
                        kafka_bootstrap,
                        routes,
                        stop=stop,
                        prefix=prefix,
                        config=WorkerConfig(worker_id=f"w-{adapter}"),
                        started=started,
                        worker_box=box,
                    )
                ),
                asyncio.create_task(run_tool_executor(kafka_bootstrap, stop=stop, prefix=prefix)),
            ]
            for stream in (Stream.MANIFESTS, Stream.COMMITTED):
                tasks.append(
                    asyncio.create_task(
                        tail_topic(kafka_bootstrap, Topics(prefix).name(stream), out.on_batch, stop=stop)
                    )
                )
            await asyncio.wait_for(started.wait(), 60)
            async with GatewayClient(kafka_bootstrap, topic=Topics(prefix).ingress) as client:
                # a tool round: calls committed, run by the executor, answered
                await client.submit_user_turn("tools", "weather in Oslo and invoice INV-7?")
                first = await _settle(client, out, "tools", "op-1", adapter, tools=True)
                assert (first.state, first.attempt_generation) == (S.COMMITTED, 1)
                calls = [b for b in out.assistant("tools")[0].blocks if b.kind == BlockKind.TOOL_CALL]
                assert calls
                await out.wait_for(lambda: len([t for t in out.turns if t.conversation_id == "tools"]) == 3)
                second = await _settle(client, out, "tools", "op-2", adapter, tools=True)
                assert second.state == S.COMMITTED
                assert [b.kind for b in out.assistant("tools")[-1].blocks] == ["text"]

                # a disconnect: resumed (Responses keeps it) or a new generation from the same manifest
                await client.submit_user_turn("cut", "tell me something")
                cut = await _settle(client, out, "cut", "op-1", adapter, tools=False)
                resumed = adapter.startswith("openai-responses")
                assert (cut.state, cut.attempt_generation) == (S.COMMITTED, 1 if resumed else 2)

                # truncated arguments: nothing of generation 1 commits or runs
                await client.submit_user_turn("trunc", "weather in Lima?")
                trunc = await _settle(client, out, "trunc", "op-1", adapter, tools=True)
                assert (trunc.state, trunc.attempt_generation) == (S.COMMITTED, 2)

                # throttled: sent again once the provider's delay (Bedrock: the backoff) has passed
                await client.submit_user_turn("busy", "are you busy?")
                busy = await _settle(client, out, "busy", "op-1", adapter, tools=False)
                assert (busy.state, busy.attempt_generation) == (S.COMMITTED, 2)

                # refused for what it is: sent once, the operation ends with the typed reason
                await client.submit_user_turn("refused", "a request it refuses")
                refused = await _settle(client, out, "refused", "op-1", adapter, tools=False)
                assert (refused.state, refused.reason) == (S.CANCELLED, ReasonCode.PROVIDER_REFUSED)
                assert refused.detail.startswith("worker gave up: the provider refused the request (HTTP 400")
            await _processor_caught_up(kafka_bootstrap, prefix)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            requests = list(fp.requests)
            assert fp.auth_failures == []
    finally:
        stop.set()
        await _finish(tasks)
        _stop_processor(processor)
    evidence = await read_all(kafka_bootstrap, prefix)
    assert len([t for t in evidence.of("committed", CommittedTurn) if t.operation_id]) == 5
    calls = evidence.of("tool-calls", ToolCallReady)
    assert calls and not [c for c in calls if c.conversation_id == "trunc" and c.attempt_generation == 1]
    failed = [(c.name, c.examples) for c in all_checks(evidence, requests) if not c.ok]
    assert not failed
    methods = [r.method for r in requests]
    assert methods.count("GET") == (1 if adapter.startswith("openai-responses") else 0)
    busy_posts = [r for r in requests if b"are you busy?" in r.body]
    assert len(busy_posts) == 2 and busy_posts[1].received_at - busy_posts[0].received_at >= (
        1.0 if adapter != "bedrock-converse@1" else 0.375
    )
    assert len([r for r in requests if b"a request it refuses" in r.body]) == 1


async def _values(redis: aioredis.Redis, key: bytes) -> bytes:
    """A key and everything stored under it, as raw bytes, whatever its type."""
    kind = (await redis.type(key)).decode()
    readers = {
        "string": lambda: redis.get(key),
        "hash": lambda: redis.hgetall(key),
        "list": lambda: redis.lrange(key, 0, -1),
        "set": lambda: redis.smembers(key),
        "zset": lambda: redis.zrange(key, 0, -1, withscores=True),
        "stream": lambda: redis.xrange(key),
    }
    return key + repr(await readers[kind]()).encode()


PLANTED = FakeKeys(
    openai=f"sk-PLANTED-openai-{uuid.uuid4().hex}",
    anthropic=f"sk-ant-PLANTED-{uuid.uuid4().hex}",
    gemini=f"AIza-PLANTED-{uuid.uuid4().hex}",
    aws_access_key_id=f"AKIAPLANTED{uuid.uuid4().hex[:9].upper()}",
    aws_secret_access_key=f"PLANTED/secret/{uuid.uuid4().hex}",
)
SESSION_TOKEN = f"PLANTED-session-token-{uuid.uuid4().hex}"


async def test_planted_credentials_appear_in_no_output(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """Every API sends with its planted key (and a session token); then every topic, every Redis key,
    the journal, the worker's DEBUG log and the CLI's output are searched for each secret."""
    from turnledger.processors.topics import ensure_topics
    from turnledger.projections.keys import ProjectionKeys
    from turnledger.projections.projector import Projector

    secrets = [*PLANTED.as_env().values(), SESSION_TOKEN]
    prefix = f"t-secrets-{uuid.uuid4().hex[:8]}-"
    key_prefix = f"tl:{prefix}"
    topics = Topics(prefix=prefix)
    await ensure_topics(kafka_bootstrap, topics, 1)
    processor = _start_processor(kafka_bootstrap, prefix)
    out = Outputs(tails_turns=False)
    stop = asyncio.Event()
    journal = tmp_path / "journal"
    log = tmp_path / "worker.log"
    tasks: list[asyncio.Task[None]] = []
    worker: subprocess.Popen[bytes] | None = None
    try:
        async with FakeProvider(seed=9, keys=PLANTED) as fp:
            env = {**os.environ, **PLANTED.as_env(), "AWS_SESSION_TOKEN": SESSION_TOKEN}
            cmd = [
                sys.executable, "-m", "turnledger.cli", "worker", "--bootstrap", kafka_bootstrap,
                "--topic-prefix", prefix, "--provider-url", fp.base_url, "--worker-id", "secret-worker",
                "--journal-dir", str(journal), "--log-level", "DEBUG",
            ]  # fmt: skip
            with log.open("wb") as sink:
                worker = subprocess.Popen(
                    cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
                )
            tail = asyncio.create_task(tail_topic(kafka_bootstrap, topics.manifests, out.on_batch, stop=stop))
            tasks.append(tail)
            async with GatewayClient(kafka_bootstrap, topic=topics.ingress) as client:
                for adapter in APIS:
                    conv = f"c-{adapter}"
                    await client.submit_user_turn(conv, "weather in Oslo?")
                    first = await _settle(client, out, conv, "op-1", adapter, tools=True)
                    assert first.state == S.COMMITTED, (adapter, first)
            await _processor_caught_up(kafka_bootstrap, prefix)
            stop.set()
            await tail
            _stop_process(worker)
            # the fake saw the real credentials: the search below would find them if they leaked
            sent = " ".join(f"{r.headers}" for r in fp.requests)
            assert PLANTED.openai in sent and PLANTED.anthropic in sent and PLANTED.gemini in sent
            assert SESSION_TOKEN in sent and fp.auth_failures == []
    finally:
        stop.set()
        await _finish(tasks)
        if worker is not None:
            _stop_process(worker)
        _stop_processor(processor)
    redis = aioredis.from_url(redis_url)
    try:
        await Projector(redis, kafka_bootstrap, topics, ProjectionKeys(key_prefix)).run_to_end()
        dumped = [await _values(redis, key) async for key in redis.scan_iter(match=f"{key_prefix}*")]
        assert len(dumped) > 5
    finally:
        async for key in redis.scan_iter(match=f"{key_prefix}*"):
            await redis.delete(key)
        await redis.aclose()
    evidence = await read_all(kafka_bootstrap, prefix)
    topic_bytes = b"".join((r.key or b"") + r.value for records in evidence.raw.values() for r in records)
    assert len(topic_bytes) > 10_000
    cli = subprocess.run(
        [sys.executable, "-m", "turnledger.cli", "history", "c-gemini@2", "--redis-url", redis_url,
         "--key-prefix", key_prefix],
        capture_output=True, env={**os.environ, **PLANTED.as_env()}, timeout=60,
    )  # fmt: skip
    outputs = {
        "topics": topic_bytes,
        "redis": b"".join(dumped),
        "journal": b"".join(p.read_bytes() for p in journal.glob("*")),
        "worker log": log.read_bytes(),
        "cli": cli.stdout + cli.stderr,
    }
    assert b"HTTP Request: POST" in outputs["worker log"]  # DEBUG logging really ran
    leaks = [(where, s[:12]) for where, data in outputs.items() for s in secrets if s.encode() in data]
    assert leaks == []
