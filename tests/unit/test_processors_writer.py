"""BatchWriter: one record batch per target partition, the transaction's tag on the first record of
every batch (a partition whose records overflow one batch gets a second, tagged too), and nothing
else about the records changed."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from turnledger.processors.errors import ProcessorError
from turnledger.processors.txn_tag import HEADER, TxnTag
from turnledger.processors.writer import BatchWriter, key_partition

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
    def __init__(self, capacity: int, partitions: dict[str, set[int]] | None = None) -> None:
        self.capacity = capacity
        self.sent: list[tuple[str, int, _Batch]] = []
        self.partitions = partitions or {}
        self.asked: list[str] = []

    async def partitions_for(self, topic: str) -> set[int]:
        self.asked.append(topic)
        return self.partitions.get(topic, {0, 1, 2})

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


async def test_a_record_without_a_partition_goes_where_the_default_partitioner_puts_its_key() -> None:
    """Partitioned by key as aiokafka's (and Java's) default partitioner does, each topic by its own
    partition count, asked once per topic; a keyless record goes to one of the topic's partitions."""
    producer = _Producer(capacity=10, partitions={"wide": set(range(12)), "narrow": {0, 1}})
    keys = [f"conversation-{i}".encode() for i in range(40)]
    records = [("wide", None, k, b"v") for k in keys] + [("narrow", None, k, b"v") for k in keys]
    random.seed(5)
    await BatchWriter(producer).write([*records, ("narrow", None, None, b"keyless")])  # type: ignore[arg-type]

    assert producer.asked == ["wide", "narrow"]
    placed = {(topic, r["key"]): partition for topic, partition, b in producer.sent for r in b.records}
    reference = DefaultPartitioner()
    for topic, count in (("wide", 12), ("narrow", 2)):
        every = list(range(count))
        expected = {k: reference(k, every, every) for k in keys}
        assert {k: placed[(topic, k)] for k in keys} == expected
        assert {k: key_partition(k, count) for k in keys} == expected
    assert len({placed[("wide", k)] for k in keys}) > 2  # the wide topic's own count, not the narrow one's
    assert placed[("narrow", None)] in (0, 1)


async def test_a_topic_whose_partitions_are_not_0_to_n_is_refused() -> None:
    producer = _Producer(capacity=10, partitions={"gappy": {0, 2, 3}})
    with pytest.raises(ProcessorError) as refused:
        await BatchWriter(producer).write([("gappy", None, b"k", b"v")])  # type: ignore[arg-type]
    assert str(refused.value) == "topic 'gappy' reports partitions [0, 2, 3]"
    assert producer.sent == []


class _TxnManager:
    def __init__(self, pid: int) -> None:
        self.producer_id, self.producer_epoch = pid, 4

    def has_pid(self) -> bool:
        return self.producer_id >= 0


class _Transactional:
    def __init__(self, manager: _TxnManager | None) -> None:
        self._txn_manager = manager


def test_a_producer_s_identity_is_read_only_once_it_has_a_producer_id() -> None:
    """What tags a transaction (`TxnTag`): the producer id and epoch, asked of an initialised
    producer only; one without a transaction manager or without an id is a bug, not a tag."""
    from turnledger.processors.txn_tag import producer_identity

    assert producer_identity(_Transactional(_TxnManager(91))) == (91, 4)  # type: ignore[arg-type]
    for manager in (None, _TxnManager(-1)):
        with pytest.raises(AssertionError, match=r"^the producer is not initialised$"):
            producer_identity(_Transactional(manager))  # type: ignore[arg-type]
