"""AWS event-stream framing (`application/vnd.amazon.eventstream`), the encoding side, for Bedrock.

A message is: total length (u32 BE) · headers length (u32 BE) · CRC32 of those 8 bytes ·
headers · payload · CRC32 of everything before it. Headers here are strings only (value
type 7: u16 BE length, UTF-8). Written from the format's description, not shared with the
gateway's decoder, so each checks the other (and botocore's parser checks both).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import orjson

_PRELUDE_AND_CRC = 16
_STRING = 7


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    raw = b"".join(_header(name.encode(), value.encode()) for name, value in headers.items())
    total = _PRELUDE_AND_CRC + len(raw) + len(payload)
    prelude = struct.pack(">II", total, len(raw))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + raw + payload
    return head + struct.pack(">I", zlib.crc32(head))


def _header(name: bytes, value: bytes) -> bytes:
    return struct.pack(">B", len(name)) + name + struct.pack(">BH", _STRING, len(value)) + value


@dataclass(frozen=True, slots=True)
class EventStreamEvent:
    """One ConverseStream message: an event (`:event-type`) or an exception (`:exception-type`).

    Same duck type as `SseEvent` (`data`, `terminal`, `encode`), so delivery faults apply alike."""

    event: str
    data: dict[str, Any]
    terminal: bool = False
    exception: bool = False

    def encode(self) -> bytes:
        if self.exception:
            headers = {
                ":exception-type": self.event,
                ":content-type": "application/json",
                ":message-type": "exception",
            }
        else:
            headers = {
                ":event-type": self.event,
                ":content-type": "application/json",
                ":message-type": "event",
            }
        return encode_message(headers, orjson.dumps(self.data))

    @property
    def sequence_number(self) -> int | None:
        return None
