"""A synthetic stream of output records (what the processor would emit) and a transactional producer.

Independent of the dispatch engine on purpose: it exercises every record type the
projection handles, including previews that race their operation's commit.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import AIOKafkaProducer, TopicPartition

from turnledger.codec import encode
from turnledger.model.base import Frozen
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
)
from turnledger.model.graph import Block
from turnledger.model.reasons import ReasonCode
from turnledger.topology import Topics

S = DispatchState


def _block(conv: str, n: int, role: str, revision: int, text: str) -> Block:
    return Block(
        id=f"{conv}-b{n}",
        role=role,
        kind="text",
        turn_id=f"{conv}-t{revision}",
        revision=revision,
        ordering=n,
        trust_label="user" if role == "user" else "model",
        text=text,
    ).with_digest()


def _decision(
    conv: str, op: str, state: DispatchState, prev: DispatchState | None, t: int, **kw: object
) -> Frozen:
    return DispatchDecision(
        conversation_id=conv,
        operation_id=op,
        state=state,
        previous_state=prev,
        conversation_revision=kw.pop("revision", 1),  # type: ignore[arg-type]
        cancel_generation=0,
        source_event_id=f"{op}-e{t}",
        occurred_at_ms=t,
        **kw,  # type: ignore[arg-type]
    )


def conversation(conv: str, t0: int = 1_000) -> list[tuple[str, Frozen]]:
    """One conversation: a user turn, an operation through two attempts, a commit, late blocks."""
    op = f"{conv}-op1"
    out: list[tuple[str, Frozen]] = [
        (
            "committed",
            CommittedTurn(
                conversation_id=conv,
                revision=1,
                turn_id=f"{conv}-t1",
                source_event_id=f"{conv}-e1",
                blocks=(_block(conv, 0, "system", 1, "be brief"), _block(conv, 1, "user", 1, "hi")),
                occurred_at_ms=t0,
            ),
        ),
        ("manifests", _decision(conv, op, S.PREPARED, None, t0 + 1, manifest_digest="sha256:m1")),
        (
            "manifests",
            _decision(
                conv, op, S.DISPATCHING, S.PREPARED, t0 + 2, attempt_generation=1, manifest_digest="sha256:m1"
            ),
        ),
        (
            "manifests",
            _decision(
                conv,
                op,
                S.DISPATCHING,
                S.DISPATCHING,
                t0 + 3,
                accepted=False,
                reason=ReasonCode.CAS_STATE_MISMATCH,
                attempt_generation=1,
                manifest_digest="sha256:m1",
            ),
        ),
    ]
    for seq, (offset, text) in enumerate(((0, "He"), (2, "ll"), (4, "o"))):  # appended: "Hello"
        out.append(
            (
                "previews",
                PreviewUpdated(
                    conversation_id=conv,
                    operation_id=op,
                    attempt_generation=1,
                    block_index=0,
                    text=text,
                    through_sequence=seq,
                    occurred_at_ms=t0 + 4 + seq,
                    text_offset=offset,
                ),
            )
        )
    out.append(
        (
            "previews",
            PreviewRetracted(
                conversation_id=conv,
                operation_id=op,
                attempt_generation=1,
                reason=ReasonCode.STREAM_DISCONNECTED,
                occurred_at_ms=t0 + 8,
            ),
        )
    )
    out.append(
        (
            "previews",
            PreviewUpdated(
                conversation_id=conv,
                operation_id=op,
                attempt_generation=2,
                block_index=0,
                text="Hi there",
                through_sequence=1,
                occurred_at_ms=t0 + 9,
            ),
        )
    )
    out.append(
        (
            "committed",
            CommittedTurn(
                conversation_id=conv,
                revision=2,
                turn_id=f"{conv}-t2",
                source_event_id=f"{conv}-e10",
                operation_id=op,
                attempt_generation=2,
                blocks=(_block(conv, 2, "assistant", 2, "Hi there!"),),
                occurred_at_ms=t0 + 10,
            ),
        )
    )
    out.append(
        (
            "manifests",
            _decision(
                conv,
                op,
                S.COMMITTED,
                S.STREAMING,
                t0 + 11,
                attempt_generation=2,
                manifest_digest="sha256:m1",
                revision=2,
            ),
        )
    )
    out.append(
        (
            "quarantine",
            Quarantined(
                conversation_id=conv,
                operation_id=op,
                attempt_generation=1,
                reason=ReasonCode.STALE_GENERATION,
                event_type="StreamDeltas",
                event_id=f"{conv}-e12",
                occurred_at_ms=t0 + 12,
            ),
        )
    )
    out.append(
        (
            "rejections",
            Rejected(
                conversation_id=conv,
                reason=ReasonCode.INVALID_EVENT,
                detail="bad",
                source_topic="ingress",
                source_partition=0,
                source_offset=t0,
                occurred_at_ms=t0 + 13,
            ),
        )
    )
    # a second operation that is still streaming: its preview must survive
    op2 = f"{conv}-op2"
    out.append(
        ("manifests", _decision(conv, op2, S.STREAMING, S.SENT, t0 + 14, attempt_generation=1, revision=2))
    )
    out.append(
        (
            "previews",
            PreviewUpdated(
                conversation_id=conv,
                operation_id=op2,
                attempt_generation=1,
                block_index=0,
                text="Thinking",
                through_sequence=0,
                occurred_at_ms=t0 + 15,
            ),
        )
    )
    return out


def workload(conversations: int) -> list[tuple[str, Frozen]]:
    out: list[tuple[str, Frozen]] = []
    for i in range(conversations):
        out.extend(conversation(f"conv-{i}", t0=1_000 * (i + 1)))
    return out


def key_of(record: Frozen) -> bytes:
    return str(getattr(record, "conversation_id", "") or "").encode()


async def produce(
    bootstrap: str,
    topics: Topics,
    records: Sequence[tuple[str, Frozen]],
    *,
    per_transaction: int = 10,
    abort_every: int = 0,
    transactional_id: str = "workload",
) -> None:
    """Write the records in transactions of `per_transaction`; with `abort_every=n`, every n-th
    transaction is first written with garbage and aborted (read_committed must never show it)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    await producer.start()
    try:
        for n, start in enumerate(range(0, len(records), per_transaction), start=1):
            chunk = records[start : start + per_transaction]
            if abort_every and n % abort_every == 0:
                await producer.begin_transaction()
                for stream, record in chunk:
                    await producer.send(topics.name(stream), b"aborted garbage", key=key_of(record))
                await producer.abort_transaction()
            async with producer.transaction():
                for stream, record in chunk:
                    await producer.send(topics.name(stream), encode(record), key=key_of(record))
    finally:
        await producer.stop()


async def settled(bootstrap: str, topic_names: Sequence[str], timeout_s: float = 30.0) -> None:
    """Wait until every partition's last stable offset reaches its high watermark.

    `commit_transaction` returns before the coordinator has written the commit markers, so a
    read_committed reader that asks for end offsets right away can see an older stable offset."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await committed.start()
    await uncommitted.start()
    try:
        cluster = await committed._client.fetch_all_metadata()
        tps = [TopicPartition(t, p) for t in topic_names for p in cluster.partitions_for_topic(t) or ()]
        deadline = asyncio.get_running_loop().time() + timeout_s
        while await committed.end_offsets(tps) != await uncommitted.end_offsets(tps):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("open transactions on the output topics")
            await asyncio.sleep(0.05)
    finally:
        await committed.stop()
        await uncommitted.stop()
