"""The stream pump: raw provider bytes → HandleBound first, then StreamDeltas per received chunk.

Three things happen here that the parsers cannot do alone, because they depend on
the connection rather than on the bytes of one response:

- Handle first. The handle is appended (bound to the manifest digest) before any
  delta, as soon as the parser learns it.
- Events before the handle. A provider may re-send events of an earlier stream
  before this one starts (late events after a reconnect). They have no handle, so
  they cannot belong to this response: they are sent after the HandleBound, under
  the empty handle, where the fold quarantines them as late blocks. The parser is
  then restarted at sequence 0 on the event that carried the handle, so this
  response's numbering does not depend on how much junk preceded it (a resumed read
  of the same response must produce the same sequence numbers).
- An error before the handle. A provider that fails before naming a response (an
  OpenAI Chat stream whose first event is `data: {"error": ...}`, Anthropic's
  `event: error` before `message_start`) sends nothing else: an error held back
  with the junk is this stream's failure (`error_type`, `error`, `unnamed_failure`)
  unless the stream names its response after it, which shows it late (and drops
  it with the rest of the junk). Of several, the last counts: late events come
  before the stream's own. Nothing of it is appended (the fold takes no delta
  before `HandleBound`): the read ends PROVIDER_ERROR (gateway/stream_read.py).
  It waits for a name at most `unnamed_error_grace_s` after the error (`ended`):
  late events are re-sent just before the stream's own, and a provider (or a
  proxy) that holds the connection open after its error would otherwise hold the
  attempt until it closed.
- Wire dedup. An API whose profile names a `wire_sequence_field` (OpenAI Responses:
  `sequence_number`) numbers its events; an event at or below the last one seen on
  this connection is a duplicate and is dropped before the parser sees it, since a
  duplicated event would otherwise produce new deltas with new sequence numbers that
  the assembler could not recognise.

Framing comes from the API's profile (adapters/profiles.py). SSE: each event is
decoded once (here) and its JSON parsed once (`parse_event`); the sequence number is
read from that parse and the parser is fed the same one. AWS event stream (Bedrock):
the binary messages go straight to the parser, which frames them itself; such a stream
names no response, so its handle is a response header (`handle_header`), bound by
`on_response_headers` before the first byte is read.

Deltas at or below `acked` (already appended by an earlier read of the same
generation) are not appended again.

The stream ends at its final event (message stop, provider error): nothing the provider sends after
it is parsed or appended, whether it came in the same chunk or later (`stats.after_final` counts
it: SSE events; Bedrock's deltas, whose frames are decoded a chunk at a time). The fold settles the
attempt on that event and ignores the rest of its record; an error after a message stop must not
judge a read that completed, and more text after it is no part of the answer.

Coalescing (`flush_interval_s` > 0, the worker's `--flush-ms`): a provider sends one event per
token or two, and one StreamDeltas record per network chunk would make every token a ledger
record. The pump appends at most once per interval per stream instead: deltas that arrive within
`flush_interval_s` of the last append wait in `pending` and go out together, by the next chunk
past the interval or by the reader's idle flush (`flush_wait` says when one is due). Rules:

- a final delta (message stop, provider error) is appended at once, with everything pending, so
  an attempt settles without waiting for the interval;
- `acked` moves only when deltas are appended: what is pending is not acknowledged, so a read
  that ends (close, disconnect) appends it first, and a resumed read starts after what the
  ledger has;
- at most `MAX_PENDING_DELTAS` wait, whatever the interval (a record stays far below the
  ledger's record size limit);
- a delta arriving after an idle interval (the last append at least `flush_interval_s` ago) is
  appended at once: coalescing bounds the record rate, it never delays a sparse stream.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from turnledger.adapters.profiles import PROFILES, Framing
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.streaming import ParsedEvent, SseDecoder, SseEvent, StreamParser, parse_event, parser_for

OnHandle = Callable[[str], Awaitable[None]]
OnDeltas = Callable[[list[NormalizedDelta]], Awaitable[None]]

FINAL_TYPES = frozenset({DeltaType.MESSAGE_STOP, DeltaType.PROVIDER_ERROR})
MAX_PENDING_DELTAS = 512
UNNAMED_ERROR_GRACE_S = 5.0
"""How long after an error before anything named the response the stream may still name one (the
error was then an earlier stream's, re-sent late) before the read ends on that error."""


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
        flush_interval_s: float = 0.0,
        unnamed_error_grace_s: float = UNNAMED_ERROR_GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.profile = PROFILES[api]
        self._sequence_field = self.profile.wire_sequence_field
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
        self.error_type: str | None = None
        """The type of the error that ended the stream (the provider's or our parser's), if any; before
        the response is named, of the last error held back with the junk."""
        self.error: Mapping[str, Any] | None = None
        """That error's object as the provider sent it (None for our parser's own, or a Bedrock exception):
        what `provider_failures.stream_failure` reads its names from."""
        self.stats = PumpStats()
        self._interval = flush_interval_s
        self._clock = clock
        self._pending: list[NormalizedDelta] = []
        self._last_append = float("-inf")
        self._grace = unnamed_error_grace_s
        self._unnamed_error_at = 0.0  # when the last error before any name came

    @property
    def response_handle(self) -> str | None:
        return self._parser.response_handle

    @property
    def unnamed_failure(self) -> bool:
        """Did the stream carry an error and name no response: it failed before anything of it could be
        appended?"""
        return self.error_type is not None and not self._bound

    @property
    def ended(self) -> bool:
        """Does the stream say how it ends: its final event came, or an error before anything named the
        response came and nothing named one within `unnamed_error_grace_s`? The reader stops there."""
        return self.saw_final or self._unnamed_error_wait() == 0.0

    def next_wait(self) -> float | None:
        """Seconds the reader may wait for the next chunk before the pump has something to do; None: as
        long as the provider takes. A named stream may have deltas pending (`flush_wait`); a stream not
        named yet has none, and may have an error to end on."""
        return self.flush_wait() if self._bound else self._unnamed_error_wait()

    def _unnamed_error_wait(self) -> float | None:
        """Seconds left for the stream to name its response after its unnamed error (0: none left)."""
        if not self.unnamed_failure:
            return None
        return max(0.0, self._unnamed_error_at + self._grace - self._clock())

    async def on_response_headers(self, headers: Mapping[str, str]) -> None:
        """The response arrived: an API whose stream names no response is bound by its header."""
        name = self.profile.handle_header
        if name is None or self._bound:
            return
        handle = headers.get(name)
        if handle:
            self._parser.response_handle = handle
            self._bound = True
            await self._on_handle(handle)

    async def feed(self, chunk: bytes) -> None:
        if self.profile.framing is Framing.AWS_EVENT_STREAM:
            await self._append(self._binary(chunk))
            return
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
        flushed = self._parser.flush()  # Bedrock's held message stop (streaming/bedrock.py)
        if self._bound:
            batch.extend(self._accept(flushed))
        else:
            self._hold(flushed)
        await self._append(batch)
        await self.flush()

    def flush_wait(self) -> float | None:
        """Seconds until the pending deltas are due (0: now); None when nothing is pending."""
        if not self._pending:
            return None
        return max(0.0, self._last_append + self._interval - self._clock())

    async def flush(self) -> None:
        """Append whatever is pending now (the reader's idle flush, and the end of a read)."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self._last_append = self._clock()
        await self._on_deltas(batch)
        self.acked = batch[-1].delta_sequence
        self.stats.deltas_appended += len(batch)

    def _binary(self, chunk: bytes) -> list[NormalizedDelta]:
        deltas = self._parser.feed(chunk)
        if self._bound:
            return self._accept(deltas)
        self._hold(deltas)
        return []

    async def _event(self, sse: SseEvent) -> list[NormalizedDelta]:
        self.stats.events += 1
        event = parse_event(sse)
        if self._is_wire_duplicate(event):
            self.stats.wire_duplicates += 1
            return []
        deltas = self._parser.feed_sse(event)
        if self._bound:
            return self._accept(deltas)
        if self._parser.response_handle is None:
            self._hold(deltas)
            self._junk_events += 1
            return []
        handle = self._parser.response_handle
        self.error_type, self.error = None, None  # a held error was an earlier stream's
        self._last_wire_sequence = self._wire_sequence(event)
        if self._junk_events:
            # restart numbering at this response's first event
            self._parser = parser_for(self.api, generation=self.generation)
            deltas = self._parser.feed_sse(event)
        self._bound = True
        await self._on_handle(handle)
        if self._junk:
            self.stats.late_deltas += len(self._junk)
            await self._on_deltas(self._junk)
            self._junk = []
        return self._accept(deltas)

    def _hold(self, deltas: list[NormalizedDelta]) -> None:
        """Deltas before the response is named: junk, never appended under no handle."""
        self._junk.extend(deltas)
        for delta in deltas:
            if delta.type is DeltaType.PROVIDER_ERROR:
                self.error_type = delta.error_type or ""
                self.error = self._parser.error_objects.get(delta.delta_sequence)
                self._unnamed_error_at = self._clock()

    def _is_wire_duplicate(self, event: ParsedEvent) -> bool:
        if self._sequence_field is None or not self._bound:
            return False
        sequence = self._wire_sequence(event)
        if sequence < 0:
            return False
        if sequence <= self._last_wire_sequence:
            return True
        self._last_wire_sequence = sequence
        return False

    def _accept(self, deltas: list[NormalizedDelta]) -> list[NormalizedDelta]:
        """This response's deltas not yet appended, up to and including its final one."""
        if self.saw_final:
            self.stats.after_final += len(deltas)
            return []
        seen = self._pending[-1].delta_sequence if self._pending else self.acked
        for end, delta in enumerate(deltas, 1):
            if delta.type is DeltaType.PROVIDER_ERROR:
                self.error_type = delta.error_type or ""
                self.error = self._parser.error_objects.get(delta.delta_sequence)
            if delta.type in FINAL_TYPES:
                self.saw_final = True
                self.stats.after_final += len(deltas) - end
                deltas = deltas[:end]
                break
        return [d for d in deltas if d.delta_sequence > seen]

    async def _append(self, batch: list[NormalizedDelta]) -> None:
        if not batch:
            return
        self._pending.extend(batch)
        if (
            self.flush_wait() == 0.0
            or len(self._pending) >= MAX_PENDING_DELTAS
            or any(d.type in FINAL_TYPES for d in batch)
        ):
            await self.flush()

    def _wire_sequence(self, event: ParsedEvent) -> int:
        """The provider's own event number (e.g. `sequence_number`), or -1 when the event has none."""
        if event.payload is None or self._sequence_field is None:
            return -1
        sequence = event.payload.get(self._sequence_field)
        return sequence if isinstance(sequence, int) and not isinstance(sequence, bool) else -1
