"""Content never changes structure; the legacy adapter pauses on kinds it does not know."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.unit.adapters.conversations import (
    INJECTIONS,
    Conversation,
    parallel_tools,
    params_for,
    plain_text,
    thinking_with_signature,
)
from tests.unit.adapters.conversations import snippets as snippets_conversation
from turnledger.adapters.base import Rendered, UnsupportedKind
from turnledger.adapters.registry import ADAPTERS, LATEST, get_adapter
from turnledger.model.graph import MessageSequence, Role
from turnledger.model.reasons import ReasonCode

STRUCTURAL_KEYS = {
    "role",
    "type",
    "id",
    "call_id",
    "tool_call_id",
    "tool_use_id",
    "toolUseId",
    "name",
    "status",
}


def skeleton(value: Any, key: str = "") -> Any:
    """The body with every content string blanked: what remains is roles, boundaries and pairing."""
    if isinstance(value, dict):
        return {k: skeleton(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [skeleton(v, key) for v in value]
    if isinstance(value, str) and key not in STRUCTURAL_KEYS:
        return "·"
    return value


def conversation_with(text: str) -> MessageSequence:
    c = Conversation("inj")
    c.system("Operator rules.")
    c.next_turn().user(text)
    c.snippet(text)
    c.artifact(text)
    c.next_turn().assistant("ok")
    call = c.call("search_docs", {"query": text})
    c.next_turn().result(call, text)
    c.snippet(text, role=Role.TOOL)
    c.next_turn().user(text)
    return c.build()


@pytest.mark.parametrize("adapter_id", sorted(LATEST.values()))
@pytest.mark.parametrize("injection", INJECTIONS)
def test_injection_never_changes_roles_or_boundaries(adapter_id: str, injection: str) -> None:
    adapter = ADAPTERS[adapter_id]
    params = params_for(adapter.provider)
    benign = adapter.render(conversation_with("plain words"), params)
    hostile = adapter.render(conversation_with(injection), params)
    assert isinstance(benign, Rendered) and isinstance(hostile, Rendered)
    assert skeleton(orjson.loads(hostile.body)) == skeleton(orjson.loads(benign.body))


SCOPED_PART = re.compile(
    r'^<(retrieved_snippet|compression_artifact) id="[^"<>]*" trust="[^"<>]*">[^<>]*</\1>$'
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("adapter_id", sorted(LATEST.values()))
@pytest.mark.parametrize("injection", INJECTIONS)
def test_scoped_blocks_stay_delimited_and_escaped(adapter_id: str, injection: str) -> None:
    adapter = ADAPTERS[adapter_id]
    rendered = adapter.render(conversation_with(injection), params_for(adapter.provider))
    assert isinstance(rendered, Rendered)
    scoped = [
        s for s in _strings(orjson.loads(rendered.body)) if s.startswith(("<retrieved", "<compression"))
    ]
    assert len(scoped) == 3
    for part in scoped:
        assert SCOPED_PART.match(part), part


@pytest.mark.parametrize("adapter_id", sorted(LATEST.values()))
def test_scoped_blocks_never_enter_system_text(adapter_id: str) -> None:
    adapter = ADAPTERS[adapter_id]
    rendered = adapter.render(snippets_conversation(), params_for(adapter.provider))
    assert isinstance(rendered, Rendered)
    body = orjson.loads(rendered.body)
    system_strings: list[str] = []
    for key in ("system", "systemInstruction"):
        system_strings += _strings(body.get(key, []))
    for m in body.get("messages", []) + body.get("input", []):
        if m.get("role") == "system":
            system_strings += _strings(m)
    assert system_strings
    assert not any("Rome in May" in s or "Summary of turns" in s for s in system_strings)


# ---- rollback: the legacy adapter reads the same graph and pauses on new kinds --------


LegacyCase = tuple[Callable[[], MessageSequence], str]


@pytest.mark.parametrize(
    ("make", "kind"),
    [(thinking_with_signature, "thinking"), (snippets_conversation, "compression_artifact")],
)
def test_legacy_adapter_pauses_on_new_kind(make: Callable[[], MessageSequence], kind: str) -> None:
    legacy = get_adapter("anthropic-messages@0")
    outcome = legacy.render(make(), params_for("anthropic"))
    assert isinstance(outcome, UnsupportedKind)
    assert outcome.kind == kind
    assert outcome.reason is ReasonCode.UNSUPPORTED_KIND
    assert outcome.block_id in {b.id for b in make().blocks}


def test_legacy_adapter_renders_known_kinds_identically_to_v1() -> None:
    legacy, current = get_adapter("anthropic-messages@0"), get_adapter("anthropic-messages@1")
    for make in (plain_text, parallel_tools):
        old = legacy.render(make(), params_for("anthropic"))
        new = current.render(make(), params_for("anthropic"))
        assert isinstance(old, Rendered) and isinstance(new, Rendered)
        assert old.body == new.body
    assert legacy.digest != current.digest


def test_unknown_kind_pauses_every_adapter() -> None:
    c = Conversation("future")
    c.next_turn().user("hi")
    c._add(Role.USER, "image_reference", text="s3://bucket/cat.png")
    for adapter in ADAPTERS.values():
        outcome = adapter.render(c.build(), params_for(adapter.provider))
        assert isinstance(outcome, UnsupportedKind)
        assert outcome.kind == "image_reference"
