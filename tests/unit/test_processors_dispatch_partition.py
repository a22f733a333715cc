"""The dispatch engine as the runtime's fold (`processors/dispatch_partition.py`): its outputs on the
physical topics, a batch folded whole or piece by piece alike, and the Avro `Rejected` of a poisoned
record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.dispatch_workload import Mix, build
from turnledger.adapters.encodings import EncodingUnavailableError
from turnledger.codec import decode, encode
from turnledger.model.events import Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.processors.dispatch_partition import DispatchPartitionFold
from turnledger.processors.model_registry import REGISTRY_ENV, load_model_registry
from turnledger.processors.store import read_cache_of
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Stream, Topics

TOPICS = Topics("p.")


class _Store(dict[str, bytes]):
    def put(self, key: str, value: bytes) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        del self[key]


def _records(conversations: int = 3) -> list[SourceRecord]:
    events = build(conversations, Mix(rounds=2), concurrency=conversations).events
    return [
        SourceRecord(TOPICS.ingress, 0, offset, event.conversation_id.encode(), encode(event))
        for offset, event in enumerate(events)
    ]


def test_the_outputs_go_to_the_physical_topics_of_their_streams() -> None:
    outputs = DispatchPartitionFold(TOPICS, 0).process_batch(_records(), _Store())
    assert {out.topic for out in outputs} == {
        TOPICS.name(Stream.COMMITTED),
        TOPICS.name(Stream.MANIFESTS),
        TOPICS.name(Stream.TOOL_CALLS),
        TOPICS.name(Stream.PREVIEWS),
    }
    assert all(out.topic.startswith("p.turnledger.") for out in outputs)


def test_a_batch_folded_piece_by_piece_gives_the_same_records_as_folded_whole() -> None:
    records = _records()
    whole_store, pieces_store = _Store(), _Store()
    whole = DispatchPartitionFold(TOPICS, 0).process_batch(records, whole_store)
    batch = DispatchPartitionFold(TOPICS, 0).open_batch(pieces_store)
    for start in range(0, len(records), 7):
        batch.fold(records[start : start + 7])
    assert batch.close() == whole
    assert len(whole) > len(records) // 2
    assert pieces_store == whole_store


def test_outputs_are_kept_until_the_batch_closes_and_the_state_written_then() -> None:
    records, store = _records(1), _Store()
    batch = DispatchPartitionFold(TOPICS, 0).open_batch(store)
    batch.fold(records)
    assert store == {}
    outputs = batch.close()
    assert outputs and store


def test_each_output_is_keyed_by_its_conversation() -> None:
    records = _records()
    outputs = DispatchPartitionFold(TOPICS, 0).process_batch(records, _Store())
    assert {out.key for out in outputs} == {record.key for record in records}


def test_the_fold_knows_its_partition_and_admits_with_the_operators_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    override = tmp_path / "models.json"
    override.write_text(json.dumps({"models": {"openai/gpt-4o": {"context_window": 77}}}), "utf-8")
    monkeypatch.setenv(REGISTRY_ENV, str(override))
    fold = DispatchPartitionFold(TOPICS, 5)
    assert fold.partition == 5
    assert fold._engine._models is load_model_registry(override)
    info = fold._engine._models.lookup("openai/gpt-4o@2024-11")
    assert info is not None and info.context_window == 77


def test_the_store_keeps_no_read_cache_beside_the_engines_states() -> None:
    assert read_cache_of(DispatchPartitionFold(TOPICS, 0)) == 0


def _poisoned(key: bytes | None, error: Exception, timestamp_ms: int = 1_700_000_000_123) -> OutputRecord:
    record = SourceRecord(TOPICS.ingress, 5, 812, key, b"\x00garbage", timestamp_ms)
    [out] = DispatchPartitionFold(TOPICS, 5).on_poison(record, error)
    return out


def test_a_poisoned_record_is_rejected_in_avro_with_its_coordinates_and_key() -> None:
    out = _poisoned(b"conversation-9", ValueError("bad magic byte"))
    assert (out.topic, out.key) == ("p.turnledger.rejections", b"conversation-9")
    assert decode(out.value) == Rejected(
        conversation_id="conversation-9",
        reason=ReasonCode.FOLD_FAILED,
        detail="ValueError: bad magic byte",
        source_topic="p.turnledger.ingress",
        source_partition=5,
        source_offset=812,
        occurred_at_ms=1_700_000_000_123,
    )


@pytest.mark.parametrize(
    ("key", "conversation_id"),
    [(None, None), (b"", None), (b"caf\xc3\xa9", "café"), (b"bad\xff", "bad\ufffd")],
    ids=["no key", "an empty key", "UTF-8", "not UTF-8"],
)
def test_a_poisoned_records_key_names_its_conversation_as_far_as_it_decodes(
    key: bytes | None, conversation_id: str | None
) -> None:
    out = _poisoned(key, KeyError("x"))
    rejected = decode(out.value)
    assert isinstance(rejected, Rejected)
    assert (out.key, rejected.conversation_id) == (key, conversation_id)


def test_a_poisoned_records_detail_is_cut_at_2000_characters() -> None:
    long = "e" * 3000
    rejected = decode(_poisoned(b"c", RuntimeError(long)).value)
    assert isinstance(rejected, Rejected)
    assert rejected.detail == ("RuntimeError: " + long)[:2000]


def test_an_encoding_the_registry_names_but_no_vocabulary_ships_stops_the_fold_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    override = tmp_path / "models.json"
    model = {"context_window": 77, "encoding": "p50k_base"}
    override.write_text(json.dumps({"models": {"openai/gpt-4o": model}}), "utf-8")
    monkeypatch.setenv(REGISTRY_ENV, str(override))
    with pytest.raises(EncodingUnavailableError) as caught:
        DispatchPartitionFold(TOPICS, 0)
    assert str(caught.value).startswith("encoding 'p50k_base' is not available offline; known: ")
