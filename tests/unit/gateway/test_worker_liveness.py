"""Every operation settles with real workers: a worker lost mid-stream, the journal → bind window, a user
speaking mid-stream, a busy conversation. The real fold (in-memory ledger) and the fake provider."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest

from tests.unit.gateway.ledger import InMemoryLedger
from tests.unit.gateway.test_worker import Harness
from turnledger.fake_provider import FakeProvider, FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.gateway.client import WorkerEvents, now_ms
from turnledger.gateway.endpoints import ProviderRoutes, endpoints_for
from turnledger.gateway.journal import WorkerJournal
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.model.events import (
    CancelRequested,
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    ExpiryClaimed,
    HandleBound,
    IngressEvent,
    LeaseRenewed,
    ManifestIssued,
    Quarantined,
    Rejected,
    ReplayStarted,
    ResumeStarted,
    StreamEnded,
    StreamOutcome,
)
from turnledger.model.reasons import ReasonCode
from turnledger.topology import Stream

S = DispatchState
LEASE_S = 1.0
SLOW = FaultPlan(always=(Fault(FaultKind.SLOW, 40),))


class Crash(Exception):
    """Ends a worker's task like a kill would: nothing is appended after it."""


@dataclass
class Node:
    """One worker attached to the shared ledger, which can be killed (it then observes and sends nothing)."""

    worker: DispatchWorker
    http: httpx.AsyncClient
    alive: bool = True

    async def kill(self) -> None:
        self.alive = False
        tasks = [*self.worker._tasks.values(), *self.worker._background]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, BaseException):
                await task


@dataclass
class Cluster:
    ledger: InMemoryLedger
    fp: FakeProvider
    routes: ProviderRoutes
    nodes: list[Node] = field(default_factory=list)

    async def start(
        self, worker_id: str, *, journal: Path | None = None, crash_at: str | None = None
    ) -> Node:
        def hook(point: str) -> None:
            if point == crash_at:
                raise Crash(point)

        config = WorkerConfig(
            worker_id=worker_id,
            settle_timeout_s=10,
            lease_s=LEASE_S,
            sweep_tick_s=0.05,
            claim_grace_s=0.05,
            crash_hook=hook if crash_at else None,
        )
        http = httpx.AsyncClient(timeout=10.0)
        worker = DispatchWorker(
            self.ledger, self.routes, config=config, journal=WorkerJournal(journal), http=http
        )
        node = Node(worker, http)
        for record in [o.record for o in self.ledger.outputs if o.stream == Stream.MANIFESTS]:
            await worker.observe([record])  # catch up, as a worker tailing the topic would

        async def observe(records: list) -> None:  # type: ignore[type-arg]
            if node.alive:
                await worker.observe(
                    [r for r in records if isinstance(r, (ManifestIssued, DispatchDecision, Rejected))]
                )

        self.ledger.subscribe(Stream.MANIFESTS, observe)
        self.ledger.subscribe(Stream.REJECTIONS, observe)  # as gateway/refusal_feed.py does
        await worker.go_live()
        self.nodes.append(node)
        return node

    def latest(self, op: str = "op-1", conv: str = "c1") -> DispatchDecision:
        return [
            d
            for d in self.ledger.of_type(DispatchDecision)
            if (d.conversation_id, d.operation_id) == (conv, op)
        ][-1]

    async def until(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            assert asyncio.get_running_loop().time() < deadline, (
                f"not reached; latest {self.ledger.outputs[-1:]}"
            )
            await asyncio.sleep(0.02)

    def harness(self) -> Harness:
        return Harness(self.ledger, self.fp, self.nodes[0].worker)


@contextlib.asynccontextmanager
async def cluster(plan: FaultPlan | None = SLOW, keeps_keys: bool | None = None) -> AsyncIterator[Cluster]:
    async with FakeProvider(seed=5, fault_plan=plan) as fp:
        routes = endpoints_for(fp.base_url, fp.keys.as_env(), keeps_idempotency_keys=keeps_keys)
        c = Cluster(InMemoryLedger(), fp, routes)
        try:
            yield c
        finally:
            for node in c.nodes:
                if node.alive:
                    await node.worker.close()
                await node.http.aclose()


def _streaming(c: Cluster) -> Callable[[], bool]:
    return lambda: any(d.state == S.STREAMING for d in c.ledger.of_type(DispatchDecision))


def _committed(c: Cluster) -> Callable[[], bool]:
    return lambda: c.latest().state == S.COMMITTED


def _assistant_turns(c: Cluster) -> list[CommittedTurn]:
    return [t for t in c.ledger.of_type(CommittedTurn) if t.operation_id]


async def _lose_worker_a_mid_stream(c: Cluster, adapter: str) -> Harness:
    """worker-a streams the answer to "tell me a story" in c1 (op-1) and is killed mid-stream."""
    a = await c.start("worker-a")
    h = c.harness()
    await h.converse("c1", adapter, text="tell me a story", tools=False)
    await c.until(_streaming(c))
    await a.kill()
    return h


async def test_a_worker_lost_mid_stream_is_replaced_and_the_answer_commits_once() -> None:
    async with cluster() as c:
        await _lose_worker_a_mid_stream(c, "anthropic-messages@1")
        b = await c.start("worker-b")
        await c.until(_committed(c))
        expired = [d for d in c.ledger.of_type(DispatchDecision) if d.reason == ReasonCode.LEASE_EXPIRED]
        assert [(d.state, d.attempt_generation, d.attempt_terminated) for d in expired] == [
            (S.UNKNOWN, 1, True)
        ]
        claims = [e for e in c.ledger.ingress if isinstance(e, ExpiryClaimed)]
        assert claims and all(e.worker_id == "worker-b" for e in claims)
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 2
        assert c.latest().lease_owner is None and b.worker.stats.counts["adopted"] == 1


async def test_a_kept_response_of_a_lost_worker_is_resumed_from_its_handle() -> None:
    async with cluster() as c:
        await _lose_worker_a_mid_stream(c, "openai-responses@1")
        await c.start("worker-b")
        await c.until(_committed(c))
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 1  # the same generation, read again from its handle
        resumes = [e for e in c.ledger.ingress if isinstance(e, ResumeStarted)]
        assert [e.worker_id for e in resumes] == ["worker-b"]
        posts = [r for r in c.fp.requests if r.method == "POST"]
        assert len(posts) == 1  # no second generation was sent


async def test_a_lost_worker_s_attempt_is_replayed_where_the_provider_keeps_keys() -> None:
    async with cluster(keeps_keys=True) as c:
        await _lose_worker_a_mid_stream(c, "anthropic-messages@1")
        await c.start("worker-b")
        await c.until(_committed(c))
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 1
        assert [e.worker_id for e in c.ledger.ingress if isinstance(e, ReplayStarted)] == ["worker-b"]
        posts = [r for r in c.fp.requests if r.method == "POST"]
        assert len(posts) == 2 and posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]


@pytest.mark.parametrize("adapter", ["openai-responses@1", "anthropic-messages@1"])
async def test_a_handle_journaled_but_not_bound_is_bound_through_the_ledger_before_any_use(
    tmp_path: Path, adapter: str
) -> None:
    async with cluster() as c:
        journal = tmp_path / "worker-a.jsonl"
        a = await c.start("worker-a", journal=journal, crash_at="journal-handle")
        h = c.harness()
        await h.converse("c1", adapter, text="tell me a story", tools=False)
        await c.until(lambda: "handle" in journal.read_text())
        await c.until(lambda: not a.worker._tasks)  # crashed between the journal and the HandleBound
        await a.kill()
        assert c.latest().state == S.SENT and not [e for e in c.ledger.ingress if isinstance(e, HandleBound)]
        requests_before = len(c.fp.requests)
        await c.start("worker-a", journal=journal)  # the same worker id restarts with its journal
        await c.until(_committed(c))
        binds = [e for e in c.ledger.ingress if isinstance(e, HandleBound)]
        digest = c.ledger.of_type(ManifestIssued)[0].manifest.manifest_digest
        journaled = [
            json.loads(line)["handle"] for line in journal.read_text().splitlines() if '"handle":"' in line
        ]
        assert binds[0].response_handle == journaled[0] and binds[0].attempt_generation == 1
        assert all(b.manifest_digest == digest for b in binds)
        bound = {b.response_handle for b in binds}
        gets = [r for r in c.fp.requests[requests_before:] if r.method == "GET"]
        assert all(any(handle in r.path for handle in bound) for r in gets)  # only handles the ledger bound
        assert len(gets) == (1 if adapter == "openai-responses@1" else 0)
        assert not [q for q in c.ledger.of_type(Quarantined)]
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == (1 if adapter == "openai-responses@1" else 2)


async def test_a_user_turn_mid_stream_supersedes_and_the_next_dispatch_answers() -> None:
    async with cluster() as c:
        node = await c.start("worker-a")
        h = c.harness()
        await h.converse("c1", "anthropic-messages@1", text="tell me a story", tools=False)
        await c.until(_streaming(c))
        await h.converse("c1", "anthropic-messages@1", text="no, a poem", op="op-2", tools=False)
        await c.until(lambda: c.latest("op-2").state == S.COMMITTED)
        superseded = [
            d
            for d in c.ledger.of_type(DispatchDecision)
            if d.operation_id == "op-1" and d.state == S.CANCELLED
        ]
        assert [d.reason for d in superseded] == [ReasonCode.SUPERSEDED, ReasonCode.ATTEMPT_TERMINATED]
        [turn] = _assistant_turns(c)
        assert turn.operation_id == "op-2"
        assert node.worker.stats.counts["cancelled_reads"] == 1


async def test_a_quiet_attempt_keeps_its_lease_by_heartbeats() -> None:
    async with cluster(plan=FaultPlan(always=(Fault(FaultKind.SLOW, 400),))) as c:
        await c.start("worker-a")
        await c.start("worker-b")
        h = c.harness()
        await h.converse("c1", "anthropic-messages@1", text="hi", tools=False)
        await c.until(_committed(c), timeout=60)
        renewals = [e for e in c.ledger.ingress if isinstance(e, LeaseRenewed)]
        [owner] = {d.lease_owner for d in c.ledger.of_type(DispatchDecision) if d.state == S.DISPATCHING}
        assert renewals and {e.worker_id for e in renewals} == {owner}
        assert not [d for d in c.ledger.of_type(DispatchDecision) if d.reason == ReasonCode.LEASE_EXPIRED]
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 1


@pytest.mark.parametrize(
    ("adapter", "keeps_keys"), [("anthropic-messages@1", True), ("openai-responses@1", None)]
)
async def test_a_kept_attempt_whose_latest_decision_is_a_refused_cas_is_still_continued(
    adapter: str, keeps_keys: bool | None
) -> None:
    """A DispatchAttempt that reaches a kept, open attempt (a worker whose board lagged) is refused with
    OLD_ATTEMPT_NOT_TERMINATED; that refusal is then the operation's latest decision. The worker that
    adopts the operation must continue the kept attempt, not read the refusal's reason as the fold
    terminating it (it then asked for a new generation, was refused again, and the operation stayed
    UNKNOWN until its deadline: the demo's stuck operations of session 25)."""
    async with cluster(keeps_keys=keeps_keys) as c:
        await _lose_worker_a_mid_stream(c, adapter)
        stray = WorkerEvents(c.ledger, "worker-x")
        # the lease runs from worker-a's last sign of life, which may be an append after the latest
        # decision (a slow machine streams long enough for a delta to renew it): no later than the
        # conversation's last event
        last = max(e.occurred_at_ms for e in c.ledger.ingress if e.conversation_id == "c1")
        expires = last + int(LEASE_S * 1000)
        await c.until(lambda: now_ms() > expires)
        await stray.claim_expiry("c1", "op-1", 1)
        assert (c.latest().state, c.latest().reason, c.latest().attempt_terminated) == (
            S.UNKNOWN,
            ReasonCode.LEASE_EXPIRED,
            False,
        )
        manifest = c.ledger.of_type(ManifestIssued)[0].manifest
        await stray.attempt("c1", "op-1", manifest.conversation_revision, manifest.cancel_generation)
        refusal = c.latest()
        assert (refusal.accepted, refusal.state, refusal.reason) == (
            False,
            S.UNKNOWN,
            ReasonCode.OLD_ATTEMPT_NOT_TERMINATED,
        )
        b = await c.start("worker-b")
        await c.until(_committed(c))
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 1  # the kept attempt was continued, no second generation
        refused = [
            d for d in c.ledger.of_type(DispatchDecision) if d.reason == ReasonCode.OLD_ATTEMPT_NOT_TERMINATED
        ]
        assert len(refused) == 1 and b.worker.stats.counts["takeovers"] == 1


async def test_a_prepared_operation_whose_latest_decision_is_a_busy_refusal_is_adopted() -> None:
    """The worker whose CAS was refused with CONVERSATION_BUSY waits for the conversation, then asks
    again. When that worker is lost meanwhile, the refusal stays the operation's latest decision; a
    worker taking the partition over must still attempt the operation once the conversation is free,
    not leave it PREPARED until its deadline."""
    async with cluster() as c:
        h = await _lose_worker_a_mid_stream(c, "anthropic-messages@1")
        await h.converse("c1", "anthropic-messages@1", text="no, a poem", op="op-2", tools=False)
        assert (c.latest("op-1").state, c.latest("op-1").attempt_terminated) == (S.CANCELLED, False)
        [manifest] = [
            m.manifest for m in c.ledger.of_type(ManifestIssued) if m.manifest.operation_id == "op-2"
        ]
        stray = WorkerEvents(c.ledger, "worker-x")
        await stray.attempt("c1", "op-2", manifest.conversation_revision, manifest.cancel_generation)
        refusal = c.latest("op-2")
        assert (refusal.accepted, refusal.state, refusal.reason) == (
            False,
            S.PREPARED,
            ReasonCode.CONVERSATION_BUSY,
        )
        b = await c.start("worker-b")
        await c.until(lambda: c.latest("op-2").state == S.COMMITTED)
        [turn] = _assistant_turns(c)
        assert turn.operation_id == "op-2"
        assert b.worker.stats.counts["adopted"] == 0  # taken with the partition, not a lease period later


CUT_ONCE = FaultPlan(by_request={0: (Fault(FaultKind.DISCONNECT, 400),)})
"""The first answer is cut mid-stream: a provider that keeps keys has the worker replay it."""


async def _converse_around_a_replay(
    c: Cluster,
    around_replay: Callable[[ReplayStarted, Callable[[IngressEvent], Awaitable[None]]], Awaitable[None]],
) -> Node:
    """worker-a streams an answer that CUT_ONCE cuts, with a patient CAS wait (`cas_timeout_s=600`: a
    wait it should not need fails the test's own timeout). `around_replay` appends the worker's
    ReplayStarted, and whatever the test lands next to it, in the order the test needs."""
    node = await c.start("worker-a")
    node.worker.config = replace(node.worker.config, cas_timeout_s=600)
    append = c.ledger.append

    async def wrapped(event: IngressEvent) -> None:
        if isinstance(event, ReplayStarted):
            await around_replay(event, append)
        else:
            await append(event)

    c.ledger.append = wrapped  # type: ignore[method-assign]
    await c.harness().converse("c1", "anthropic-messages@1", text="tell me a story", tools=False)
    return node


async def test_a_cancel_that_lands_just_before_a_replay_confirms_the_attempt_at_once() -> None:
    """The fold refuses a ReplayStarted that finds the operation CANCELLED with a rejection, not a
    decision. The worker waited `cas_timeout_s` for a decision that never came, and the cancelled
    attempt held the conversation (CONVERSATION_BUSY for its next operation) all that time."""
    async with cluster(plan=CUT_ONCE, keeps_keys=True) as c:
        user = WorkerEvents(c.ledger, "user")

        async def cancel_first(
            replay: ReplayStarted, append: Callable[[IngressEvent], Awaitable[None]]
        ) -> None:
            await append(CancelRequested(**user.stamp("c1"), operation_id="op-1", reason="stop"))
            await append(replay)

        await _converse_around_a_replay(c, cancel_first)
        await c.until(lambda: c.latest().state == S.CANCELLED and c.latest().attempt_terminated, timeout=60)
        assert [d.reason for d in c.ledger.of_type(DispatchDecision) if d.state == S.CANCELLED] == [
            None,
            ReasonCode.ATTEMPT_TERMINATED,
        ]
        assert [e.worker_id for e in c.ledger.ingress if isinstance(e, ReplayStarted)] == ["worker-a"]
        assert not _assistant_turns(c)


async def test_a_stray_decision_right_after_a_replay_does_not_end_the_replayed_attempt() -> None:
    """The worker reads the answer to its own ReplayStarted, not the operation's latest decision: a
    refused CAS of another worker that lands right after it (a lagging board's attempt) left the
    worker waiting `cas_timeout_s` for an answer it had already been given, then terminating the
    attempt the provider keeps and paying for a second generation."""
    async with cluster(plan=CUT_ONCE, keeps_keys=True) as c:
        stray = WorkerEvents(c.ledger, "worker-x")

        async def stray_after(
            replay: ReplayStarted, append: Callable[[IngressEvent], Awaitable[None]]
        ) -> None:
            await append(replay)
            manifest = c.ledger.of_type(ManifestIssued)[0].manifest
            await stray.attempt("c1", "op-1", manifest.conversation_revision, manifest.cancel_generation)

        node = await _converse_around_a_replay(c, stray_after)
        await c.until(_committed(c), timeout=60)
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 1
        refusals = [d.reason for d in c.ledger.of_type(DispatchDecision) if not d.accepted]
        assert refusals == [ReasonCode.CAS_STATE_MISMATCH]
        assert node.worker.stats.counts["replays"] == 1
        assert node.worker.stats.counts["terminated"] == 0


async def test_a_replay_refused_because_another_worker_took_the_attempt_ends_the_wait_at_once() -> None:
    """A refused event gets a Rejected, never a decision. worker-a's board lags: another worker claimed
    the attempt's lease and replayed it first, so the fold refuses worker-a's ReplayStarted
    (ILLEGAL_TRANSITION: the attempt is SENT again) and then its AttemptTerminated (LEASE_NOT_HELD).
    Reading only decisions, worker-a waited `cas_timeout_s` (here 600 s) for an answer to its replay and
    held the operation all that time. With the refusals it lets go at once; when worker-x's lease
    runs out too, worker-a's sweeper claims it and continues the attempt the provider keeps."""
    async with cluster(plan=CUT_ONCE, keeps_keys=True) as c:
        other = WorkerEvents(c.ledger, "worker-x")

        taken: list[str] = []

        async def taken_first(
            replay: ReplayStarted, append: Callable[[IngressEvent], Awaitable[None]]
        ) -> None:
            if taken:  # worker-a's replay once it adopted the attempt: nobody is ahead of it now
                await append(replay)
                return
            taken.append(replay.event_id)
            future = now_ms() + 60_000  # past worker-a's lease, whatever it renewed last
            await append(
                ExpiryClaimed(
                    **{**other.stamp("c1"), "occurred_at_ms": future},
                    operation_id="op-1",
                    attempt_generation=replay.attempt_generation,
                    worker_id="worker-x",
                )
            )
            await append(replay.model_copy(update={**other.stamp("c1"), "worker_id": "worker-x"}))
            await append(replay)

        node = await _converse_around_a_replay(c, taken_first)
        await c.until(_committed(c), timeout=60)
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 1
        mine = {
            e.event_id: type(e).__name__
            for e in c.ledger.ingress
            if getattr(e, "worker_id", "") == "worker-a"
        }
        refused = [(mine[r.event_id], r.reason) for r in c.ledger.of_type(Rejected) if r.event_id in mine]
        assert ("ReplayStarted", ReasonCode.ILLEGAL_TRANSITION) in refused
        assert ("AttemptTerminated", ReasonCode.LEASE_NOT_HELD) in refused
        counts = node.worker.stats.counts
        assert (counts["refused_ILLEGAL_TRANSITION"], counts["refused_LEASE_NOT_HELD"]) == (1, 1)
        assert (counts["verdict_lost_lease"], counts["adopted"], counts["settle_timeouts"]) == (1, 1, 0)
        replays = [e.worker_id for e in c.ledger.ingress if isinstance(e, ReplayStarted)]
        assert replays == ["worker-x", "worker-a", "worker-a"]
        keys = {r.headers.get("idempotency-key") for r in c.fp.requests if r.method == "POST"}
        assert len(keys) == 1  # the adopted replay asked for the same response again, not a new one


async def test_a_read_stops_as_soon_as_its_lease_is_claimed() -> None:
    """worker-a reads a slow answer (5 s an event) when its lease is claimed (a future-stamped claim, as
    from a worker whose clock says the lease ran out: worker-a was paused, say). The attempt is no longer
    worker-a's: it stops reading at once instead of paying for the rest of a stream the fold no longer
    keeps, and the next generation (adopted by worker-a's sweeper, as nobody else runs) commits."""
    plan = FaultPlan(by_request={0: (Fault(FaultKind.SLOW, 5_000),)})
    async with cluster(plan=plan) as c:
        a = await c.start("worker-a")
        claimer = WorkerEvents(c.ledger, "worker-x")
        await c.harness().converse("c1", "anthropic-messages@1", text="tell me a story", tools=False)
        await c.until(_streaming(c))
        claim = ExpiryClaimed(
            **{**claimer.stamp("c1"), "occurred_at_ms": now_ms() + 60_000},
            operation_id="op-1",
            attempt_generation=1,
            worker_id="worker-x",
        )
        await c.ledger.append(claim)

        def first_ends() -> list[StreamOutcome]:
            ingress = c.ledger.ingress
            return [e.outcome for e in ingress if isinstance(e, StreamEnded) and e.attempt_generation == 1]

        await c.until(
            lambda: bool(first_ends()), timeout=15
        )  # the slow answer alone would take tens of seconds more
        await c.until(_committed(c), timeout=60)
        [turn] = _assistant_turns(c)
        assert turn.attempt_generation == 2
        ends = [
            e.outcome for e in c.ledger.ingress if isinstance(e, StreamEnded) and e.attempt_generation == 1
        ]
        assert ends == [StreamOutcome.DISCONNECTED]
        counts = a.worker.stats.counts
        assert (counts["lost_lease_reads"], counts["cancelled_reads"], counts["lost_leases"]) == (1, 0, 1)
        expired = [d for d in c.ledger.of_type(DispatchDecision) if d.reason == ReasonCode.LEASE_EXPIRED]
        assert [(d.state, d.attempt_generation, d.attempt_terminated) for d in expired] == [
            (S.UNKNOWN, 1, True)
        ]
