"""Following an output topic: decoded records in batches, with a "caught up" signal.

Readers use `read_committed`, so they only see what the processor's transactions committed (an
aborted batch of a crashed processor is never acted upon). Without a group id the reader assigns
itself every partition and starts at the beginning; with one it joins that consumer group and
commits its offsets after each handled batch (at least once: a handler must tolerate redelivery). A
group member's consumer is `group_member.py`'s, whose session timeout is its command's
`--session-timeout-ms`: a broker that refuses it ends the reader with a `SessionTimeoutRefusedError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from turnledger.codec import CodecError, decode
from turnledger.kafka.clients import (
    LEAVE_WITHIN_S,
    close_client,
    kafka_outage,
    read_committed_consumer,
    start_client,
)
from turnledger.kafka.group_member import group_member_consumer
from turnledger.kafka.reading import wait_for_partitions
from turnledger.model.base import Frozen
from turnledger.retry import NO_WAIT, Backoff, StopRequested, ride_out

log = logging.getLogger(__name__)

OnBatch = Callable[[list[Frozen]], Awaitable[None]]
T = TypeVar("T")


def decode_record(data: bytes) -> Frozen:
    """Decode one record of a turnledger topic (every registered schema maps to a `Frozen` model)."""
    record = decode(data)
    if not isinstance(record, Frozen):
        raise CodecError(f"decoded a {type(record).__name__}, which is not a turnledger record")
    return record


def _decoded(topic: str, batches: dict[TopicPartition, list[object]]) -> list[Frozen]:
    records: list[Frozen] = []
    for messages in batches.values():
        for message in messages:
            value = message.value  # type: ignore[attr-defined]
            if value is None:
                continue
            try:
                records.append(decode_record(value))
            except CodecError as exc:
                offset = message.offset  # type: ignore[attr-defined]
                log.warning("%s: undecodable record at offset %s: %s", topic, offset, exc)
    return records


async def tail_topic(
    bootstrap: str,
    topic: str,
    on_batch: OnBatch,
    *,
    stop: asyncio.Event,
    group_id: str | None = None,
    on_caught_up: Callable[[], Awaitable[None]] | None = None,
    max_records: int = 2000,
    poll_ms: int = 200,
    client_id: str = "turnledger-reader",
    backoff: Backoff = NO_WAIT,
    session_timeout_ms: int = 10_000,
    heartbeat_interval_ms: int = 3_000,
) -> None:
    """Deliver every decodable record of `topic` to `on_batch` until `stop` is set.

    Kafka outages are ridden out as `backoff` says (`NO_WAIT`: the first one raises
    `KafkaUnavailableError`; services pass `FOREVER`). `session_timeout_ms`, `heartbeat_interval_ms`:
    the group member's (`group_timing.check_heartbeat`); unused without `group_id`."""
    action = f"read {topic!r}"

    def new_consumer() -> AIOKafkaConsumer:
        if group_id is None:
            return read_committed_consumer(bootstrap, group_id=None, client_id=client_id)
        return group_member_consumer(
            bootstrap,
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            client_id=client_id,
        )

    try:
        consumer = await start_client(
            new_consumer,
            bootstrap=bootstrap,
            action=action,
            backoff=backoff,
            stop=stop,
        )
    except StopRequested:
        return
    try:
        await _follow(
            consumer, bootstrap, topic, on_batch, stop, group_id, on_caught_up, max_records, poll_ms, backoff
        )
    except StopRequested:
        return
    finally:
        await close_client(consumer, LEAVE_WITHIN_S if group_id is not None else None)


async def _follow(
    consumer: AIOKafkaConsumer,
    bootstrap: str,
    topic: str,
    on_batch: OnBatch,
    stop: asyncio.Event,
    group_id: str | None,
    on_caught_up: Callable[[], Awaitable[None]] | None,
    max_records: int,
    poll_ms: int,
    backoff: Backoff,
) -> None:
    classify = kafka_outage(bootstrap, f"read {topic!r}")
    waiting_for = f"Kafka at {bootstrap} to read {topic!r}"

    def riding_out(attempt: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        return ride_out(attempt, waiting_for=waiting_for, classify=classify, backoff=backoff, stop=stop)

    async def from_the_beginning() -> dict[TopicPartition, int]:
        partitions = await wait_for_partitions(consumer, bootstrap, topic)
        consumer.assign(list(partitions))
        await consumer.seek_to_beginning(*partitions)
        offsets: dict[TopicPartition, int] = await consumer.end_offsets(list(partitions))
        return offsets

    async def positions() -> dict[TopicPartition, int]:
        return {tp: await consumer.position(tp) for tp in ends}

    ends: dict[TopicPartition, int] = {}
    if group_id is None:
        ends = await riding_out(from_the_beginning)
    else:
        consumer.subscribe([topic])
    caught_up = on_caught_up is None
    if not caught_up and group_id is None and all(v == 0 for v in ends.values()):
        caught_up = True
        assert on_caught_up is not None
        await on_caught_up()

    async def fetch() -> dict[TopicPartition, list[object]]:
        fetched: dict[TopicPartition, list[object]] = await consumer.getmany(
            timeout_ms=poll_ms, max_records=max_records
        )
        return fetched

    while not stop.is_set():
        batches = await riding_out(fetch)
        records = _decoded(topic, batches)
        if records:
            await on_batch(records)
        if group_id is not None and batches:
            try:
                await consumer.commit()
            except KafkaError as exc:  # a rebalance or an outage: the batch is redelivered, at least once
                log.warning(
                    "%s: committing the group's offsets failed (%r); records may be redelivered", topic, exc
                )
        if not caught_up:
            reached = await riding_out(positions)
            if all(reached[tp] >= end for tp, end in ends.items()):
                caught_up = True
                assert on_caught_up is not None
                await on_caught_up()
