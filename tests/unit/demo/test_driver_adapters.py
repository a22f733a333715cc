"""The demo's conversations go round every API's current adapter and some previous ones."""

from __future__ import annotations

from turnledger.adapters.profiles import api_of
from turnledger.adapters.registry import ADAPTERS as REGISTERED
from turnledger.adapters.registry import LATEST
from turnledger.demo.driver import ADAPTERS


def test_the_demo_sends_with_every_current_adapter_and_older_ones_beside_them() -> None:
    """A new version made LATEST without the demo using it (gemini@3 and openai-responses@3 were left
    out at first; openai-responses@4 replaced @3 as current, @2 stays beside it) would never meet the
    demo's invariants."""
    used = [adapter for adapter, _, _ in ADAPTERS]
    assert set(LATEST.values()) <= set(used)
    assert all(adapter in REGISTERED for adapter in used)
    older = [adapter for adapter in used if adapter not in LATEST.values()]
    assert sorted(older) == [
        "anthropic-messages@1",
        "bedrock-converse@1",
        "gemini@2",
        "openai-chat@1",
        "openai-responses@2",
    ]
    assert {api_of(adapter) for adapter in used} == set(LATEST)
