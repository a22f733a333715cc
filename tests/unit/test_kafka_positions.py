"""`seek_settled` and `seek_all` (kafka/positions.py) against a consumer that records its calls: the
first position awaited (assign's reset settled) before the explicit seek, the log start asked for only
when no offset is given, and asked before the position (else it would queue behind the first fetch)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

from aiokafka import TopicPartition

from turnledger.kafka.positions import seek_all, seek_settled

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
C = TopicPartition("u", 2)


class _Consumer:
    """Log starts per partition; every call recorded, in order, with its arguments."""

    def __init__(self, beginnings: dict[TopicPartition, int]) -> None:
        self.beginnings = beginnings
        self.calls: list[tuple[Any, ...]] = []

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls.append(("beginning_offsets", list(partitions)))
        await asyncio.sleep(0)
        return {tp: self.beginnings[tp] for tp in partitions}

    async def position(self, tp: TopicPartition) -> int:
        self.calls.append(("position", tp))
        await asyncio.sleep(0)
        return 999  # where assign's reset put it: never what is sought

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", tp, offset))


async def _seek_settled(consumer: _Consumer, tp: TopicPartition, offset: int | None) -> int:
    return await asyncio.wait_for(seek_settled(consumer, tp, offset), 10)


async def _seek_all(
    consumer: _Consumer, partitions: Iterable[TopicPartition], start: dict[TopicPartition, int]
) -> None:
    await asyncio.wait_for(seek_all(consumer, partitions, start), 10)


async def test_seek_settled_without_an_offset_asks_the_beginning_before_the_position_then_seeks_it() -> None:
    consumer = _Consumer({A: 17, B: 3})
    assert await _seek_settled(consumer, A, None) == 17
    assert consumer.calls == [("beginning_offsets", [A]), ("position", A), ("seek", A, 17)]


async def test_seek_settled_at_an_offset_asks_no_beginning() -> None:
    consumer = _Consumer({A: 17})
    assert await _seek_settled(consumer, A, 42) == 42
    assert consumer.calls == [("position", A), ("seek", A, 42)]


async def test_seek_settled_at_offset_zero_seeks_zero_not_the_beginning() -> None:
    consumer = _Consumer({B: 5})
    assert await _seek_settled(consumer, B, 0) == 0
    assert consumer.calls == [("position", B), ("seek", B, 0)]


async def test_seek_settled_again_repeats_the_same_calls() -> None:
    consumer = _Consumer({A: 4})
    assert await _seek_settled(consumer, A, None) == 4
    assert await _seek_settled(consumer, A, 9) == 9
    assert consumer.calls == [
        ("beginning_offsets", [A]), ("position", A), ("seek", A, 4),
        ("position", A), ("seek", A, 9),
    ]  # fmt: skip


async def test_seek_all_asks_fresh_beginnings_once_then_awaits_every_position_then_seeks_in_order() -> None:
    consumer = _Consumer({A: 10, B: 20, C: 30})
    await _seek_all(consumer, [B, A, C], {A: 15})
    assert consumer.calls == [
        ("beginning_offsets", [B, C]),
        ("position", B), ("position", A), ("position", C),
        ("seek", B, 20), ("seek", A, 15), ("seek", C, 30),
    ]  # fmt: skip


async def test_seek_all_with_every_start_given_asks_no_beginning() -> None:
    consumer = _Consumer({})
    await _seek_all(consumer, [A, B], {B: 0, A: 7})
    assert consumer.calls == [("position", A), ("position", B), ("seek", A, 7), ("seek", B, 0)]


async def test_seek_all_without_starts_seeks_every_partition_to_its_beginning() -> None:
    consumer = _Consumer({A: 1, B: 2})
    await _seek_all(consumer, [A, B], {})
    assert consumer.calls == [
        ("beginning_offsets", [A, B]), ("position", A), ("position", B), ("seek", A, 1), ("seek", B, 2),
    ]  # fmt: skip


async def test_seek_all_ignores_starts_of_partitions_not_given() -> None:
    consumer = _Consumer({A: 1})
    await _seek_all(consumer, [A], {C: 5})
    assert consumer.calls == [("beginning_offsets", [A]), ("position", A), ("seek", A, 1)]


async def test_seek_all_of_no_partitions_calls_nothing() -> None:
    consumer = _Consumer({})
    await _seek_all(consumer, [], {A: 1})
    assert consumer.calls == []


async def test_seek_all_takes_partitions_from_a_generator_consumed_once() -> None:
    consumer = _Consumer({A: 1, B: 2})
    drawn: list[TopicPartition] = []

    def partitions() -> Iterator[TopicPartition]:
        for tp in (A, B):
            drawn.append(tp)
            yield tp

    await _seek_all(consumer, partitions(), {A: 6})
    assert drawn == [A, B]
    assert consumer.calls == [
        ("beginning_offsets", [B]), ("position", A), ("position", B), ("seek", A, 6), ("seek", B, 2),
    ]  # fmt: skip
