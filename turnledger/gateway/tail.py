"""Reading an output topic: decoded records in batches, with a "caught up" signal.

Readers use `read_committed`, so they only see what the processor's transactions
committed (an aborted batch of a crashed processor is never acted upon). Without a
group id the reader assigns itself every partition and starts at the beginning:
that is how the worker rebuilds its view of every operation after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from turnledger.codec import CodecError, decode
from turnledger.errors import KafkaUnavailableError
from turnledger.model.base import Frozen

log = logging.getLogger(__name__)

OnBatch = Callable[[list[Frozen]], Awaitable[None]]


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
) -> None:
    """Deliver every decodable record of `topic` to `on_batch` until `stop` is set."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=client_id,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        await consumer.start()
    except (KafkaConnectionError, OSError) as exc:
        await consumer.stop()
        raise KafkaUnavailableError(bootstrap, exc, action=f"read {topic!r}") from exc
    try:
        if group_id is None:
            partitions = await topic_partitions(consumer, topic)
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
        else:
            consumer.subscribe([topic])
            ends = {}
        caught_up = on_caught_up is None
        if not caught_up and group_id is None and all(v == 0 for v in ends.values()):
            caught_up = True
            assert on_caught_up is not None
            await on_caught_up()
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=poll_ms, max_records=max_records)
            records: list[Frozen] = []
            for _tp, messages in batches.items():
                for message in messages:
                    if message.value is None:
                        continue
                    try:
                        records.append(decode_record(message.value))
                    except CodecError as exc:
                        log.warning("%s: undecodable record at offset %s: %s", topic, message.offset, exc)
            if records:
                await on_batch(records)
            if group_id is not None and batches:
                await consumer.commit()
            if not caught_up:
                positions = {tp: await consumer.position(tp) for tp in ends}
                if all(positions[tp] >= end for tp, end in ends.items()):
                    caught_up = True
                    assert on_caught_up is not None
                    await on_caught_up()
    except KafkaConnectionError as exc:
        raise KafkaUnavailableError(bootstrap, exc, action=f"read {topic!r}") from exc
    finally:
        await consumer.stop()


def decode_record(data: bytes) -> Frozen:
    """Decode one record of a turnledger topic (every registered schema maps to a `Frozen` model)."""
    record = decode(data)
    if not isinstance(record, Frozen):
        raise CodecError(f"decoded a {type(record).__name__}, which is not a turnledger record")
    return record


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str) -> Sequence[TopicPartition]:
    for _ in range(50):
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        await consumer._client.force_metadata_update()
        await asyncio.sleep(0.1)
    raise KafkaError(f"topic {topic!r} does not exist; create the topics first (turnledger process)")
