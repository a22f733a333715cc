"""The engine's guards (promise 6 of docs/architecture.md), each pinned by its whole rejection record:
garbage bytes, a record without a value, an oversized record, an unknown fingerprint, a record that is no
ingress event, a key that differs from the conversation id or is missing, a fold that raises; then the
state paths (`decode_state`, `read_state`, the decoded-state cache a rolled-back store must not be
shadowed by) and the keys and streams of the encoded outputs."""

from __future__ import annotations

from dataclasses import replace

import pytest

import turnledger.dispatch.engine as engine_module
from turnledger.codec import decode, encode
from turnledger.dispatch.engine import (
    BatchEngine,
    _deleter,
    _encode_output,
    decode_state,
    encode_state,
    read_state,
)
from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.stored import StateDecodeError, encode_part
from turnledger.dispatch.turn_size import EncodedRecords
from turnledger.model.events import ConversationSnapshot, IngressEvent, Rejected
from turnledger.model.limits import DEFAULT_LIMITS
from turnledger.model.reasons import ReasonCode
from turnledger.processors.store import MemoryStateStore, OverlayStore
from turnledger.records import SourceRecord
from turnledger.topology import Stream

from .test_engine import DictStore, _events, _records

EVENTS = _events()


class FullStore(DictStore):
    """A store that also deletes, and records every write in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str]] = []

    def put(self, key: str, value: bytes) -> None:
        self.log.append(("put", key))
        super().put(key, value)

    def delete(self, key: str) -> None:
        self.log.append(("delete", key))
        del self.data[key]


def _one(record: SourceRecord, engine: BatchEngine | None = None) -> Rejected:
    outputs = (engine or BatchEngine()).process_batch([record], DictStore())
    assert [o.stream for o in outputs] == [Stream.REJECTIONS]
    assert [type(o.record) for o in outputs] == [Rejected]
    rejected = decode(outputs[0].value)
    assert rejected == outputs[0].record
    assert isinstance(rejected, Rejected)
    return rejected


def _record(value: bytes | None, key: bytes | None = b"conv-1", offset: int = 41) -> SourceRecord:
    return SourceRecord("t.in", 7, offset, key, value)


def _anonymous(reason: ReasonCode, detail: str, conversation_id: str | None = "conv-1") -> Rejected:
    """The rejection of a record whose event is unknown: only the key and the coordinates."""
    return Rejected(
        conversation_id=conversation_id,
        reason=reason,
        detail=detail,
        source_topic="t.in",
        source_partition=7,
        source_offset=41,
    )


# ------------------------------------------------------------------ undecodable records


def test_garbage_bytes_are_rejected_with_the_codec_reason_and_the_key_as_conversation() -> None:
    assert _one(_record(b"\x00garbage")) == _anonymous(
        ReasonCode.UNDECODABLE_RECORD, "missing the C3 01 single-object marker"
    )


def test_a_record_without_a_value_is_undecodable() -> None:
    assert _one(_record(None)) == _anonymous(ReasonCode.UNDECODABLE_RECORD, "record without a value")


def test_an_unknown_fingerprint_is_rejected_as_such() -> None:
    value = encode(EVENTS[0])
    forged = value[:2] + bytes(8) + value[10:]
    assert _one(_record(forged)) == _anonymous(
        ReasonCode.UNKNOWN_FINGERPRINT, "unknown writer schema fingerprint 0000000000000000"
    )


def test_a_keyless_garbage_record_has_no_conversation() -> None:
    rejected = _one(_record(b"\xc3\x01short", key=None))
    assert rejected == _anonymous(
        ReasonCode.UNDECODABLE_RECORD, "missing the C3 01 single-object marker", conversation_id=None
    )
    # and its output record is keyed by the empty conversation id
    outputs = BatchEngine().process_batch([_record(b"junk", key=None)], DictStore())
    assert [o.key for o in outputs] == [b""]


def test_a_key_that_is_not_utf8_is_decoded_with_replacement() -> None:
    rejected = _one(_record(b"junk", key=b"conv-\xff"))
    assert rejected.conversation_id == "conv-\ufffd"
    outputs = BatchEngine().process_batch([_record(b"junk", key=b"conv-\xff")], DictStore())
    assert [o.key for o in outputs] == ["conv-\ufffd".encode()]


def test_a_record_that_is_no_ingress_event_is_invalid() -> None:
    other = Rejected(conversation_id="conv-1", reason=ReasonCode.KEY_MISMATCH)
    assert _one(_record(encode(other))) == _anonymous(
        ReasonCode.INVALID_EVENT, "Rejected is not an ingress event"
    )


# ------------------------------------------------------------------ oversized records


def test_a_record_past_max_record_bytes_is_rejected_before_it_is_decoded() -> None:
    value = encode(EVENTS[0])
    limits = replace(DEFAULT_LIMITS, max_record_bytes=len(value) - 1)
    rejected = _one(_record(value), BatchEngine(limits=limits))
    detail = f"record of {len(value)} bytes, at most {len(value) - 1}"
    assert rejected == _anonymous(ReasonCode.RECORD_TOO_LARGE, detail)


def test_a_record_of_exactly_max_record_bytes_is_folded() -> None:
    value = encode(EVENTS[0])
    limits = replace(DEFAULT_LIMITS, max_record_bytes=len(value))
    outputs = BatchEngine(limits=limits).process_batch([_record(value)], DictStore())
    assert [o.stream for o in outputs] == [Stream.COMMITTED]


def test_the_default_limit_is_the_models() -> None:
    """The engine's default limits are `DEFAULT_LIMITS` (1 MiB records): 1 MiB + 1 is refused."""
    value = b"\xc3\x01" + bytes(DEFAULT_LIMITS.max_record_bytes - 2)
    assert _one(_record(value)).reason is ReasonCode.UNKNOWN_FINGERPRINT
    assert _one(_record(value + b"\x00")).reason is ReasonCode.RECORD_TOO_LARGE


# ------------------------------------------------------------------ keys


def test_a_key_that_is_not_the_conversation_id_names_the_event() -> None:
    event = EVENTS[1]
    assert _one(_record(encode(event), key=b"other")) == Rejected(
        conversation_id="conv-1",
        reason=ReasonCode.KEY_MISMATCH,
        detail="record key 'other' is not the conversation id",
        event_type="DispatchRequested",
        event_id="e2",
        source_topic="t.in",
        source_partition=7,
        source_offset=41,
        occurred_at_ms=1002,
    )


def test_a_record_without_a_key_is_a_key_mismatch() -> None:
    event = EVENTS[0]
    assert _one(_record(encode(event), key=None)) == Rejected(
        conversation_id="conv-1",
        reason=ReasonCode.KEY_MISMATCH,
        detail="record key None is not the conversation id",
        event_type="TurnSubmitted",
        event_id="e1",
        source_topic="t.in",
        source_partition=7,
        source_offset=41,
        occurred_at_ms=1001,
    )


# ------------------------------------------------------------------ a fold that raises


class Boom(RuntimeError):
    pass


def _failing_fold(message: str, calls: list[IngressEvent]):  # type: ignore[no-untyped-def]
    real = engine_module.fold

    def fold(state, event, *args):  # type: ignore[no-untyped-def]
        calls.append(event)
        if event.event_id == "e2":
            raise Boom(message)
        return real(state, event, *args)

    return fold


def test_a_fold_that_raises_costs_one_event_and_leaves_the_state(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[IngressEvent] = []
    monkeypatch.setattr(engine_module, "fold", _failing_fold("no luck", calls))
    records = _records(EVENTS[:2])
    store = FullStore()
    outputs = BatchEngine().process_batch(records, store)
    assert [o.stream for o in outputs] == [Stream.COMMITTED, Stream.REJECTIONS]
    assert [o.key for o in outputs] == [b"conv-1", b"conv-1"]
    assert decode(outputs[1].value) == Rejected(
        conversation_id="conv-1",
        operation_id="op-1",
        reason=ReasonCode.FOLD_FAILED,
        detail="Boom: no luck",
        event_type="DispatchRequested",
        event_id="e2",
        source_topic="turnledger.ingress",
        source_partition=0,
        source_offset=1,
        occurred_at_ms=1002,
    )
    assert [e.event_id for e in calls] == ["e1", "e2"]
    # the state is the first event's: revision 1, no operation
    state = read_state(store, "conv-1")
    assert state is not None and state.graph.revision == 1
    assert state.operations == {}


def test_a_fold_failure_of_an_event_without_operation_and_a_long_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fold(*_args):  # type: ignore[no-untyped-def]
        raise ValueError("x" * 3000)

    monkeypatch.setattr(engine_module, "fold", fold)
    store = FullStore()
    outputs = BatchEngine().process_batch(_records(EVENTS[:1]), store)
    rejected = decode(outputs[0].value)
    assert rejected == Rejected(
        conversation_id="conv-1",
        operation_id=None,
        reason=ReasonCode.FOLD_FAILED,
        detail=("ValueError: " + "x" * 3000)[:2000],
        event_type="TurnSubmitted",
        event_id="e1",
        source_topic="turnledger.ingress",
        source_partition=0,
        source_offset=0,
        occurred_at_ms=1001,
    )
    assert len(rejected.detail) == 2000
    assert store.log == []  # nothing folded, nothing written


def test_a_failed_event_does_not_change_what_later_events_fold_to(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch after a failure folds as if the failed event had never been read."""
    records = _records(EVENTS)
    clean = BatchEngine().process_batch(records[:1] + records[2:3], DictStore())
    calls: list[IngressEvent] = []
    monkeypatch.setattr(engine_module, "fold", _failing_fold("x", calls))
    failed = BatchEngine().process_batch(records[:3], DictStore())
    assert [
        o.value
        for o in failed
        if o.stream is not Stream.REJECTIONS or o.record.reason is not ReasonCode.FOLD_FAILED
    ] == [o.value for o in clean]


# ------------------------------------------------------------------ the fold's own rejections


def test_a_rejection_by_the_fold_carries_the_source_coordinates() -> None:
    unknown = EVENTS[2].model_copy(update={"operation_id": "op-9"})
    records = [
        SourceRecord("t.in", 5, 100 + i, e.conversation_id.encode(), encode(e))
        for i, e in enumerate([*EVENTS[:2], unknown])
    ]
    outputs = BatchEngine().process_batch(records, DictStore())
    assert decode(outputs[-1].value) == Rejected(
        conversation_id="conv-1",
        operation_id="op-9",
        reason=ReasonCode.UNKNOWN_OPERATION,
        detail="no operation op-9",
        event_type="DispatchAttempt",
        event_id="e3",
        source_topic="t.in",
        source_partition=5,
        source_offset=102,
        occurred_at_ms=1003,
    )
    # the other outputs are passed through as the fold made them
    assert [o.stream for o in outputs] == [
        Stream.COMMITTED,
        Stream.MANIFESTS,
        Stream.MANIFESTS,
        Stream.REJECTIONS,
    ]
    assert [o.key for o in outputs] == [b"conv-1"] * 4


def test_the_manifest_is_keyed_by_its_conversation() -> None:
    outputs = BatchEngine().process_batch(_records(EVENTS[:2]), DictStore())
    manifest = outputs[1]
    assert type(manifest.record).__name__ == "ManifestIssued"
    assert manifest.key == b"conv-1"
    assert _encode_output(manifest.record, EncodedRecords()).key == b"conv-1"


# ------------------------------------------------------------------ state read and write


def test_decode_state_reads_a_whole_state_and_refuses_a_split_head() -> None:
    store = FullStore()
    BatchEngine().process_batch(_records(EVENTS[:2]), store)
    state = read_state(store, "conv-1")
    assert isinstance(state, ConversationState)
    assert decode_state(encode_state(state)) == state
    with pytest.raises(StateDecodeError) as caught:
        decode_state(store.data["conv-1"])
    assert str(caught.value) == "a format-8 head: its state is split over keys (read it with read_state)"
    head = decode(store.data["conv-1"])
    assert isinstance(head, ConversationSnapshot)
    with pytest.raises(StateDecodeError, match="a format-4 head"):  # written before contents were chunked
        decode_state(encode_part("conv-1", 4, head.state))


def test_read_state_of_a_conversation_without_state_is_none() -> None:
    assert read_state(DictStore(), "conv-1") is None


def test_state_is_written_only_for_changed_conversations_in_sorted_order() -> None:
    store = FullStore()
    engine = BatchEngine()
    first = [
        SourceRecord("t", 0, 0, b"conv-b", encode(EVENTS[0].model_copy(update={"conversation_id": "conv-b"})))
    ]
    second = [
        SourceRecord("t", 0, 1, b"conv-a", encode(EVENTS[0].model_copy(update={"conversation_id": "conv-a"})))
    ]
    engine.process_batch(first + second, store)
    heads = [key for op, key in store.log if op == "put" and "\x1f" not in key]
    assert heads == ["conv-a", "conv-b"]
    assert all(op == "put" for op, _ in store.log)
    # a record that changes no state (a rejection) writes nothing
    store.log.clear()
    engine.process_batch([_record(b"junk")], store)
    assert store.log == []


def test_an_event_that_leaves_the_state_writes_nothing() -> None:
    """The late duplicate is quarantined; the state does not move, so no key is written."""
    records = _records(EVENTS)
    store = FullStore()
    engine = BatchEngine()
    engine.process_batch(records[:-1], store)
    store.log.clear()
    outputs = engine.process_batch(records[-1:], store)
    assert [o.stream for o in outputs] == [Stream.QUARANTINE]
    assert store.log == []


def test_an_unchanged_state_is_still_the_batch_state_for_later_events() -> None:
    """Within one batch, an event that leaves the state is followed by one that changes it: both fold
    against the batch's state, and the outputs are those of one event per batch."""
    records = _records(EVENTS)
    dup = records[-1]
    late = [*records, dup, SourceRecord(dup.topic, 0, 99, dup.key, dup.value)]
    one_by_one = []
    engine, store = BatchEngine(), DictStore()
    for r in late:
        one_by_one += [o.value for o in engine.process_batch([r], store)]
    together = [o.value for o in BatchEngine().process_batch(late, DictStore())]
    assert together == one_by_one


def test_a_store_rolled_back_is_not_shadowed_by_the_cached_state() -> None:
    """An aborted transaction takes the store back; the engine, which cached the state it wrote, must
    read the store again: the same batch folds to the same outputs as on the first try."""
    records = _records(EVENTS)
    store = FullStore()
    engine = BatchEngine()
    engine.process_batch(records[:2], store)
    before = dict(store.data)
    first = [o.value for o in engine.process_batch(records[2:4], store)]
    after = dict(store.data)
    store.data = dict(before)  # the transaction aborted
    again = [o.value for o in engine.process_batch(records[2:4], store)]
    assert again == first
    assert store.data == after


def test_the_cached_state_is_used_while_the_store_holds_what_was_written() -> None:
    """While the store holds the bytes the engine wrote, the cached state answers (no read of the
    parts); a fresh engine reads the same state from the store, so the outputs agree."""
    records = _records(EVENTS)

    class Counting(FullStore):
        def __init__(self) -> None:
            super().__init__()
            self.gets: list[str] = []

        def get(self, key: str) -> bytes | None:
            self.gets.append(key)
            return super().get(key)

    store = Counting()
    engine = BatchEngine()
    engine.process_batch(records[:2], store)
    store.gets.clear()
    cached = [o.value for o in engine.process_batch(records[2:3], store)]
    assert store.gets and set(store.gets) <= set(store.data)
    # the cache compares each key it read or wrote, and reads nothing else
    assert len(store.gets) == len(set(store.gets))
    fresh_store = Counting()
    BatchEngine().process_batch(records[:2], fresh_store)
    fresh = [o.value for o in BatchEngine().process_batch(records[2:3], fresh_store)]
    assert cached == fresh


class StampedStore(FullStore):
    """A store with a rollback stamp (processors/store.py) that counts its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[str] = []
        self.rollback_stamp = object()

    def get(self, key: str) -> bytes | None:
        self.gets.append(key)
        return super().get(key)


def test_while_the_stamp_stays_a_cached_state_is_used_without_reading_the_store() -> None:
    records = _records(EVENTS)
    store = StampedStore()
    engine = BatchEngine()
    engine.process_batch(records[:2], store)
    store.gets.clear()
    cached = [o.value for o in engine.process_batch(records[2:3], store)]
    assert store.gets == []
    store.rollback_stamp = object()  # a rollback somewhere: every cached state is checked again
    engine.process_batch(records[3:4], store)
    checked = list(store.gets)
    assert checked and len(checked) == len(set(checked)) and set(checked) <= set(store.data)
    store.gets.clear()
    engine.process_batch(records[4:5], store)  # checked once, then trusted under the new stamp
    assert store.gets == []
    fresh = StampedStore()
    BatchEngine().process_batch(records[:2], fresh)
    assert cached == [o.value for o in BatchEngine().process_batch(records[2:3], fresh)]


def test_a_discarded_overlay_is_not_shadowed_by_the_state_the_engine_wrote_into_it() -> None:
    """The runtime's stores: the state a batch wrote into an overlay its transaction then lost is not
    trusted by stamp (the discard replaced it), so the batch folds again to the same outputs."""
    records = _records(EVENTS)
    base = MemoryStateStore()
    engine = BatchEngine()
    batch = OverlayStore(base)
    engine.process_batch(records[:2], batch)
    batch.commit()
    aborted = OverlayStore(base)
    first = [o.value for o in engine.process_batch(records[2:4], aborted)]
    written = dict(aborted.dirty)
    aborted.discard()
    retry = OverlayStore(base)
    again = [o.value for o in engine.process_batch(records[2:4], retry)]
    assert again == first
    assert dict(retry.dirty) == written


def test_a_state_read_from_the_store_is_cached() -> None:
    records = _records(EVENTS)
    store = FullStore()
    BatchEngine().process_batch(records[:2], store)
    engine = BatchEngine()
    engine.process_batch(records[2:3], store)  # reads the store, folds, writes
    assert list(engine._cache) == ["conv-1"]
    stored, state, _ = engine._cache["conv-1"]
    assert state == read_state(store, "conv-1")
    assert stored.current(store.get)


def test_a_cache_of_size_zero_changes_no_output() -> None:
    records = _records(EVENTS)
    reference = [o.value for o in BatchEngine().process_batch(records, DictStore())]
    engine, store = BatchEngine(cache_size=0), DictStore()
    outputs = []
    for r in records:
        outputs += [o.value for o in engine.process_batch([r], store)]
    assert outputs == reference
    assert len(engine._cache) == 0


def test_the_deleter_deletes_the_key_it_is_given() -> None:
    store = FullStore()
    store.data["k"] = b"v"
    _deleter(store)("k")
    assert store.log == [("delete", "k")]
    assert store.data == {}


def test_the_engine_uses_the_registry_it_is_given() -> None:
    """An empty model registry admits nothing: the request is refused, where the built-in one admits."""
    from turnledger.adapters.admission import ModelRegistry

    records = _records(EVENTS[:2])
    builtin = BatchEngine().process_batch(records, DictStore())
    empty = BatchEngine(models=ModelRegistry({})).process_batch(records, DictStore())
    assert [o.stream for o in builtin] == [Stream.COMMITTED, Stream.MANIFESTS, Stream.MANIFESTS]
    assert [o.value for o in empty] != [o.value for o in builtin]


def test_a_state_that_drops_a_part_deletes_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold never drops an operation (nor a block); a state that does, here injected, has its
    stale keys deleted through the store's `delete`, and reads back as written."""
    records = _records(EVENTS)
    store = FullStore()
    BatchEngine().process_batch(records[:1], store)
    earlier = read_state(store, "conv-1")
    assert earlier is not None
    engine = BatchEngine()
    engine.process_batch(records[1:2], store)
    operation_keys = sorted(k for k in store.data if any(f"\x1f{tag}\x1f" in k for tag in "oprs"))
    assert len(operation_keys) == 4  # the request wrote its operation's parts and its toolset
    real = engine_module.fold

    def back(state, event, *args):  # type: ignore[no-untyped-def]
        result = real(state, event, *args)
        result.state = earlier
        return result

    monkeypatch.setattr(engine_module, "fold", back)
    store.log.clear()
    engine.process_batch(records[2:3], store)
    assert sorted(key for op, key in store.log if op == "delete") == operation_keys
    assert not any(k in store.data for k in operation_keys)
    assert read_state(store, "conv-1") == earlier


def test_a_cache_hit_returns_the_cached_state_itself() -> None:
    records = _records(EVENTS)
    store = FullStore()
    engine = BatchEngine()
    engine.process_batch(records[:2], store)
    stored, cached, _ = engine._cache["conv-1"]
    state, again = engine._load("conv-1", store, None)
    assert state is cached and again is stored
    store.data["conv-1"] = store.data["conv-1"] + b""  # equal bytes: still current
    assert engine._load("conv-1", store, None)[0] is cached
    other = FullStore()
    other.data = {k: v for k, v in store.data.items()}
    BatchEngine().process_batch(records[2:3], other)  # another writer moved the store on
    fresh, _ = engine._load("conv-1", other, None)
    assert fresh is not cached and fresh == read_state(other, "conv-1")


def test_the_engine_keeps_its_live_assemblers_and_render_cache_across_batches() -> None:
    """The fold is given the engine's own caches (a fresh one per call would give the same outputs,
    which is why the engine test above cannot tell): after a streaming chunk, the engine's live
    assemblers hold the attempt's assembler, and its render cache the request's prefix."""
    records = _records(EVENTS)
    engine = BatchEngine()
    engine.process_batch(records[:6], DictStore())
    assert len(engine._live._live) == 1
    assert len(engine._renders._entries) == 1


def test_the_cache_keeps_the_most_recent_states_up_to_its_size() -> None:
    """Oldest out first, and exactly `cache_size` kept (no output depends on it: a miss reads the store)."""
    engine, store = BatchEngine(cache_size=1), DictStore()
    for cid in ("conv-a", "conv-b"):
        event = EVENTS[0].model_copy(update={"conversation_id": cid})
        engine.process_batch([SourceRecord("t", 0, 0, cid.encode(), encode(event))], store)
    assert list(engine._cache) == ["conv-b"]
    engine, store = BatchEngine(cache_size=2), DictStore()
    for cid in ("conv-a", "conv-b", "conv-a", "conv-c"):  # touching conv-a again makes conv-b the oldest
        event = EVENTS[0].model_copy(update={"conversation_id": cid})
        engine.process_batch([SourceRecord("t", 0, 0, cid.encode(), encode(event))], store)
    assert list(engine._cache) == ["conv-a", "conv-c"]


def test_a_state_read_and_left_unchanged_is_cached_whole() -> None:
    """A state read from the store by an event that leaves it (no write follows to refresh the cache)
    is cached with what was read: the next batch is served from the cache and folds the same."""
    records = _records(EVENTS)
    store = FullStore()
    BatchEngine().process_batch(records[:-1], store)
    store.log.clear()
    late = records[-1]
    again = SourceRecord(late.topic, late.partition, 99, late.key, late.value)
    engine = BatchEngine()
    first = engine.process_batch([late], store)
    assert [o.stream for o in first] == [Stream.QUARANTINE] and store.log == []
    stored, state, _ = engine._cache["conv-1"]
    assert stored.current(store.get) and state == read_state(store, "conv-1")
    second = engine.process_batch([again], store)
    fresh = BatchEngine().process_batch([again], store)
    assert [o.value for o in second] == [o.value for o in fresh]
    assert [o.stream for o in second] == [Stream.QUARANTINE]


def test_the_render_cache_keeps_no_more_prefixes_than_the_state_cache_keeps_states() -> None:
    """A prefix holds its blocks alive after its state left the state cache, which the render cache's
    byte bound does not count (issue 20: 100k small conversations kept ~50k prefixes per engine):
    the engine bounds it to `cache_size` entries, most recent kept. The outputs are those of an
    engine with the default caches."""
    upto = next(i for i, e in enumerate(EVENTS) if type(e).__name__ == "DispatchRequested") + 1
    batches = [
        _records([e.model_copy(update={"conversation_id": cid}) for e in EVENTS[:upto]])
        for cid in ("conv-a", "conv-b", "conv-c", "conv-d")
    ]
    outputs = {}
    for size in (2, 10_000):
        engine, store = BatchEngine(cache_size=size), DictStore()
        outputs[size] = [(o.stream, o.value) for batch in batches for o in engine.process_batch(batch, store)]
        kept = [cid for _, cid in engine._renders._entries]
        assert kept == ["conv-a", "conv-b", "conv-c", "conv-d"][-size:]
    assert outputs[2] == outputs[10_000]
    manifests = [value for stream, value in outputs[2] if stream is Stream.MANIFESTS]
    assert (
        len(manifests) == 8
    )  # per conversation its request rendered: a ManifestIssued and a DispatchDecision


def test_the_default_engine_bounds_its_states_and_prefixes_by_state_cache_size() -> None:
    engine = BatchEngine()
    assert engine._cache_size == engine_module.STATE_CACHE_SIZE
    assert engine._renders._max_entries == engine_module.STATE_CACHE_SIZE


def test_the_engine_continues_manifest_listings_in_a_cache_bounded_like_its_states() -> None:
    """A long conversation's manifest lists its blocks continued from its last dispatch, kept in the
    engine's listing cache (`manifest_blocks.ListingCache`), which holds no more conversations than
    the state cache holds states, most recent kept; the outputs are those of an engine with the
    default caches."""
    from bench.dispatch_workload import Mix, build

    workload = build(3, Mix(rounds=24), concurrency=3)
    records = [
        SourceRecord("turnledger.ingress", 0, i, e.conversation_id.encode(), v)
        for i, (e, v) in enumerate(zip(workload.events, workload.values, strict=True))
    ]
    outputs = {}
    for size in (1, 10_000):
        engine, store = BatchEngine(cache_size=size), DictStore()
        outputs[size] = [
            (o.stream, o.value)
            for i in range(0, len(records), 50)
            for o in engine.process_batch(records[i : i + 50], store)
        ]
        listed = list(engine._listings._entries)
        assert len(listed) == min(size, 3)
        assert listed[-1] == workload.events[-1].conversation_id
    assert outputs[1] == outputs[10_000]
    assert BatchEngine()._listings._max_entries == engine_module.STATE_CACHE_SIZE
