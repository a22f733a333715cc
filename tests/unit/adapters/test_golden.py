"""Golden bytes: any byte change of an existing adapter version fails; it must be a new version."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tests.unit.adapters import golden
from turnledger.adapters.anthropic_messages import RULES_V1, AnthropicMessagesAdapter
from turnledger.adapters.base import Rendered
from turnledger.adapters.openai_chat import RULES_V1 as CHAT_RULES_V1
from turnledger.adapters.openai_chat import OpenAIChatAdapter
from turnledger.adapters.registry import ADAPTERS

ADAPTER_IDS = sorted(ADAPTERS)


@pytest.mark.parametrize("adapter_id", ADAPTER_IDS)
def test_golden_bytes_and_digests(adapter_id: str) -> None:
    adapter = ADAPTERS[adapter_id]
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.update(adapter)  # adds only; raises GoldenVersionError on any change
    comparison = golden.compare(adapter)
    assert comparison.ok, comparison.problems + [
        f"missing (run UPDATE_GOLDEN=1): {m}" for m in comparison.missing
    ]


def test_rendering_is_deterministic() -> None:
    for adapter in ADAPTERS.values():
        first = golden.render_all(adapter)
        second = golden.render_all(adapter)
        assert first == second


def test_changed_role_ordering_is_caught_by_goldens() -> None:
    """An 'upgrade' that stops merging the results turn with the following user text."""
    patched = AnthropicMessagesAdapter(1, dataclasses.replace(RULES_V1, merge_same_role=False))
    assert patched.adapter_id == "anthropic-messages@1"
    comparison = golden.compare(patched)
    assert not comparison.ok
    assert any("rules digest" in p for p in comparison.problems)
    assert any("parallel_tools: bytes differ" in p for p in comparison.problems)
    with pytest.raises(golden.GoldenVersionError):
        golden.update(patched)


def test_same_digest_different_order_still_caught() -> None:
    """Even if someone changed renderer code but not the rules table, the bytes catch it."""
    real = ADAPTERS["openai-chat@1"]
    outcomes = golden.render_all(real)
    rendered = outcomes["parallel_tools"]
    assert isinstance(rendered, Rendered)
    import orjson

    body = orjson.loads(rendered.body)
    tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
    reordered = [m for m in body["messages"] if m["role"] != "tool"]
    reordered[3:3] = list(reversed(tool_messages))
    body["messages"] = reordered
    outcomes["parallel_tools"] = Rendered.of(body)
    comparison = golden.compare(OpenAIChatAdapter(1, CHAT_RULES_V1), outcomes)
    assert any("parallel_tools" in p for p in comparison.problems)
