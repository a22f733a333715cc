"""How a batch is gathered (`processors.batching`): record and time bounds, on an injected clock."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.test_processors_runtime import FakeClock, ScriptedFetch, rec
from turnledger.processors.batching import CLOSE_POLL_MS, collect_batch
from turnledger.records import SourceRecord


async def test_an_idle_poll_waits_the_default_100_ms_once() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([], clock)
    assert await collect_batch(fetch, max_records=10, max_ms=1000, stop=asyncio.Event(), clock=clock) == []
    assert fetch.calls == [(100, 10)] and clock.now == 0.1


async def test_a_stopped_collector_fetches_nothing() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(0))], clock)
    stop = asyncio.Event()
    stop.set()
    assert await collect_batch(fetch, max_records=10, max_ms=1000, stop=stop, clock=clock) == []
    assert fetch.calls == []


async def test_the_window_is_counted_from_the_first_record_and_fetches_wait_what_is_left_of_it() -> None:
    clock = FakeClock()
    clock.now = 1.0
    fetch = ScriptedFetch([(1.0, rec(0)), (1.375, rec(1)), (1.625, rec(2))], clock)
    batch = await collect_batch(
        fetch, max_records=10, max_ms=500, stop=asyncio.Event(), idle_poll_ms=250, clock=clock
    )
    assert [r.offset for r in batch] == [0, 1]
    # opened at t=1.0 until 1.5: fetches wait at most idle_poll_ms, then what is left of the window
    # (125 ms at t=1.375); the empty fetch at t=1.25 does not end the batch
    assert fetch.calls == [(250, 10), (250, 9), (250, 9), (125, 8)]
    assert clock.now == 1.5


async def test_a_fetch_waits_the_whole_seconds_left_of_a_long_window() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(0)), (0.5, rec(1))], clock)
    batch = await collect_batch(
        fetch, max_records=10, max_ms=1000, stop=asyncio.Event(), idle_poll_ms=5000, clock=clock
    )
    assert [r.offset for r in batch] == [0, 1]
    assert fetch.calls == [(5000, 10), (1000, 9), (500, 8)] and clock.now == 1.0


async def test_a_window_with_one_ms_left_still_fetches_and_one_with_none_left_does_not() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(0)), (0.0, rec(1))], clock)

    async def one_at_a_time(timeout_ms: int, max_records: int) -> list[SourceRecord]:
        return await fetch(timeout_ms, 1)

    batch = await collect_batch(one_at_a_time, max_records=10, max_ms=1, stop=asyncio.Event(), clock=clock)
    assert [r.offset for r in batch] == [0, 1]
    assert fetch.calls == [(100, 1), (1, 1), (1, 1)] and clock.now == 0.001

    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(0)), (0.0, rec(1))], clock)
    batch = await collect_batch(one_at_a_time, max_records=10, max_ms=0, stop=asyncio.Event(), clock=clock)
    assert [r.offset for r in batch] == [0] and fetch.calls == [(100, 1)]


async def test_a_batch_of_exactly_max_records_closes_without_another_fetch() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(i)) for i in range(4)], clock)
    batch = await collect_batch(fetch, max_records=3, max_ms=1000, stop=asyncio.Event(), clock=clock)
    assert [r.offset for r in batch] == [0, 1, 2] and fetch.calls == [(100, 3)]


async def test_group_commit_polls_every_default_close_poll_ms() -> None:
    assert CLOSE_POLL_MS == 5
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(0)), (0.012, rec(1))], clock)
    batch = await collect_batch(
        fetch,
        max_records=10,
        max_ms=100,
        stop=asyncio.Event(),
        clock=clock,
        close_when=lambda: clock.now >= 0.014,
    )
    assert [r.offset for r in batch] == [0, 1]
    assert fetch.calls == [(100, 10), (5, 9), (5, 9), (5, 9), (5, 8)]
    assert clock.now == pytest.approx(0.017)


async def test_every_fetchs_records_are_handed_on_as_they_arrive() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(0)), (0.0, rec(1)), (0.01, rec(2))], clock)
    seen: list[list[int]] = []
    batch = await collect_batch(
        fetch,
        max_records=10,
        max_ms=20,
        stop=asyncio.Event(),
        clock=clock,
        on_records=lambda records: seen.append([r.offset for r in records]),
    )
    assert [r.offset for r in batch] == [0, 1, 2] and seen == [[0, 1], [2]]
