"""The worker sees the fold's refusals of its conversations' events through the real rejections topic.

The processor runs as its own process and the worker here (`run_worker`). An event the fold refuses
(a ReplayStarted for an operation that committed: ILLEGAL_TRANSITION) is answered on the rejections
topic only; the worker's board must hold that refusal, keyed by the event, or a worker waiting for
the answer would wait out its timeout (tests/unit/gateway/test_worker_liveness.py shows that wait).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from tests.unit.gateway.decisions import decision
from turnledger.codec import encode
from turnledger.demo.run import _processor_caught_up, _start_processor, _stop_processor
from turnledger.fake_provider import FakeProvider
from turnledger.gateway.board import DecisionBoard
from turnledger.gateway.client import GatewayClient, WorkerEvents
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.refusal_feed import RefusalFeed
from turnledger.gateway.runner import run_worker
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.model.events import DispatchState, Rejected, ReplayStarted
from turnledger.model.reasons import ReasonCode
from turnledger.replay.evidence import read_all
from turnledger.retry import NO_WAIT
from turnledger.topology import Topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

S = DispatchState
ADAPTER, MODEL = "anthropic-messages@1", "anthropic/claude-sonnet-4@2025-05"


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"not reached: {what}"
        await asyncio.sleep(0.05)


async def test_the_worker_s_board_holds_the_refusals_of_the_conversations_it_follows(
    kafka_bootstrap: str,
) -> None:
    from turnledger.processors.topics import ensure_topics

    prefix = f"t-refusals-{uuid.uuid4().hex[:8]}-"
    topics = Topics(prefix)
    # one partition: the stranger's refusal is read before the late one
    await ensure_topics(kafka_bootstrap, topics, 1)
    processor = _start_processor(kafka_bootstrap, prefix)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        async with (
            FakeProvider(seed=8) as fp,
            GatewayClient(kafka_bootstrap, topic=topics.ingress) as client,
        ):
            someone = WorkerEvents(client, "someone")
            # before the worker starts: an operation that stays PREPARED, and a refusal of its conversation
            await client.submit_user_turn("before", "hello")
            await _dispatch(client, "before")
            # generation 0, which WorkerEvents refuses, so built and appended as any producer could:
            # PREPARED, ILLEGAL_TRANSITION
            early = someone.build(
                ReplayStarted, "before", operation_id="op-1", attempt_generation=0, worker_id="someone"
            )
            await client.append(early)
            await _processor_caught_up(kafka_bootstrap, prefix)  # its refusal is on the topic now
            box: list[DispatchWorker] = []
            started = asyncio.Event()
            routes = endpoints_for(fp.base_url, fp.keys.as_env())
            config = WorkerConfig(worker_id="w-refusals")
            run = run_worker(
                kafka_bootstrap,
                routes,
                stop=stop,
                prefix=prefix,
                config=config,
                started=started,
                worker_box=box,
            )
            tasks.append(asyncio.create_task(run))
            await asyncio.wait_for(started.wait(), 90)
            [worker] = box
            await _until(lambda: _state(worker, "before") == S.COMMITTED, "the early operation committed")

            await client.submit_user_turn("live", "hello again")
            await _dispatch(client, "live")
            await _until(lambda: _state(worker, "live") == S.COMMITTED, "the live operation committed")
            stranger = await someone.replay_started("stranger", "op-1", 1)  # a conversation it never saw
            late = await someone.replay_started("live", "op-1", 1)  # COMMITTED: ILLEGAL_TRANSITION
            await _until(lambda: worker.board.refusal(late.event_id) is not None, "the late refusal")
            refusal = worker.board.refusal(late.event_id)
            assert refusal is not None
            assert (refusal.reason, refusal.event_type, refusal.conversation_id, refusal.operation_id) == (
                ReasonCode.ILLEGAL_TRANSITION,
                "ReplayStarted",
                "live",
                "op-1",
            )
            # refused before the worker started, and before its board followed the conversation
            assert worker.board.refusal(early.event_id) is None
            assert worker.board.refusal(stranger.event_id) is None  # read before the late one, not followed
    finally:
        stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=60)
        _stop_processor(processor)
    evidence = await read_all(kafka_bootstrap, prefix)
    refused = {r.event_id: r.reason for r in evidence.of("rejections", Rejected)}
    assert refused == {
        early.event_id: ReasonCode.ILLEGAL_TRANSITION,
        late.event_id: ReasonCode.ILLEGAL_TRANSITION,
        stranger.event_id: ReasonCode.UNKNOWN_OPERATION,
    }


async def _dispatch(client: GatewayClient, conversation_id: str) -> None:
    await client.request_dispatch(
        conversation_id, operation_id="op-1", adapter=ADAPTER, provider="anthropic", model_revision=MODEL,
        max_output_tokens=256,
    )  # fmt: skip


def _state(worker: DispatchWorker, conversation_id: str) -> DispatchState | None:
    latest = worker.board.latest.get((conversation_id, "op-1"))
    return None if latest is None else latest.state


async def test_the_feed_reads_from_where_the_topic_ended_when_it_started(kafka_bootstrap: str) -> None:
    """The feed alone, over two partitions: a rejection already on the topic when it starts is not read,
    even of a conversation the board follows; the next ones on either partition are."""
    from aiokafka import AIOKafkaProducer

    from turnledger.processors.topics import ensure_topics

    prefix = f"t-refusal-feed-{uuid.uuid4().hex[:8]}-"
    topics = Topics(prefix)
    await ensure_topics(kafka_bootstrap, topics, 2)
    board = DecisionBoard()
    for conversation_id in ("c1", "c2"):
        board.apply_nowait(decision("op-1", S.UNKNOWN, conversation_id=conversation_id))

    def rejected(conversation_id: str, event_id: str) -> Rejected:
        return Rejected(
            conversation_id=conversation_id, operation_id="op-1", reason=ReasonCode.LEASE_NOT_HELD,
            event_type="AttemptTerminated", event_id=event_id,
        )  # fmt: skip

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    stop = asyncio.Event()
    try:

        async def send(record: Rejected, partition: int) -> None:
            key = (record.conversation_id or "").encode()
            await producer.send_and_wait(topics.rejections, encode(record), key=key, partition=partition)

        await send(rejected("c1", "before"), 0)
        feed = RefusalFeed(
            board,
            board.apply,
            kafka_bootstrap,
            topics.rejections,
            stop=stop,
            outage=NO_WAIT,
            client_id="t-feed",
        )
        async with feed.following() as positioned:
            assert positioned
            await send(rejected("c1", "after-0"), 0)
            await send(rejected("c2", "after-1"), 1)
            await _until(lambda: feed.delivered == 2, "both later refusals delivered", timeout=60)
            assert [board.refusal(e) is not None for e in ("before", "after-0", "after-1")] == [
                False,
                True,
                True,
            ]
    finally:
        stop.set()
        await producer.stop()
