"""The pump's coalescing (gateway/pump.py "Coalescing"), on a clock the test moves: at most one append
per interval, a final delta at once, `acked` only for what was appended, the pending cap, and the
same deltas in the same order as a pump that appends every chunk. Then `TimedChunks`, which wakes
the reader for the idle flush without losing the chunk it is reading."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.gateway.test_pump_guards import Sink
from tests.unit.streaming.support import fixture
from turnledger.gateway.chunks import IDLE, TimedChunks
from turnledger.gateway.pump import MAX_PENDING_DELTAS, StreamPump
from turnledger.model.deltas import DeltaType

TEXT = fixture("anthropic_text.sse")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def events(data: bytes) -> list[bytes]:
    """The fixture cut into its SSE events (each ends with a blank line)."""
    parts = data.split(b"\n\n")
    return [p + b"\n\n" for p in parts if p.strip()]


def coalescing_pump(interval: float = 0.1) -> tuple[StreamPump, Sink, Clock]:
    sink, clock = Sink(), Clock()
    pump = StreamPump(
        "anthropic-messages",
        1,
        on_handle=sink.on_handle,
        on_deltas=sink.on_deltas,
        flush_interval_s=interval,
        clock=clock,
    )
    return pump, sink, clock


def test_the_reference_fixture_has_many_events() -> None:
    assert len(events(TEXT)) >= 8


def test_deltas_within_the_interval_wait_and_go_out_together() -> None:
    pump, sink, clock = coalescing_pump()
    chunks = events(TEXT)

    async def go() -> list[int]:
        appended = []
        for chunk in chunks[:-2]:  # the last events carry the block stop and the message stop
            await pump.feed(chunk)
            appended.append(len(sink.batches))
            clock.now += 0.01
        return appended

    appended = asyncio.run(go())
    # the first chunk with deltas goes out at once (the stream was idle), the rest wait an interval
    first = next(i for i, n in enumerate(appended) if n)
    assert appended[first] == 1
    assert all(n == 1 for n in appended[first : first + 10])
    assert pump.acked == sink.sequences[-1]
    wait = pump.flush_wait()
    assert wait is not None and 0 < wait <= 0.1
    pending_through = pump._pending[-1].delta_sequence
    assert pump.acked < pending_through  # pending is not acknowledged

    clock.now += wait
    assert pump.flush_wait() == 0.0
    asyncio.run(pump.flush())
    assert pump.acked == pending_through
    assert pump.flush_wait() is None
    assert pump.stats.deltas_appended == len(sink.sequences)


def test_a_final_delta_goes_out_at_once_with_everything_pending() -> None:
    pump, sink, _clock = coalescing_pump(interval=60.0)

    async def go() -> None:
        for chunk in events(TEXT):
            await pump.feed(chunk)

    asyncio.run(go())
    assert len(sink.batches) == 2  # the first delta at once, then everything with the message stop
    assert sink.batches[-1][-1].type is DeltaType.MESSAGE_STOP
    assert pump.flush_wait() is None
    assert pump.acked == sink.sequences[-1] == len(sink.sequences) - 1


def test_close_appends_what_is_pending() -> None:
    pump, sink, _clock = coalescing_pump(interval=60.0)
    cut = events(TEXT)[:-2]

    async def go() -> None:
        for chunk in cut:
            await pump.feed(chunk)
        await pump.close()

    asyncio.run(go())
    assert pump.flush_wait() is None
    assert sink.sequences == list(range(len(sink.sequences)))
    assert pump.acked == sink.sequences[-1]


def test_at_most_max_pending_deltas_wait() -> None:
    pump, sink, _clock = coalescing_pump(interval=60.0)
    head, body = events(TEXT)[:3], events(TEXT)[3]
    assert b"text_delta" in body

    async def go() -> None:
        for chunk in head:
            await pump.feed(chunk)
        for _ in range(MAX_PENDING_DELTAS + 5):
            await pump.feed(body)

    before = len(sink.batches)
    asyncio.run(go())
    sizes = [len(b) for b in sink.batches[before:]]
    assert max(sizes) == MAX_PENDING_DELTAS
    assert len(pump._pending) < MAX_PENDING_DELTAS


def test_an_interval_of_zero_appends_every_chunk() -> None:
    pump, sink, _clock = coalescing_pump(interval=0.0)
    chunks = events(TEXT)

    async def go() -> None:
        for chunk in chunks:
            await pump.feed(chunk)

    asyncio.run(go())
    with_deltas = sum(1 for b in sink.batches if b)
    assert with_deltas == len(sink.batches)
    assert len(sink.batches) >= len(chunks) - 2  # every event with a delta is its own record


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=0.25), min_size=1, max_size=40))
def test_coalescing_keeps_every_delta_in_order(gaps: list[float]) -> None:
    """Whatever the timing, the appended deltas are those of the per-chunk pump, in order, once each,
    and no two appends are closer than the interval unless the later one carries the final delta."""
    reference, ref_sink, _ = coalescing_pump(interval=0.0)
    pump, sink, clock = coalescing_pump(interval=0.1)
    stamps: list[float] = []
    original = sink.on_deltas

    async def stamped(batch: list) -> None:  # type: ignore[type-arg]
        stamps.append(clock.now)
        await original(batch)

    pump._on_deltas = stamped
    chunks = events(TEXT)

    async def go() -> None:
        for i, chunk in enumerate(chunks):
            await reference.feed(chunk)
            await pump.feed(chunk)
            clock.now += gaps[i % len(gaps)]
            wait = pump.flush_wait()
            if wait == 0.0:
                await pump.flush()
        await reference.close()
        await pump.close()

    asyncio.run(go())
    assert [d.model_dump() for b in sink.batches for d in b] == [
        d.model_dump() for b in ref_sink.batches for d in b
    ]
    for (earlier, later), batch in zip(itertools.pairwise(stamps), sink.batches[1:], strict=False):
        assert later - earlier >= 0.1 - 1e-9 or batch[-1].type is DeltaType.MESSAGE_STOP


WITHIN_S = 10.0
"""A bound on the reads below, which must each answer at once: a read that waits for ever (its idle
timeout lost) fails the test instead of hanging it."""


async def _gated(gate: asyncio.Event, chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        await gate.wait()
        gate.clear()
        yield chunk


def test_timed_chunks_ticks_idle_and_keeps_the_chunk_it_reads() -> None:
    async def go() -> list[object]:
        gate = asyncio.Event()
        chunks = TimedChunks(_gated(gate, [b"a", b"b"]))
        seen: list[object] = [await chunks.next(0.0)]  # nothing yet: a tick
        gate.set()
        seen.append(await chunks.next(None))
        seen.append(await chunks.next(0.0))
        gate.set()
        seen.append(await chunks.next(None))
        seen.append(await chunks.next(None))  # the end
        return seen

    assert asyncio.run(asyncio.wait_for(go(), WITHIN_S)) == [IDLE, b"a", IDLE, b"b", None]


def test_timed_chunks_aclose_cancels_the_outstanding_read_and_waits_for_it() -> None:
    async def go() -> bool:
        gate = asyncio.Event()
        chunks = TimedChunks(_gated(gate, [b"a"]))
        assert await chunks.next(0.0) is IDLE
        task = chunks._next
        assert task is not None
        await chunks.aclose()
        return task.cancelled() and chunks._next is None

    assert asyncio.run(asyncio.wait_for(go(), WITHIN_S)) is True
