"""shadow diff joins a legacy line to the manifest of its operation, and never guesses a conversation."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.unit.dispatch.scenario import Conversation
from turnledger.model.events import ManifestIssued
from turnledger.model.manifest import DispatchManifest
from turnledger.replay.shadow import LegacyFormatError, compare_all, read_legacy


def _manifest(conversation_id: str, text: str) -> DispatchManifest:
    c = Conversation(conversation_id=conversation_id)
    c.user(text)
    c.request("op-1")
    (issued,) = c.of(ManifestIssued)
    return issued.manifest


def _legacy(tmp_path: Path, *lines: dict[str, object]) -> Path:
    path = tmp_path / "legacy.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    return path


def test_a_repeated_operation_id_needs_the_conversation(tmp_path: Path) -> None:
    a, b, c = _manifest("A", "hello from A"), _manifest("B", "hello from B"), _manifest("C", "only C")
    manifests = {("A", "op-1"): a, ("B", "op-1"): b, ("C", "op-2"): c}
    body_b = orjson.loads(b.request_body)
    path = _legacy(
        tmp_path,
        {"operationId": "op-1", "request": body_b},
        {"operationId": "op-1", "conversationId": "B", "request": body_b},
        {"operationId": "op-1", "conversationId": "A", "request": body_b},
        {"operationId": "op-2", "request": orjson.loads(c.request_body)},
        {"operationId": "op-1", "conversationId": "Z", "request": {}},
    )
    results = compare_all(read_legacy(path), manifests)
    assert [r.status for r in results] == ["ambiguous", "equal", "differs", "equal", "no manifest"]
    assert results[0].ambiguous == ["A", "B"] and results[0].manifest_digest is None
    assert results[1].manifest_digest == b.manifest_digest
    assert results[2].manifest_digest == a.manifest_digest


def test_a_conversation_id_that_is_not_a_string_is_a_format_error(tmp_path: Path) -> None:
    path = _legacy(tmp_path, {"operationId": "op-1", "conversationId": 7, "request": {}})
    with pytest.raises(LegacyFormatError, match=r"legacy\.jsonl:1: conversationId must be a string"):
        read_legacy(path)
