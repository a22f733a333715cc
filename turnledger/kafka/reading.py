"""Reading partitions by static assignment: fetched messages as `SourceRecord`s, up to the stable end.

No consumer group here: whoever reads owns its position (the projector keeps it in Redis, the
replay tools start from the beginning, restore reads a changelog partition whole).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnledger.errors import KafkaUnavailableError, MissingTopicError
from turnledger.kafka.clients import read_committed_consumer, start_client
from turnledger.kafka.positions import seek_all
from turnledger.records import SourceRecord
from turnledger.retry import NO_WAIT, Backoff

DEFAULT_BATCH = 1000

ReadProgress = Callable[[int, int], None]
"""`(done, total)` of a `read_to_end`: offsets passed of the offsets between the start and the end seen
when the read began, over every partition read (offsets, not records: transaction markers, aborted and
compacted records take offsets too, and `done` reaches `total` exactly when the read is at its end)."""

NamedProgress = Callable[[str, int, int | None], None]
"""`(name, done, total)`: the `ReadProgress` of each of several reads, told under the read's name (a
topic, a phase of a command); a phase that is no read may tell a total of None, not known yet (a
drop's keys while its SCAN walks)."""


def told_as(progress: NamedProgress | None, name: str) -> ReadProgress | None:
    """The `ReadProgress` of the read named `name`: `progress` told under that name (None: none)."""
    return None if progress is None else partial(progress, name)


def source_record(message: Any) -> SourceRecord:
    """An aiokafka `ConsumerRecord` as the plain record every layer passes around."""
    return SourceRecord(
        message.topic, message.partition, message.offset, message.key, message.value, message.timestamp
    )


async def start_reader(
    bootstrap: str,
    *,
    fetch_max_wait_ms: int = 100,
    backoff: Backoff = NO_WAIT,
    stop: asyncio.Event | None = None,
    action: str = "read topics",
) -> AIOKafkaConsumer:
    """A started read_committed consumer without a group, with room for large fetches."""
    return await start_client(
        lambda: read_committed_consumer(
            bootstrap, fetch_max_wait_ms=fetch_max_wait_ms, max_partition_fetch_bytes=4 * 1024 * 1024
        ),
        bootstrap=bootstrap,
        action=action,
        backoff=backoff,
        stop=stop,
    )


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


async def wait_for_partitions(
    consumer: AIOKafkaConsumer, bootstrap: str, topic: str, timeout_s: float = 5.0
) -> Sequence[TopicPartition]:
    """The partitions of `topic`, refreshing metadata for up to `timeout_s` while it is not known yet
    (a topic created a moment ago reaches the client's metadata a little later).

    Raises `MissingTopicError` when the brokers answered without the topic, and `KafkaUnavailableError`
    (an outage, for the caller to ride out) when the last refresh reached no broker: a topic the client
    could not ask about is not known to be missing."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    refreshed = True
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        if asyncio.get_running_loop().time() > deadline:
            if not refreshed:
                raise KafkaUnavailableError(bootstrap, action=f"read the partitions of {topic!r}")
            raise MissingTopicError(topic, bootstrap)
        refreshed = bool(await consumer._client.force_metadata_update())
        await asyncio.sleep(0.1)


async def read_to_end(
    consumer: AIOKafkaConsumer,
    partitions: list[TopicPartition],
    start: Mapping[TopicPartition, int] | None = None,
    batch: int = DEFAULT_BATCH,
    progress: ReadProgress | None = None,
) -> AsyncIterator[list[SourceRecord]]:
    """Batches (each from one partition, in offset order) from `start` (default: the beginning) up to
    the last stable offset observed when the call began.

    `progress(done, total)` is told the total first (`done` 0), then, after the batches of each fetch
    were handled by the caller, every time `done` moved."""
    consumer.assign(partitions)
    await seek_all(consumer, partitions, start or {})
    ends = await consumer.end_offsets(partitions)
    began = {tp: await consumer.position(tp) for tp in partitions}
    reached = dict(began)
    total = offsets_passed(began, ends, ends)
    if progress is not None:
        progress(0, total)
    done = 0
    remaining = {tp for tp in partitions if began[tp] < ends[tp]}
    while remaining:
        fetched = await consumer.getmany(*remaining, timeout_ms=200, max_records=batch)
        for tp, records in fetched.items():
            batch_records = [source_record(r) for r in records if r.offset < ends[tp]]
            if batch_records:
                yield batch_records
        for tp in list(remaining):
            reached[tp] = await consumer.position(tp)
            if reached[tp] >= ends[tp]:
                remaining.discard(tp)
        passed = offsets_passed(began, reached, ends)
        if progress is not None and passed != done:
            progress(passed, total)
        done = passed


def offsets_passed(
    began: Mapping[TopicPartition, int],
    reached: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> int:
    """Offsets from `began` to `reached` (capped at `ends`), summed over the partitions of `began`."""
    return sum(max(min(reached[tp], ends[tp]) - began[tp], 0) for tp in began)


async def end_offsets(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    return dict(await consumer.end_offsets(partitions))
