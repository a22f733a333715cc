"""shadow diff joins a legacy line to the manifest of its operation, and never guesses a conversation."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.unit.dispatch.scenario import Conversation
from turnledger.model.events import ManifestIssued
from turnledger.model.manifest import DispatchManifest
from turnledger.replay.semantic_diff import Difference, DiffKind
from turnledger.replay.shadow import LegacyFormatError, LegacyRequest, compare_all, read_legacy


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


def test_the_progress_is_the_lines_compared_of_all_told_after_each_line() -> None:
    """Told after each result, whatever the line came to (ambiguous, compared, no manifest)."""
    manifests = {(c, "op-1"): _manifest(c, f"hello from {c}") for c in ("A", "B")}
    legacy = [LegacyRequest("op-1", {}, 1), LegacyRequest("op-1", {}, 2, "A"), LegacyRequest("op-9", {}, 4)]
    told: list[tuple[int, int]] = []
    results = compare_all(legacy, manifests, lambda done, total: told.append((done, total)))
    assert told == [(1, 3), (2, 3), (3, 3)]
    assert [r.status for r in results] == ["ambiguous", "differs", "no manifest"]


def test_a_conversation_id_that_is_not_a_string_is_a_format_error(tmp_path: Path) -> None:
    path = _legacy(tmp_path, {"operationId": "op-1", "conversationId": 7, "request": {}})
    with pytest.raises(LegacyFormatError, match=r"legacy\.jsonl:1: conversationId must be a string"):
        read_legacy(path)


def _write(tmp_path: Path, text: bytes) -> Path:
    path = tmp_path / "legacy.jsonl"
    path.write_bytes(text)
    return path


def test_read_legacy_skips_blank_and_comment_lines_and_numbers_lines_from_one(tmp_path: Path) -> None:
    """Every line counts for the numbering, blank ones (spaces too) and `#` comments are skipped, a
    null conversationId is none, other keys are ignored."""
    path = _write(
        tmp_path,
        b"# captured 2026-12-06\n"
        b'{"operationId": "op-1", "request": {"a": 1}}\n'
        b"   \n"
        b"\n"
        b'  {"operationId": "op-2", "request": null, "conversationId": "C", "extra": 1}  \n'
        b'{"operationId": "op-3", "request": [], "conversationId": null}\n'
        b"  # indented comment\n",
    )
    assert read_legacy(path) == [
        LegacyRequest("op-1", {"a": 1}, 2, None),
        LegacyRequest("op-2", None, 5, "C"),
        LegacyRequest("op-3", [], 6, None),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b"{nope", "not JSON (unexpected character, expected a string key: line 1 column 2 (char 1))"),
        (b'["operationId", "request"]', "missing operationId (string) or request"),
        (b'{"request": {}}', "missing operationId (string) or request"),
        (b'{"operationId": 7, "request": {}}', "missing operationId (string) or request"),
        (b'{"operationId": "op-1"}', "missing operationId (string) or request"),
        (
            b'{"operationId": "op-1", "request": {}, "conversationId": ["C"]}',
            "conversationId must be a string",
        ),
    ],
)
def test_read_legacy_names_the_file_the_line_and_the_problem(
    tmp_path: Path, line: bytes, problem: str
) -> None:
    """A line that is not a legacy request is refused with its path, its line number and what is wrong,
    and the format expected."""
    path = _write(tmp_path, b'{"operationId": "op-0", "request": {}}\n\n' + line + b"\n")
    with pytest.raises(LegacyFormatError) as refused:
        read_legacy(path)
    assert str(refused.value) == (
        f"{path}:3: {problem}. Expected one JSON object per line: "
        '{"operationId": "...", "request": {...}}'
    )


def test_a_result_carries_the_manifest_its_adapter_and_what_differs() -> None:
    """Byte-equal, equal in meaning only (a string content where ours has a text block), different
    (with the semantic diff's findings, legacy first), and no manifest."""
    manifest = _manifest("A", "hello")
    ours = orjson.loads(manifest.request_body)
    as_string = {**ours, "messages": [{**ours["messages"][0], "content": "hello"}]}
    changed = {**ours, "max_tokens": 1}
    manifests = {("A", "op-1"): manifest}
    legacy = [
        LegacyRequest("op-1", ours, 1),
        LegacyRequest("op-1", as_string, 2, "A"),
        LegacyRequest("op-1", changed, 3),
        LegacyRequest("op-9", ours, 4),
    ]
    results = compare_all(legacy, manifests)
    assert [r.status for r in results] == ["equal", "same meaning", "differs", "no manifest"]
    assert [(r.operation_id, r.line) for r in results] == [("op-1", 1), ("op-1", 2), ("op-1", 3), ("op-9", 4)]
    assert [(r.manifest_digest, r.adapter) for r in results] == [
        (manifest.manifest_digest, "anthropic-messages@1"),
        (manifest.manifest_digest, "anthropic-messages@1"),
        (manifest.manifest_digest, "anthropic-messages@1"),
        (None, None),
    ]
    assert [r.bytes_equal for r in results] == [True, False, False, False]
    assert [r.differences for r in results] == [
        [],
        [],
        [Difference(DiffKind.VALUE_CHANGED, "$.max_tokens", "legacy 1 != ours 256")],
        [],
    ]
    assert all(r.ambiguous == [] for r in results)


def test_an_ambiguous_result_names_every_conversation_in_order() -> None:
    """Three conversations share the operation id: the line without a conversation names all three,
    sorted, and is matched to none."""
    manifests = {(c, "op-1"): _manifest(c, f"hello from {c}") for c in ("C", "A", "B")}
    (result,) = compare_all([LegacyRequest("op-1", {}, 7)], manifests)
    assert (result.status, result.operation_id, result.ambiguous, result.line, result.manifest_digest) == (
        "ambiguous",
        "op-1",
        ["A", "B", "C"],
        7,
        None,
    )
