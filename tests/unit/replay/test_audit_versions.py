"""`replay audit` across a schema change: an output written with an older schema version is the same
record when it decodes to the expected one; anything else that differs is still a divergence."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from turnledger.codec import Codec, SchemaRegistry
from turnledger.codec.history import canonical_text, current_record_schemas, file_name, fingerprint_hex
from turnledger.replay.audit import AuditReport, Coordinates, compare

HERE = Coordinates("t", 0, 0)
DATUM = {"conversationId": "c", "eventId": "e", "occurredAtMs": 5, "operationId": "o", "attemptGeneration": 2}


def _codec_with_older_version(tmp_path: Path) -> tuple[Codec, Any]:
    [current] = [s for s in current_record_schemas() if s["name"].endswith("DispatchSent")]
    older = copy.deepcopy(current)
    older["fields"].append({"name": "sentBy", "type": "string"})
    (tmp_path / file_name(older)).write_text(canonical_text(older), encoding="utf-8")
    codec = Codec(SchemaRegistry.from_files(history=tmp_path))
    entry = codec.registry.writer(bytes.fromhex(fingerprint_hex(older)))
    assert entry is not None
    return codec, entry


def _audit(codec: Codec, expected: bytes, actual: bytes) -> AuditReport:
    report = AuditReport()
    key = ("manifests", b"c")
    compare({key: [(expected, HERE)]}, {key: [(actual, HERE)]}, report, codec)
    return report


def test_same_record_written_with_an_older_version_is_not_a_divergence(tmp_path: Path) -> None:
    codec, older = _codec_with_older_version(tmp_path)
    current = codec.registry.reader(older.name)
    assert current is not None
    expected = codec.encode_datum(current, DATUM)
    actual = codec.encode_datum(older, {**DATUM, "sentBy": "w"})
    assert expected != actual
    report = _audit(codec, expected, actual)
    assert (report.checked, report.older_versions, report.divergences) == (1, 1, [])


def test_another_record_in_an_older_version_is_a_divergence(tmp_path: Path) -> None:
    codec, older = _codec_with_older_version(tmp_path)
    current = codec.registry.reader(older.name)
    assert current is not None
    expected = codec.encode_datum(current, DATUM)
    actual = codec.encode_datum(older, {**DATUM, "attemptGeneration": 3, "sentBy": "w"})
    report = _audit(codec, expected, actual)
    assert report.older_versions == 0 and [d.kind for d in report.divergences] == ["differs"]


def test_different_bytes_of_the_same_version_are_a_divergence(tmp_path: Path) -> None:
    codec, older = _codec_with_older_version(tmp_path)
    current = codec.registry.reader(older.name)
    assert current is not None
    expected = codec.encode_datum(current, DATUM)
    corrupted = expected[:-1] + bytes([expected[-1] ^ 0x02])
    report = _audit(codec, expected, corrupted)
    assert report.older_versions == 0 and [d.kind for d in report.divergences] == ["differs"]


def _preview_sequences() -> tuple[Codec, list[bytes], list[bytes]]:
    """The same three previews in the current form (text appended at an offset) and as the earlier
    version wrote them (the whole text so far each time), a retraction and a new read in between."""
    codec = Codec(SchemaRegistry.from_files())
    earlier = codec.registry.writer(bytes.fromhex("eb76c4c8738cee09"))
    current = codec.registry.reader("turnledger.v1.PreviewUpdated")
    retracted = codec.registry.reader("turnledger.v1.PreviewRetracted")
    assert earlier is not None and current is not None and retracted is not None
    base = {
        "conversationId": "c",
        "operationId": "o",
        "attemptGeneration": 1,
        "blockIndex": 0,
        "occurredAtMs": 5,
    }
    parts = [
        ("He", 0, "He"),
        ("llo", 2, "Hello"),
        (" 日本", 5, "Hello 日本"),
        (None, 0, None),
        ("Hi", 0, "Hi"),
    ]
    expected, actual = [], []
    for seq, (text, offset, whole) in enumerate(parts):
        if text is None:
            gone = codec.encode_datum(retracted, {**base, "reason": "STREAM_DISCONNECTED"})
            expected.append(gone)
            actual.append(gone)
            continue
        datum = {**base, "throughSequence": seq}
        expected.append(codec.encode_datum(current, {**datum, "text": text, "textOffset": offset}))
        actual.append(codec.encode_datum(earlier, {**datum, "text": whole}))
    return codec, expected, actual


def _audit_sequence(codec: Codec, expected: list[bytes], actual: list[bytes]) -> AuditReport:
    report = AuditReport()
    key = ("previews", b"c")
    compare({key: [(e, HERE) for e in expected]}, {key: [(a, HERE) for a in actual]}, report, codec)
    return report


def test_earlier_previews_holding_the_whole_text_match_the_appended_ones() -> None:
    codec, expected, actual = _preview_sequences()
    report = _audit_sequence(codec, expected, actual)
    assert (report.checked, report.older_versions, report.divergences) == (5, 4, [])


def test_an_earlier_preview_whose_whole_text_differs_is_a_divergence() -> None:
    codec, expected, actual = _preview_sequences()
    _, datum = codec.decode_datum(actual[2])
    earlier = codec.registry.writer(actual[2][2:10])
    assert earlier is not None
    del datum["textOffset"]
    actual[2] = codec.encode_datum(earlier, {**datum, "text": "Hello 日本!"})
    report = _audit_sequence(codec, expected, actual)
    assert report.older_versions == 3 and [(d.kind, d.index) for d in report.divergences] == [("differs", 2)]
