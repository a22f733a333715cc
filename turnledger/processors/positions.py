"""Positioning a freshly assigned aiokafka consumer without racing its initial offset reset.

`consumer.assign()` starts an asynchronous reset of the partition's position (committed
offset, else `auto_offset_reset`). aiokafka 0.14 keeps a single "awaiting reset" flag per
partition, not the strategy that set it: a `seek_to_beginning()` / `seek_to_end()` issued
while the assignment's reset is in flight is answered with the in-flight reset's offset
when that uses another strategy (e.g. the end, with the default `auto_offset_reset="latest"`),
and the partition is silently read from the wrong place. An explicit `seek()` clears the
flag and wins, but only the reset's own completion makes the position settled for sure.

So: wait for the first position, then seek explicitly to an offset we resolved ourselves.
The same fix as `turnledger.projections.topic_source.seek_all`.
"""

from __future__ import annotations

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
