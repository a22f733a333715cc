"""Fuzz the byte decoders: Avro single-object decode (compiled reader and fastavro alone), the SSE
decoder and the AWS event-stream decoder. Zero crashes: every input decodes, or is refused with the
decoder's typed error (CodecError, EventStreamError); the SSE decoder refuses nothing (garbage is the
parsers' to report). `make fuzz` runs these with the fuzz profile; CI with its fast one."""

from __future__ import annotations

import itertools
import struct
import zlib

from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.support import seen
from tests.strategies import model_strategy
from turnledger.codec import Codec, SchemaRegistry
from turnledger.codec.errors import CodecError
from turnledger.codec.models import RECORD_MODELS
from turnledger.streaming.eventstream import EventStreamDecoder, EventStreamError, encode_message
from turnledger.streaming.sse import SseDecoder

COMPILED = Codec(SchemaRegistry.from_files())
FASTAVRO = Codec(SchemaRegistry.from_files(compiled=False))


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding, then cut, extended, overwritten or spliced at random places."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "delete", "overwrite"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "overwrite" and at < len(data):
            data[at] = draw(st.integers(0, 255))
    return bytes(data)


ENCODED = st.sampled_from(RECORD_MODELS).flatmap(model_strategy).map(COMPILED.encode)
AVRO_INPUTS = mutated(ENCODED) | st.binary(max_size=64) | ENCODED.map(lambda b: b[:10] + bytes(len(b) - 10))


def _decode(codec: Codec, data: bytes) -> tuple[str, object]:
    try:
        return "decoded", codec.decode(data)
    except CodecError as exc:
        return type(exc).__name__, exc.reason


@given(AVRO_INPUTS)
def test_avro_decode_compiled_and_fastavro_refuse_alike(data: bytes) -> None:
    compiled = _decode(COMPILED, data)
    reference = _decode(FASTAVRO, data)
    seen("avro decode (compiled)", compiled[0])
    seen("avro decode (fastavro)", reference[0])
    assert compiled == reference


NEWLINES = st.sampled_from([b"\n", b"\r", b"\r\n"])
SSE_LINE = st.tuples(
    st.sampled_from([b"data: ", b"data:", b"event: ", b"id: ", b"retry: ", b": ", b"", b"data"]),
    st.binary(max_size=10) | st.text(max_size=10).map(str.encode) | st.just(b'{"type": "x"}'),
    NEWLINES,
).map(b"".join)
SSE_BYTES = st.lists(SSE_LINE | NEWLINES | st.binary(max_size=6), max_size=30).map(b"".join)


@given(SSE_BYTES, st.lists(st.integers(0, 400), max_size=8))
@example(b'event: a\r\ndata: {"x": 1}\r\n\r\ndata: two\ndata: lines\n\n: ping\n\ndata: cut', [9, 10, 30])
def test_sse_decoder_never_raises_and_ignores_chunk_boundaries(data: bytes, cuts: list[int]) -> None:
    whole = SseDecoder()
    expected = [*whole.feed(data), *whole.flush()]
    chunked = SseDecoder()
    events = []
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    for start, end in itertools.pairwise(bounds):
        events += chunked.feed(data[start:end])
    events += chunked.flush()
    seen("sse decoder", "no event" if not events else "events")
    assert events == expected


HEADER_VALUES = st.text(max_size=12)
MESSAGES = st.builds(
    encode_message,
    st.dictionaries(st.sampled_from([":event-type", ":message-type", ":content-type", "x"]), HEADER_VALUES),
    st.binary(max_size=40),
)


def _forged_crc(data: bytes) -> bytes:
    """Recompute both CRCs of a (mutated) message, so the decoder must judge the lengths and headers."""
    if len(data) < 16:
        return data
    prelude = data[:8] + struct.pack(">I", zlib.crc32(data[:8]))
    body = prelude + data[12:-4]
    return body + struct.pack(">I", zlib.crc32(body))


EVENT_STREAM = st.lists(MESSAGES, min_size=1, max_size=3).map(b"".join).flatmap(
    lambda valid: mutated(st.just(valid)) | mutated(st.just(valid)).map(_forged_crc)
) | st.binary(max_size=64)


@given(EVENT_STREAM, st.lists(st.integers(0, 300), max_size=4))
def test_event_stream_decoder_decodes_or_raises_its_typed_error(data: bytes, cuts: list[int]) -> None:
    decoder = EventStreamDecoder()
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    messages = 0
    try:
        for start, end in itertools.pairwise(bounds):
            messages += len(decoder.feed(data[start:end]))
    except EventStreamError:
        seen("aws event-stream decoder", "EventStreamError")
        return
    seen("aws event-stream decoder", "decoded" if messages else "incomplete")
