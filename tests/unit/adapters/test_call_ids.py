"""Call ids from any provider → ids the target API accepts: deterministic, unique within the request,
and every result still carries its own call's id (property, over graphs with ids of every provider)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.adapters.conversations import Conversation, params_for
from turnledger.adapters.base import Rendered
from turnledger.adapters.call_ids import IdRule, wire_call_id
from turnledger.adapters.registry import ADAPTERS
from turnledger.model.graph import BlockKind, MessageSequence

Ids = tuple[list[str | None], list[str | None]]  # (call ids, result ids) in the request's order

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
provider_ids = st.one_of(
    st.text(ALNUM, min_size=24, max_size=24).map(lambda s: "toolu_" + s),  # Anthropic
    st.text(ALNUM, min_size=1, max_size=70).map(lambda s: "call_" + s),  # OpenAI, some over 40
    st.text(ALNUM + "_-", min_size=22, max_size=22).map(lambda s: "tooluse_" + s),  # Bedrock
    st.tuples(st.text(ALNUM, min_size=1, max_size=20), st.integers(0, 9)).map(
        lambda t: f"gemini:{t[0]}:{t[1]}"  # our synthetic Gemini ids
    ),
    st.uuids().map(str),
    st.text(min_size=1, max_size=80),  # anything another gateway may have minted
)


@st.composite
def graphs(draw: st.DrawFn) -> MessageSequence:
    ids = draw(st.lists(provider_ids, min_size=1, max_size=8, unique=True))
    c = Conversation("ids")
    c.next_turn().user("go")
    rounds = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    position = 0
    for width in rounds:
        chunk = ids[position : position + width]
        if not chunk:
            break
        position += width
        c.next_turn().assistant("calling")
        calls = [c.call("get_weather", {"city": "x"}, call_id=i) for i in chunk]
        c.next_turn()
        for call in draw(st.permutations(calls)):
            c.result(call, "ok", status=draw(st.sampled_from(["success", "error", "cancel"])))
        c.next_turn().user("more")
    return c.build()


def _anthropic(body: dict[str, Any]) -> Ids:
    parts = [p for m in body["messages"] for p in m["content"]]
    return (
        [p["id"] for p in parts if p["type"] == "tool_use"],
        [p["tool_use_id"] for p in parts if p["type"] == "tool_result"],
    )


def _chat(body: dict[str, Any]) -> Ids:
    return (
        [tc["id"] for m in body["messages"] for tc in m.get("tool_calls", [])],
        [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"],
    )


def _responses(body: dict[str, Any]) -> Ids:
    return (
        [i["call_id"] for i in body["input"] if i["type"] == "function_call"],
        [i["call_id"] for i in body["input"] if i["type"] == "function_call_output"],
    )


def _gemini(body: dict[str, Any]) -> Ids:
    parts = [p for c in body["contents"] for p in c["parts"]]
    return (
        [p["functionCall"].get("id") for p in parts if "functionCall" in p],
        [p["functionResponse"].get("id") for p in parts if "functionResponse" in p],
    )


def _bedrock(body: dict[str, Any]) -> Ids:
    parts = [p for m in body["messages"] for p in m["content"]]
    return (
        [p["toolUse"]["toolUseId"] for p in parts if "toolUse" in p],
        [p["toolResult"]["toolUseId"] for p in parts if "toolResult" in p],
    )


ANTHROPIC_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
BEDROCK_PATTERN = re.compile(r"[a-zA-Z0-9_-]{1,64}")

#: adapter → (extract ids, does the API accept this id?) — the APIs' rules restated, not read from ours
TARGETS: dict[str, tuple[Callable[[dict[str, Any]], Ids], Callable[[str | None], bool]]] = {
    "anthropic-messages@2": (_anthropic, lambda i: i is not None and bool(ANTHROPIC_PATTERN.match(i))),
    "openai-chat@2": (_chat, lambda i: i is not None and 0 < len(i) <= 40),
    "openai-responses@2": (_responses, lambda i: i is not None and 0 < len(i) <= 64),
    "gemini@2": (_gemini, lambda i: i is None or not i.startswith("gemini:")),
    "bedrock-converse@1": (_bedrock, lambda i: i is not None and bool(BEDROCK_PATTERN.fullmatch(i))),
}


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_ids_from_any_provider_render_as_the_target_accepts_them_and_results_stay_paired(
    sequence: MessageSequence,
) -> None:
    graph_calls = [b.call_id for b in sequence.blocks if b.kind == BlockKind.TOOL_CALL]
    for adapter_id, (extract, accepted) in TARGETS.items():
        adapter = ADAPTERS[adapter_id]
        rendered = adapter.render(sequence, params_for(adapter.provider))
        assert isinstance(rendered, Rendered)
        assert adapter.render(sequence, params_for(adapter.provider)) == rendered  # deterministic
        calls, results = extract(orjson.loads(rendered.body))
        assert len(calls) == len(graph_calls) == len(results)
        assert all(accepted(i) for i in calls + results), (adapter_id, calls)
        sent = [i for i in calls if i is not None]
        assert len(set(sent)) == len(sent), (adapter_id, calls)  # unique within the request
        # each result carries its own call's id: results come in call order after each run
        assert results == calls
        if adapter_id == "gemini@2":  # id-less calls pair by position: only synthetic ids are left out
            assert [i is None for i in calls] == [
                g is not None and g.startswith("gemini:") for g in graph_calls
            ]


@given(st.lists(provider_ids, min_size=2, max_size=30, unique=True))
def test_the_mapping_is_injective_for_every_rule(ids: list[str]) -> None:
    rules = [
        IdRule(pattern=r"[a-zA-Z0-9_-]+"),
        IdRule(max_length=40),
        IdRule(pattern=r"[a-zA-Z0-9_-]+", max_length=64),
    ]
    for rule in rules:
        wire = [wire_call_id(rule, i) for i in ids]
        assert len(set(wire)) == len(wire)
        assert all(w is not None and rule.accepts(w) for w in wire)


def test_version_one_still_sends_ids_as_they_are() -> None:
    from tests.unit.adapters.conversations import FOREIGN_CALL_IDS, foreign_call_ids

    sequence = foreign_call_ids()
    for adapter_id, extract in (
        ("anthropic-messages@1", _anthropic),
        ("openai-chat@1", _chat),
        ("gemini@1", _gemini),
    ):
        adapter = ADAPTERS[adapter_id]
        rendered = adapter.render(sequence, params_for(adapter.provider))
        assert isinstance(rendered, Rendered)
        calls, _ = extract(orjson.loads(rendered.body))
        assert calls == list(FOREIGN_CALL_IDS)
