"""The fold hands the engine's RenderCache to prepare, and no output depends on it."""

from __future__ import annotations

from tests.unit.dispatch.scenario import ADAPTER, Conversation
from turnledger.adapters.prefix import RenderCache
from turnledger.model.events import ManifestIssued


def test_prepare_renders_through_the_cache_and_the_outputs_are_those_without_it() -> None:
    plain, cached = Conversation(), Conversation(renders=RenderCache())
    for conversation in (plain, cached):
        for step in range(3):
            conversation.user(f"question {step}")
            conversation.request(op=f"op-{step}")
    assert cached.outputs == plain.outputs
    assert len(cached.of(ManifestIssued)) == 3
    assert cached.renders is not None
    entry = cached.renders.get((ADAPTER, cached.conversation_id))
    assert entry is not None
    assert [b.text for b in entry.blocks] == ["question 0", "question 1", "question 2"]
