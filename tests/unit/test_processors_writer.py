"""BatchWriter: one record batch per target partition, the transaction's tag on the first record of
every batch (a partition whose records overflow one batch gets a second, tagged too), and nothing
else about the records changed."""

from __future__ import annotations

import asyncio
from typing import Any

from turnledger.processors.txn_tag import HEADER, TxnTag
from turnledger.processors.writer import BatchWriter

TAG = TxnTag(7, 3, 12)


class _Batch:
    """Holds `capacity` records, then refuses (as aiokafka's BatchBuilder does when full)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[dict[str, Any]] = []

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: int | None, **rest: Any) -> object:
        if len(self.records) == self.capacity:
            return None
        self.records.append({"key": key, "value": value, "timestamp": timestamp, **rest})
        return object()


class _Producer:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.sent: list[tuple[str, int, _Batch]] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2}

    def create_batch(self) -> _Batch:
        return _Batch(self.capacity)

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[object]:
        self.sent.append((topic, partition, batch))
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


async def test_exactly_one_header_per_batch_on_its_first_record() -> None:
    producer = _Producer(capacity=2)
    records = [("out", 0, b"a", b"1"), ("log", 1, b"b", b"2"), ("out", 0, b"c", b"3"), ("out", 0, b"d", b"4")]
    records += [("out", 0, b"e", b"5"), ("out", 0, b"f", b"6"), ("out", 0, b"g", None)]
    futures = await BatchWriter(producer).write(records, TAG)  # type: ignore[arg-type]

    assert len(futures) == len(producer.sent) == 4
    tagged = [(HEADER, b"\x01" + bytes.fromhex("00000000000000070003000000000000000c"))]
    layout = [
        (topic, partition, [(r["key"], r["value"], r.get("headers")) for r in batch.records])
        for topic, partition, batch in producer.sent
    ]
    assert layout == [
        ("out", 0, [(b"a", b"1", tagged), (b"c", b"3", None)]),
        ("out", 0, [(b"d", b"4", tagged), (b"e", b"5", None)]),
        ("out", 0, [(b"f", b"6", tagged), (b"g", None, None)]),
        ("log", 1, [(b"b", b"2", tagged)]),
    ]
    assert all(r["timestamp"] is None for _t, _p, b in producer.sent for r in b.records)


async def test_without_a_tag_no_record_carries_a_header() -> None:
    """The benchmarks' raw copy loops write with no transaction tag (bench_processor, bench_scaling)."""
    producer = _Producer(capacity=2)
    records = [("out", 0, b"a", b"1"), ("out", 0, b"b", b"2"), ("out", 0, b"c", b"3")]
    futures = await BatchWriter(producer).write(records)  # type: ignore[arg-type]

    assert len(futures) == 2
    assert [[r.get("headers") for r in batch.records] for _t, _p, batch in producer.sent] == [
        [None, None],
        [None],
    ]
