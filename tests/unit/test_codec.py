"""Single-object encoding: round trips, evolution, and typed errors for bad bytes."""

from __future__ import annotations

import contextlib
import copy
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.strategies import model_strategy
from turnledger.codec import (
    Codec,
    CodecError,
    CorruptRecord,
    NotSingleObjectEncoded,
    SchemaRegistry,
    UnencodableRecord,
    UnknownFingerprint,
    decode,
    default_codec,
    encode,
)
from turnledger.codec.loader import expand, load_schema_files
from turnledger.codec.models import RECORD_MODELS
from turnledger.codec.registry import HEADER_SIZE
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchRequested, DispatchSent, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition

SAMPLE = DispatchRequested(
    conversation_id="conv-1",
    event_id="ev-1",
    occurred_at_ms=1_700_000_000_000,
    operation_id="op-1",
    adapter="anthropic-messages@1",
    provider="anthropic",
    model_revision="provider/model@2026-07",
    tools=(
        ToolDefinition(
            name="clock", input_schema={"type": "object", "properties": {"tz": {"type": "string"}}}
        ),
    ),
    max_output_tokens=1600,
    policy={"temperature": 0.2, "stop": ["\n\n"]},
)


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_round_trip_of_every_record(model: type[BaseModel]) -> None:
    @settings(max_examples=20)
    @given(model_strategy(model))
    def round_trip(record: BaseModel) -> None:
        data = encode(record)
        assert data[:2] == b"\xc3\x01"
        assert decode(data) == record

    round_trip()


def test_header_is_marker_and_little_endian_fingerprint() -> None:
    data = encode(SAMPLE)
    entry = default_codec().registry.reader("turnledger.v1.DispatchRequested")
    assert entry is not None
    assert data[:10] == b"\xc3\x01" + entry.fingerprint


def test_json_fields_travel_as_canonical_text() -> None:
    data = encode(SAMPLE)
    assert b'{"stop":["\\n\\n"],"temperature":0.2}' in data


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", NotSingleObjectEncoded),
        (b"\xc3", NotSingleObjectEncoded),
        (b'{"json": true}', NotSingleObjectEncoded),
        (b"\x00\x00\x00\x00\x01payload", NotSingleObjectEncoded),
        (b"\xc3\x01" + b"\x00" * 8 + b"body", UnknownFingerprint),
    ],
)
def test_bytes_that_are_not_ours(data: bytes, error: type[CodecError]) -> None:
    with pytest.raises(error):
        decode(data)


def test_error_reasons() -> None:
    assert NotSingleObjectEncoded().reason == ReasonCode.UNDECODABLE_RECORD
    assert CorruptRecord().reason == ReasonCode.UNDECODABLE_RECORD
    assert UnknownFingerprint().reason == ReasonCode.UNKNOWN_FINGERPRINT


def test_truncated_at_every_byte_is_a_typed_error() -> None:
    data = encode(SAMPLE)
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            decode(data[:cut])


def test_trailing_bytes_are_corrupt() -> None:
    with pytest.raises(CorruptRecord):
        decode(encode(SAMPLE) + b"\x00")


@given(st.binary(max_size=200))
def test_garbage_is_a_typed_error(noise: bytes) -> None:
    for data in (noise, b"\xc3\x01" + encode(SAMPLE)[2:10] + noise):
        with contextlib.suppress(CodecError):
            decode(data)


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_bit_flips_decode_or_fail_typed(model: type[BaseModel]) -> None:
    """Avro has no checksum: a flipped body bit may still decode, but only ever to a
    valid record of the same type, or to a CodecError; never another exception."""

    @settings(max_examples=15)
    @given(model_strategy(model), st.data())
    def flip(record: BaseModel, data: st.DataObject) -> None:
        raw = bytearray(encode(record))
        position = data.draw(st.integers(0, len(raw) * 8 - 1))
        raw[position // 8] ^= 1 << (position % 8)
        try:
            decoded = decode(bytes(raw))
        except CodecError:
            return
        assert type(decoded) is model
        assert position >= 80  # a flipped header bit never decodes

    flip()


def test_exhaustive_single_bit_flips_of_a_sample() -> None:
    data = encode(SAMPLE)
    rng = random.Random(7)
    for position in rng.sample(range(len(data) * 8), 400):
        raw = bytearray(data)
        raw[position // 8] ^= 1 << (position % 8)
        with contextlib.suppress(CodecError):
            decode(bytes(raw))


# ---------------------------------------------------------------- schema evolution


def _with_note(schema: dict[str, Any]) -> dict[str, Any]:
    newer = copy.deepcopy(schema)
    newer["fields"].append(
        {"name": "note", "type": ["null", "string"], "default": None, "doc": "added later"}
    )
    return newer


def _current(name: str) -> dict[str, Any]:
    return expand(f"turnledger.v1.{name}", load_schema_files())


def test_newer_writer_with_an_added_optional_field_is_read_by_the_current_reader() -> None:
    registry = SchemaRegistry.from_files()
    newer = registry.add(_with_note(_current("DispatchSent")), reader=False)
    codec = Codec(registry)
    datum = {"conversationId": "c", "eventId": "e", "occurredAtMs": 5, "operationId": "o"}
    data = codec.encode_datum(newer, {**datum, "attemptGeneration": 3, "note": "hello"})
    assert codec.decode(data) == DispatchSent(
        conversation_id="c", event_id="e", occurred_at_ms=5, operation_id="o", attempt_generation=3
    )


def test_older_writer_is_read_by_a_newer_reader_with_the_default() -> None:
    registry = SchemaRegistry()
    registry.add(_current("DispatchSent"), reader=False)
    registry.add(_with_note(_current("DispatchSent")))
    record = DispatchSent(
        conversation_id="c", event_id="e", occurred_at_ms=5, operation_id="o", attempt_generation=3
    )
    name, datum = Codec(registry).decode_datum(encode(record))
    assert name == "turnledger.v1.DispatchSent"
    assert datum == {**record.to_json_dict(), "note": None}


def test_a_record_is_encoded_with_the_current_schema_of_its_name_as_it_changes() -> None:
    registry = SchemaRegistry.from_files()
    codec = Codec(registry)
    record = DispatchSent(
        conversation_id="c", event_id="e", occurred_at_ms=5, operation_id="o", attempt_generation=3
    )
    first = codec.encode(record)
    assert first[2:HEADER_SIZE] == registry.reader("turnledger.v1.DispatchSent").fingerprint  # type: ignore[union-attr]
    registry.add(_with_note(_current("DispatchSent")), reader=False)
    assert codec.encode(record) == first  # a writer-only version changes nothing
    newer = registry.add(_with_note(_current("DispatchSent")))
    second = codec.encode(record)
    assert second[2:HEADER_SIZE] == newer.fingerprint != first[2:HEADER_SIZE]
    assert second == codec.encode_datum(newer, {**record.model_dump(by_alias=True), "note": None})
    with pytest.raises(UnencodableRecord, match="no schema for Frozen"):
        codec.encode(Frozen())


def test_unknown_reason_code_symbol_falls_back_to_unspecified() -> None:
    newer = _current("Rejected")
    reason = next(f for f in newer["fields"] if f["name"] == "reason")
    reason["type"] = {**reason["type"], "symbols": [*reason["type"]["symbols"], "FROM_THE_FUTURE"]}
    registry = SchemaRegistry.from_files()
    entry = registry.add(newer, reader=False)
    codec = Codec(registry)
    decoded = codec.decode(codec.encode_datum(entry, {"reason": "FROM_THE_FUTURE", "detail": "x"}))
    assert isinstance(decoded, Rejected)
    assert decoded.reason == ReasonCode.UNSPECIFIED


def test_a_corrupt_record_is_refused_with_the_same_words_every_time() -> None:
    """The detail ends up in a Rejected record: a replay must produce the same bytes, so no memory
    address of fastavro's buffer may appear in it."""
    from turnledger.codec import CorruptRecord, decode, encode
    from turnledger.model.events import DispatchSent

    data = encode(
        DispatchSent(
            conversation_id="c", event_id="e", occurred_at_ms=1, operation_id="o", attempt_generation=1
        )
    )
    details = []
    for _ in range(2):
        try:
            decode(data[:-1])
        except CorruptRecord as exc:
            details.append(str(exc))
    assert len(details) == 2 and details[0] == details[1] and " at 0x" not in details[0]
