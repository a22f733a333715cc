"""`check_manifest`, the pure half of `replay manifest` (promise 5): every binding of a manifest re-derived
from the committed turns and its DispatchRequested, each check named, and the exact reason when the
rebuild cannot get as far as a request."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.unit.dispatch.scenario import Conversation, tool_stream
from turnledger.codec import encode
from turnledger.model.events import (
    CommittedTurn,
    DispatchRequested,
    ManifestIssued,
    StreamOutcome,
    SubmittedBlock,
    TurnSubmitted,
)
from turnledger.model.limits import DEFAULT_LIMITS
from turnledger.model.manifest import DispatchManifest
from turnledger.replay.manifest_check import Check, ManifestCheck, TopicEvidence, _collect, check_manifest

CHECKS = [
    "manifest digest (seal)",
    "conversation revision",
    "sequence digest",
    "block refs",
    "adapter digest",
    "request bytes",
    "request digest",
    "request digest = sha256(request bytes)",
]


def _evidence(c: Conversation, op: str) -> tuple[DispatchManifest, list[CommittedTurn], DispatchRequested]:
    manifest = next(m.manifest for m in reversed(c.of(ManifestIssued)) if m.manifest.operation_id == op)
    request = next(e for e in c.events if isinstance(e, DispatchRequested) and e.operation_id == op)
    return manifest, c.of(CommittedTurn), request


def _tool_round() -> Conversation:
    """u1; op-1 answered with a call of get_weather (revision 2); its result (revision 3); op-2 prepared."""
    c = Conversation("conv-check")
    c.user("weather in Paris?")
    c.dispatch_to_streaming("op-1")
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": ', '"Paris"}'])]))
    c.ended(StreamOutcome.COMPLETED)
    c.tool_results(("call-1", "get_weather", '{"city": "Paris"}'))
    c.request("op-2")
    return c


def _failed(result: ManifestCheck) -> list[str]:
    return [check.name for check in result.checks if not check.ok]


def test_a_manifest_rebuilt_from_its_topics_passes_every_check() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-2")
    assert [t.revision for t in turns] == [1, 2, 3]
    result = check_manifest(manifest, turns, request)
    assert [check.name for check in result.checks] == CHECKS
    assert (result.ok, result.error, _failed(result)) == (True, None, [])
    assert (result.operation_id, result.manifest_digest, result.adapter, result.conversation_revision) == (
        "op-2", manifest.manifest_digest, "anthropic-messages@1", 3,
    )  # fmt: skip
    by_name = {check.name: check for check in result.checks}
    assert by_name["conversation revision"] == Check("conversation revision", "3", "3")
    assert by_name["request bytes"].rebuilt == manifest.request_body
    assert by_name["request digest"].rebuilt == manifest.request_digest


def test_turns_after_the_manifest_are_left_out_and_their_order_on_the_topic_does_not_matter() -> None:
    c = _tool_round()
    c.user("and tomorrow?")
    manifest, turns, request = _evidence(c, "op-2")
    assert [t.revision for t in turns] == [1, 2, 3, 4]
    result = check_manifest(manifest, list(reversed(turns)), request)
    assert (result.ok, _failed(result)) == (True, [])


def test_the_first_manifest_of_the_conversation_is_rebuilt_from_its_own_revision() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-1")
    result = check_manifest(manifest, turns, request)
    assert (result.ok, result.conversation_revision, len(result.checks)) == (True, 1, len(CHECKS))


def test_without_its_dispatch_request_only_the_seal_is_checked() -> None:
    c = _tool_round()
    manifest, turns, _ = _evidence(c, "op-2")
    result = check_manifest(manifest, turns, None)
    assert result.error == "no DispatchRequested for operation op-2 on the ingress topic"
    assert [check.name for check in result.checks] == ["manifest digest (seal)"] and result.checks[0].ok
    assert result.ok is False


def test_changed_request_bytes_break_the_seal_and_the_bytes() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-2")
    forged = manifest.model_copy(update={"request_body": manifest.request_body.replace("Paris", "Lyon")})
    result = check_manifest(forged, turns, request)
    assert _failed(result) == ["manifest digest (seal)", "request bytes"] and result.ok is False


def test_another_dispatch_request_renders_other_bytes() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-2")
    other = request.model_copy(update={"max_output_tokens": request.max_output_tokens + 1})
    result = check_manifest(manifest, turns, other)
    assert _failed(result) == ["request bytes", "request digest", "request digest = sha256(request bytes)"]


def test_a_missing_committed_turn_changes_the_sequence() -> None:
    c = _tool_round()
    c.user("and tomorrow?")
    c.request("op-3")
    manifest, turns, request = _evidence(c, "op-3")
    result = check_manifest(manifest, [t for t in turns if t.revision != 4], request)
    assert _failed(result) == [
        "conversation revision", "sequence digest", "block refs", "request bytes", "request digest",
        "request digest = sha256(request bytes)",
    ]  # fmt: skip


def test_a_sequence_still_waiting_on_a_call_gives_no_request() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-2")
    early: dict[str, Any] = {"conversation_revision": 2}
    result = check_manifest(manifest.model_copy(update=early), turns, request)
    assert result.error == "the rebuilt sequence is WAITING on ['call-1']"
    assert [check.name for check in result.checks] == ["manifest digest (seal)"]


def test_a_committed_turn_that_no_longer_validates_is_named_with_its_codes() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-2")
    again = turns[0].model_copy(update={"revision": 2})  # the same block ids a second time
    result = check_manifest(manifest, [turns[0], again], request)
    assert result.error == "committed revision 2 does not validate: BLOCK_OUT_OF_SEQUENCE, DUPLICATE_BLOCK_ID"


def test_the_limits_the_turns_are_validated_under_are_the_callers() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-2")
    tiny = replace(DEFAULT_LIMITS, max_block_bytes=4)
    result = check_manifest(manifest, turns, request, tiny)
    assert result.error == "committed revision 1 does not validate: BLOCK_TOO_LARGE"


def test_an_adapter_that_now_refuses_a_kind_is_named() -> None:
    """A rollback to an adapter older than a block kind of the history: the rebuild pauses too."""
    c = Conversation("conv-artifact")
    artifact = SubmittedBlock(
        id="s1-b0", role="user", kind="compression_artifact", trust_label="retrieved", text="turns 1-40"
    )
    c.apply(TurnSubmitted(**c._common(), turn_id="s1", blocks=(artifact,)))
    c.user("q")
    c.request("op-1")
    manifest, turns, request = _evidence(c, "op-1")
    assert check_manifest(manifest, turns, request).ok
    result = check_manifest(manifest.model_copy(update={"adapter": "anthropic-messages@0"}), turns, request)
    assert result.error == "anthropic-messages@0 now refuses kind 'compression_artifact' (block s1-b0)"
    assert _failed(result) == ["manifest digest (seal)", "adapter digest"]


def test_block_refs_in_another_order_are_not_the_sequence() -> None:
    c = _tool_round()
    manifest, turns, request = _evidence(c, "op-2")
    result = check_manifest(manifest.model_copy(update={"blocks": manifest.blocks[::-1]}), turns, request)
    assert _failed(result) == ["manifest digest (seal)", "block refs"]
    refs = {check.name: check for check in result.checks}["block refs"]
    assert refs.rebuilt == "\n".join(repr(ref) for ref in manifest.blocks)
    assert refs.rebuilt.count("\n") == len(manifest.blocks) - 1 >= 2


def test_the_evidence_keeps_only_what_the_check_asked_for() -> None:
    c = _tool_round()
    other = Conversation("conv-other")
    other.user("hi")
    issued = {m.manifest.operation_id: m for m in c.of(ManifestIssued)}
    first, second = issued["op-1"], issued["op-2"]

    def collected(operation_id: str | None, digest: str | None) -> list[str]:
        evidence = TopicEvidence()
        for record in (first, second):
            _collect(evidence, encode(record), operation_id, digest, set(), set())
        return [m.operation_id for m in evidence.manifests]

    assert collected(None, None) == ["op-1", "op-2"]
    assert collected("op-2", None) == ["op-2"]
    assert collected(None, first.manifest.manifest_digest) == ["op-1"]
    assert collected("op-2", first.manifest.manifest_digest) == []

    evidence = TopicEvidence()
    for turn in [*c.of(CommittedTurn), *other.of(CommittedTurn)]:
        _collect(evidence, encode(turn), None, None, {"conv-check"}, set())
    _collect(evidence, None, None, None, {"conv-check"}, set())
    _collect(evidence, b"\x00not avro", None, None, {"conv-check"}, set())
    assert list(evidence.turns) == ["conv-check"]
    assert evidence.turns["conv-check"] == c.of(CommittedTurn)
    assert evidence.manifests == [] and evidence.requests == {}
