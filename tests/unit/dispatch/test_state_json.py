"""`state_json` (the incremental changelog JSON) is byte-identical to `model_dump_json`."""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable

import pytest

from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.state_json import CachedJson, StateJson, state_json
from turnledger.dispatch.state_keys import blocks_key
from turnledger.dispatch.state_layout import state_parts
from turnledger.model.base import Frozen
from turnledger.model.events import IngressEvent

from . import test_fold
from .scenario import Conversation, text_stream, tool_stream

FOLD_SCENARIOS = [
    fn
    for name, fn in inspect.getmembers(test_fold, inspect.isfunction)
    if name.startswith("test_") and not inspect.signature(fn).parameters
]


def _assert_identical(state: ConversationState) -> None:
    assert state_json(state) == state.model_dump_json().encode()
    json = StateJson()
    assert json.of(state) == state.model_dump_json().encode()
    assert json.of(state) == state.model_dump_json().encode()
    assert json.model(state.graph) == state.graph.model_dump_json().encode()
    for block in state.graph.blocks:
        assert json.model(block) == block.model_dump_json().encode()


@pytest.mark.parametrize("scenario", FOLD_SCENARIOS, ids=lambda fn: fn.__name__)
def test_every_state_of_every_fold_scenario(
    scenario: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[ConversationState] = []
    apply = Conversation.apply

    def checked(self: Conversation, event: IngressEvent) -> list[Frozen]:
        _assert_identical(self.state)
        outputs = apply(self, event)
        _assert_identical(self.state)
        seen.append(self.state)
        return outputs

    monkeypatch.setattr(Conversation, "apply", checked)
    scenario()
    assert seen
    # again, now that every part is cached
    for state in seen:
        _assert_identical(state)


def test_awkward_strings_and_growing_history() -> None:
    c = Conversation(conversation_id='conv "quoted" \\ ,"chain_head": ünï\u2028')
    for i in range(5):
        c.user(f'turn {i}: "quote", \\backslash\\, ,"blocks":[], \u0000 \U0001f600')
        _assert_identical(c.state)
    c.dispatch_to_streaming()
    c.deltas(text_stream(['"a",', "\\"], stop=True))
    _assert_identical(c.state)
    assert len(c.state.graph.blocks) > 5


def test_json_cache_entry_lives_exactly_as_long_as_its_model() -> None:
    json = StateJson()
    graph = ConversationState.empty("c-cache").graph
    key = id(graph)
    assert json.model(graph) is json.model(graph)
    assert json.entries[key]() is graph
    del graph
    gc.collect()
    assert key not in json.entries


def test_json_cache_callback_of_a_dead_entry_keeps_the_newer_one() -> None:
    json = StateJson()
    old = ConversationState.empty("c-old").graph
    new = ConversationState.empty("c-new").graph
    json.model(old)
    stale = json.entries.pop(id(old))
    json.entries[id(old)] = newer = CachedJson(new, json.forget)
    newer.key, newer.json = id(old), b"newer"
    json.forget(stale)
    assert json.entries.pop(id(old)) is newer


def test_a_split_state_leaves_no_block_or_request_json_in_the_cache() -> None:
    """A run's JSON is kept by its run (GraphParts), a request's by its part: neither a second time."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": "Paris"}'])]))
    json = StateJson()
    parts, graph = state_parts(c.state, json)
    assert graph is not None and len(c.state.graph.blocks) >= 2 and c.state.graph.calls
    # an operation's manifest is in its row (part_rows.py), its request's JSON in its part
    assert json.entries == {}
    assert set(json.requests) == {id(c.state.operations["op-1"].request)}
    run = b"[" + b",".join(b.model_dump_json().encode() for b in c.state.graph.blocks[:1]) + b"]"
    assert parts[blocks_key("conv-1", 0)].split(b"\n")[0] == run
