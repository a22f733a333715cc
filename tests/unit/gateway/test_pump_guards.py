"""The pump's guards, each pinned by an exact outcome: the resend filter (`acked`), the final flag,
the wire dedup of numbered events and the stats. Each test fails when its guard is removed."""

from __future__ import annotations

import asyncio

from tests.unit.streaming.support import fixture
from turnledger.gateway.pump import StreamPump
from turnledger.model.deltas import DeltaType, NormalizedDelta


class Sink:
    def __init__(self) -> None:
        self.handles: list[str] = []
        self.batches: list[list[NormalizedDelta]] = []

    async def on_handle(self, handle: str) -> None:
        self.handles.append(handle)

    async def on_deltas(self, batch: list[NormalizedDelta]) -> None:
        self.batches.append(list(batch))

    @property
    def sequences(self) -> list[int]:
        return [d.delta_sequence for batch in self.batches for d in batch]


def pump_all(name: str, api: str, *, acked: int = -1, handle: str | None = None, chunks: int = 1) -> tuple:
    sink = Sink()
    pump = StreamPump(
        api, 3, on_handle=sink.on_handle, on_deltas=sink.on_deltas, response_handle=handle, acked=acked
    )
    data = fixture(name)
    size = max(1, len(data) // chunks)

    async def go() -> None:
        for start in range(0, len(data), size):
            await pump.feed(data[start : start + size])
        await pump.close()

    asyncio.run(go())
    return pump, sink


def test_a_fresh_read_appends_every_delta_from_zero() -> None:
    pump, sink = pump_all("anthropic_text.sse", "anthropic-messages")
    total = len(sink.sequences)
    assert total > 3
    assert sink.sequences == list(range(total))
    assert pump.acked == total - 1
    assert pump.stats.deltas_appended == total
    assert pump.saw_final is True


def test_a_resumed_read_appends_only_past_acked() -> None:
    """The resend filter: a second read of the same generation re-parses the response from its start;
    what the first read already appended (<= acked) is not appended again."""
    _, first = pump_all("anthropic_text.sse", "anthropic-messages")
    total = len(first.sequences)
    acked = total // 2
    pump, sink = pump_all("anthropic_text.sse", "anthropic-messages", acked=acked, chunks=4)
    assert sink.sequences == list(range(acked + 1, total))
    assert pump.stats.deltas_appended == total - acked - 1
    assert pump.acked == total - 1
    assert pump.saw_final is True


def test_a_resumed_read_past_the_end_appends_nothing_but_still_sees_the_final_event() -> None:
    _, first = pump_all("anthropic_text.sse", "anthropic-messages")
    last = first.sequences[-1]
    pump, sink = pump_all("anthropic_text.sse", "anthropic-messages", acked=last)
    assert sink.batches == []
    assert pump.stats.deltas_appended == 0
    assert pump.acked == last
    assert pump.saw_final is True


def test_a_stream_without_its_stop_is_not_final() -> None:
    pump, sink = pump_all("anthropic_missing_stop.sse", "anthropic-messages")
    assert sink.sequences
    assert all(d.type is not DeltaType.MESSAGE_STOP for batch in sink.batches for d in batch)
    assert pump.saw_final is False


def test_a_provider_error_is_final() -> None:
    pump, sink = pump_all("anthropic_error.sse", "anthropic-messages")
    assert sink.batches[-1][-1].type is DeltaType.PROVIDER_ERROR
    assert pump.saw_final is True


def test_numbered_events_seen_again_are_dropped_before_the_parser() -> None:
    """OpenAI Responses numbers its events: a resent event (same or lower number) is a wire duplicate."""
    data = fixture("openai_responses_text.sse")
    events = [e + b"\r\n\r\n" for e in data.split(b"\r\n\r\n") if e.strip()]
    assert len(events) > 4
    clean_sink = Sink()
    clean = StreamPump("openai-responses", 1, on_handle=clean_sink.on_handle, on_deltas=clean_sink.on_deltas)
    sink = Sink()
    pump = StreamPump("openai-responses", 1, on_handle=sink.on_handle, on_deltas=sink.on_deltas)
    resent = [*events[:3], events[1], events[2], *events[3:4], events[3], *events[4:]]

    async def go() -> None:
        for event in events:
            await clean.feed(event)
        await clean.close()
        for event in resent:
            await pump.feed(event)
        await pump.close()

    asyncio.run(go())
    assert pump.stats.wire_duplicates == 3
    assert clean.stats.wire_duplicates == 0
    assert pump.stats.events == len(resent)
    assert [d.model_dump() for b in sink.batches for d in b] == [
        d.model_dump() for b in clean_sink.batches for d in b
    ]
    assert sink.handles == clean_sink.handles and len(sink.handles) == 1
