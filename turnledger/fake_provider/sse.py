"""Server-sent events: one frozen event type and its exact wire bytes.

Encoding is byte-deterministic (orjson keeps insertion order, no whitespace) so that the same request and
seed always produce identical stream bytes, which the determinism tests compare directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

DONE = "[DONE]"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One SSE event.

    `event` is the `event:` line (None for data-only streams such as Chat Completions); `data` is a JSON
    object or a literal string (`[DONE]`). `terminal` marks the event that ends a well-formed stream
    (message_stop, [DONE], response.completed), which the missing-stop fault drops.
    """

    event: str | None
    data: dict[str, Any] | str
    terminal: bool = False

    def encode(self) -> bytes:
        payload = self.data if isinstance(self.data, str) else orjson.dumps(self.data).decode()
        head = f"event: {self.event}\n" if self.event is not None else ""
        return f"{head}data: {payload}\n\n".encode()

    @property
    def sequence_number(self) -> int | None:
        """The Responses API `sequence_number`, if this event carries one."""
        if isinstance(self.data, dict):
            seq = self.data.get("sequence_number")
            if isinstance(seq, int):
                return seq
        return None


def encode_all(events: list[SseEvent]) -> bytes:
    return b"".join(e.encode() for e in events)
