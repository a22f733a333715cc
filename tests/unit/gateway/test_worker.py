"""The dispatch worker against the real fold (in-memory ledger) and the fake provider, faults included."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.unit.gateway.ledger import InMemoryLedger
from turnledger.fake_provider import FakeProvider, FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.gateway.client import EventFactory, stream_policy
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.tool_executor import DEMO_TOOLS, ToolExecutor
from turnledger.gateway.worker import GIVE_UP_PREFIX, DispatchWorker, WorkerConfig, gave_up
from turnledger.model.events import (
    AttemptTerminated,
    CancelRequested,
    CommittedTurn,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    PreviewRetracted,
    Quarantined,
    StreamDeltas,
    StreamEnded,
    StreamOutcome,
    ToolCallReady,
)
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.runs import expand
from turnledger.topology import Stream

MODELS = {
    "anthropic-messages@1": ("anthropic", "anthropic/claude-sonnet-4@2025-05"),
    "openai-chat@1": ("openai", "openai/gpt-4o@2024-08"),
    "openai-responses@1": ("openai", "openai/gpt-4.1@2025-04"),
}


class Harness:
    def __init__(self, ledger: InMemoryLedger, fp: FakeProvider, worker: DispatchWorker) -> None:
        self.ledger, self.fp, self.worker = ledger, fp, worker
        self.factory = EventFactory()

    async def converse(
        self,
        conv: str,
        adapter: str,
        text: str = "weather in Paris?",
        op: str = "op-1",
        tools: bool = True,
        policy: dict | None = None,  # type: ignore[type-arg]
    ) -> None:
        await self.ledger.append(self.factory.user_turn(conv, text))
        await self.request(conv, adapter, op, tools=tools, policy=policy)

    async def request(
        self,
        conv: str,
        adapter: str,
        op: str,
        tools: bool = True,
        policy: dict | None = None,  # type: ignore[type-arg]
    ) -> None:
        """A dispatch request with the adapter's streaming policy unless `policy` is given."""
        provider, model = MODELS[adapter]
        await self.ledger.append(
            DispatchRequested(
                **self.factory.stamp(conv),
                operation_id=op,
                adapter=adapter,
                provider=provider,
                model_revision=model,
                tools=DEMO_TOOLS if tools else (),
                max_output_tokens=512,
                policy=stream_policy(adapter) if policy is None else policy,
            )
        )

    async def wait_state(
        self, op: str, state: DispatchState, timeout: float = 10.0, conversation: str = "c1"
    ) -> DispatchDecision:
        key = (conversation, op)
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            latest = self.worker.board.latest.get(key)
            if latest is not None and latest.state == state and not self.worker.busy:
                return latest
            await asyncio.sleep(0.02)
        raise AssertionError(f"{key} not {state}: {self.worker.board.latest.get(key)}")


async def _harness(plan: FaultPlan | None = None, max_attempts: int = 4) -> AsyncIterator[Harness]:
    ledger = InMemoryLedger()
    async with FakeProvider(seed=3, fault_plan=plan) as fp:
        endpoints = endpoints_for(fp.base_url, fp.keys.as_env())
        config = WorkerConfig(settle_timeout_s=10, max_attempts=max_attempts)
        async with DispatchWorker(ledger, endpoints, config=config) as worker:

            async def observe(records: list) -> None:
                await worker.observe(
                    [r for r in records if isinstance(r, (ManifestIssued, DispatchDecision))]
                )

            ledger.subscribe(Stream.MANIFESTS, observe)
            await worker.go_live()
            yield Harness(ledger, fp, worker)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    async for harness in _harness():
        yield harness


@pytest.mark.parametrize("adapter", sorted(MODELS))
async def test_tool_turn_commits_and_sends_exact_bytes(h: Harness, adapter: str) -> None:
    await h.converse("c1", adapter)
    await h.wait_state("op-1", DispatchState.COMMITTED)
    manifest = h.ledger.of_type(ManifestIssued)[0].manifest
    posts = [r for r in h.fp.requests if r.method == "POST"]
    assert len(posts) == 1 and posts[0].body == manifest.request_body.encode()
    calls = h.ledger.of_type(ToolCallReady)
    assert calls and all(json.loads(c.arguments) for c in calls)
    assistant = [t for t in h.ledger.of_type(CommittedTurn) if t.operation_id]
    assert len(assistant) == 1


async def test_tool_loop_second_dispatch_waits_then_answers(h: Harness) -> None:
    executor = ToolExecutor(h.ledger)

    async def run_tools(records: list) -> None:
        await executor.handle([r for r in records if isinstance(r, ToolCallReady)])

    h.ledger.subscribe(Stream.TOOL_CALLS, run_tools)
    await h.converse("c1", "anthropic-messages@1")
    await h.wait_state("op-1", DispatchState.COMMITTED)
    await h.request("c1", "anthropic-messages@1", "op-2")
    await h.wait_state("op-2", DispatchState.COMMITTED)
    last = next(t for t in h.ledger.of_type(CommittedTurn) if t.operation_id == "op-2")
    assert [b.kind for b in last.blocks] == ["text"]


@pytest.mark.parametrize(
    ("adapter", "fault"),
    [
        ("anthropic-messages@1", "missing_stop"),
        ("anthropic-messages@1", "truncate_tool_args"),
        ("openai-chat@1", "error_event"),
        ("openai-chat@1", "disconnect_at_byte=400"),
        ("anthropic-messages@1", "disconnect_at_byte=300"),
        ("openai-responses@1", "duplicate_event=3"),
        ("anthropic-messages@1", "slow_ms=2"),
    ],
)
async def test_fault_on_first_request_then_new_generation_commits(adapter: str, fault: str) -> None:
    kind, _, value = fault.partition("=")
    plan = FaultPlan(by_request={0: (Fault(FaultKind(kind), int(value) if value else None),)})
    async for h in _harness(plan):
        await h.converse("c1", adapter)
        final = await h.wait_state("op-1", DispatchState.COMMITTED)
        assistant = [t for t in h.ledger.of_type(CommittedTurn) if t.operation_id]
        assert len(assistant) == 1 and assistant[0].attempt_generation == final.attempt_generation
        if kind in ("missing_stop", "truncate_tool_args", "error_event", "disconnect_at_byte"):
            assert final.attempt_generation == 2
        manifest = h.ledger.of_type(ManifestIssued)[0].manifest
        assert all(r.body == manifest.request_body.encode() for r in h.fp.requests if r.method == "POST")


async def test_late_events_are_quarantined_and_answer_commits() -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.MISSING_STOP),), 1: (Fault(FaultKind.LATE_EVENTS, 3),)})
    async for h in _harness(plan):
        await h.converse("c1", "anthropic-messages@1")
        final = await h.wait_state("op-1", DispatchState.COMMITTED)
        assert final.attempt_generation == 2
        assert h.ledger.of_type(Quarantined), "late events must reach the quarantine"


async def test_resumable_responses_stream_recovers_without_new_generation() -> None:
    """background + stream in the request bytes: the provider keeps the response; same generation."""
    plan = FaultPlan(by_request={0: (Fault(FaultKind.DISCONNECT, 3000),)})
    async for h in _harness(plan):
        await h.converse("c1", "openai-responses@1")
        final = await h.wait_state("op-1", DispatchState.COMMITTED)
        assert final.attempt_generation == 1
        post = h.fp.requests[0].json()
        assert (post["stream"], post["background"]) == (True, True)
        assert [r.method for r in h.fp.requests] == ["POST", "GET"]
        assert h.worker.stats.counts["resumes"] == 1


async def test_responses_stream_without_background_is_not_resumed() -> None:
    """Without background mode the real API keeps nothing to resume: a new generation instead."""
    plan = FaultPlan(by_request={0: (Fault(FaultKind.DISCONNECT, 3000),)})
    async for h in _harness(plan):
        await h.converse("c1", "openai-responses@1", policy={"stream": True})
        final = await h.wait_state("op-1", DispatchState.COMMITTED)
        assert final.attempt_generation == 2
        assert [r.method for r in h.fp.requests] == ["POST", "POST"]
        assert h.worker.stats.counts["resumes"] == 0


async def test_exhausted_attempts_give_up_as_a_cancel_with_the_last_reason() -> None:
    plan = FaultPlan(always=(Fault(FaultKind.MISSING_STOP),))
    async for h in _harness(plan, max_attempts=2):
        await h.converse("c1", "anthropic-messages@1")
        final = await h.wait_state("op-1", DispatchState.CANCELLED)
        assert gave_up(final) and final.reason == ReasonCode.WORKER_GAVE_UP
        assert final.detail.startswith(GIVE_UP_PREFIX)
        assert "2 attempts failed" in final.detail and "UNKNOWN" in final.detail
        [cancel] = [e for e in h.ledger.ingress if isinstance(e, CancelRequested)]
        assert cancel.worker_gave_up and cancel.reason == final.detail
        assert len([r for r in h.fp.requests if r.method == "POST"]) == 2
        assert not [t for t in h.ledger.of_type(CommittedTurn) if t.operation_id]
        assert h.worker.stats.counts["gave_up"] == 1


async def test_a_manifest_that_does_not_stream_is_given_up_without_a_send(h: Harness) -> None:
    await h.converse("c1", "openai-chat@1", policy={})
    final = await h.wait_state("op-1", DispatchState.CANCELLED)
    assert gave_up(final) and "does not stream" in final.detail
    assert h.fp.requests == []


async def test_non_resumable_disconnect_retracts_previews_and_commits_new_generation() -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.DISCONNECT, 1200),)})
    async for h in _harness(plan):
        await h.converse("c1", "openai-chat@1", text="tell me something", tools=False)  # text previews
        final = await h.wait_state("op-1", DispatchState.COMMITTED)
        assert final.attempt_generation == 2
        retracted = h.ledger.of_type(PreviewRetracted)
        assert [r.attempt_generation for r in retracted] == [1]
        assistant = [t for t in h.ledger.of_type(CommittedTurn) if t.operation_id == "op-1"]
        assert len(assistant) == 1 and assistant[0].attempt_generation == 2


class _CountingTransport(httpx.AsyncBaseTransport):
    """Counts the body bytes the worker reads from each response and whether it closed them."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.reads: list[_CountingStream] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        counted = _CountingStream(response.stream)
        self.reads.append(counted)
        response.stream = counted
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CountingStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self.inner = inner
        self.bytes_read = 0
        self.exhausted = False
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.bytes_read += len(chunk)
            yield chunk
        self.exhausted = True

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


async def test_cancel_mid_stream_stops_reading_and_closes_the_connection() -> None:
    """A CANCELLED operation is not read to the end: the worker closes the stream at once."""
    slow_ms = 20
    plan = FaultPlan(always=(Fault(FaultKind.SLOW, slow_ms),))
    ledger = InMemoryLedger()
    transport = _CountingTransport()
    async with (
        FakeProvider(seed=3, fault_plan=plan) as fp,
        httpx.AsyncClient(transport=transport, timeout=10.0) as http,
    ):
        # one record per chunk, so three records are three chunks into the stream
        config = WorkerConfig(settle_timeout_s=10, flush_s=0.0)
        async with DispatchWorker(
            ledger, endpoints_for(fp.base_url, fp.keys.as_env()), config=config, http=http
        ) as worker:

            async def observe(records: list) -> None:
                await worker.observe(
                    [r for r in records if isinstance(r, (ManifestIssued, DispatchDecision))]
                )

            ledger.subscribe(Stream.MANIFESTS, observe)
            await worker.go_live()
            h = Harness(ledger, fp, worker)
            await h.converse("c1", "anthropic-messages@1", text="tell me something", tools=False)

            def deltas_appended() -> int:
                return sum(isinstance(e, StreamDeltas) for e in ledger.ingress)

            deadline = asyncio.get_running_loop().time() + 10
            while deltas_appended() < 3:  # well into the stream
                assert asyncio.get_running_loop().time() < deadline, "the stream never started"
                await asyncio.sleep(0.005)
            before_cancel = deltas_appended()
            cancel = CancelRequested(**h.factory.stamp("c1"), operation_id="op-1", reason="user")
            await ledger.append(cancel)
            final = await h.wait_state("op-1", DispatchState.CANCELLED)
            cancelled, confirmed = [
                d for d in ledger.of_type(DispatchDecision) if d.state == DispatchState.CANCELLED
            ]
            assert cancelled.attempt_generation == 1
            assert (cancelled.reason, cancelled.detail, gave_up(cancelled)) == (
                None,
                "user",
                False,
            )  # a client's
            # the stopped read confirms the cancelled attempt terminated: the conversation may go on
            assert final == confirmed and (confirmed.reason, confirmed.attempt_terminated) == (
                ReasonCode.ATTEMPT_TERMINATED,
                True,
            )

            # Before the fix every remaining event became a late block (10 here). Now at most one
            # StreamDeltas can land after the cancel: a chunk whose read completed in the same loop turn
            # as the CANCELLED decision (an append never suspends in this ledger, so none is cut).
            late = [q for q in ledger.of_type(Quarantined) if q.reason == ReasonCode.AFTER_CANCEL]
            assert len(late) <= 1 and all(q.event_type == "StreamDeltas" for q in late)
            assert deltas_appended() - before_cancel == len(late)
            await asyncio.sleep(10 * slow_ms / 1000)  # nothing more arrives later either
            assert deltas_appended() - before_cancel == len(late)

            ended = [e for e in ledger.ingress if isinstance(e, StreamEnded)]
            assert [(e.outcome, e.resumable) for e in ended] == [(StreamOutcome.DISCONNECTED, False)]
            terminated = [e for e in ledger.ingress if isinstance(e, AttemptTerminated)]
            assert [(e.attempt_generation, e.worker_id) for e in terminated] == [(1, "worker-1")]
            assert not [t for t in ledger.of_type(CommittedTurn) if t.operation_id]
            assert worker.stats.counts["cancelled_reads"] == 1
            assert worker.stats.counts["verdict_cancelled"] == 1

            # The connection was closed early: the same request read to its end is much longer.
            [read] = transport.reads
            assert read.closed and not read.exhausted
            [post] = [r for r in fp.requests if r.method == "POST"]
            full = await http.post(
                f"{fp.base_url}{post.path}",
                content=post.body,
                headers={**post.headers, "x-fake-fault": "none"},
            )
            assert full.status_code == 200
            assert 0 < read.bytes_read < len(full.content) / 2


async def test_same_operation_id_in_two_conversations_dispatches_both(h: Harness) -> None:
    """Operation ids are unique per conversation only: the worker keys everything by both."""
    await h.converse("c1", "anthropic-messages@1", text="weather in Paris?", op="op-1")
    await h.converse("c2", "anthropic-messages@1", text="weather in Oslo?", op="op-1")
    for conv in ("c1", "c2"):
        await h.wait_state("op-1", DispatchState.COMMITTED, conversation=conv)
    manifests = {m.manifest.conversation_id: m.manifest for m in h.ledger.of_type(ManifestIssued)}
    posts = sorted(r.body for r in h.fp.requests if r.method == "POST")
    assert posts == sorted(m.request_body.encode() for m in manifests.values())
    assistant = sorted(t.conversation_id for t in h.ledger.of_type(CommittedTurn) if t.operation_id)
    assert assistant == ["c1", "c2"]


def test_gave_up_recognizes_decisions_written_before_the_typed_give_up() -> None:
    base = DispatchDecision(
        conversation_id="c", operation_id="o", state=DispatchState.CANCELLED, conversation_revision=1,
        cancel_generation=1, source_event_id="e", occurred_at_ms=0, detail=GIVE_UP_PREFIX + "2 failed",
    )  # fmt: skip
    assert gave_up(base)  # reason None: an old record, told by its detail
    assert gave_up(base.model_copy(update={"reason": ReasonCode.WORKER_GAVE_UP, "detail": ""}))
    assert not gave_up(base.model_copy(update={"detail": "user"}))
    assert not gave_up(base.model_copy(update={"state": DispatchState.COMMITTED}))
    assert not gave_up(base.model_copy(update={"reason": ReasonCode.AFTER_CANCEL}))


def test_a_refusal_the_fold_settled_is_no_give_up_and_a_worker_refusal_is() -> None:
    """PROVIDER_REFUSED is the reason of the worker's give-up on a refused request and of the fold's
    settle of an answer the provider stopped for a refusal; only the give-up's detail has the prefix."""
    fold = DispatchDecision(
        conversation_id="c", operation_id="o", state=DispatchState.CANCELLED, conversation_revision=1,
        cancel_generation=0, source_event_id="e", occurred_at_ms=0, reason=ReasonCode.PROVIDER_REFUSED,
        detail="stopped with refusal, a refusal",
    )  # fmt: skip
    assert not gave_up(fold)
    assert gave_up(fold.model_copy(update={"detail": GIVE_UP_PREFIX + "the provider refused the request"}))


@pytest.mark.parametrize("flush_s", [0.0, 0.1])
async def test_a_slow_stream_is_appended_at_most_once_per_flush_interval(flush_s: float) -> None:
    """The worker coalesces a stream's deltas (`flush_s`, the CLI's --flush-ms): at most one StreamDeltas
    record per interval, the final delta at once, every delta once and in order, the same committed
    turn as the per-chunk worker (flush_s=0, one record per chunk)."""
    plan = FaultPlan(always=(Fault(FaultKind.SLOW, 20),))
    ledger = InMemoryLedger()
    async with FakeProvider(seed=5, fault_plan=plan) as fp:
        config = WorkerConfig(settle_timeout_s=20, flush_s=flush_s)
        async with DispatchWorker(
            ledger, endpoints_for(fp.base_url, fp.keys.as_env()), config=config
        ) as worker:
            appended_at: list[float] = []

            async def observe(records: list) -> None:  # type: ignore[type-arg]
                await worker.observe(
                    [r for r in records if isinstance(r, (ManifestIssued, DispatchDecision))]
                )

            ledger.subscribe(Stream.MANIFESTS, observe)
            original = ledger.append

            async def stamped(event):  # type: ignore[no-untyped-def]
                if isinstance(event, StreamDeltas):
                    appended_at.append(asyncio.get_running_loop().time())
                return await original(event)

            ledger.append = stamped  # type: ignore[method-assign]
            await worker.go_live()
            h = Harness(ledger, fp, worker)
            await h.converse("c1", "anthropic-messages@1", text="tell me something", tools=False)
            await h.wait_state("op-1", DispatchState.COMMITTED)

    records = [e for e in ledger.ingress if isinstance(e, StreamDeltas)]
    sequences = [p.delta_sequence for e in records for d in e.deltas for p in expand(d)]
    assert sequences == list(range(len(sequences)))
    runs = any(d.following_texts for e in records for d in e.deltas)
    assert runs is (flush_s > 0), "the text deltas of one flush are a run"
    [turn] = [t for t in ledger.of_type(CommittedTurn) if t.operation_id]
    text = "".join(b.text or "" for b in turn.blocks)
    assert text  # the fake's answer, whole
    chunks = sum(1 for r in fp.requests if r.method == "POST")
    assert chunks == 1
    gaps = [b - a for a, b in itertools.pairwise(appended_at)]
    if flush_s:
        # every gap but the last (the final delta goes at once) is at least the interval
        assert all(g >= flush_s - 0.005 for g in gaps[:-1]), gaps
        assert len(records) <= len(sequences) / 2, [len(e.deltas) for e in records]
    else:
        assert len(records) > len(sequences) / 2, [len(e.deltas) for e in records]
