"""The schema history: every shipped version stays readable, and a new version cannot ship unarchived."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from turnledger.codec import Codec, SchemaRegistry, UnknownFingerprint, encode, history
from turnledger.codec.history import (
    archive,
    canonical_text,
    current_record_schemas,
    file_name,
    fingerprint_hex,
    load_history,
    missing,
)
from turnledger.model.events import CancelRequested, DispatchSent


def test_every_current_record_schema_is_archived() -> None:
    unarchived = [file_name(s) for s in missing(current_record_schemas(), load_history())]
    assert unarchived == [], (
        "schema version(s) not in schemas/history: run `python -m turnledger.codec.history` and "
        f"commit the new files: {unarchived}"
    )


def test_each_archived_file_is_canonical_and_named_by_its_fingerprint() -> None:
    history = load_history()
    assert len(history) >= len(current_record_schemas())
    for name, schema in history.items():
        assert name == file_name(schema)
        assert canonical_text(schema) == canonical_text(copy.deepcopy(schema))
        assert name.endswith(f"@{fingerprint_hex(schema)}.avsc")


def _older_dispatch_sent() -> dict[str, Any]:
    """DispatchSent as if it had once had one more field, since removed."""
    [current] = [s for s in current_record_schemas() if s["name"].endswith("DispatchSent")]
    older = copy.deepcopy(current)
    older["fields"].append({"name": "sentBy", "type": "string"})
    return older


def test_data_written_with_an_archived_version_is_read_into_the_current_model(tmp_path: Path) -> None:
    older = _older_dispatch_sent()
    (tmp_path / file_name(older)).write_text(canonical_text(older), encoding="utf-8")
    with_history = Codec(SchemaRegistry.from_files(history=tmp_path))
    writer = with_history.registry.writer(bytes.fromhex(fingerprint_hex(older)))
    assert writer is not None and with_history.registry.reader(writer.name) is not writer
    datum = {"conversationId": "c", "eventId": "e", "occurredAtMs": 5, "operationId": "o"}
    data = with_history.encode_datum(writer, {**datum, "attemptGeneration": 2, "sentBy": "w"})

    assert with_history.decode(data) == DispatchSent(
        conversation_id="c", event_id="e", occurred_at_ms=5, operation_id="o", attempt_generation=2
    )
    without = Codec(SchemaRegistry.from_files(history=tmp_path / "none"))
    with pytest.raises(UnknownFingerprint):
        without.decode(data)
    # the current version is still what is written
    record = DispatchSent(**{"conversation_id": "c", "event_id": "e", "occurred_at_ms": 5,
                             "operation_id": "o", "attempt_generation": 2})  # fmt: skip
    assert with_history.encode(record) == encode(record)


def test_archive_writes_only_what_is_missing(tmp_path: Path) -> None:
    first = archive(tmp_path)
    assert sorted(p.name for p in first) == sorted(file_name(s) for s in current_record_schemas())
    assert archive(tmp_path) == []
    assert set(load_history(tmp_path)) <= set(load_history())


def test_a_cancel_written_before_the_typed_give_up_is_read_as_a_client_cancel() -> None:
    """The shipped history in use: CancelRequested gained `workerGaveUp` (default false)."""
    [older] = [
        schema
        for name, schema in load_history().items()
        if name.startswith("turnledger.v1.CancelRequested@")
        and "workerGaveUp" not in {f["name"] for f in schema["fields"]}
    ]
    codec = Codec(SchemaRegistry.from_files())
    writer = codec.registry.writer(bytes.fromhex(fingerprint_hex(older)))
    assert writer is not None
    datum = {"conversationId": "c", "eventId": "e", "occurredAtMs": 1, "operationId": "o", "reason": "user"}
    decoded = codec.decode(codec.encode_datum(writer, datum))
    assert decoded == CancelRequested(
        conversation_id="c",
        event_id="e",
        occurred_at_ms=1,
        operation_id="o",
        reason="user",
        worker_gave_up=False,
    )


def test_archived_files_hold_the_canonical_text_in_a_directory_made_on_demand(tmp_path: Path) -> None:
    target = tmp_path / "not" / "yet"
    written = archive(target)
    schemas = current_record_schemas()
    assert [p.name for p in written] == [file_name(s) for s in schemas]
    for path, schema in zip(written, schemas, strict=True):
        assert path.parent == target
        assert path.read_bytes() == canonical_text(schema).encode("utf-8") + b"\n"


def test_loading_keeps_only_avsc_files_in_name_order_and_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert load_history(tmp_path / "absent") == {}
    (tmp_path / "b@2.avsc").write_text('{"type": "string"}', encoding="utf-8")
    (tmp_path / "a@1.avsc").write_text('{"type": "long"}', encoding="utf-8")
    (tmp_path / "c@3.avsc.orig").write_text("not json", encoding="utf-8")
    (tmp_path / "README").write_text("not json", encoding="utf-8")
    loaded = load_history(tmp_path)
    assert list(loaded.items()) == [("a@1.avsc", {"type": "long"}), ("b@2.avsc", {"type": "string"})]


def test_the_command_archives_what_is_missing_and_says_what_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(history, "history_dir", lambda: tmp_path)
    names = [file_name(s) for s in current_record_schemas()]
    history.main()
    out, err = capsys.readouterr()
    assert out == "".join(f"archived {name}\n" for name in names)
    assert err == f"{len(names)} new version(s) in {tmp_path}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    history.main()
    assert capsys.readouterr() == ("", f"0 new version(s) in {tmp_path}\n")
