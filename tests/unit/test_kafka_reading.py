"""`kafka/reading.py` without a broker: `wait_for_partitions` (a topic's partitions once the client's
metadata knows them; a topic the brokers answered without is missing, one the client could not ask about
is an outage), `read_to_end` (every partition from its start to the end seen when the call began, in
per-partition batches), `partitions_of`, `start_reader`, `source_record`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition

from turnledger.errors import KafkaUnavailableError, MissingTopicError
from turnledger.kafka import reading
from turnledger.kafka.reading import (
    end_offsets,
    partitions_of,
    read_to_end,
    source_record,
    start_reader,
    told_as,
    wait_for_partitions,
)
from turnledger.records import SourceRecord
from turnledger.retry import FOREVER, NO_WAIT


class Client:
    def __init__(self, refreshes: list[bool]) -> None:
        self.refreshes, self.asked = refreshes, 0

    async def force_metadata_update(self) -> bool:
        self.asked += 1
        return self.refreshes.pop(0) if self.refreshes else True


class Consumer:
    """`partitions_for_topic` knows the topic from its `known_after`-th question on (None: never)."""

    def __init__(self, known_after: int | None, refreshes: list[bool] | None = None) -> None:
        self.known_after, self.questions = known_after, 0
        self._client = Client(refreshes or [])

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self.questions += 1
        if self.known_after is None or self.questions < self.known_after:
            return None
        return {2, 0, 1}


async def test_known_partitions_come_back_sorted_without_a_refresh() -> None:
    consumer = Consumer(known_after=1)
    assert await wait_for_partitions(consumer, "k:1", "t") == [TopicPartition("t", p) for p in (0, 1, 2)]  # type: ignore[arg-type]
    assert consumer._client.asked == 0


async def test_a_topic_the_metadata_learns_after_a_refresh() -> None:
    consumer = Consumer(known_after=3)
    assert await wait_for_partitions(consumer, "k:1", "t", timeout_s=30) == [  # type: ignore[arg-type]
        TopicPartition("t", p) for p in (0, 1, 2)
    ]
    assert (consumer.questions, consumer._client.asked) == (3, 2)


async def test_a_topic_the_brokers_answered_without_is_missing() -> None:
    consumer = Consumer(known_after=None)
    with pytest.raises(MissingTopicError) as raised:
        await wait_for_partitions(consumer, "k:1", "t", timeout_s=0.05)  # type: ignore[arg-type]
    assert str(raised.value) == str(MissingTopicError("t", "k:1")) and consumer._client.asked >= 1


async def test_a_topic_the_client_could_not_ask_about_is_an_outage() -> None:
    consumer = Consumer(known_after=None, refreshes=[False] * 1000)
    with pytest.raises(KafkaUnavailableError) as raised:
        await wait_for_partitions(consumer, "k:1", "t", timeout_s=0.05)  # type: ignore[arg-type]
    assert (raised.value.bootstrap, raised.value.action, raised.value.cause) == (
        "k:1",
        "read the partitions of 't'",
        None,
    )


async def test_only_the_last_refresh_counts() -> None:
    """Brokers that failed once and then answered without the topic: it is missing."""
    consumer = Consumer(known_after=None, refreshes=[False])
    with pytest.raises(MissingTopicError):
        await wait_for_partitions(consumer, "k:1", "t", timeout_s=0.25)  # type: ignore[arg-type]
    assert consumer._client.asked >= 2


class Clock:
    """`reading.asyncio` on a clock that moves only when the reader sleeps, by `step` a sleep."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.sleeps = 0.0, step, 0

    def __getattr__(self, name: str) -> object:
        return getattr(asyncio, name)

    def get_running_loop(self) -> Clock:
        return self

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds == 0.1
        self.sleeps += 1
        self.now += self.step


async def test_the_metadata_is_refreshed_until_the_deadline_is_passed_not_reached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five seconds by default, a refresh each 0.1 s; at the deadline itself it looks once more."""
    clock = Clock(step=1.0)
    monkeypatch.setattr(reading, "asyncio", clock)
    consumer = Consumer(known_after=None)
    with pytest.raises(MissingTopicError):
        await wait_for_partitions(consumer, "k:1", "t")  # type: ignore[arg-type]
    assert (consumer._client.asked, consumer.questions, clock.now) == (6, 7, 6.0)


async def test_a_deadline_passed_before_any_refresh_is_a_missing_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client's own metadata (fetched when it started) answered without the topic."""
    monkeypatch.setattr(reading, "asyncio", Clock(step=1.0))
    consumer = Consumer(known_after=None)
    with pytest.raises(MissingTopicError):
        await wait_for_partitions(consumer, "k:1", "t", timeout_s=-1)  # type: ignore[arg-type]
    assert consumer._client.asked == 0


# ------------------------------------------------------------------------------------ reading to the end


@dataclass(frozen=True)
class Message:
    """What `source_record` reads of aiokafka's `ConsumerRecord`."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def msg(tp: TopicPartition, offset: int) -> Message:
    return Message(tp.topic, tp.partition, offset, b"k", f"v{offset}".encode(), 1_000 + offset)


A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Log:
    """A consumer over fixed partitions' logs (`logs[tp]` holds offsets from `starts[tp]` on), whose
    fetches give at most `per_fetch` records a partition; its calls recorded."""

    def __init__(
        self, logs: dict[TopicPartition, list[int]], starts: dict[TopicPartition, int], per_fetch: int
    ) -> None:
        self.logs, self.starts, self.per_fetch = logs, starts, per_fetch
        self.positions: dict[TopicPartition, int] = {}
        self.calls: list[tuple[Any, ...]] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("assign", partitions))

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.starts[tp] for tp in partitions}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", tp, offset))
        self.positions[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.positions.get(tp, self.starts[tp])

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.starts[tp] + len(self.logs[tp]) for tp in partitions}

    async def getmany(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, list[Message]]:
        self.calls.append(("getmany", sorted(tps), timeout_ms, max_records))
        fetched = {}
        for tp in sorted(tps):
            at = self.positions[tp]
            offsets = [o for o in self.logs[tp] if o >= at][: min(self.per_fetch, max_records)]
            if offsets:
                fetched[tp] = [msg(tp, o) for o in offsets]
                self.positions[tp] = offsets[-1] + 1
        return fetched


async def _read(consumer: Log, **options: Any) -> list[list[tuple[int, int]]]:
    return [
        [(r.partition, r.offset) for r in batch]
        async for batch in read_to_end(consumer, [A, B], **options)  # type: ignore[arg-type]
    ]


async def test_every_partition_is_read_from_its_beginning_to_its_end_in_per_partition_batches() -> None:
    consumer = Log({A: [0, 1, 2, 3, 4], B: [7, 8]}, {A: 0, B: 7}, per_fetch=2)
    assert await _read(consumer) == [[(0, 0), (0, 1)], [(1, 7), (1, 8)], [(0, 2), (0, 3)], [(0, 4)]]
    assert consumer.calls[:3] == [("assign", [A, B]), ("seek", A, 0), ("seek", B, 7)]
    assert [c for c in consumer.calls if c[0] == "getmany"] == [
        ("getmany", [A, B], 200, 1000),
        ("getmany", [A], 200, 1000),
        ("getmany", [A], 200, 1000),
    ]


async def test_a_read_from_given_offsets_and_in_smaller_batches() -> None:
    consumer = Log({A: [0, 1, 2, 3, 4], B: [7, 8]}, {A: 0, B: 7}, per_fetch=10)
    assert await _read(consumer, start={A: 3}, batch=1) == [[(0, 3)], [(1, 7)], [(0, 4)], [(1, 8)]]
    assert consumer.calls[1:3] == [("seek", A, 3), ("seek", B, 7)]
    assert {c[3] for c in consumer.calls if c[0] == "getmany"} == {1}


async def test_records_past_the_end_seen_at_the_start_are_not_read() -> None:
    """The end is the last stable offset when the call began: what arrives later is left for later."""
    consumer = Log({A: [0, 1], B: []}, {A: 0, B: 0}, per_fetch=10)
    ends = {A: 1, B: 0}

    async def end_offsets(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: ends[tp] for tp in partitions}

    consumer.end_offsets = end_offsets  # type: ignore[method-assign]
    assert await _read(consumer) == [[(0, 0)]]


async def test_partitions_already_at_their_end_are_not_fetched() -> None:
    consumer = Log({A: [], B: []}, {A: 4, B: 0}, per_fetch=10)
    assert await _read(consumer) == [] and [c for c in consumer.calls if c[0] == "getmany"] == []


async def _read_telling(consumer: Log, **options: Any) -> list[tuple[str, Any]]:
    """The batches read and the progress told, in the order they came."""
    told: list[tuple[str, Any]] = []
    async for batch in read_to_end(
        consumer,  # type: ignore[arg-type]
        [A, B],
        progress=lambda done, total: told.append(("progress", (done, total))),
        **options,
    ):
        told.append(("batch", [(r.partition, r.offset) for r in batch]))
    return told


async def test_the_progress_is_the_offsets_passed_of_those_to_the_end_told_after_each_fetch() -> None:
    """Total first (5 offsets of A, 2 of B), then the offsets passed once the fetch's batches were
    handled: the caller has applied what the progress counts."""
    consumer = Log({A: [0, 1, 2, 3, 4], B: [7, 8]}, {A: 0, B: 7}, per_fetch=2)
    assert await _read_telling(consumer) == [
        ("progress", (0, 7)),
        ("batch", [(0, 0), (0, 1)]),
        ("batch", [(1, 7), (1, 8)]),
        ("progress", (4, 7)),
        ("batch", [(0, 2), (0, 3)]),
        ("progress", (6, 7)),
        ("batch", [(0, 4)]),
        ("progress", (7, 7)),
    ]


async def test_the_progress_counts_from_where_the_read_starts_and_not_past_the_end() -> None:
    """A from 3 of 5 (2 to read), B sought past its end (nothing to read, nothing counted)."""
    consumer = Log({A: [0, 1, 2, 3, 4], B: [7, 8]}, {A: 0, B: 7}, per_fetch=10)
    assert await _read_telling(consumer, start={A: 3, B: 12}) == [
        ("progress", (0, 2)),
        ("batch", [(0, 3), (0, 4)]),
        ("progress", (2, 2)),
    ]


async def test_offsets_without_a_record_count_so_the_progress_ends_at_the_end() -> None:
    """A transaction's marker at offset 2 takes an offset and yields no record: 4 records, 5 offsets.
    Offset 5 came after the read began: fetched past the end, not counted."""
    consumer = Log({A: [0, 1, 3, 4, 5], B: []}, {A: 0, B: 0}, per_fetch=3)

    async def end_offsets(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {A: 5, B: 0}

    consumer.end_offsets = end_offsets  # type: ignore[method-assign]
    assert await _read_telling(consumer) == [
        ("progress", (0, 5)),
        ("batch", [(0, 0), (0, 1), (0, 3)]),
        ("progress", (4, 5)),
        ("batch", [(0, 4)]),
        ("progress", (5, 5)),
    ]


async def test_a_fetch_that_moves_nothing_tells_nothing_and_nothing_to_read_is_done_at_once() -> None:
    consumer = Log({A: [0, 1], B: []}, {A: 0, B: 0}, per_fetch=10)
    fetch, fetches = consumer.getmany, []

    async def getmany(*tps: TopicPartition, timeout_ms: int, max_records: int) -> dict[TopicPartition, Any]:
        fetches.append(tps)
        if len(fetches) == 1:
            return {}  # the fetch timed out
        return await fetch(*tps, timeout_ms=timeout_ms, max_records=max_records)

    consumer.getmany = getmany  # type: ignore[method-assign]
    assert await _read_telling(consumer) == [
        ("progress", (0, 2)),
        ("batch", [(0, 0), (0, 1)]),
        ("progress", (2, 2)),
    ]
    assert len(fetches) == 2
    assert await _read_telling(Log({A: [], B: []}, {A: 4, B: 0}, per_fetch=10)) == [("progress", (0, 0))]


def test_a_progress_told_as_a_name_tells_that_name_first_and_none_stays_none() -> None:
    told: list[tuple[str, int, int]] = []
    as_ingress = told_as(lambda *t: told.append(t), "ingress")
    assert as_ingress is not None
    as_ingress(3, 7)
    assert told == [("ingress", 3, 7)]
    assert told_as(None, "ingress") is None


def test_a_consumer_record_becomes_a_source_record() -> None:
    assert source_record(msg(B, 8)) == SourceRecord("t", 1, 8, b"k", b"v8", 1_008)


class Metadata:
    def __init__(self, partitions: dict[str, set[int]]) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.partitions.get(topic)


class MetadataClient:
    def __init__(self, partitions: dict[str, set[int]]) -> None:
        self.partitions = partitions

    async def fetch_all_metadata(self) -> Metadata:
        return Metadata(self.partitions)


class Described:
    def __init__(self, partitions: dict[str, set[int]]) -> None:
        self._client = MetadataClient(partitions)


async def test_the_partitions_of_topics_come_in_topic_order_each_sorted() -> None:
    consumer = Described({"b": {1, 0}, "a": {2, 0, 1}})
    assert await partitions_of(consumer, "k:1", ["b", "a"]) == [  # type: ignore[arg-type]
        TopicPartition("b", 0),
        TopicPartition("b", 1),
        TopicPartition("a", 0),
        TopicPartition("a", 1),
        TopicPartition("a", 2),
    ]


async def test_a_topic_without_partitions_is_missing_not_waited_for() -> None:
    with pytest.raises(MissingTopicError) as raised:
        await partitions_of(Described({"a": {0}, "b": set()}), "k:1", ["a", "b"])  # type: ignore[arg-type]
    assert (raised.value.topic, raised.value.bootstrap) == ("b", "k:1")


async def test_a_reader_is_a_read_committed_consumer_with_room_for_large_fetches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[tuple[str, dict[str, Any]]] = []
    started: list[dict[str, Any]] = []

    def read_committed_consumer(bootstrap: str, **options: Any) -> str:
        built.append((bootstrap, options))
        return "consumer"

    async def start_client(make: Any, **kwargs: Any) -> Any:
        started.append(kwargs)
        return make()

    monkeypatch.setattr(reading, "read_committed_consumer", read_committed_consumer)
    monkeypatch.setattr(reading, "start_client", start_client)
    stop = asyncio.Event()
    assert await start_reader("k:1") == "consumer"
    assert (
        await start_reader("k:1", fetch_max_wait_ms=5, backoff=FOREVER, stop=stop, action="audit")
        == "consumer"
    )
    big = 4 * 1024 * 1024
    assert built == [
        ("k:1", {"fetch_max_wait_ms": 100, "max_partition_fetch_bytes": big}),
        ("k:1", {"fetch_max_wait_ms": 5, "max_partition_fetch_bytes": big}),
    ]
    assert started == [
        {"bootstrap": "k:1", "action": "read topics", "backoff": NO_WAIT, "stop": None},
        {"bootstrap": "k:1", "action": "audit", "backoff": FOREVER, "stop": stop},
    ]


async def test_end_offsets_are_a_plain_dict() -> None:
    consumer = Log({A: [0, 1]}, {A: 3}, per_fetch=1)
    ends = await end_offsets(consumer, [A])  # type: ignore[arg-type]
    assert (ends, type(ends)) == ({A: 5}, dict)
