"""Positioning a freshly assigned aiokafka consumer without racing its initial offset reset.

`consumer.assign()` starts an asynchronous reset of the partition's position (committed
offset, else `auto_offset_reset`). aiokafka 0.14 keeps a single "awaiting reset" flag per
partition, not the strategy that set it: a `seek_to_beginning()` / `seek_to_end()` issued
while the assignment's reset is in flight is answered with the in-flight reset's offset
when that uses another strategy (e.g. the end, with the default `auto_offset_reset="latest"`),
and the partition is silently read from the wrong place. An explicit `seek()` clears the
flag and wins, but only the reset's own completion makes the position settled for sure.

So: wait for the first position, then seek explicitly to an offset we resolved ourselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition


async def seek_settled(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int | None) -> int:
    """Position `tp` at `offset`, or at its log start when None, after assign's reset settled.

    Returns the offset sought. Safe to call again later (the position is then already valid)."""
    if offset is None:
        # asked before the reset settles: once it has, the fetcher's first (long-polling) fetch
        # would sit in front of this request on the broker connection
        offset = (await consumer.beginning_offsets([tp]))[tp]
    await consumer.position(tp)
    consumer.seek(tp, offset)
    return offset


async def seek_all(
    consumer: AIOKafkaConsumer, partitions: Iterable[TopicPartition], start: Mapping[TopicPartition, int]
) -> None:
    """`seek_settled` for many partitions: each at `start[tp]`, or at its beginning (asked first, as
    there, before the resets settle and the fetcher's first fetch sits in front of the request)."""
    partitions = list(partitions)
    fresh = [tp for tp in partitions if tp not in start]
    beginnings = await consumer.beginning_offsets(fresh) if fresh else {}
    for tp in partitions:
        await consumer.position(tp)
    for tp in partitions:
        consumer.seek(tp, start[tp] if tp in start else beginnings[tp])
