"""The batch engine: bytes in, bytes out, independent of batch boundaries."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.codec import decode, encode
from turnledger.dispatch.engine import BatchClosedError, BatchEngine, read_state
from turnledger.model.events import CommittedTurn, IngressEvent, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.records import SourceRecord
from turnledger.topology import Stream

from .scenario import Conversation, text_stream


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        del self.data[key]


def _events() -> list[IngressEvent]:
    """Every event of a full dispatch, captured by driving the scenario."""
    captured: list[IngressEvent] = []
    c = Conversation()
    original = c.apply

    def capture(event: IngressEvent) -> list:  # type: ignore[type-arg]
        captured.append(event)
        return original(event)

    c.apply = capture  # type: ignore[method-assign]
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["a", "b", "c"])
    c.deltas(stream[:3])
    c.deltas(stream[3:])
    c.deltas(stream)  # late duplicate → quarantine
    return captured


def _records(events: list[IngressEvent]) -> list[SourceRecord]:
    return [
        SourceRecord("turnledger.ingress", 0, offset, e.conversation_id.encode(), encode(e))
        for offset, e in enumerate(events)
    ]


def _run(records: list[SourceRecord], batch: int) -> tuple[list[tuple[str, bytes | None, bytes]], DictStore]:
    engine, store = BatchEngine(), DictStore()
    out = []
    for i in range(0, len(records), batch):
        out += [(o.stream.value, o.key, o.value) for o in engine.process_batch(records[i : i + batch], store)]
    return out, store


def test_outputs_do_not_depend_on_batch_boundaries() -> None:
    records = _records(_events())
    reference, store = _run(records, 1)
    for batch in (2, 3, len(records)):
        outputs, other = _run(records, batch)
        assert outputs == reference
        assert other.data == store.data
    streams = [s for s, _, _ in reference]
    assert streams.count(Stream.COMMITTED.value) == 2
    assert streams.count(Stream.QUARANTINE.value) == 1


def test_state_survives_a_fresh_engine() -> None:
    records = _records(_events())
    _, store = _run(records[:5], 5)
    engine = BatchEngine()
    rest = [(o.stream.value, o.value) for o in engine.process_batch(records[5:], store)]
    whole, _ = _run(records, len(records))
    assert rest == [(s, v) for s, _, v in whole][-len(rest) :]
    state = read_state(store, "conv-1")
    assert state is not None and state.graph.revision == 2


def test_garbage_and_key_mismatch_become_rejections_with_coordinates() -> None:
    event = _events()[0]
    records = [
        SourceRecord("in", 3, 10, b"conv-1", b"\x00garbage"),
        SourceRecord("in", 3, 11, b"conv-1", None),
        SourceRecord("in", 3, 12, b"other", encode(event)),
        SourceRecord("in", 3, 13, b"conv-1", encode(event)),
    ]
    outputs = BatchEngine().process_batch(records, DictStore())
    decoded = [decode(o.value) for o in outputs]
    rejected = [r for r in decoded if isinstance(r, Rejected)]
    assert [(r.reason, r.source_partition, r.source_offset) for r in rejected] == [
        (ReasonCode.UNDECODABLE_RECORD, 3, 10),
        (ReasonCode.UNDECODABLE_RECORD, 3, 11),
        (ReasonCode.KEY_MISMATCH, 3, 12),
    ]
    assert [type(r) for r in decoded[3:]] == [CommittedTurn]


def test_a_committed_turn_is_encoded_once_and_written_as_its_size_check_measured_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fold encodes every CommittedTurn to check its size; the engine writes those very bytes (the
    same as `encode(turn)`) instead of encoding the turn again."""
    import turnledger.dispatch.turn_size as turn_size

    records = _records(_events())
    reference, _ = _run(records, len(records))
    encoded: list[str] = []

    def counting(record: Any) -> bytes:
        encoded.append(type(record).__name__)
        return encode(record)

    monkeypatch.setattr(turn_size, "encode", counting)
    engine, store = BatchEngine(), DictStore()
    outputs = engine.process_batch(records, store)
    assert [(o.stream.value, o.key, o.value) for o in outputs] == reference
    turns = [o for o in outputs if isinstance(o.record, CommittedTurn)]
    assert len(turns) == 2 and all(o.value == encode(o.record) for o in turns)
    assert encoded.count("CommittedTurn") == 2  # once each, by the size check
    assert len(encoded) == len(outputs)  # and every other output once, by the engine


def test_encoded_records_hand_back_what_they_encoded_once_then_encode_again() -> None:
    from turnledger.dispatch.turn_size import EncodedRecords

    turn = CommittedTurn(
        conversation_id="c", revision=1, turn_id="t", source_event_id="e", blocks=(), occurred_at_ms=1
    )
    other = turn.model_copy(update={"revision": 2})
    memo = EncodedRecords()
    data = memo.encode(turn)
    assert data == encode(turn)
    assert memo.take(other) == encode(other)  # never encoded here: encoded now
    assert memo.take(turn) is data  # the very bytes, once
    assert memo.take(turn) == data and memo.take(turn) is not data  # then encoded again


def _two_conversations() -> list[SourceRecord]:
    """Two conversations' dispatches, interleaved record by record."""
    first = _events()
    second = [e.model_copy(update={"conversation_id": "conv-2"}) for e in first]
    return _records([e for pair in zip(first, second, strict=True) for e in pair])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_batch_folded_in_pieces_gives_the_outputs_and_writes_of_folding_it_whole(
    data: st.DataObject,
) -> None:
    records = _two_conversations()
    cuts = sorted(data.draw(st.sets(st.integers(1, len(records) - 1), max_size=8), label="cuts"))
    whole_store, piece_store = DictStore(), DictStore()
    whole = BatchEngine().process_batch(records, whole_store)
    batch = BatchEngine().open_batch(piece_store)
    outputs = []
    for start, end in zip([0, *cuts], [*cuts, len(records)], strict=True):
        outputs += batch.fold(records[start:end])
        assert piece_store.data == {}  # no state is written before the close
    batch.close()
    assert [(o.stream, o.key, o.value) for o in outputs] == [(o.stream, o.key, o.value) for o in whole]
    assert piece_store.data == whole_store.data
    assert len(whole) > 10 and len(whole_store.data) > 4


def test_a_closed_batch_refuses_more_records_and_a_second_close() -> None:
    records = _records(_events())
    batch = BatchEngine().open_batch(DictStore())
    batch.fold(records[:2])
    batch.close()
    with pytest.raises(BatchClosedError, match=r"^records folded into a batch after its close$"):
        batch.fold(records[2:])
    with pytest.raises(BatchClosedError, match=r"^a batch closed twice$"):
        batch.close()


def test_a_request_whose_deadline_is_past_the_avro_long_is_refused_with_its_operation_not_a_failed_fold() -> (
    None
):
    """Its decision's `deadlineAtMs` could not be encoded: the engine raised, and the runtime wrote a
    FOLD_FAILED with no operation id."""
    from turnledger.model.events import DispatchRequested
    from turnledger.model.limits import AVRO_LONG_MAX

    user = _events()[0]
    request = DispatchRequested(
        conversation_id="conv-1",
        event_id="e-late",
        occurred_at_ms=user.occurred_at_ms + 1,
        operation_id="op-far",
        adapter="anthropic-messages@1",
        provider="anthropic",
        model_revision="anthropic/claude-sonnet-4@1",
        max_output_tokens=64,
        settle_within_ms=AVRO_LONG_MAX,
    )
    outputs = BatchEngine().process_batch(_records([user, request]), DictStore())
    decoded = [decode(o.value) for o in outputs]
    [rejected] = [r for r in decoded if isinstance(r, Rejected)]
    assert (rejected.reason, rejected.operation_id, rejected.source_offset) == (
        ReasonCode.INVALID_EVENT,
        "op-far",
        1,
    )
    assert rejected.detail == (
        f"the deadline (occurredAtMs {request.occurred_at_ms} + settleWithinMs) is past {AVRO_LONG_MAX}"
    )
