"""The parser base: SSE events in, `NormalizedDelta`s out, numbered in stream order.

A provider parser is a table from the provider's event type to a handler; the
handlers call `_emit`, which stamps the dedup key (response handle, generation,
block index, delta sequence). Everything provider-specific lives in the table and
the handlers of one module per provider.

Why the parser, and not the assembler, numbers deltas: the sequence is the dedup
key, so it must be a deterministic function of the bytes received. The same bytes
fed to a fresh parser yield the same deltas with the same sequence numbers, which
is what lets a replayed or re-opened stream be deduplicated downstream.

Malformed JSON in an event is not skipped: we cannot know what it said, so it
becomes a PROVIDER_ERROR delta and the response can never commit.

A caller that decodes the transport itself (the gateway's stream pump, which reads
the provider's `sequence_number` before the parser sees an event) parses each event
once with `parse_event` and hands it to `feed_sse`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from turnledger.model.deltas import MESSAGE_LEVEL_INDEX, DeltaType, NormalizedDelta
from turnledger.streaming.sse import SseDecoder, SseEvent

Handler = Callable[[Any, Mapping[str, Any]], None]

UNDECODABLE_EVENT = "undecodable_event"
MALFORMED_EVENT = "malformed_event"


_DELTA_DEFAULTS: dict[str, Any] = {
    name: field.default for name, field in NormalizedDelta.model_fields.items() if not field.is_required()
}
_set = object.__setattr__


def _construct(fields: dict[str, Any]) -> NormalizedDelta:
    """`NormalizedDelta.model_construct`, minus its per-field default resolution.

    Deltas are the hot path (one per provider event) and every field is produced
    here with its declared type, so validation would only cost time; pydantic's own
    `model_construct` still spends ~2/3 of the parser's time resolving the ten
    optional defaults one by one. This sets the same four slots it sets; a test pins
    equality with a validated `NormalizedDelta(...)`.
    """
    delta = NormalizedDelta.__new__(NormalizedDelta)
    values = dict(_DELTA_DEFAULTS)
    values.update(fields)
    _set(delta, "__dict__", values)
    _set(delta, "__pydantic_fields_set__", set(fields))
    _set(delta, "__pydantic_extra__", None)
    _set(delta, "__pydantic_private__", None)
    return delta


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    """An SSE event and its data parsed as JSON; `payload` is None when the data is not a JSON object."""

    sse: SseEvent
    payload: Mapping[str, Any] | None


def parse_event(event: SseEvent) -> ParsedEvent:
    """orjson, not `json`: it refuses what has no canonical form downstream (a lone surrogate such as
    "\\ud800", NaN), so such an event is malformed here — a PROVIDER_ERROR
    delta — instead of a delta the ledger would refuse to record."""
    try:
        payload = orjson.loads(event.data)
    except ValueError:
        return ParsedEvent(event, None)
    return ParsedEvent(event, payload if isinstance(payload, dict) else None)


class StreamParser:
    """Incremental parser for one provider response stream (one handle, one generation)."""

    api: ClassVar[str] = ""
    handlers: ClassVar[Mapping[str, Handler]] = {}
    ignored: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        *,
        generation: int,
        response_handle: str | None = None,
        start_sequence: int = 0,
    ) -> None:
        self.generation = generation
        self.response_handle = response_handle
        self.unknown_events = 0
        self.error_objects: dict[int, Mapping[str, Any]] = {}
        """By the sequence of its PROVIDER_ERROR delta, the error object a provider's error event carried,
        as sent: the worker judges the error by the names in it (`provider_failures.error_names`) and
        keeps none of its text (its message may quote the credential)."""
        self._next_sequence = start_sequence
        self._sse = SseDecoder()
        self._out: list[NormalizedDelta] = []

    @property
    def last_sequence(self) -> int:
        """Sequence of the last delta emitted (start_sequence - 1 before the first)."""
        return self._next_sequence - 1

    # -- input -------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[NormalizedDelta]:
        for event in self._sse.feed(data):
            self._on_sse(parse_event(event))
        return self._drain()

    def flush(self) -> list[NormalizedDelta]:
        for event in self._sse.flush():
            self._on_sse(parse_event(event))
        return self._drain()

    def feed_sse(self, event: ParsedEvent) -> list[NormalizedDelta]:
        """Feed one SSE event the caller decoded from its transport and parsed with `parse_event`."""
        self._on_sse(event)
        return self._drain()

    def feed_event(self, payload: Mapping[str, Any], event: str | None = None) -> list[NormalizedDelta]:
        """Feed one already-decoded JSON event (recorded fixtures, non-SSE transports)."""
        self._dispatch(event, payload)
        return self._drain()

    # -- to be used by provider modules -------------------------------------------------

    def _on_sse(self, event: ParsedEvent) -> None:
        if event.payload is None:
            self._emit_undecodable(event.sse.data)
        else:
            self._dispatch(event.sse.event, event.payload)

    def _dispatch(self, event: str | None, payload: Mapping[str, Any]) -> None:
        kind = self._event_type(event, payload)
        handler = self.handlers.get(kind)
        if handler is not None:
            try:
                handler(self, payload)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # a known event type without the fields it must carry: as bad as garbage
                self._emit_error(MALFORMED_EVENT, f"{kind}: {exc!r}"[:200])
        elif kind not in self.ignored:
            self.unknown_events += 1

    def _event_type(self, event: str | None, payload: Mapping[str, Any]) -> str:
        """Typed SSE streams name the event in `data.type`; the SSE `event:` is a fallback."""
        kind = payload.get("type")
        return kind if isinstance(kind, str) else (event or "")

    def _emit(self, type_: DeltaType, block_index: int = MESSAGE_LEVEL_INDEX, **fields: Any) -> None:
        fields["response_handle"] = self.response_handle or ""
        fields["generation"] = self.generation
        fields["block_index"] = block_index
        fields["delta_sequence"] = self._next_sequence
        fields["type"] = type_
        self._out.append(_construct(fields))
        self._next_sequence += 1

    def _emit_error(self, error_type: str, message: str, error: Mapping[str, Any] | None = None) -> None:
        if error is not None:
            self.error_objects[self._next_sequence] = error
        self._emit(DeltaType.PROVIDER_ERROR, error_type=error_type, error_message=message)

    def _emit_undecodable(self, data: str) -> None:
        self._emit_error(UNDECODABLE_EVENT, data[:200])

    def _drain(self) -> list[NormalizedDelta]:
        out, self._out = self._out, []
        return out
