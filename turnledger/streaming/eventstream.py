"""AWS event-stream binary framing (`application/vnd.amazon.eventstream`), incremental.

Bedrock ConverseStream does not use SSE. Each message is:
prelude = total length (u32 BE) · headers length (u32 BE) · CRC32 of those 8 bytes,
then the headers, the payload, and a CRC32 of everything before it. A header is
name length (u8) · name · value type (u8) · value. We keep only string headers
(`:message-type`, `:event-type`, `:exception-type`, `:content-type`); other value
types are skipped by their fixed or prefixed length.

A CRC mismatch poisons the decoder: after it nothing can be trusted to be aligned,
so `feed` reports the error once and ignores everything after it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from turnledger.errors import StreamFormatError

_PRELUDE = struct.Struct(">III")
_FIXED_SIZES = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
_STRING_TYPES = (6, 7)
_MIN_MESSAGE = 16


class EventStreamError(StreamFormatError):
    """The byte stream is not valid event-stream framing.

    `decoded` holds the whole messages that came before the bad bytes in the same `feed`: a reader
    gets them either way, so what it sees does not depend on how the network cut the bytes.
    """

    decoded: tuple[EventStreamMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class EventStreamMessage:
    headers: dict[str, str]
    payload: bytes


class EventStreamDecoder:
    def __init__(self) -> None:
        self._buffer = bytearray()
        self.poisoned = False

    @property
    def pending(self) -> int:
        """Bytes held for an unfinished message (non-zero at end of stream = truncated)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[EventStreamMessage]:
        if self.poisoned:
            return []
        self._buffer += data
        messages: list[EventStreamMessage] = []
        try:
            while (message := self._next_message()) is not None:
                messages.append(message)
        except EventStreamError as exc:
            self.poisoned = True
            exc.decoded = tuple(messages)
            raise
        return messages

    def _next_message(self) -> EventStreamMessage | None:
        """The next whole message off the buffer, None while it is unfinished."""
        if len(self._buffer) < _PRELUDE.size:
            return None
        total, headers_length, prelude_crc = _PRELUDE.unpack_from(self._buffer)
        if zlib.crc32(self._buffer[:8]) != prelude_crc or total < _MIN_MESSAGE + headers_length:
            raise EventStreamError("event-stream prelude CRC mismatch or bad lengths")
        if len(self._buffer) < total:
            return None
        frame = bytes(self._buffer[:total])
        del self._buffer[:total]
        (message_crc,) = struct.unpack_from(">I", frame, total - 4)
        if zlib.crc32(frame[:-4]) != message_crc:
            raise EventStreamError("event-stream message CRC mismatch")
        return EventStreamMessage(
            _headers(frame[12 : 12 + headers_length]), frame[12 + headers_length : total - 4]
        )


def _headers(raw: bytes) -> dict[str, str]:
    """The string headers of one message. A header cut short, past the headers' length, or a name or
    string value that is not UTF-8 is an EventStreamError (found by fuzzing: the CRCs only say the
    bytes arrived as sent, not that the sender framed them right)."""
    headers: dict[str, str] = {}
    pos = 0
    try:
        while pos < len(raw):
            name_length = raw[pos]
            name = _take(raw, pos + 1, name_length).decode("utf-8")
            pos += 1 + name_length
            value_type = _take(raw, pos, 1)[0]
            pos += 1
            if value_type in _STRING_TYPES:
                (length,) = struct.unpack(">H", _take(raw, pos, 2))
                value = _take(raw, pos + 2, length)
                pos += 2 + length
                if value_type == 7:
                    headers[name] = value.decode("utf-8")
            elif value_type in _FIXED_SIZES:
                _take(raw, pos, _FIXED_SIZES[value_type])
                pos += _FIXED_SIZES[value_type]
            else:
                raise EventStreamError(f"unknown header value type {value_type}")
    except UnicodeDecodeError as exc:
        raise EventStreamError(f"event-stream header is not UTF-8: {exc.reason}") from None
    return headers


def _take(raw: bytes, pos: int, length: int) -> bytes:
    if pos + length > len(raw):
        raise EventStreamError(f"event-stream header cut short at byte {pos} of {len(raw)}")
    return raw[pos : pos + length]


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """Frame one message (string headers only): used to build fixtures and fakes."""
    raw_headers = b"".join(
        bytes([len(name.encode())])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total = _MIN_MESSAGE + len(raw_headers) + len(payload)
    prelude = struct.pack(">II", total, len(raw_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + raw_headers + payload
    return body + struct.pack(">I", zlib.crc32(body))
