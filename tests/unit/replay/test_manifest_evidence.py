"""`replay manifest` pairs a manifest with the request of its own conversation, not any of the same id."""

from __future__ import annotations

from typing import Any

from tests.unit.dispatch.scenario import Conversation
from turnledger.codec import encode
from turnledger.model.events import DispatchRequested, ManifestIssued
from turnledger.replay.manifest_check import TopicEvidence, _collect


def _prepared(conversation_id: str, text: str, max_output_tokens: int) -> tuple[Conversation, Any]:
    """A conversation with one user turn and op-1 prepared: its ManifestIssued and DispatchRequested."""
    c = Conversation(conversation_id=conversation_id)
    c.user(text)
    captured: list[DispatchRequested] = []
    apply = c.apply

    def capture(event: Any) -> list[Any]:
        if isinstance(event, DispatchRequested):
            captured.append(event)
        return apply(event)

    c.apply = capture  # type: ignore[method-assign]
    c.request("op-1", max_output_tokens=max_output_tokens)
    (issued,) = c.of(ManifestIssued)
    return c, (issued, captured[0])


def test_the_request_of_the_manifests_conversation_is_used_when_op_ids_repeat() -> None:
    _, (issued_a, request_a) = _prepared("A", "hello from A", 256)
    _, (_, request_b) = _prepared("B", "hello from B", 999)
    evidence = TopicEvidence()
    wanted = {("A", "op-1")}
    _collect(evidence, encode(issued_a), "op-1", None, set(), set())
    for request in (request_b, request_a):  # B's request of the same id comes first on the topic
        _collect(evidence, encode(request), "op-1", None, {"A"}, wanted)
    assert evidence.requests == {("A", "op-1"): request_a}
