"""The evidence the metrics and the demo's invariants read (promise 5's topics, read whole): every
committed record of each stream in partition and offset order, decoded where it decodes."""

from __future__ import annotations

import pytest

from tests.unit.replay.fake_topics import FakeTopics
from turnledger.codec import default_codec
from turnledger.model.events import DispatchSent, TurnSubmitted
from turnledger.records import SourceRecord
from turnledger.replay.evidence import STREAMS, Evidence, Raw, _raw, read_all
from turnledger.topology import Stream

CODEC = default_codec()
SENT = DispatchSent(
    conversation_id="c", event_id="e", occurred_at_ms=5, operation_id="o", attempt_generation=2
)
TURN = TurnSubmitted(conversation_id="c", event_id="t", occurred_at_ms=6, turn_id="u1", blocks=())


def _record(
    topic: str, partition: int, offset: int, value: bytes | None, key: bytes | None = b"c"
) -> SourceRecord:
    return SourceRecord(topic, partition, offset, key, value)


def test_a_record_is_kept_with_its_coordinates_and_decoded_when_it_decodes() -> None:
    """The raw bytes and key are kept either way; bytes no schema reads have no record."""
    value = CODEC.encode(SENT)
    assert _raw(_record("t", 2, 9, value)) == Raw(2, 9, b"c", value, SENT)
    assert _raw(_record("t", 1, 4, b"garbage", None)) == Raw(1, 4, None, b"garbage", None)
    with pytest.raises(AssertionError):
        _raw(_record("t", 0, 0, None))


def test_records_skip_what_did_not_decode_and_of_picks_a_type() -> None:
    """`records` gives a stream's decoded records in order (none for a stream not read); `of` those
    of one type."""
    evidence = Evidence(
        {"ingress": [Raw(0, 0, None, b"", TURN), Raw(0, 1, None, b"x", None), Raw(0, 2, None, b"", SENT)]}
    )
    assert evidence.records("ingress") == [TURN, SENT]
    assert evidence.records("committed") == []
    assert evidence.of("ingress", DispatchSent) == [SENT]
    assert evidence.of("ingress", TurnSubmitted) == [TURN]
    assert evidence.of("committed", DispatchSent) == []


async def test_read_all_reads_each_stream_sorted_by_partition_and_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches arrive per partition in any order; each stream's records come back sorted, the ones
    without a value left out, under the prefixed topic names, and the reader is stopped. The progress
    of each topic's read is told under its name."""
    sent, turn = CODEC.encode(SENT), CODEC.encode(TURN)
    topics = FakeTopics(
        {
            "p.turnledger.ingress": [
                [_record("p.turnledger.ingress", 1, 0, turn), _record("p.turnledger.ingress", 1, 1, None)],
                [_record("p.turnledger.ingress", 0, 5, sent), _record("p.turnledger.ingress", 0, 6, b"x")],
                [_record("p.turnledger.ingress", 0, 2, turn)],
            ],
            "p.turnledger.committed": [],
        }
    )
    topics.install(monkeypatch, "turnledger.replay.evidence")
    told: list[tuple[str, int, int]] = []
    evidence = await read_all(
        "broker:9092", "p.", (Stream.INGRESS, Stream.COMMITTED), progress=lambda *t: told.append(t)
    )
    assert evidence.raw == {
        "ingress": [
            Raw(0, 2, b"c", turn, TURN),
            Raw(0, 5, b"c", sent, SENT),
            Raw(0, 6, b"c", b"x", None),
            Raw(1, 0, b"c", turn, TURN),
        ],
        "committed": [],
    }
    assert topics.asked == [
        ("broker:9092", ["p.turnledger.ingress"]),
        ("broker:9092", ["p.turnledger.committed"]),
    ]
    assert told == [
        ("p.turnledger.ingress", 0, 5), ("p.turnledger.ingress", 2, 5), ("p.turnledger.ingress", 4, 5),
        ("p.turnledger.ingress", 5, 5),
        ("p.turnledger.committed", 0, 0),
    ]  # fmt: skip
    assert topics.started == ["broker:9092"] and [c.stopped for c in topics.consumers] == [1]


async def test_read_all_reads_every_stream_by_default_and_stops_the_reader_on_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without streams named, the ingress and every output stream are read, in that order; a topic
    that is missing raises, and the reader is stopped all the same."""
    topics = FakeTopics({f"turnledger.{s.value}": [] for s in STREAMS})
    topics.install(monkeypatch, "turnledger.replay.evidence")
    evidence = await read_all("b", "")
    assert list(evidence.raw) == [s.value for s in STREAMS]
    assert STREAMS[0] == Stream.INGRESS and len(STREAMS) == 7
    del topics.batches["turnledger.previews"]
    with pytest.raises(LookupError, match=r"no topic turnledger\.previews"):
        await read_all("b", "")
    assert [c.stopped for c in topics.consumers] == [1, 1]
