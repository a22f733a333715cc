"""Malformed event-stream headers under valid CRCs (found by `make fuzz`): a typed EventStreamError from
the decoder, a MALFORMED_EVENT provider error from the Bedrock parser, never a UnicodeDecodeError or an
IndexError."""

from __future__ import annotations

import struct
import zlib

import pytest

from turnledger.model.deltas import DeltaType
from turnledger.streaming import parser_for
from turnledger.streaming.eventstream import EventStreamDecoder, EventStreamError, encode_message


def framed(raw_headers: bytes, payload: bytes = b"{}") -> bytes:
    """One message with these header bytes and correct CRCs."""
    total = 16 + len(raw_headers) + len(payload)
    prelude = struct.pack(">II", total, len(raw_headers))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + raw_headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


NOT_UTF8_NAME = b"\x0b\x80event-type\x07\x00\x00"
NOT_UTF8_VALUE = b"\x0b:event-type\x07\x00\x02\xc0\x80"
NAME_LONGER_THAN_HEADERS = b"\x0c:event-type"
NAME_WITHOUT_TYPE = b"\x0b:event-type"
VALUE_CUT_SHORT = b"\x0b:event-type\x07\x00\x09abc"
LENGTH_CUT_SHORT = b"\x0b:event-type\x07\x00"
FIXED_CUT_SHORT = b"\x01x\x05\x00\x00"
UNKNOWN_TYPE = b"\x01x\x0e"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (NOT_UTF8_NAME, "event-stream header is not UTF-8: invalid start byte"),
        (NOT_UTF8_VALUE, "event-stream header is not UTF-8: invalid start byte"),
        (NAME_LONGER_THAN_HEADERS, "event-stream header cut short at byte 1 of 12"),
        (NAME_WITHOUT_TYPE, "event-stream header cut short at byte 12 of 12"),
        (VALUE_CUT_SHORT, "event-stream header cut short at byte 15 of 18"),
        (LENGTH_CUT_SHORT, "event-stream header cut short at byte 13 of 14"),
        (FIXED_CUT_SHORT, "event-stream header cut short at byte 3 of 5"),
        (UNKNOWN_TYPE, "unknown header value type 14"),
    ],
)
def test_malformed_headers_are_a_typed_error_and_poison_the_decoder(raw: bytes, message: str) -> None:
    decoder = EventStreamDecoder()
    with pytest.raises(EventStreamError) as caught:
        decoder.feed(framed(raw))
    assert str(caught.value) == message
    assert decoder.poisoned is True
    assert decoder.feed(encode_message({":event-type": "messageStart"}, b"{}")) == []


def test_the_bedrock_parser_reports_a_malformed_header_as_a_provider_error() -> None:
    parser = parser_for("bedrock-converse", generation=1)
    deltas = parser.feed(framed(NOT_UTF8_VALUE))
    assert [(d.type, d.error_type, d.error_message, d.delta_sequence) for d in deltas] == [
        (
            DeltaType.PROVIDER_ERROR,
            "malformed_event",
            "event-stream header is not UTF-8: invalid start byte",
            0,
        )
    ]


def test_well_formed_headers_of_every_fixed_type_still_decode() -> None:
    raw = b"".join(
        bytes([1, ord("a") + t, t]) + b"\x00" * size
        for t, size in ((0, 0), (1, 0), (2, 1), (3, 2), (4, 4), (5, 8))
    )
    raw += b"\x0b:event-type\x07\x00\x02hi" + b"\x01z\x06\x00\x01\xff"
    (message,) = EventStreamDecoder().feed(framed(raw, b'{"a": 1}'))
    assert message.headers == {":event-type": "hi"}
    assert message.payload == b'{"a": 1}'


def _bedrock(*chunks: bytes) -> list[tuple[DeltaType, int, str | None]]:
    parser = parser_for("bedrock-converse", generation=1)
    deltas = [d for chunk in chunks for d in parser.feed(chunk)] + parser.flush()
    return [(d.type, d.delta_sequence, d.text or d.error_type) for d in deltas]


def test_messages_before_a_bad_frame_count_however_the_bytes_were_cut() -> None:
    """Found by the mutation fuzzer: the messages decoded in the same read as a corrupt frame were
    dropped, so a stream read whole lost deltas that the same stream read frame by frame kept."""
    headers = {":message-type": "event", ":content-type": "application/json"}
    start = encode_message({**headers, ":event-type": "messageStart"}, b'{"role": "assistant"}')
    text = encode_message(
        {**headers, ":event-type": "contentBlockDelta"}, b'{"contentBlockIndex": 0, "delta": {"text": "hi"}}'
    )
    bad = bytearray(encode_message({**headers, ":event-type": "contentBlockStop"}, b"{}"))
    bad[-1] ^= 0xFF  # message CRC wrong

    decoder = EventStreamDecoder()
    with pytest.raises(EventStreamError) as caught:
        decoder.feed(start + text + bytes(bad))
    assert str(caught.value) == "event-stream message CRC mismatch"
    assert [m.headers[":event-type"] for m in caught.value.decoded] == ["messageStart", "contentBlockDelta"]

    expected = [
        (DeltaType.MESSAGE_START, 0, None),
        (DeltaType.BLOCK_START, 1, None),
        (DeltaType.TEXT_DELTA, 2, "hi"),
        (DeltaType.PROVIDER_ERROR, 3, "malformed_event"),
    ]
    assert _bedrock(start + text + bytes(bad)) == expected
    assert _bedrock(start, text, bytes(bad)) == expected


def test_a_header_value_of_more_than_32767_bytes_round_trips() -> None:
    """String header lengths are unsigned 16-bit (`>H`), on the wire and in `encode_message`."""
    value = "v" * 40_000
    [message] = EventStreamDecoder().feed(encode_message({":event-type": value}, b"{}"))
    assert message.headers == {":event-type": value} and message.payload == b"{}"


def test_a_message_with_an_empty_payload_decodes() -> None:
    [message] = EventStreamDecoder().feed(encode_message({":event-type": "ping"}, b""))
    assert message.headers == {":event-type": "ping"} and message.payload == b""


def test_a_bad_prelude_is_refused_as_soon_as_it_arrives() -> None:
    """The prelude's CRC and its lengths are checked on its 12 bytes, before the message's: a wrong
    prelude CRC, or a total shorter than the headers it announces, is refused at once."""
    good = encode_message({":event-type": "chunk"}, b"{}")
    bad_crc = good[:8] + bytes([good[8] ^ 1]) + good[9:12]
    short = struct.pack(">II", 16 + 5 - 1, 5)
    short += struct.pack(">I", zlib.crc32(short))
    for prelude in (bad_crc, short):
        with pytest.raises(EventStreamError, match=r"^event-stream prelude CRC mismatch or bad lengths$"):
            EventStreamDecoder().feed(prelude)
