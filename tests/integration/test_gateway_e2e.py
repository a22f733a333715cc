"""End to end on the real broker: a small demo with every fault kind, and a worker SIGKILLed mid-stream."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from turnledger.demo.checks import all_checks
from turnledger.demo.driver import commits_no_turn
from turnledger.demo.run import DemoOptions, _processor_caught_up, _start_processor, _stop_processor, run_demo
from turnledger.fake_provider import FakeProvider, Fault, FaultKind, FaultPlan
from turnledger.gateway.client import GatewayClient
from turnledger.gateway.tool_executor import DEMO_TOOLS
from turnledger.kafka.tail import tail_topic
from turnledger.model.base import Frozen
from turnledger.model.events import CommittedTurn, DispatchDecision, DispatchState
from turnledger.model.graph import BlockKind
from turnledger.model.reasons import ReasonCode
from turnledger.replay.evidence import read_all
from turnledger.topology import Topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

S = DispatchState


@pytest.mark.slow
async def test_small_demo_with_every_fault_kind_keeps_every_invariant(
    kafka_bootstrap: str, redis_url: str
) -> None:
    options = DemoOptions(
        conversations=24,
        fault_rate=0.05,
        invalid_rate=0.3,
        cancel_rate=0.2,
        move_rate=0.2,  # seed 7: five of the 24 move (2, 3, 5, 11, 19; 7 cancels and 12 interjects instead)
        partitions=2,
        every_fault_kind=True,
        timeout_s=150,
    )
    said: list[str] = []
    result = await run_demo(kafka_bootstrap, redis_url, options, announce=said.append)
    assert len(said) == 1 and said[0].startswith("web page (while the demo runs): http://127.0.0.1:"), said
    failed = [(c.name, c.examples) for c in result.checks if not c.ok]
    assert not failed
    names = " ".join(c.name for c in result.checks)
    assert "projected history" in names and "replay audit" in names
    # a conversation may run out of attempts under faults (the worker gives up after 4 generations,
    # and says so at once: nothing waits for a timeout, nothing stalls)
    d = result.driver
    assert d.conversations == options.conversations and d.stalled == 0
    assert d.completed + d.cancelled >= options.conversations - 2
    assert len(result.metrics.given_up) == d.gave_up
    assert d.cancels_requested > 0 and d.cancelled > 0
    # a text answer cancelled after its first preview retracts it (`driver.cancels_text`)
    assert d.cancelled_text > 0 and result.metrics.preview_retractions >= d.cancelled_text
    assert result.metrics.cancelled == d.cancelled + d.interjections  # a superseded operation is cancelled
    assert result.metrics.refused == d.refused  # the fake's refusal_after: the provider's own answer
    assert result.metrics.output_limited == d.output_limited  # an answer cut at the limit: no cancel
    # one conversation's first answer is thinking alone (`thinking_only`, every attempt at its question):
    # COMMITTED EMPTY_RESPONSE with no turn, the driver's outcome (it does not stall), the user speaks next
    decisions = result.evidence.of("manifests", DispatchDecision)
    empty = [x for x in decisions if commits_no_turn(x) and x.accepted]
    assert d.nothing_visible == len(empty) == 1
    # a worker was killed a third of the way through, and still every operation is final
    assert result.worker_crashed_after == options.conversations // 3
    assert result.settle.not_final == 0 and result.settle.operations == d.dispatches
    expected = {k.value for k in FaultKind} - {FaultKind.LATE_EVENTS.value}  # needs a retried body
    assert expected <= set(result.faults)
    assert result.metrics.partial_tool_dispatches == 0
    assert result.metrics.orphaned_results + result.metrics.duplicate_results > 0
    # conversations moving between APIs (demo/moving.py): each of their dispatches to another API, every
    # one completed or ended by an injected fault, none refused by the provider (Gemini as Gemini 3)
    assert len(d.moving) >= 2 and d.api_changes >= len(d.moving)
    moving = next(c for c in result.checks if c.name.startswith("every dispatch of a conversation moving"))
    assert moving.checked == len(d.moving) + d.api_changes and moving.ok
    assert set(result.requests_by_api) == {"anthropic-messages", "openai-chat", "openai-responses", "gemini",
                                           "bedrock-converse"}  # fmt: skip
    moved_blocks = [b for t in result.evidence.of("committed", CommittedTurn) if t.conversation_id in d.moving
                    for b in t.blocks]  # fmt: skip
    assert any(b.kind == BlockKind.THINKING and b.signed_by == "openai-responses" for b in moved_blocks)


def _worker_cmd(bootstrap: str, prefix: str, url: str, journal: Path) -> list[str]:
    code = "import typer; from turnledger.gateway.cli import worker; typer.run(worker)"
    return [
        sys.executable, "-c", code, "--bootstrap", bootstrap, "--topic-prefix", prefix, "--provider-url", url,
        "--worker-id", "crash-worker", "--journal-dir", str(journal), "--log-level", "WARNING",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("adapter", "model", "generation"),
    [
        # Anthropic streams are gone with their connection: a new generation after termination
        ("anthropic-messages@1", "anthropic/claude-sonnet-4@2025-05", 2),
        # the Responses request is rendered with background + stream: resumed, same generation
        ("openai-responses@1", "openai/gpt-4.1@2025-04", 1),
    ],
)
async def test_worker_sigkill_mid_stream_recovers_through_unknown_to_one_canonical_turn(
    kafka_bootstrap: str, tmp_path: Path, adapter: str, model: str, generation: int
) -> None:
    from turnledger.processors.topics import ensure_topics

    prefix = f"t-crash-{uuid.uuid4().hex[:8]}-"
    await ensure_topics(kafka_bootstrap, Topics(prefix=prefix), 1)
    processor = _start_processor(kafka_bootstrap, prefix)
    # the first request streams slowly so the kill lands mid-stream; later reads are fast. The kill
    # follows STREAMING only after a processor commit and the manifests tail: 300 ms an event leaves a
    # 7-13 event answer 2-4 s to be killed in (60 ms gave 0.4-0.8 s, as little as test_worker_sharding's
    # 40 ms, which a loaded CI machine once let finish first)
    plan = FaultPlan(by_request={0: (Fault(FaultKind.SLOW, 300),)})
    decisions: list[DispatchDecision] = []
    stop = asyncio.Event()

    async def on_batch(records: list[Frozen]) -> None:
        decisions.extend(r for r in records if isinstance(r, DispatchDecision))

    async def wait_for(pred, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
        deadline = asyncio.get_running_loop().time() + timeout
        while not pred():
            assert asyncio.get_running_loop().time() < deadline, [(d.state, d.reason) for d in decisions]
            await asyncio.sleep(0.05)

    workers: list[subprocess.Popen[bytes]] = []
    try:
        async with FakeProvider(seed=5, fault_plan=plan) as fp:
            tail = asyncio.create_task(
                tail_topic(kafka_bootstrap, Topics(prefix).manifests, on_batch, stop=stop)
            )
            cmd = _worker_cmd(kafka_bootstrap, prefix, fp.base_url, tmp_path)
            env = {**os.environ, **fp.keys.as_env()}  # the worker reads the credentials the fake checks
            workers.append(subprocess.Popen(cmd, start_new_session=True, env=env))
            async with GatewayClient(kafka_bootstrap, topic=Topics(prefix).ingress) as client:
                await client.submit_user_turn("conv-crash", "weather in Oslo?")
                await client.request_dispatch(
                    "conv-crash", operation_id="op-crash", adapter=adapter, provider=adapter.split("-")[0],
                    model_revision=model, tools=DEMO_TOOLS, max_output_tokens=512,
                )  # fmt: skip
                await wait_for(lambda: any(d.state == S.STREAMING for d in decisions))
                os.kill(workers[0].pid, signal.SIGKILL)
                workers[0].wait()
                workers.append(subprocess.Popen(cmd, start_new_session=True, env=env))
                await wait_for(lambda: any(d.state == S.COMMITTED for d in decisions), 90)
            await _processor_caught_up(kafka_bootstrap, prefix)
            stop.set()
            await tail
            requests = list(fp.requests)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
                w.wait(timeout=20)
        _stop_processor(processor)
    recovered = [d for d in decisions if d.state == S.UNKNOWN and d.reason == ReasonCode.WORKER_RECOVERED]
    assert len(recovered) == 1
    committed = [d for d in decisions if d.state == S.COMMITTED]
    assert len(committed) == 1 and committed[0].attempt_generation == generation
    evidence = await read_all(kafka_bootstrap, prefix)
    turns = [t for t in evidence.of("committed", CommittedTurn) if t.operation_id == "op-crash"]
    assert len(turns) == 1 and turns[0].attempt_generation == generation
    assert all(c.ok for c in all_checks(evidence, requests)), [
        (c.name, c.examples) for c in all_checks(evidence, requests) if not c.ok
    ]
