"""Reading output and ingress topics with read_committed, by static assignment.

No consumer group: whoever reads owns its position (the projector keeps it in Redis,
the replay tools always start from the beginning), so nothing here commits offsets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from turnledger.errors import KafkaUnavailableError, MissingTopicError
from turnledger.records import SourceRecord

DEFAULT_BATCH = 1000


async def start_consumer(bootstrap: str, *, fetch_max_wait_ms: int = 100) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=fetch_max_wait_ms,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    try:
        await consumer.start()
    except (KafkaConnectionError, KafkaError, OSError) as exc:
        await consumer.stop()
        raise KafkaUnavailableError(bootstrap, exc) from exc
    return consumer


async def partitions_of(
    consumer: AIOKafkaConsumer, bootstrap: str, topics: Iterable[str]
) -> list[TopicPartition]:
    """Every partition of `topics`, from fresh cluster metadata; a missing topic is an error, not a wait."""
    cluster = await consumer._client.fetch_all_metadata()  # the public topics() drops partition counts
    out: list[TopicPartition] = []
    for topic in topics:
        parts = cluster.partitions_for_topic(topic)
        if not parts:
            raise MissingTopicError(topic, bootstrap)
        out.extend(TopicPartition(topic, p) for p in sorted(parts))
    return out


async def read_to_end(
    consumer: AIOKafkaConsumer,
    partitions: list[TopicPartition],
    start: Mapping[TopicPartition, int] | None = None,
    batch: int = DEFAULT_BATCH,
) -> AsyncIterator[list[SourceRecord]]:
    """Batches (each from one partition, in offset order) from `start` (default: the beginning) up to
    the last stable offset observed when the call began."""
    consumer.assign(partitions)
    await seek_all(consumer, partitions, start or {})
    ends = await consumer.end_offsets(partitions)
    remaining = {tp for tp in partitions if await consumer.position(tp) < ends[tp]}
    while remaining:
        fetched = await consumer.getmany(*remaining, timeout_ms=200, max_records=batch)
        for tp, records in fetched.items():
            batch_records = [
                SourceRecord(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp)
                for r in records
                if r.offset < ends[tp]
            ]
            if batch_records:
                yield batch_records
        for tp in list(remaining):
            if await consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)


async def seek_all(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], start: Mapping[TopicPartition, int]
) -> None:
    """Position every assigned partition at `start[tp]`, or at its beginning.

    `assign` starts an asynchronous offset reset; a seek issued while it is in flight can be
    overwritten when it completes (seen as a whole partition silently skipped). So first wait
    for every partition to have a position, then seek explicitly."""
    for tp in partitions:
        await consumer.position(tp)
    fresh = [tp for tp in partitions if tp not in start]
    beginnings = await consumer.beginning_offsets(fresh) if fresh else {}
    for tp in partitions:
        consumer.seek(tp, start[tp] if tp in start else beginnings[tp])


async def end_offsets(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    return dict(await consumer.end_offsets(partitions))
