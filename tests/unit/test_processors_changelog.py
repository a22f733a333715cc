"""processors/changelog.py without a broker: the position record's bytes, what a restore keeps (and
counts, and logs), which offsets `read_position` reads, and how `settle` waits, sweeps and gives up.
The readers are scripted stand-ins and the clock is fake: `settle`'s polls advance it by one second
each. The real broker answers the same reads in tests/integration."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from turnledger.errors import KafkaUnavailableError
from turnledger.processors import changelog
from turnledger.processors.changelog import (
    POSITION_KEY,
    POSITION_TAIL,
    SWEEP_EVERY_S,
    RestoreResult,
    position_record,
    read_position,
    restore_from_changelog,
    settle,
)
from turnledger.processors.errors import ProcessorError
from turnledger.processors.store import MemoryStateStore
from turnledger.records import SourceRecord

TP = TopicPartition("log", 3)


def rec(offset: int, key: bytes | None, value: bytes | None) -> SourceRecord:
    return SourceRecord("log", 3, offset, key, value)


def test_the_position_record_is_its_fixed_non_utf8_key_and_the_offset_in_ascii_digits() -> None:
    """The key is on every changelog written so far: it must never change, and never be a state key
    (a leading 0xFF is not UTF-8, every state key is)."""
    assert POSITION_KEY == b"\xffturnledger.position"
    with pytest.raises(UnicodeDecodeError):
        POSITION_KEY.decode("utf-8")
    assert position_record(0) == (POSITION_KEY, b"0")
    assert position_record(1_234_567) == (POSITION_KEY, b"1234567")
    assert (POSITION_TAIL, SWEEP_EVERY_S) == (64, 5.0)


@dataclass
class Reader:
    """A started read_committed consumer and what was asked of it."""

    action: str
    begin: int = 0
    end: int = 0
    assigned: list[list[TopicPartition]] = field(default_factory=list)
    closed: int = 0

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned.append(tps)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.end for tp in tps}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.begin for tp in tps}


@dataclass
class Script:
    """The chunks `read_to_end` yields (an exception instead of a chunk is raised there), and the
    readers started, with what `read_to_end` was called with."""

    chunks: list[list[SourceRecord] | Exception]
    begin: int = 0
    end: int = 0
    readers: list[Reader] = field(default_factory=list)
    reads: list[tuple[list[TopicPartition], Mapping[TopicPartition, int] | None, dict[str, Any]]] = field(
        default_factory=list
    )
    clock: float = 100.0

    async def start_reader(self, bootstrap: str, *, action: str) -> Reader:
        assert bootstrap == "b:9092"
        reader = Reader(action, self.begin, self.end)
        self.readers.append(reader)
        return reader

    async def read_to_end(
        self,
        consumer: Reader,
        partitions: list[TopicPartition],
        start: Mapping[TopicPartition, int] | None = None,
        **options: Any,
    ) -> AsyncIterator[list[SourceRecord]]:
        assert consumer is self.readers[-1]
        self.reads.append((partitions, start, options))
        for chunk in self.chunks:
            if isinstance(chunk, Exception):
                raise chunk
            self.clock += 0.75
            yield chunk

    async def close_client(self, client: Reader) -> None:
        client.closed += 1


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Script:
    script = Script([])
    monkeypatch.setattr(changelog, "start_reader", script.start_reader)
    monkeypatch.setattr(changelog, "read_to_end", script.read_to_end)
    monkeypatch.setattr(changelog, "close_client", script.close_client)
    monkeypatch.setattr(changelog, "time", SimpleNamespace(monotonic=lambda: script.clock))
    return script


class RecordingStore(MemoryStateStore):
    def __init__(self) -> None:
        super().__init__()
        self.applied: list[dict[str, bytes | None]] = []

    def apply(self, writes: Mapping[str, bytes | None]) -> None:
        self.applied.append(dict(writes))
        super().apply(writes)


async def test_a_restore_applies_each_chunk_s_state_and_keeps_the_last_position(
    script: Script, caplog: pytest.LogCaptureFixture
) -> None:
    """State records are applied chunk by chunk (a tombstone deletes, a chunk with no state record is
    not applied), counted; position records are not state, the last one read is the position; a
    record without a key is skipped with a warning naming its offset."""
    script.chunks = [
        [rec(0, b"a", b"1"), rec(1, POSITION_KEY, b"5")],
        [rec(2, POSITION_KEY, b"6")],
        [rec(3, None, b"x"), rec(4, b"b", b"2"), rec(5, b"a", None), rec(6, "é".encode(), b"3")],
        [rec(7, POSITION_KEY, b"9")],
    ]
    store = RecordingStore()
    with caplog.at_level(logging.INFO, logger=changelog.__name__):
        result = await restore_from_changelog("b:9092", "log", 3, store)
    assert result == RestoreResult(records=4, position=9, seconds=3.0)
    assert store.applied == [{"a": b"1"}, {"b": b"2", "a": None, "é": b"3"}]
    assert dict(store.items()) == {"b": b"2", "é": b"3"}
    reader = script.readers[0]
    assert (reader.action, reader.closed) == ("restore log-3", 1)
    assert script.reads == [([TP], None, {"batch": 10_000})]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "changelog log-3 offset 3 has no key; skipped"),
        (logging.INFO, "restored log-3: 4 changelog records, position 9, in 3.00s"),
    ]


async def test_a_restore_without_a_position_record_has_no_position(
    script: Script, caplog: pytest.LogCaptureFixture
) -> None:
    """A changelog written before position records existed (or a position record deleted) restores
    its state with position None, and the reads' batch is the caller's."""
    script.chunks = [[rec(0, POSITION_KEY, b"4"), rec(1, b"a", b"1"), rec(2, POSITION_KEY, None)]]
    store = RecordingStore()
    with caplog.at_level(logging.INFO, logger=changelog.__name__):
        result = await restore_from_changelog("b:9092", "log", 3, store, batch=7)
    assert result == RestoreResult(records=1, position=None, seconds=0.75)
    assert script.reads == [([TP], None, {"batch": 7})]
    assert caplog.messages == ["restored log-3: 1 changelog records, position None, in 0.75s"]


async def test_a_changelog_without_any_position_record_restores_position_none(script: Script) -> None:
    script.chunks = [[rec(0, b"a", b"1")]]
    result = await restore_from_changelog("b:9092", "log", 3, RecordingStore())
    assert result == RestoreResult(records=1, position=None, seconds=0.75)
    assert await read_position("b:9092", TP) is None


async def test_a_restore_that_fails_closes_its_reader_and_raises(script: Script) -> None:
    script.chunks = [[rec(0, b"a", b"1")], KeyError("outage")]
    with pytest.raises(KeyError):
        await restore_from_changelog("b:9092", "log", 3, RecordingStore())
    assert script.readers[0].closed == 1


@pytest.mark.parametrize(
    ("begin", "end", "tail", "start"),
    [(0, 100, None, 36), (50, 100, None, 50), (0, 100, 10, 90), (0, 10, None, 0), (36, 100, None, 36)],
)
async def test_read_position_reads_the_last_tail_offsets_and_keeps_the_last_position(
    script: Script, begin: int, end: int, tail: int | None, start: int
) -> None:
    """The last `tail` offsets (64 by default), never before the log's beginning; of the position
    records there, the last one read; state records are not positions."""
    script.begin, script.end = begin, end
    script.chunks = [
        [rec(start, POSITION_KEY, b"17"), rec(start + 1, b"a", b"99")],
        [rec(start + 2, POSITION_KEY, b"18"), rec(start + 3, b"b", b"1")],
    ]
    position = (
        await read_position("b:9092", TP) if tail is None else await read_position("b:9092", TP, tail=tail)
    )
    assert position == 18
    reader = script.readers[0]
    assert (reader.action, reader.assigned, reader.closed) == ("read the position in log-3", [[TP]], 1)
    assert script.reads == [([TP], {TP: start}, {})]


async def test_read_position_without_a_position_record_is_none(script: Script) -> None:
    script.end = 5
    script.chunks = [[rec(0, b"a", b"1")], [rec(1, POSITION_KEY, None)]]
    assert await read_position("b:9092", TP) is None
    script.chunks = [KeyError("outage")]
    with pytest.raises(KeyError):
        await read_position("b:9092", TP)
    assert [r.closed for r in script.readers] == [1, 1]


@dataclass
class Offsets:
    """An end-offsets reader whose answer depends on the fake clock."""

    answer: Any
    kwargs: dict[str, Any] = field(default_factory=dict)
    started: int = 0
    closed: int = 0

    async def start(self) -> None:
        self.started += 1

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.answer() for tp in tps}


@dataclass
class Settling:
    """`settle`'s world: the high watermark is 10, the last stable offset 5 until `settles_at` (a
    second on the fake clock; None: never); every `asyncio.sleep` advances the clock by a second."""

    settles_at: float | None
    clock: float = 0.0
    sleeps: list[float] = field(default_factory=list)
    sweeps: list[float] = field(default_factory=list)
    committed: Offsets | None = None
    uncommitted: Offsets | None = None

    def stable(self) -> int:
        return 10 if self.settles_at is not None and self.clock >= self.settles_at else 5

    async def start_reader(self, bootstrap: str, *, action: str) -> Offsets:
        assert (bootstrap, action) == ("b:9092", "settle log-3")
        self.committed = Offsets(self.stable)
        return self.committed

    def consumer(self, **kwargs: Any) -> Offsets:
        self.uncommitted = Offsets(lambda: 10, kwargs)
        return self.uncommitted

    async def close_client(self, client: Offsets) -> None:
        client.closed += 1

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.clock += 1

    async def sweep(self) -> None:
        self.sweeps.append(self.clock)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Settling:
    world = Settling(settles_at=None)
    monkeypatch.setattr(changelog, "start_reader", world.start_reader)
    monkeypatch.setattr(changelog, "AIOKafkaConsumer", world.consumer)
    monkeypatch.setattr(changelog, "close_client", world.close_client)
    monkeypatch.setattr(changelog, "kafka_options", lambda: {"security_protocol": "SSL"})
    monkeypatch.setattr(changelog, "time", SimpleNamespace(monotonic=lambda: world.clock))
    monkeypatch.setattr(changelog, "asyncio", SimpleNamespace(sleep=world.sleep))
    return world


async def test_a_settled_partition_returns_at_once_without_a_word(
    world: Settling, caplog: pytest.LogCaptureFixture
) -> None:
    """Last stable offset = high watermark: no wait, no sweep, no log; both readers closed, the
    uncommitted one built with the process's Kafka options and no auto-commit."""
    world.settles_at = 0
    with caplog.at_level(logging.INFO, logger=changelog.__name__):
        await settle("b:9092", TP, sweep=world.sweep)
    assert (world.sleeps, world.sweeps, caplog.messages) == ([], [], [])
    assert world.uncommitted is not None and world.committed is not None
    assert world.uncommitted.kwargs == {
        "bootstrap_servers": "b:9092",
        "enable_auto_commit": False,
        "security_protocol": "SSL",
    }
    assert (world.uncommitted.started, world.uncommitted.closed, world.committed.closed) == (1, 1, 1)


async def test_an_open_transaction_is_waited_for_with_a_sweep_every_sweep_every_s(
    world: Settling, caplog: pytest.LogCaptureFixture
) -> None:
    """Polled every 20 ms, swept `sweep_every_s` after the start and then after each sweep, logged
    once when the wait begins and once when it ends."""
    world.settles_at = 9
    with caplog.at_level(logging.INFO, logger=changelog.__name__):
        await settle("b:9092", TP, sweep=world.sweep, sweep_every_s=3)
    assert world.sweeps == [3, 6]
    assert world.sleeps == [0.02] * 9
    assert caplog.messages == [
        "log-3 has an open transaction (stable offset 5 < high watermark 10): the fenced predecessor's "
        "markers are still being written; waiting",
        "log-3 settled at 10",
    ]


async def test_a_partition_that_never_settles_is_an_outage_after_timeout_s(world: Settling) -> None:
    """Past `timeout_s` (not at it) the wait raises `KafkaUnavailableError`, so that the caller starts
    over; without a sweep it only waits. Both readers are closed."""
    with pytest.raises(KafkaUnavailableError) as info:
        await settle("b:9092", TP, timeout_s=4)
    assert world.clock == 5 and world.sleeps == [0.02] * 5
    expected = KafkaUnavailableError(
        "b:9092", ProcessorError("log-3 kept an open transaction for 4s"), action="settle log-3"
    )
    assert str(info.value) == str(expected)
    assert info.value.action == "settle log-3"
    assert str(info.value.cause) == "log-3 kept an open transaction for 4s"
    assert world.uncommitted is not None and world.committed is not None
    assert (world.uncommitted.closed, world.committed.closed) == (1, 1)


async def test_settle_waits_120_s_and_sweeps_every_5_s_by_default(world: Settling) -> None:
    with pytest.raises(KafkaUnavailableError) as info:
        await settle("b:9092", TP, sweep=world.sweep)
    assert world.sweeps == [5.0 * n for n in range(1, 25)]
    assert world.clock == 121
    assert str(info.value.cause) == "log-3 kept an open transaction for 120s"
