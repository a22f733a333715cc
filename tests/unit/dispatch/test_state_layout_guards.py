"""Guards of the changelog layout that no test defended: found by mutation testing (session 25).

`state_layout`, `state_read` and `stored` joined `make mutation` after the split of the layout into
modules; each test here kills mutants that survived every other unit test (named in its docstring).
Most survivors were the layout's shortcuts (a part reused rather than serialized again): removing
one changes only the CPU, never the bytes, and `docs/mutation-report.md` argues each. These are the
others: a mutant here writes or reads a wrong state, refuses a good one with an untyped error, or
loses the words a typed error owes its reader.
"""

from __future__ import annotations

import re

import orjson
import pytest

from turnledger.codec import encode
from turnledger.dispatch.engine import encode_state, read_state
from turnledger.dispatch.state import STATE_FORMAT_VERSION, ConversationState
from turnledger.dispatch.state_json import CONTENT_CHUNK, StateJson
from turnledger.dispatch.state_keys import (
    SPLIT_FORMAT,
    TURNS_TAG,
    blocks_key,
    chunk_key,
    content_key,
    head_key,
    operation_key,
    progress_key,
    request_key,
)
from turnledger.dispatch.state_layout import graph_parts, parts_since, state_parts, write_state
from turnledger.dispatch.state_read import decode_snapshot, decode_whole
from turnledger.dispatch.stored import StateDecodeError, StateLayoutError, Stored, encode_part, snapshot_base
from turnledger.model.events import ConversationSnapshot
from turnledger.model.tools import ToolDefinition
from turnledger.sequence.graph_state import GraphState

from .scenario import Conversation, text_stream
from .test_state_layout import Store, _round_trip, weather_round
from .test_stored import _avro_long_unminimal


def _written(state: ConversationState) -> tuple[Store, Stored]:
    store = Store()
    return store, write_state(state, Stored(), StateJson(), store.put, store.delete)


def _progress_with(store: Store, conversation_id: str, operation_id: str, assembler: object) -> None:
    """Rewrite the operation's progress part with its row's snapshot field replaced (index 0 of the
    row, `part_rows.PROGRESS_ROW`), keeping its chunk counts line."""
    key = progress_key(conversation_id, operation_id)
    row, counts = decode_snapshot(store[key]).state.split(b"\n")
    fields = orjson.loads(row)
    fields[0] = assembler
    store[key] = encode_part(conversation_id, SPLIT_FORMAT, orjson.dumps(fields) + b"\n" + counts)


# --- the graph's parts grown from the last graph's ----------------------------------------------


def test_a_graph_grown_from_no_blocks_gets_the_parts_of_the_whole_graph() -> None:
    """The first write of a conversation may hold no block (a pause, a cancel); the next graph grows
    from it (`_grown` with n = 0; `0 <= n` read `old.blocks[-1]` of no blocks)."""
    c = Conversation()
    c.user("hello")
    c.user("again")
    empty = GraphState.empty("conv-1")
    previous = graph_parts(empty, StateJson())
    assert previous.split and not previous.runs
    assert graph_parts(c.state.graph, StateJson(), previous) == graph_parts(c.state.graph, StateJson())


def test_a_graph_whose_single_old_block_run_grows_is_rebuilt_whole() -> None:
    """Blocks appended to the revision of the last old block make that run longer, which only a whole
    rebuild writes right (`_grown`'s `0 < n`, with n = 1: `1 < n` kept two runs of one revision)."""
    c = weather_round()
    graph = c.state.graph
    revision = graph.blocks[0].revision
    same = [b for b in graph.blocks if b.revision == revision]
    assert len(same) == 1  # a user turn: one block; give the run a second block of its revision
    second = graph.blocks[1].model_copy(update={"revision": revision})
    grown = graph.model_copy(update={"blocks": (graph.blocks[0], second)})
    grown = grown.model_copy(update={"block_ids": {b.id: i for i, b in enumerate(grown.blocks)}})
    grown = grown.model_copy(update={"calls": {}, "results": {}})
    one = grown.model_copy(update={"blocks": grown.blocks[:1], "block_ids": {grown.blocks[0].id: 0}})
    previous = graph_parts(one, StateJson())
    assert previous.split and list(previous.runs) == [0]
    fresh = graph_parts(grown, StateJson())
    assert list(fresh.runs) == [0]  # one run: both blocks are of one revision
    assert graph_parts(grown, StateJson(), previous) == fresh


def test_an_old_index_entry_that_changed_makes_the_graph_rebuilt_whole() -> None:
    """The runs already written hold their revisions' index entries: a graph whose old entries differ
    (not only more of them) is rebuilt, not continued (`_extends`: `and` → `or` reused the stale run)."""
    c = weather_round()
    before = c.state.graph
    previous = graph_parts(before, StateJson())
    c.user("and in Rome?")
    call = c.state.graph.calls["call-1"]
    changed = c.state.graph.model_copy(
        update={"calls": {**c.state.graph.calls, "call-1": call.model_copy(update={"tool_name": "renamed"})}}
    )
    fresh = graph_parts(changed, StateJson())
    assert fresh.split and any(b'"renamed"' in part for part in fresh.runs.values())
    assert graph_parts(changed, StateJson(), previous) == fresh


@pytest.mark.parametrize("past", [0, 1], ids=["an-earlier-ordering", "one-past-the-end"])
def test_a_new_index_entry_outside_the_new_runs_keeps_the_indexes_in_the_head(past: int) -> None:
    """A new `block_ids` entry naming an ordering outside the runs it is split over cannot be split:
    the head keeps the indexes (`_split_indexes`' range check: `or True` indexed the runs from the
    end, `<=` one past them)."""
    c = weather_round()
    previous = graph_parts(c.state.graph, StateJson())
    c.user("and in Rome?")
    graph = c.state.graph
    ordering = 0 if past == 0 else len(graph.blocks)
    stray = graph.model_copy(update={"block_ids": {**graph.block_ids, "stray": ordering}})
    fresh = graph_parts(stray, StateJson())
    assert not fresh.split
    assert graph_parts(stray, StateJson(), previous) == fresh


def test_the_head_of_unsplit_indexes_holds_no_block() -> None:
    """Indexes that do not split by revision stay in the head, but the blocks never do: the head's
    graph JSON is that of the graph without them (`GRAPH_HEAD`), whatever reads it back."""
    c = Conversation()
    c.user("one")
    graph = c.state.graph.model_copy(update={"block_ids": {**c.state.graph.block_ids, "stray": 7}})
    state = c.state.model_copy(update={"graph": graph})
    parts, _ = state_parts(state, StateJson())
    head = parts["conv-1"]
    assert head.count(b'"blocks":') == 1 and b'"blocks":[]' in head and b'"stray":7' in head
    assert b'"one"' not in head
    _round_trip(state)


# --- writing only what changed ------------------------------------------------------------------


def test_turn_ids_or_handles_that_changed_alone_are_written() -> None:
    """`parts_since` declines a state whose turn ids or handles differ even when its graph is the
    same object (the `or` of its checks: an `and` there left the old chunk on the changelog)."""
    c = weather_round()
    for update in ({"turn_ids": (*c.state.turn_ids, "t-extra")}, {"handles": {**c.state.handles, "h": "x"}}):
        store, old = _written(c.state)
        changed = c.state.model_copy(update=update)
        assert changed.graph is c.state.graph
        assert parts_since(changed, StateJson(), old) is None
        write_state(changed, old, StateJson(), store.put, store.delete)
        assert read_state(store, "conv-1") == changed


def test_a_whole_state_changed_without_its_graph_is_written_whole_again() -> None:
    """A conversation id holding the separator keeps its state whole (no graph parts): the next event
    that leaves its graph as it was is written whole too (`parts_since` declines on `old.graph is
    None` alone; an `and` read `old.graph.graph` of None)."""
    c = Conversation(conversation_id="odd\x1fid")
    c.user("hello")
    store, old = _written(c.state)
    assert old.graph is None
    c.request("op-1")
    assert c.state.graph is old.source.graph  # type: ignore[union-attr]
    write_state(c.state, old, StateJson(), store.put, store.delete)
    assert read_state(store, "odd\x1fid") == c.state


def test_an_unchanged_operation_after_a_changed_one_keeps_its_parts_and_those_after_it() -> None:
    """A rewrite (new operation ids) takes an operation that is the very object it was from the last
    write and goes on to the next (`continue`; a `break` there lost every later operation's parts)."""
    c = weather_round()
    c.request("op-2")
    store, old = _written(c.state)
    first, second = c.state.operations["op-1"], c.state.operations["op-2"]
    third = second.model_copy(update={"operation_id": "op-3"})
    operations = {"op-1": first.model_copy(update={"updated_at_ms": 1}), "op-2": second, "op-3": third}
    changed = c.state.model_copy(update={"operations": operations})
    write_state(changed, old, StateJson(), store.put, store.delete)
    assert request_key("conv-1", "op-3") in store
    assert read_state(store, "conv-1") == changed


# --- reading back ------------------------------------------------------------------------------


def test_an_operation_id_with_spaces_reads_back() -> None:
    """The head's first line ends at its first newline, not at any whitespace (`split(b"\\n", 1)`)."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming(op="op 1 of many")
    _round_trip(c.state)


def test_a_block_kept_inline_before_a_chunked_one_reads_back_both() -> None:
    """A snapshot block that is not an index and a content (none the assembler writes) stays inline
    with a null count; the blocks after it still get their chunks back (`continue`, not `break`)."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["x" * (2 * CONTENT_CHUNK + 3)], stop=False)[:3])
    op = c.state.operations["op-1"]
    assert op.assembler is not None
    odd = {"kind": "opaque"}
    blocks = [odd, *op.assembler["blocks"]]
    state = c.state.with_operation(op.model_copy(update={"assembler": {**op.assembler, "blocks": blocks}}))
    stored = _round_trip(state)
    assert stored.parts[progress_key("conv-1", "op-1")].endswith(b"\n[null,2]")


def test_chunk_counts_that_do_not_fit_the_blocks_are_a_typed_error() -> None:
    """Counts of another number of blocks, a count for a block with no int index or no str content:
    `StateLayoutError` with the operation named, never a TypeError or AttributeError."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["x" * (CONTENT_CHUNK + 3)], stop=False)[:3])
    store, _ = _written(c.state)
    assembler = c.state.operations["op-1"].assembler
    assert assembler is not None
    cases: list[tuple[object, str]] = [
        ({**assembler, "blocks": []}, "'op-1' counts the chunks of 1 blocks"),
        ({**assembler, "blocks": ["text"]}, "'op-1' counts chunks of a block with no index"),
        (
            {**assembler, "blocks": [{"index": 0, "content": 5}]},
            "'op-1' counts chunks of a block with no index",
        ),
        (
            {**assembler, "blocks": [{"index": "0", "content": ""}]},
            "'op-1' counts chunks of a block with no index",
        ),
    ]
    for snapshot, message in cases:
        broken = Store(store)
        _progress_with(broken, "conv-1", "op-1", snapshot)
        with pytest.raises(StateLayoutError, match=f"^operation {message}$"):
            read_state(broken, "conv-1")


def test_the_typed_errors_of_reading_name_what_was_read() -> None:
    """Each refusal says what it refused: the key and the conversation, the operation, the formats."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    store, _ = _written(c.state)
    own = operation_key("conv-1", "op-1")
    foreign = Store(store)
    foreign[own] = encode_part("conv-2", SPLIT_FORMAT, b"[]")
    with pytest.raises(
        StateLayoutError, match="^" + re.escape(f"{own!r} holds a part of 'conv-2', not of 'conv-1'") + "$"
    ):
        read_state(foreign, "conv-1")
    other_head = Store(store)
    other_head["conv-1"] = store[blocks_key("conv-1", 0)].replace(b"conv-1", b"conv-9")
    with pytest.raises(StateLayoutError, match=r"^'conv-1' holds a part of 'conv-9', not of 'conv-1'$"):
        read_state(other_head, "conv-1")
    request = request_key("conv-1", "op-1")
    no_json = Store(store)
    no_json[request] = encode_part("conv-1", SPLIT_FORMAT, b"digest\nnot json")
    with pytest.raises(
        StateLayoutError, match=r"^operation 'op-1''s request part is not a toolset digest and JSON$"
    ):
        read_state(no_json, "conv-1")
    with pytest.raises(StateDecodeError, match=r"^ToolDefinition is not a ConversationSnapshot$"):
        decode_snapshot(encode(ToolDefinition(name="t", description="d", input_schema={})))
    with pytest.raises(StateDecodeError, match=r"\S") as refused:
        decode_snapshot(b"\x00not avro")
    assert "None" not in str(refused.value)
    unknown = ConversationSnapshot(conversation_id="conv-1", format_version=99, state=b"{}")
    with pytest.raises(
        StateDecodeError,
        match=r"^state format 99 \(this release reads \[.*\] whole, \[4, 5, 6, 7, 8\] split\)$",
    ):
        decode_whole(unknown)


def test_a_format_4_part_of_too_few_lines_names_its_operation() -> None:
    """Format 4's reader names the operation whose part is short of lines (`_lines`)."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    store, _ = _written(c.state)
    head = decode_snapshot(store["conv-1"]).state
    old = Store({key: encode_part("conv-1", 4, decode_snapshot(value).state) for key, value in store.items()})
    old["conv-1"] = encode_part("conv-1", 4, head)
    old[operation_key("conv-1", "op-1")] = encode_part("conv-1", 4, b"{}")
    with pytest.raises(StateLayoutError, match=r"^the part of operation 'op-1' has 1 lines$"):
        read_state(old, "conv-1")


def test_another_conversations_whole_state_under_the_bare_id_is_not_read() -> None:
    """A conversation id holding the separator finds under its bare id (format 3's key) only its own
    whole state: another conversation's whole state there is not read as its own (an `and` in
    `_whole_under_bare_id` read it whenever its format was a whole one)."""
    other = Conversation(conversation_id="x\x1fy")
    other.user("not yours")
    victim_id = "a\x1fb"
    store = Store({victim_id: encode_state(other.state)})
    assert decode_snapshot(store[victim_id]).format_version == STATE_FORMAT_VERSION
    assert head_key(victim_id) not in store
    assert read_state(store, victim_id) is None
    mine = Conversation(conversation_id=victim_id)
    mine.user("mine")
    store[victim_id] = encode_state(mine.state)
    assert read_state(store, victim_id) == mine.state


# --- what the store still holds ----------------------------------------------------------------


def test_a_value_read_as_other_bytes_then_deleted_is_not_current() -> None:
    """`current` of a state some of whose values were read as other bytes: a key the store no longer
    holds makes it stale (`_current_with_raw`)."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    store, _ = _written(c.state)
    key = operation_key("conv-1", "op-1")
    part = decode_snapshot(store[key]).state
    store[key] = snapshot_base("conv-1", SPLIT_FORMAT) + _avro_long_unminimal(len(part)) + part
    assert read_state(store, "conv-1") == c.state
    stored = state_read_stored(store)
    assert stored.raw is not None and key in stored.raw and stored.current(store.get)
    missing = Store(store)
    del missing[request_key("conv-1", "op-1")]
    assert not stored.current(missing.get)


def test_a_read_state_checks_the_keys_after_its_content_chunks() -> None:
    """A state read back holds its parts in the order read: an operation's content chunks come before
    the block runs, so `current` skips the chunks and goes on (`continue`; a `break` left every run
    unchecked)."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["x" * (CONTENT_CHUNK + 3)], stop=False)[:3])
    store, _ = _written(c.state)
    stored = state_read_stored(store)
    keys = list(stored.parts)
    chunk, run = content_key("conv-1", "op-1", 0, 0), blocks_key("conv-1", 0)
    assert keys.index(chunk) < keys.index(run)
    assert stored.raw is None and stored.current(store.get)
    rolled_back = Store(store)
    rolled_back[run] = encode_part("conv-1", SPLIT_FORMAT, b"[]")
    assert not stored.current(rolled_back.get)


def state_read_stored(store: Store) -> Stored:
    from turnledger.dispatch import state_read

    found = state_read.read_state(store.get, "conv-1")
    assert found is not None
    return found[1]


@pytest.mark.parametrize(
    ("part_of", "value"),
    [
        ("head", b"[1]\n{}"),  # a part list of the wrong shape
        ("head", b"[]"),  # no line after the part list
        ("head", b'[["op-1"],[0],0,0]\n{"conversation_id":'),  # the state's JSON cut
        ("turns", b"{"),
        ("blocks", b"[{]"),
        ("request", b"{bad"),
        ("progress", b"[]\nxx"),
        ("whole", b"{not json"),
    ],
)
def test_a_part_that_does_not_parse_is_a_typed_error_naming_the_conversation(
    part_of: str, value: bytes
) -> None:
    """Whatever part another writer or a broken disk left unparseable, reading the state back raises
    `StateLayoutError` (a `StateFormatError`) naming the conversation (an operation's rows: the
    operation): the engine's poison path then
    reports our error, not pydantic's or the parser's own."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    store, _ = _written(c.state)
    conversation_id, key = (
        "conv-1",
        {
            "head": "conv-1",
            "turns": chunk_key("conv-1", TURNS_TAG, 0),
            "blocks": blocks_key("conv-1", 0),
            "request": request_key("conv-1", "op-1"),
            "progress": progress_key("conv-1", "op-1"),
        }.get(part_of, ""),
    )
    format_version = SPLIT_FORMAT
    if part_of == "whole":
        conversation_id = "odd\x1fid"
        key, format_version = head_key(conversation_id), STATE_FORMAT_VERSION
    broken = Store(store)
    broken[key] = encode_part(conversation_id, format_version, value)
    named = "'op-1'" if part_of == "progress" else repr(conversation_id)  # the rows' reader names it
    with pytest.raises(StateLayoutError, match=re.escape(named)):
        read_state(broken, conversation_id)
