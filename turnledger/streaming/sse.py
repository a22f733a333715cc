"""Incremental Server-Sent Events decoding (WHATWG HTML "event stream interpretation").

Network reads cut the byte stream anywhere: inside a multi-byte UTF-8 character,
between the CR and LF of a CRLF, in the middle of a field name. The decoder keeps
exactly what it needs across `feed` calls (an incremental UTF-8 decoder, the
unterminated tail line, a "the last chunk ended in CR" flag and the event being
built), so the events it yields do not depend on where the cuts fell.

Rules kept from the standard, because providers and proxies do use them:
- lines end in CRLF, LF or CR; a leading BOM is dropped;
- `:comment` lines are ignored (proxies send them as keep-alives);
- `data` lines of one event are joined with "\\n";
- `id` persists across events and is ignored when it contains NUL;
- `retry` with only ASCII digits updates `retry`, anything else is ignored;
- unknown fields are ignored; an event with no data is not dispatched;
- at end of stream an event without its terminating blank line is discarded
  (`flush` reports that in `discarded_partial`): a stream cut mid-event never
  yields the cut event, which is what keeps truncated streams from committing.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str | None
    data: str
    id: str | None


class SseDecoder:
    """Bytes in, complete SSE events out. One instance per HTTP response body."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail = ""
        self._skip_lf = False  # previous chunk ended with CR: a leading LF belongs to it
        self._at_start = True
        self._event: str | None = None
        self._data: list[str] = []
        self._last_id: str | None = None
        self.retry: int | None = None
        self.discarded_partial = False

    def feed(self, data: bytes) -> list[SseEvent]:
        text = self._utf8.decode(data)
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        buffer = self._tail + text
        events: list[SseEvent] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            end = match.start()
            self._line(buffer[start:end], events)
            start = match.end()
        self._tail = buffer[start:]
        if not self._tail and start and buffer[start - 1] == "\r":
            self._skip_lf = True
        return events

    def flush(self) -> list[SseEvent]:
        """End of stream: decode what is left and discard an unterminated event."""
        rest = self._utf8.decode(b"", final=True)
        self._tail += rest
        self.discarded_partial = bool(self._tail or self._data or self._event is not None)
        self._tail = ""
        self._event = None
        self._data = []
        return []

    def _line(self, line: str, events: list[SseEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        handler = _FIELDS.get(name)
        if handler is not None:
            handler(self, value)

    def _dispatch(self, events: list[SseEvent]) -> None:
        if self._data:
            events.append(SseEvent(self._event, "\n".join(self._data), self._last_id))
        self._event = None
        self._data = []

    def _field_event(self, value: str) -> None:
        self._event = value

    def _field_data(self, value: str) -> None:
        self._data.append(value)

    def _field_id(self, value: str) -> None:
        if "\x00" not in value:
            self._last_id = value

    def _field_retry(self, value: str) -> None:
        if value and value.isascii() and value.isdigit():
            self.retry = int(value)


_FIELDS = {
    "event": SseDecoder._field_event,
    "data": SseDecoder._field_data,
    "id": SseDecoder._field_id,
    "retry": SseDecoder._field_retry,
}
