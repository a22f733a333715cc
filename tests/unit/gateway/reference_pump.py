"""The stream pump and the parser's bytes input as of 1088e6f: test_pump_equivalence's oracle.

The pump then decoded SSE, re-encoded each event to bytes (`encode_sse`) and fed the bytes
to the parser, which decoded SSE again and parsed the JSON; for OpenAI Responses
`_wire_sequence` parsed each event's JSON once more. Below: `turnledger.gateway.pump`
verbatim, except that it calls `parser_feed` / `parser_flush` (the 1088e6f
`StreamParser.feed` / `flush`, at the end of this module) instead of the parser's methods,
so that neither side of the comparison runs the new input path. One deliberate change since: JSON
is parsed with orjson, as `streaming.parser.parse_event` now does (a lone surrogate or NaN makes an
event malformed), so that the comparison is about decoding once, not about the JSON rule. Another
(session 49): the stream ends at its final event, as the pump's does (nothing after it is parsed or
appended, `after_final` counts it), so that the comparison is not about that rule either.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.streaming import SseDecoder, SseEvent, StreamParser, parser_for
from turnledger.streaming.openai_chat import DONE, OpenAIChatParser

OnHandle = Callable[[str], Awaitable[None]]
OnDeltas = Callable[[list[NormalizedDelta]], Awaitable[None]]

FINAL_TYPES = frozenset({DeltaType.MESSAGE_STOP, DeltaType.PROVIDER_ERROR})
SEQUENCED_APIS = frozenset({"openai-responses"})


def encode_sse(event: SseEvent) -> bytes:
    """One decoded SSE event back to its wire form (for the parser, which reads bytes)."""
    lines = [f"event: {event.event}"] if event.event else []
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


@dataclass
class PumpStats:
    late_deltas: int = 0
    wire_duplicates: int = 0
    deltas_appended: int = 0
    events: int = 0
    after_final: int = 0


class StreamPump:
    """Feed it the response body chunk by chunk; it appends through the callbacks."""

    def __init__(
        self,
        api: str,
        generation: int,
        *,
        on_handle: OnHandle,
        on_deltas: OnDeltas,
        response_handle: str | None = None,
        acked: int = -1,
    ) -> None:
        self.api = api
        self.generation = generation
        self._on_handle = on_handle
        self._on_deltas = on_deltas
        self._bound = response_handle is not None
        self._parser: StreamParser = parser_for(api, generation=generation, response_handle=response_handle)
        self._sse = SseDecoder()
        self._junk: list[NormalizedDelta] = []
        self._junk_events = 0
        self._last_wire_sequence = -1
        self.acked = acked
        self.saw_final = False
        self.stats = PumpStats()

    @property
    def response_handle(self) -> str | None:
        return self._parser.response_handle

    async def feed(self, chunk: bytes) -> None:
        batch: list[NormalizedDelta] = []
        for event in self._sse.feed(chunk):
            if self.saw_final:
                self.stats.after_final += 1
                continue
            batch.extend(await self._event(event))
        await self._append(batch)

    async def close(self) -> None:
        """The transport ended normally: flush what the decoders still hold."""
        batch: list[NormalizedDelta] = []
        for event in self._sse.flush():
            batch.extend(await self._event(event))
        batch.extend(self._accept(parser_flush(self._parser)))
        await self._append(batch)

    async def _event(self, event: SseEvent) -> list[NormalizedDelta]:
        self.stats.events += 1
        if self._is_wire_duplicate(event):
            self.stats.wire_duplicates += 1
            return []
        deltas = parser_feed(self._parser, encode_sse(event))
        if self._bound:
            return self._accept(deltas)
        if self._parser.response_handle is None:
            self._junk.extend(deltas)
            self._junk_events += 1
            return []
        handle = self._parser.response_handle
        self._last_wire_sequence = _wire_sequence(event) if self.api in SEQUENCED_APIS else -1
        if self._junk_events:
            # restart numbering at this response's first event
            self._parser = parser_for(self.api, generation=self.generation)
            deltas = parser_feed(self._parser, encode_sse(event))
        self._bound = True
        await self._on_handle(handle)
        if self._junk:
            self.stats.late_deltas += len(self._junk)
            await self._on_deltas(self._junk)
            self._junk = []
        return self._accept(deltas)

    def _is_wire_duplicate(self, event: SseEvent) -> bool:
        if self.api not in SEQUENCED_APIS or not self._bound:
            return False
        sequence = _wire_sequence(event)
        if sequence < 0:
            return False
        if sequence <= self._last_wire_sequence:
            return True
        self._last_wire_sequence = sequence
        return False

    def _accept(self, deltas: list[NormalizedDelta]) -> list[NormalizedDelta]:
        if self.saw_final:
            self.stats.after_final += len(deltas)
            return []
        final = next((i for i, d in enumerate(deltas) if d.type in FINAL_TYPES), None)
        if final is not None:
            self.saw_final = True
            self.stats.after_final += len(deltas) - final - 1
            deltas = deltas[: final + 1]
        return [d for d in deltas if d.delta_sequence > self.acked]

    async def _append(self, batch: list[NormalizedDelta]) -> None:
        if not batch:
            return
        await self._on_deltas(batch)
        self.acked = batch[-1].delta_sequence
        self.stats.deltas_appended += len(batch)


def _wire_sequence(event: SseEvent) -> int:
    """The provider's own event number (`sequence_number`), or -1 when the event has none."""
    try:
        sequence = orjson.loads(event.data).get("sequence_number")
    except (ValueError, AttributeError):
        return -1
    return sequence if isinstance(sequence, int) and not isinstance(sequence, bool) else -1


# StreamParser.feed / flush / _on_sse of 1088e6f, OpenAIChatParser's `[DONE]` override included


def parser_feed(parser: StreamParser, data: bytes) -> list[NormalizedDelta]:
    for event in parser._sse.feed(data):
        _on_sse(parser, event)
    return parser._drain()


def parser_flush(parser: StreamParser) -> list[NormalizedDelta]:
    for event in parser._sse.flush():
        _on_sse(parser, event)
    return parser._drain()


def _on_sse(parser: StreamParser, event: SseEvent) -> None:
    if isinstance(parser, OpenAIChatParser) and event.data.strip() == DONE:
        parser._done()
        return
    try:
        payload = orjson.loads(event.data)
    except ValueError:
        parser._emit_undecodable(event.data)
        return
    if not isinstance(payload, dict):
        parser._emit_undecodable(event.data)
        return
    parser._dispatch(event.event, payload)
