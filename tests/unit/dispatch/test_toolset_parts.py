"""Format 8 keeps a conversation's toolset once, under its digest (`state_layout.toolset_key`), for as
long as an operation's request names it; each request part holds the digest and its JSON with
`"tools":[]`. These tests check the cut and the splice byte for byte with definitions built to
confuse them, the life of a toolset part, and the typed refusal of a part that breaks the layout."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.codec import decode, encode
from turnledger.dispatch.engine import BatchEngine, read_state
from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.state_json import StateJson
from turnledger.dispatch.state_keys import SEPARATOR, SPLIT_FORMAT, TOOLSET_TAG, request_key, toolset_key
from turnledger.dispatch.state_layout import write_state
from turnledger.dispatch.stored import StateLayoutError, Stored
from turnledger.model.events import ConversationSnapshot, DispatchRequested
from turnledger.model.tools import ToolDefinition, toolset_digest, toolset_json, toolset_of_json

from .scenario import ADAPTER, MODEL, WEATHER, Conversation, text_stream
from .test_state_layout import Store, _record

TRICKY = (
    ToolDefinition(
        name="tools",
        description='a description holding "tools":[] and ,"max_output_tokens":1 and a\nnewline',
        input_schema={
            "type": "object",
            "properties": {"tools": {"type": "array", "items": {}}, "max_output_tokens": {"type": "integer"}},
            "required": ["tools"],
        },
    ),
    ToolDefinition(name="empty_schema", input_schema={}),
    WEATHER,
)
ROME = ToolDefinition(name="rome_weather", description="Weather in Rome", input_schema={"type": "object"})


def _request(c: Conversation, op: str, tools: tuple[ToolDefinition, ...], **fields: Any) -> None:
    values: dict[str, Any] = {
        "operation_id": op,
        "adapter": ADAPTER,
        "provider": "anthropic",
        "model_revision": MODEL,
        "tools": tools,
        "max_output_tokens": 256,
        **fields,
    }
    c.apply(DispatchRequested(**c._common(), **values))


def _toolset_keys(store: Store) -> list[str]:
    return sorted(key for key in store if f"{SEPARATOR}{TOOLSET_TAG}{SEPARATOR}" in key)


def _part(store: Store, key: str) -> bytes:
    snapshot = decode(store[key])
    assert isinstance(snapshot, ConversationSnapshot) and snapshot.format_version == SPLIT_FORMAT
    return snapshot.state


def _written(state: ConversationState) -> tuple[Store, Stored]:
    store = Store()
    return store, write_state(state, Stored(), StateJson(), store.put, store.delete)


def test_tools_built_to_confuse_the_cut_are_read_back_byte_for_byte() -> None:
    c = Conversation()
    c.user("hello")
    _request(c, "op-1", TRICKY, policy={"tools": [1], "note": '"tools":[]'})
    op = c.state.operations["op-1"]
    assert op.request.tools == TRICKY and op.request.policy  # live: both kept
    store, _ = _written(c.state)
    part = _part(store, request_key("conv-1", "op-1"))
    digest = toolset_digest(TRICKY)
    assert part.startswith(digest.encode() + b"\n{") and b"empty_schema" not in part
    assert part.count(b'"tools":[]') == 1  # the field; the policy's "tools" holds [1]
    assert _part(store, toolset_key("conv-1", digest)).startswith(b'[{"name":"tools"')
    read = read_state(store, "conv-1")
    assert read is not None and read == c.state
    assert read.model_dump_json() == c.state.model_dump_json()


def test_a_toolset_is_kept_while_a_request_names_it_and_deleted_after() -> None:
    """op-1 names WEATHER's toolset and stays its last operation once final; op-2 names another:
    op-1 is settled (its tools dropped), so WEATHER's toolset goes in the same write."""
    c = Conversation()
    c.user("weather in Paris?")
    _request(c, "op-1", (WEATHER,))
    c.attempt()
    c.sent()
    c.bind()
    c.deltas(text_stream(["Sunny."]))
    c.user("and in Rome?")
    _request(c, "op-2", (ROME,))
    engine, store, keys = BatchEngine(), Store(), []
    for offset, event in enumerate(c.events):
        store.log.clear()
        engine.process_batch([_record(event, offset)], store)
        keys.append((_toolset_keys(store), [k for k, v in store.log if v is None]))
    paris, rome = (
        toolset_key("conv-1", toolset_digest((WEATHER,))),
        toolset_key("conv-1", toolset_digest((ROME,))),
    )
    assert [kept for kept, _ in keys] == [[]] + [[paris]] * (len(c.events) - 2) + [[rome]]
    assert keys[-1][1] == [paris]  # deleted by the write that named the other
    assert read_state(store, "conv-1") == c.state


def test_a_request_part_naming_a_toolset_the_store_lacks_is_refused() -> None:
    c = Conversation()
    c.user("hello")
    _request(c, "op-1", (WEATHER,))
    store, _ = _written(c.state)
    del store[toolset_key("conv-1", toolset_digest((WEATHER,)))]
    with pytest.raises(StateLayoutError, match=r"names .* which the store does not hold"):
        read_state(store, "conv-1")


@pytest.mark.parametrize("part", [b"sha256:00\nnot json", b'sha256:00\n{"tools":[1]}', b"sha256:00"])
def test_a_request_part_that_is_not_a_digest_and_json_with_empty_tools_is_refused(part: bytes) -> None:
    c = Conversation()
    c.user("hello")
    _request(c, "op-1", (WEATHER,))
    store, _ = _written(c.state)
    key = request_key("conv-1", "op-1")
    store[key] = encode(
        ConversationSnapshot(conversation_id="conv-1", format_version=SPLIT_FORMAT, state=part)
    )
    with pytest.raises(StateLayoutError, match="request part is not a toolset digest and JSON"):
        read_state(store, "conv-1")


def test_conversations_that_name_one_toolset_read_it_back_parsed_once() -> None:
    """A processor taking a partition over reads each conversation's toolset part back: the same
    toolset gives the very same definitions (`toolset_of_json`), and each state equals the one written."""
    store, states = Store(), []
    for conversation_id in ("conv-1", "conv-2"):
        c = Conversation(conversation_id)
        c.user("hello")
        _request(c, "op-1", TRICKY)
        write_state(c.state, Stored(), StateJson(), store.put, store.delete)
        states.append(c.state)
    first, second = (read_state(store, state.conversation_id) for state in states)
    assert first == states[0] and second == states[1]
    assert first.model_dump_json() == states[0].model_dump_json()
    tools = first.operations["op-1"].request.tools
    assert tools is second.operations["op-1"].request.tools
    assert tools == TRICKY and all(read is live for read, live in zip(tools, TRICKY, strict=True))


def test_a_toolset_key_met_again_with_other_json_is_parsed_again() -> None:
    paris = b'[{"name":"paris_weather","description":"","input_schema":{"type":"object"}}]'
    rome = b'[{"name":"rome_weather","description":"","input_schema":{"type":"object"}}]'
    assert [t.name for t in toolset_of_json("sha256:same", paris)] == ["paris_weather"]
    assert [t.name for t in toolset_of_json("sha256:same", rome)] == ["rome_weather"]
    assert [t.name for t in toolset_of_json("sha256:same", paris)] == ["paris_weather"]


@pytest.mark.parametrize("toolset", [b"{}", b'[{"description":"no name"}]', b"[", b'[{"name":1}]'])
def test_a_toolset_part_that_is_not_a_list_of_tools_is_refused(toolset: bytes) -> None:
    c = Conversation()
    c.user("hello")
    _request(c, "op-1", (WEATHER,))
    store, _ = _written(c.state)
    key = toolset_key("conv-1", toolset_digest((WEATHER,)))
    store[key] = encode(
        ConversationSnapshot(conversation_id="conv-1", format_version=SPLIT_FORMAT, state=toolset)
    )
    with pytest.raises(StateLayoutError, match="is not a list of tools"):
        read_state(store, "conv-1")


def test_a_toolsets_json_is_what_a_request_holds_and_is_made_once_per_sequence_of_definitions() -> None:
    request = DispatchRequested(
        conversation_id="conv-1", event_id="e-1", occurred_at_ms=1, operation_id="op-1", adapter=ADAPTER,
        provider="anthropic", model_revision=MODEL, tools=TRICKY, max_output_tokens=256,
    )  # fmt: skip
    json = toolset_json(request.tools)
    assert request.model_dump_json().encode().count(b'"tools":' + json) == 1
    assert toolset_json(tuple(list(request.tools))) is json
    assert toolset_json((WEATHER,)) == b"[" + WEATHER.model_dump_json().encode() + b"]"
