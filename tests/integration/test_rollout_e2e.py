"""Rollout stage 2 on the real broker: we send requests without tools, the legacy gateway the tool turns.

The processor runs as its own process, the worker at `--rollout-stage without-tools`
in this one, and the legacy answer is recorded with the real `turnledger legacy record`
command. Outcomes are checked on the output topics.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from turnledger.demo.run import _processor_caught_up, _start_processor, _stop_processor
from turnledger.fake_provider import FakeProvider
from turnledger.gateway.client import GatewayClient
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.legacy import RECORDER_ID
from turnledger.gateway.provider_request import ProviderRequest, authenticate
from turnledger.gateway.rollout import RolloutStage
from turnledger.gateway.runner import run_worker
from turnledger.gateway.tool_executor import DEMO_TOOLS
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.kafka.tail import tail_topic
from turnledger.model.base import Frozen
from turnledger.model.events import (
    CommittedTurn,
    DispatchAttempt,
    DispatchDecision,
    DispatchState,
    ManifestIssued,
    ToolCallReady,
)
from turnledger.replay.evidence import read_all
from turnledger.topology import Topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

S = DispatchState
ADAPTER, MODEL = "anthropic-messages@1", "anthropic/claude-sonnet-4@2025-05"


def _legacy_record(bootstrap: str, prefix: str, exchanges: Path) -> subprocess.CompletedProcess[str]:
    code = "from turnledger.cli import main; main()"
    cmd = [sys.executable, "-c", code, "legacy", "record", str(exchanges), "--bootstrap", bootstrap,
           "--topic-prefix", prefix, "--timeout", "60"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


async def test_stage_without_tools_end_to_end(kafka_bootstrap: str, tmp_path: Path) -> None:
    from turnledger.processors.topics import ensure_topics

    prefix = f"t-rollout-{uuid.uuid4().hex[:8]}-"
    await ensure_topics(kafka_bootstrap, Topics(prefix=prefix), 2)
    processor = _start_processor(kafka_bootstrap, prefix)
    latest: dict[tuple[str, str], DispatchDecision] = {}
    manifests: dict[str, str] = {}
    stop = asyncio.Event()

    async def on_batch(records: list[Frozen]) -> None:
        for r in records:
            if isinstance(r, DispatchDecision):
                latest[(r.conversation_id, r.operation_id)] = r
            elif isinstance(r, ManifestIssued):
                manifests[r.manifest.conversation_id] = r.manifest.request_body

    async def wait_for(pred: Callable[[], bool], timeout: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not pred():
            assert asyncio.get_running_loop().time() < deadline, {k: v.state for k, v in latest.items()}
            await asyncio.sleep(0.05)

    def state(conv: str) -> DispatchState | None:
        decision = latest.get((conv, "op-1"))
        return decision.state if decision else None

    try:
        async with FakeProvider(seed=11) as fp:
            tail = asyncio.create_task(
                tail_topic(kafka_bootstrap, Topics(prefix).manifests, on_batch, stop=stop)
            )
            started = asyncio.Event()
            box: list[DispatchWorker] = []
            config = WorkerConfig(worker_id="stage2-worker", rollout_stage=RolloutStage.WITHOUT_TOOLS)
            worker = asyncio.create_task(
                run_worker(
                    kafka_bootstrap, endpoints_for(fp.base_url, fp.keys.as_env()), stop=stop, prefix=prefix,
                    config=config, started=started, worker_box=box,
                )
            )  # fmt: skip
            await asyncio.wait_for(started.wait(), 60)
            async with GatewayClient(kafka_bootstrap, topic=Topics(prefix).ingress) as client:
                for conv, tools in (("plain", ()), ("tools", DEMO_TOOLS)):
                    await client.submit_user_turn(conv, "weather in Lisbon?")
                    await client.request_dispatch(
                        conv, operation_id="op-1", adapter=ADAPTER, provider="anthropic",
                        model_revision=MODEL, tools=tools, max_output_tokens=512,
                    )  # fmt: skip
                await wait_for(lambda: state("plain") == S.COMMITTED and state("tools") == S.PREPARED)
            # the worker reads the manifests with a consumer of its own: what this tail saw, it may not
            # have counted yet
            await wait_for(lambda: box[0].stats.counts["not_taken"] >= 1)
            assert box[0].stats.counts["not_taken"] == 1

            # the legacy gateway sends the tool turn itself and keeps the raw answer
            endpoint = endpoints_for(fp.base_url, fp.keys.as_env()).endpoint(ADAPTER, MODEL)
            request = authenticate(
                endpoint, ProviderRequest("POST", endpoint.url, endpoint.headers, manifests["tools"].encode())
            )
            async with httpx.AsyncClient() as http:
                answer = await http.post(request.url, content=request.content, headers=dict(request.headers))
            line = {"conversationId": "tools", "operationId": "op-1", "response": answer.text}
            exchanges = tmp_path / "legacy.jsonl"
            exchanges.write_bytes(orjson.dumps(line) + b"\n")

            first = await asyncio.to_thread(_legacy_record, kafka_bootstrap, prefix, exchanges)
            assert first.returncode == 0, first.stderr
            assert first.stdout.splitlines()[0].split() == ["committed", "tools/op-1", "state", "COMMITTED"]
            again = await asyncio.to_thread(_legacy_record, kafka_bootstrap, prefix, exchanges)
            assert again.returncode == 0, again.stderr
            assert again.stdout.splitlines()[0].split() == [
                "already-final",
                "tools/op-1",
                "state",
                "COMMITTED",
            ]

            await _processor_caught_up(kafka_bootstrap, prefix)
            posts = [r.body for r in fp.requests if r.method == "POST"]
            stop.set()
            await tail
            await worker
    finally:
        _stop_processor(processor)

    # our worker sent the plain request, the legacy gateway the tool request: one POST each
    assert sorted(posts) == sorted(body.encode() for body in manifests.values())
    evidence = await read_all(kafka_bootstrap, prefix)
    attempts = evidence.of("ingress", DispatchAttempt)
    assert sorted((a.conversation_id, a.worker_id) for a in attempts) == [
        ("plain", "stage2-worker"),
        ("tools", RECORDER_ID),
    ]
    assistant = sorted(t.conversation_id for t in evidence.of("committed", CommittedTurn) if t.operation_id)
    assert assistant == ["plain", "tools"]
    calls = evidence.of("tool-calls", ToolCallReady)
    assert calls and {c.conversation_id for c in calls} == {"tools"}

    # the spec's metrics of this deployment, as an operator reads them
    code = "from turnledger.cli import main; main()"
    cmd = [
        sys.executable,
        "-c",
        code,
        "metrics",
        "--json",
        "--bootstrap",
        kafka_bootstrap,
        "--topic-prefix",
        prefix,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    metrics = orjson.loads(out.stdout)
    assert (metrics["operations"], metrics["committed"]) == (2, 2)
    assert metrics["finalStates"] == {"COMMITTED": 2} and metrics["committedAtGeneration"] == {"1": 2}
    assert (metrics["partialToolDispatches"], metrics["canonicalCasConflicts"]) == (0, 0)
    assert metrics["dispatchCasConflicts"] == {} and metrics["sequenceValidatorRejections"] == {}
    assert metrics["givenUp"] == {} and metrics["unknownOpen"] == 0
