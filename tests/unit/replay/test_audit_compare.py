"""`replay audit`'s comparison (promise 5, "folding the ingress log again yields byte-identical outputs"):
every (stream, key) sequence compared index by index, in key order, each divergence located exactly,
and an output that is not the expected record never counted as one written with an older schema."""

from __future__ import annotations

from typing import Any

from turnledger.codec import SchemaEntry, default_codec
from turnledger.codec.registry import HEADER_SIZE
from turnledger.replay.audit import (
    AuditReport,
    Coordinates,
    Divergence,
    _text,
    _WholePreviews,
    compare,
    same_record_older_version,
)

CODEC = default_codec()


def _entry(found: SchemaEntry | None) -> SchemaEntry:
    assert found is not None
    return found


SENT = _entry(CODEC.registry.reader("turnledger.v1.DispatchSent"))
PREVIEW = _entry(CODEC.registry.reader("turnledger.v1.PreviewUpdated"))
EARLIER_PREVIEW = _entry(CODEC.registry.writer(bytes.fromhex("eb76c4c8738cee09")))
RETRACTED = _entry(CODEC.registry.reader("turnledger.v1.PreviewRetracted"))


def _sent(generation: int) -> bytes:
    datum = {"conversationId": "c", "eventId": "e", "occurredAtMs": 5, "operationId": "o"}
    return CODEC.encode_datum(SENT, {**datum, "attemptGeneration": generation})


def _at(topic: str, offset: int) -> Coordinates:
    return Coordinates(topic, 3, offset)


BLOCK = {"conversationId": "c", "operationId": "o", "attemptGeneration": 1, "occurredAtMs": 5}


def _preview(text: str, offset: int, block: int = 0, seq: int = 0) -> bytes:
    """The current PreviewUpdated: `text` appended at `offset`."""
    datum = {**BLOCK, "blockIndex": block, "throughSequence": seq, "text": text, "textOffset": offset}
    return CODEC.encode_datum(PREVIEW, datum)


def _earlier(whole: str, block: int = 0, seq: int = 0) -> bytes:
    """The earlier PreviewUpdated: the whole text so far."""
    return CODEC.encode_datum(
        EARLIER_PREVIEW, {**BLOCK, "blockIndex": block, "throughSequence": seq, "text": whole}
    )


def _retracted() -> bytes:
    return CODEC.encode_datum(RETRACTED, {**BLOCK, "blockIndex": 0, "reason": "STREAM_DISCONNECTED"})


def _previews(expected: list[bytes], actual: list[bytes]) -> AuditReport:
    report = AuditReport()
    key = ("previews", b"c")
    compare(
        {key: [(e, _at("in", i)) for i, e in enumerate(expected)]},
        {key: [(a, _at("out", i)) for i, a in enumerate(actual)]},
        report,
        CODEC,
    )
    return report


def test_every_sequence_is_compared_in_key_order_and_each_divergence_located() -> None:
    """Equal, differing, missing and extra records over five sequences: the report counts every index
    checked and names each divergence's kind, stream, key, index, output record and ingress record."""
    one, two, three = _sent(1), _sent(2), _sent(3)
    expected: dict[Any, list[tuple[bytes, Coordinates]]] = {
        ("tool-calls", b"k"): [(one, _at("in", 1))],
        ("manifests", b"only-expected"): [(one, _at("in", 2)), (two, _at("in", 3))],
        ("manifests", b"b"): [(one, _at("in", 4)), (two, _at("in", 5)), (three, _at("in", 6))],
        ("manifests", b"a"): [(one, _at("in", 7))],
    }
    actual: dict[Any, list[tuple[bytes | None, Coordinates]]] = {
        ("tool-calls", b"k"): [(one, _at("out", 1))],
        ("manifests", b"a"): [(one, _at("out", 2)), (two, _at("out", 3)), (None, _at("out", 4))],
        ("manifests", b"b"): [(one, _at("out", 5)), (three, _at("out", 6))],
        ("committed", b"only-actual"): [(two, _at("out", 7))],
    }
    report = AuditReport()
    compare(expected, actual, report)
    assert (report.checked, report.older_versions) == (10, 0)
    assert report.divergences == [
        Divergence("extra", "committed", "only-actual", 0, _at("out", 7), None),
        Divergence("extra", "manifests", "a", 1, _at("out", 3), None),
        Divergence("extra", "manifests", "a", 2, _at("out", 4), None),
        Divergence("differs", "manifests", "b", 1, _at("out", 6), _at("in", 5)),
        Divergence("missing", "manifests", "b", 2, None, _at("in", 6)),
        Divergence("missing", "manifests", "only-expected", 0, None, _at("in", 2)),
        Divergence("missing", "manifests", "only-expected", 1, None, _at("in", 3)),
    ]
    assert not report.ok


def test_identical_sequences_are_checked_and_ok() -> None:
    """Byte-identical outputs: every record checked, none counted as an older version, the report ok."""
    key = ("manifests", b"c")
    report = AuditReport()
    compare(
        {key: [(_sent(1), _at("in", 0)), (_sent(2), _at("in", 1))]},
        {key: [(_sent(1), _at("out", 0)), (_sent(2), _at("out", 1))]},
        report,
        CODEC,
    )
    assert (report.checked, report.older_versions, report.divergences, report.ok) == (2, 0, [], True)


def test_checked_adds_to_the_count_the_report_already_has() -> None:
    """A report reused across calls keeps counting: the index count is added, never reset."""
    key = ("manifests", b"c")
    report = AuditReport(checked=5)
    compare({key: [(_sent(1), _at("in", 0))]}, {key: [(_sent(1), _at("out", 0))]}, report, CODEC)
    assert report.checked == 6


def test_a_tombstone_or_an_undecodable_output_is_a_divergence() -> None:
    """An output without a value, or whose bytes no schema known reads (an unknown fingerprint, or the
    expected schema's header over a cut body), differs: it is never taken for an older version."""
    key = ("manifests", b"c")
    expected = _sent(1)
    unknown = b"\xc3\x01" + bytes(8) + expected[HEADER_SIZE:]
    not_avro = b"garbage"
    report = AuditReport()
    compare(
        {key: [(expected, _at("in", i)) for i in range(3)]},
        {key: [(None, _at("out", 0)), (unknown, _at("out", 1)), (not_avro, _at("out", 2))]},
        report,
        CODEC,
    )
    assert report.older_versions == 0
    assert [(d.kind, d.index, d.actual) for d in report.divergences] == [
        ("differs", 0, _at("out", 0)),
        ("differs", 1, _at("out", 1)),
        ("differs", 2, _at("out", 2)),
    ]


def test_a_key_that_is_not_utf_8_is_named_with_replacement_characters() -> None:
    """Keys are bytes on the topic; the report names them as text, bytes that are not UTF-8 replaced."""
    assert _text(b"conv-\xff\xfe") == "conv-\ufffd\ufffd"
    assert _text("日本".encode()) == "日本"
    report = AuditReport()
    compare({}, {("committed", b"\xffk"): [(_sent(1), _at("out", 0))]}, report, CODEC)
    assert report.divergences == [Divergence("extra", "committed", "\ufffdk", 0, _at("out", 0), None)]


def test_same_record_older_version_needs_another_header_and_a_decodable_record() -> None:
    """Only bytes of another writer schema can be the same record; bytes of the same writer schema
    that differ are another record, and bytes that do not decode are none."""
    record = _sent(1)
    assert not same_record_older_version(CODEC, record, record)
    assert not same_record_older_version(CODEC, record, record + b"\x00")
    assert not same_record_older_version(CODEC, record, b"\xc3\x01" + bytes(8) + record[HEADER_SIZE:])
    assert not same_record_older_version(CODEC, record, _earlier("x"))


def test_a_current_version_preview_holding_the_whole_text_is_a_divergence() -> None:
    """Only the earlier schema wrote the whole text: a preview in the current schema must carry the
    appended text itself, so one holding the whole text at offset 0 differs."""
    expected = [_preview("He", 0, seq=0), _preview("llo", 2, seq=1)]
    actual = [_preview("He", 0, seq=0), _preview("Hello", 0, seq=1)]
    report = _previews(expected, actual)
    assert report.older_versions == 0
    assert report.divergences == [Divergence("differs", "previews", "c", 1, _at("out", 1), _at("in", 1))]


def test_whole_texts_are_kept_per_block() -> None:
    """Two blocks streamed in turns: each earlier preview holds its own block's whole text."""
    expected = [
        _preview("He", 0, 0, 0),
        _preview("Wo", 0, 1, 1),
        _preview("llo", 2, 0, 2),
        _preview("rld", 2, 1, 3),
    ]
    actual = [_earlier("He", 0, 0), _earlier("Wo", 1, 1), _earlier("Hello", 0, 2), _earlier("World", 1, 3)]
    report = _previews(expected, actual)
    assert (report.checked, report.older_versions, report.divergences) == (4, 4, [])


def test_an_earlier_preview_against_another_record_is_a_divergence() -> None:
    """At the index of a retraction, an earlier preview holding the text before it is no match."""
    expected = [_preview("He", 0), _retracted()]
    actual = [_earlier("He"), _earlier("He")]
    report = _previews(expected, actual)
    assert report.older_versions == 1
    assert [(d.kind, d.index) for d in report.divergences] == [("differs", 1)]


def test_a_preview_past_the_text_held_matches_no_whole_text() -> None:
    """A preview appending past the end of the text its block has (which no fold writes) has no whole
    text: no earlier preview matches it, whatever came before its offset, nor the block's next preview."""
    expected = [_preview("llo", 2, seq=0), _preview("!", 5, seq=1)]
    for before in ("", "He", "XX", "XXXX"):
        report = _previews(expected, [_earlier(before + "llo", seq=0), _earlier(before + "llo!", seq=1)])
        assert report.older_versions == 0, before
        assert [(d.kind, d.index) for d in report.divergences] == [("differs", 0), ("differs", 1)]


def test_a_preview_past_the_text_held_forgets_the_blocks_text() -> None:
    """After a preview past the end of its block's text, the text held before it is gone: a later
    preview inside that old text has no whole text either, and the text started again at offset 0
    is followed on."""
    expected = [
        _preview("He", 0, seq=0),
        _preview("x", 5, seq=1),
        _preview("y", 2, seq=2),
        _preview("Hi", 0, seq=3),
        _preview("!", 2, seq=4),
    ]
    actual = [expected[0], expected[1], _earlier("Hey", seq=2), expected[3], _earlier("Hi!", seq=4)]
    report = _previews(expected, actual)
    assert report.older_versions == 1
    assert [(d.kind, d.index) for d in report.divergences] == [("differs", 2)]


def test_whole_texts_are_followed_past_other_records_of_the_sequence() -> None:
    """Another block's retraction between two previews of a block leaves that block's text whole."""
    other = CODEC.encode_datum(RETRACTED, {**BLOCK, "blockIndex": 1, "reason": "STREAM_DISCONNECTED"})
    expected = [_preview("He", 0, seq=0), other, _preview("llo", 2, seq=1)]
    actual = [expected[0], other, _earlier("Hello", seq=1)]
    report = _previews(expected, actual)
    assert (report.checked, report.older_versions, report.divergences) == (3, 1, [])


def test_a_retracted_text_starts_again_from_the_offset() -> None:
    """A preview at an offset inside the held text replaces what followed it."""
    expected = [_preview("Hello", 0, seq=0), _preview("p", 3, seq=1), _preview("!", 4, seq=2)]
    actual = [_earlier("Hello", seq=0), _earlier("Help", seq=1), _earlier("Help!", seq=2)]
    report = _previews(expected, actual)
    assert (report.older_versions, report.divergences) == (3, [])


def test_whole_previews_answer_only_forward_and_inside_the_sequence() -> None:
    """`matches_older` walks forward: an index already passed, or past the expected records, is no
    match, and a record that is no preview is none either."""
    expected = [(_preview("He", 0, seq=0), _at("in", 0)), (_preview("llo", 2, seq=1), _at("in", 1))]
    whole = _WholePreviews(CODEC, expected)
    assert whole.matches_older(1, _earlier("Hello", seq=1))
    assert not whole.matches_older(0, _earlier("He", seq=0))
    assert not whole.matches_older(0, _earlier("Hello", seq=1))
    assert not whole.matches_older(2, _earlier("Hello", seq=1))
    fresh = _WholePreviews(CODEC, expected)
    assert not fresh.matches_older(0, _sent(1))
    assert not fresh.matches_older(0, b"garbage")
    assert fresh.matches_older(0, _earlier("He", seq=0))
