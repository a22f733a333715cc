"""Formats 5 and 6: the contents of a streaming operation's assembler blocks in chunks of their own.

A streamed delta writes the operation's progress, which holds less than a chunk of the answer,
and a chunk when one fills, however long the answer; what was written reads back as the state (any
content: empty, a multiple of the chunk, characters outside the BMP across a chunk's edge,
thinking and tool-argument blocks); the chunk keys of two operations never collide whatever their
ids hold; the chunks go when the assembler does or shrinks; the parts of what changed are the
parts of the whole state at every step; a changelog written in format 4 (contents inline) or in
format 5 (progress inline) before the upgrade is read, and folded on exactly like one written in
format 6.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from turnledger.codec import decode
from turnledger.dispatch.engine import BatchEngine, read_state
from turnledger.dispatch.part_rows import progress_fields
from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.state_json import CONTENT_CHUNK, StateJson
from turnledger.dispatch.state_keys import (
    CONTENTS_TAG,
    INLINE_CONTENTS_FORMAT,
    OBJECT_PARTS_FORMAT,
    PROGRESS_INLINE_FORMAT,
    ROWS_FORMAT,
    SEPARATOR,
    SPLIT_FORMAT,
    TOOLSET_TAG,
    content_key,
    operation_key,
    progress_key,
    request_key,
)
from turnledger.dispatch.state_layout import parts_since, state_parts, write_state
from turnledger.dispatch.stored import Stored
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.events import ConversationSnapshot, IngressEvent, StreamOutcome
from turnledger.records import SourceRecord

from .scenario import Conversation, _DeltaMaker
from .test_state_layout import Store, _checking_parts_since, _record, _round_trip

C = CONTENT_CHUNK
CHUNKS = f"conv-1{SEPARATOR}{CONTENTS_TAG}{SEPARATOR}"
"""What every content chunk key of the conversation starts with (an operation id may hold it too)."""
WORDS = ["the", "quick", "brown", "fox", "jumps", "über", "🦊", "a", "lazy", "dog"]
FIXTURE = Path(__file__).parents[2] / "fixtures" / "state" / "changelog_v4.json"
"""Written by the format-4 engine (commit 51d4293) folding `events` one per batch: a conversation
whose operation streams, mid-answer, a thinking block, a text block of 355 code points with
characters outside the BMP, a tool call's first argument fragment and an empty text block;
`later_events` are the rest of that answer, to its commit. The script (the deltas are in the
events): the `Conversation` driver with `_DeltaMaker("msg_1", 1)`, `BatchEngine().process_batch`
of each event into a dict store, the store's values in base64."""


FIXTURE_V5 = FIXTURE.with_name("changelog_v5.json")
"""The same `events` folded by the format-5 engine (commit 5c5fd67): the operation's progress inline
in its part, its contents in chunks (the same keys as format 6's)."""
FIXTURE_V6 = FIXTURE.with_name("changelog_v6.json")
"""The same `events` folded by the format-6 engine (commit 234745e): the operation's progress apart,
its parts JSON objects (the same keys as format 7's)."""
FIXTURE_V7 = FIXTURE.with_name("changelog_v7.json")
"""The same `events` folded by the format-7 engine (commit f766245): the operation's parts rows, its
request with its tools inline (format 8 keeps the toolset under a key of its own)."""


def _chunk_keys(store: dict[str, bytes]) -> list[str]:
    return sorted(key for key in store if key.startswith(CHUNKS))


def _streaming(*deltas: NormalizedDelta) -> Conversation:
    c = Conversation()
    c.user("tell me a story")
    c.dispatch_to_streaming()
    c.deltas(list(deltas))
    return c


def _engine_writes(
    c: Conversation, store: Store, engine: BatchEngine
) -> list[list[tuple[str, bytes | None]]]:
    """Fold the recorded events one per batch; each batch's writes (a delete's value: None), with
    every stored key checked to be a part of the state folded so far (no chunk left behind)."""
    writes = []
    for offset, event in enumerate(c.events):
        store.log.clear()
        engine.process_batch([_record(event, offset)], store)
        writes.append(list(store.log))
        state = read_state(store, "conv-1")
        assert state is not None
        assert sorted(store) == sorted(state_parts(state, StateJson())[0])
    return writes


def _answer(records: int) -> list[tuple[int, int, int]]:
    """Each StreamDeltas record's writes in an answer of `records` records of six text deltas: the
    bytes of the operation's part, the code points of the chunks it wrote (full ones, each written
    once), the changelog bytes in all (keys and values)."""
    d = _DeltaMaker("msg_1", 1)
    c = _streaming(d(DeltaType.MESSAGE_START, -1), d(DeltaType.BLOCK_START, 0, block_kind="text"))
    for k in range(records):
        words = (WORDS[(k * 6 + t) % len(WORDS)] + " " for t in range(6))
        c.deltas([d(DeltaType.TEXT_DELTA, 0, text=word) for word in words])
    writes = _engine_writes(c, Store(), BatchEngine())[-records:]
    chunks = {content_key("conv-1", "op-1", 0, n) for n in range(records)}
    sizes, filled = [], []
    for written in writes:  # the operation's progress, then the chunk the delta filled, if it did
        keys = [key for key, _ in written]
        assert keys[0] == progress_key("conv-1", "op-1") and len(keys) <= 2
        assert set(keys[1:]) <= chunks
        filled += keys[1:]
        values = [decode(value) for _, value in written]  # type: ignore[arg-type]
        assert all(isinstance(v, ConversationSnapshot) for v in values)
        code_points = [len(orjson.loads(v.state)) for v in values[1:]]  # type: ignore[attr-defined]
        assert code_points in ([], [C])
        total = sum(len(key.encode()) + len(value or b"") for key, value in written)
        sizes.append((len(values[0].state), sum(code_points), total))  # type: ignore[attr-defined]
    assert filled == sorted(set(filled), key=filled.index)  # each chunk written once
    assert len(filled) >= records * 6 * 3 // C  # words of 3 code points or more
    return sizes


def test_a_streamed_answer_writes_the_same_bytes_per_record_however_long_it_is() -> None:
    short, long = _answer(20), _answer(200)
    for sizes in (short, long):
        assert max(total for _, _, total in sizes) < 2_000  # the part, a chunk of 256, keys: at most
    # the part holds less than a chunk of the answer: the sizes of the short one's, but for a digit
    # more in three numbers (next sequence, delta count, chunk count) and where the words fall
    assert max(part for part, _, _ in long) <= max(part for part, _, _ in short) + 3 + 8
    mean = [sum(total for _, _, total in sizes) / len(sizes) for sizes in (short, long)]
    assert mean[1] <= mean[0] + 16


def _text(length: int, outside_bmp_at: tuple[int, ...] = ()) -> str:
    """`length` code points: ASCII, 'é' (two UTF-8 bytes), and '🙂' (four; a surrogate pair in
    UTF-16) at `outside_bmp_at` and wherever else the pattern puts it."""
    pattern = "ab é🙂cd"
    text = [pattern[i % len(pattern)] for i in range(length)]
    for i in outside_bmp_at:
        text[i] = "🙂"
    return "".join(text)


def _special_blocks() -> list[NormalizedDelta]:
    """A thinking block exactly two chunks long, a text block one code point past a chunk with
    characters outside the BMP on both sides of the edge, a tool call's arguments so far, an empty
    text block, a last text block five code points past a chunk (those five stay in the operation's
    part): the answer, unfinished."""
    d = _DeltaMaker("msg_1", 1)
    thinking, text = _text(2 * C), _text(C + 1, (C - 1, C))
    return [
        d(DeltaType.MESSAGE_START, -1),
        d(DeltaType.BLOCK_START, 0, block_kind="thinking"),
        d(DeltaType.THINKING_DELTA, 0, text=thinking[: C - 7]),
        d(DeltaType.THINKING_DELTA, 0, text=thinking[C - 7 :]),
        d(DeltaType.BLOCK_START, 1, block_kind="text"),
        d(DeltaType.TEXT_DELTA, 1, text=text),
        d(DeltaType.BLOCK_START, 2, block_kind="tool_call", call_id="call-1", tool_name="get_weather"),
        d(DeltaType.ARGUMENT_FRAGMENT, 2, text='{"city": "Zürich 🙂'),
        d(DeltaType.BLOCK_START, 3, block_kind="text"),
        d(DeltaType.BLOCK_START, 4, block_kind="text"),
        d(DeltaType.TEXT_DELTA, 4, text=_text(C) + "Ωμέγα"),
    ]


def test_a_state_with_contents_in_chunks_reads_back_equal() -> None:
    c = _streaming(*_special_blocks())
    assembler = c.state.operations["op-1"].assembler
    assert assembler is not None
    contents = [block["content"] for block in assembler["blocks"]]
    assert [len(content) for content in contents] == [2 * C, C + 1, 18, 0, C + 5]
    stored = _round_trip(c.state)  # read back: an equal state, the same JSON
    counts = [2, 2, 1, 0, 1]  # every block's content in chunks, but the last's past its full ones
    for index, (content, count) in enumerate(zip(contents, counts, strict=True)):
        chunks = [stored.parts[content_key("conv-1", "op-1", index, n)] for n in range(count)]
        assert content_key("conv-1", "op-1", index, count) not in stored.parts
        assert "".join(orjson.loads(chunk) for chunk in chunks) == content[: C * 4 if index < 4 else C]
        assert [len(orjson.loads(chunk)) for chunk in chunks[:-1]] == [C] * (len(chunks) - 1)
        assert all(chunk.decode("utf-8") for chunk in chunks)  # whole UTF-8 sequences in each
    assert orjson.loads(stored.parts[content_key("conv-1", "op-1", 1, 1)]) == "🙂"
    part = stored.parts[progress_key("conv-1", "op-1")]
    assert part.endswith(b"\n[2,2,1,0,1]") and _inline_contents(part) == ["", "", "", "", "Ωμέγα"]
    assert b"ab \xc3\xa9" not in part and b"Z\xc3\xbcrich" not in part
    assert b'"assembler"' not in stored.parts[operation_key("conv-1", "op-1")]


@pytest.mark.parametrize("length", [0, 1, C - 1, C, C + 1, 2 * C, 3 * C + 5])
def test_a_content_of_any_length_reads_back_equal(length: int) -> None:
    d = _DeltaMaker("msg_1", 1)
    c = _streaming(
        d(DeltaType.MESSAGE_START, -1),
        d(DeltaType.BLOCK_START, 0, block_kind="text"),
        d(DeltaType.TEXT_DELTA, 0, text=_text(length, tuple(range(C - 1, length, C)))),
    )
    stored = _round_trip(c.state)
    keys = [key for key in stored.parts if key.startswith(CHUNKS)]
    assert keys == [content_key("conv-1", "op-1", 0, n) for n in range(length // C)]  # the full ones
    rest = _text(length, tuple(range(C - 1, length, C)))[length // C * C :]
    assert _inline_contents(stored.parts[progress_key("conv-1", "op-1")]) == [rest]


def _inline_contents(progress: bytes) -> list[str]:
    """What each block's content in an operation's progress part holds (the rest past its chunks)."""
    snapshot = progress_fields(orjson.loads(progress.split(b"\n")[0]))["assembler"]
    return [block["content"] for block in snapshot["blocks"]]


COLLIDING_IDS = ["a", "a\x1f0", "0\x1fa", "0\x1f0\x1fa", "a\x1f0\x1f1", "1\x1f0\x1fa", "x\x1f0\x1f0\x1fa", ""]
"""Operation ids holding the separator, shaped like the integers and ids of other chunk keys (and
like a tag): a key that did not keep the integers apart from the id would be another's."""


def _with_operations(state: ConversationState, ids: list[str], contents: list[str]) -> ConversationState:
    """The state with one operation per id, a copy of its streaming op-1 whose blocks hold `contents`."""
    op = state.operations["op-1"]
    assert op.assembler is not None
    operations = {}
    for operation_id in ids:
        assembler = copy.deepcopy(op.assembler)
        template = assembler["blocks"][0]
        assembler["blocks"] = [{**template, "index": i, "content": text} for i, text in enumerate(contents)]
        operations[operation_id] = op.model_copy(
            update={"operation_id": operation_id, "assembler": assembler}
        )
    return state.model_copy(update={"operations": operations})


def test_the_chunk_keys_of_operations_whose_ids_hold_the_separator_never_collide() -> None:
    d = _DeltaMaker("msg_1", 1)
    c = _streaming(d(DeltaType.MESSAGE_START, -1), d(DeltaType.BLOCK_START, 0, block_kind="text"))
    state = _with_operations(c.state, COLLIDING_IDS, [_text(C + 1), _text(2 * C)])
    parts, _ = state_parts(state, StateJson())
    chunks = [key for key in parts if key.startswith(CHUNKS)]
    assert len(chunks) == 2 * 2 * len(COLLIDING_IDS)
    # head, turns, handles, ops, blocks, the toolset they name
    assert len(parts) == 3 + (3 + 2 * 2) * len(COLLIDING_IDS) + 1 + 1
    for key in chunks:  # each key names one (operation, block, chunk): read from the left
        conversation, tag, block, chunk, operation = key.split(SEPARATOR, 4)
        assert key == content_key(conversation, operation, int(block), int(chunk)) and tag == CONTENTS_TAG
    others = {key("conv-1", op) for op in COLLIDING_IDS for key in (operation_key, progress_key, request_key)}
    assert not others & set(chunks)
    _round_trip(state)


def test_the_chunks_go_when_the_answer_commits_or_is_retracted_and_every_write_is_the_whole_states() -> None:
    """A long answer is cut off and retracted, a shorter one commits: at every step the store holds
    exactly the state's parts, and the parts of what changed are those of the whole state."""
    old = _DeltaMaker("msg_1", 1)
    c = _streaming(old(DeltaType.MESSAGE_START, -1), old(DeltaType.BLOCK_START, 0, block_kind="text"))
    for k in range(40):
        c.deltas([old(DeltaType.TEXT_DELTA, 0, text=f"{WORDS[(k + t) % len(WORDS)]} ") for t in range(6)])
    c.ended(StreamOutcome.DISCONNECTED)
    c.terminated()
    c.attempt()
    c.sent(gen=2)
    c.bind(gen=2, handle="msg_2")
    new = _DeltaMaker("msg_2", 2)
    c.deltas([new(DeltaType.MESSAGE_START, -1), new(DeltaType.BLOCK_START, 0, block_kind="text")], gen=2)
    for k in range(50):
        c.deltas([new(DeltaType.TEXT_DELTA, 0, text=f"{WORDS[k % len(WORDS)]}🙂 ")], gen=2)
    stop = [new(DeltaType.BLOCK_STOP, 0), new(DeltaType.MESSAGE_STOP, -1, stop_reason=StopReason.END_TURN)]
    c.deltas(stop, gen=2)
    assert c.state.operations["op-1"].state.value == "COMMITTED"
    monkeypatch = pytest.MonkeyPatch()
    try:
        counts = _checking_parts_since(monkeypatch)
        store = Store()
        writes = _engine_writes(c, store, BatchEngine())
    finally:
        monkeypatch.undo()
    assert counts[0] > 40  # the deltas took the incremental path (a new chunk included)
    deleted = [[key for key, value in written if value is None] for written in writes]
    retracted = next(i for i, keys in enumerate(deleted) if keys)
    assert c.events[retracted].__class__.__name__ in {"StreamEnded", "AttemptTerminated"}
    assert len(deleted[retracted]) >= 4  # the chunks of the first answer, all of them
    assert all(key.startswith(f"conv-1{SEPARATOR}{CONTENTS_TAG}") for key in deleted[retracted])
    assert deleted[-1] == [content_key("conv-1", "op-1", 0, 0)]  # the commit deletes the second's
    assert not _chunk_keys(store)
    assert read_state(store, "conv-1") == c.state


def _mutated(
    assembler: dict[str, Any] | None, rng: random.Random, template: dict[str, Any]
) -> dict[str, Any] | None:
    """Another snapshot, as an attempt changes it: contents grow (most often), a block starts, a new
    attempt starts shorter, the assembler goes or comes back."""
    roll = rng.random()
    if assembler is None:
        return copy.deepcopy(template) if roll < 0.5 else None
    if roll < 0.05:
        return None
    changed = copy.deepcopy(assembler)
    blocks = changed["blocks"]
    if roll < 0.15 or not blocks:
        blocks.append(
            {**template["blocks"][0], "index": len(blocks) + 1, "content": _text(rng.randrange(3 * C))}
        )
    elif roll < 0.22:
        block = blocks[rng.randrange(len(blocks))]  # a new attempt: other words, often as many chunks
        block["content"] = "".join(rng.choice(WORDS) for _ in range(C))[
            : rng.randrange(len(block["content"]) + 1)
        ]
    elif roll < 0.25:
        changed["next_sequence"] += 1  # the contents unchanged
    else:
        block = blocks[rng.randrange(len(blocks))]
        block["content"] += "".join(rng.choice(WORDS) + " " for _ in range(rng.randrange(1, 40)))
    return changed


@pytest.mark.parametrize("seed", range(4))
def test_the_parts_of_what_changed_are_the_whole_states_parts_through_any_change_of_contents(
    seed: int,
) -> None:
    """Random steps of three operations' assemblers: each step's incremental parts are the whole
    state's (keys, order, JSON), the store holds exactly them, and they read back as the state."""
    d = _DeltaMaker("msg_1", 1)
    c = _streaming(d(DeltaType.MESSAGE_START, -1), d(DeltaType.BLOCK_START, 0, block_kind="text"))
    state = _with_operations(c.state, ["op-1", "op\x1f2", "3"], [_text(C - 1)])
    template = state.operations["op-1"].assembler
    assert template is not None
    rng, json, store = random.Random(seed), StateJson(), Store()
    stored = write_state(state, Stored(), json, store.put, store.delete)
    for _ in range(150):
        operation_id = rng.choice(list(state.operations))
        op = state.operations[operation_id]
        op = op.model_copy(update={"assembler": _mutated(op.assembler, rng, template)})
        state = state.model_copy(update={"operations": {**state.operations, operation_id: op}})
        since = parts_since(state, json, stored)
        assert since is not None
        assert list(since.items()) == list(state_parts(state, StateJson())[0].items())
        stored = write_state(state, stored, json, store.put, store.delete)
        assert sorted(store) == sorted(stored.parts)
        assert stored.current(store.get)
        assert read_state(store, "conv-1") == state


def _fixture() -> tuple[list[bytes], list[bytes], dict[str, bytes]]:
    """The events folded by the format-4 engine, the changelog it wrote, the events after them."""
    raw = json.loads(FIXTURE.read_text())
    events = [base64.b64decode(v) for v in raw["events"]]
    later = [base64.b64decode(v) for v in raw["later_events"]]
    assert all(isinstance(decode(event), IngressEvent) for event in events + later)
    return events, later, {k: base64.b64decode(v) for k, v in raw["changelog_v4"].items()}


def _records(values: list[bytes], first: int = 0) -> list[SourceRecord]:
    return [SourceRecord("turnledger.ingress", 0, first + i, b"conv-1", v) for i, v in enumerate(values)]


@pytest.mark.parametrize(
    "written_in", [INLINE_CONTENTS_FORMAT, PROGRESS_INLINE_FORMAT, OBJECT_PARTS_FORMAT, ROWS_FORMAT]
)
def test_a_changelog_of_an_earlier_split_format_is_read_and_folded_on_like_a_format_8_one(
    written_in: int,
) -> None:
    """Format 4 (contents inline in the operation's part), format 5 (contents in chunks, progress
    inline), format 6 (progress apart, parts as JSON objects) and format 7 (parts as rows, the tools
    in the request): read back equal, every key rewritten in format 8 on the first change, and
    folded on to the same outputs and the same store as a changelog written in format 8 from the
    start."""
    events, later, changelog_v4 = _fixture()
    if written_in == INLINE_CONTENTS_FORMAT:
        old = Store(changelog_v4)
        assert "é🙂a".encode() in old[operation_key("conv-1", "op-1")]  # the contents inline
    else:
        fixture = {PROGRESS_INLINE_FORMAT: FIXTURE_V5, OBJECT_PARTS_FORMAT: FIXTURE_V6}.get(
            written_in, FIXTURE_V7
        )
        raw = json.loads(fixture.read_text())
        assert raw["events"] == [base64.b64encode(e).decode() for e in events]
        old = Store({k: base64.b64decode(v) for k, v in raw[f"changelog_v{written_in}"].items()})
        assert _chunk_keys(old)
        if written_in == PROGRESS_INLINE_FORMAT:
            assert progress_key("conv-1", "op-1") not in old
            assert b'"assembler"' in old[operation_key("conv-1", "op-1")]  # the progress inline
        elif written_in == OBJECT_PARTS_FORMAT:
            assert b'"assembler":{"v":1,' in old[progress_key("conv-1", "op-1")]  # JSON objects
        else:
            assert b'"tools":[{"name":"get_weather"' in old[request_key("conv-1", "op-1")]  # tools inline
            assert not any(f"{SEPARATOR}{TOOLSET_TAG}{SEPARATOR}" in key for key in old)
    snapshots = [decode(value) for value in old.values()]
    assert all(isinstance(s, ConversationSnapshot) and s.format_version == written_in for s in snapshots)
    fresh, fresh_engine = Store(), BatchEngine()
    for record in _records(events):
        fresh_engine.process_batch([record], fresh)
    state = read_state(old, "conv-1")
    assert state is not None and state == read_state(fresh, "conv-1")
    assert state.model_dump_json() == read_state(fresh, "conv-1").model_dump_json()  # type: ignore[union-attr]
    assert [len(b["content"]) for b in state.operations["op-1"].assembler["blocks"]] == [390, 355, 9, 0]  # type: ignore[index]
    engine = BatchEngine()
    for record in _records(later, len(events)):
        old.log.clear()
        outputs = engine.process_batch([record], old)
        expected = fresh_engine.process_batch([record], fresh)
        assert [(o.stream, o.key, o.value) for o in outputs] == [(o.stream, o.key, o.value) for o in expected]
        assert dict(old) == dict(fresh)  # every key in format 8, as if written so from the start
        if record.offset == len(events):  # the first write after the upgrade: every key again
            assert sorted(key for key, _ in old.log) == sorted(old)
    assert all(decode(value).format_version == SPLIT_FORMAT for value in old.values())  # type: ignore[attr-defined]
    assert not _chunk_keys(old)  # the answer committed


def test_a_lost_batch_that_filled_a_chunk_leaves_the_state_not_current() -> None:
    """`Stored.current` reads no content chunk (its operation's part decides them): a batch whose
    writes the store lost, a chunk among them, still leaves the cached state not current, and a
    chunk alone changed under an unchanged part is the one thing it does not look at."""
    d = _DeltaMaker("msg_1", 1)
    c = _streaming(d(DeltaType.MESSAGE_START, -1), d(DeltaType.BLOCK_START, 0, block_kind="text"))
    c.deltas([d(DeltaType.TEXT_DELTA, 0, text=_text(C - 3))])
    json, store = StateJson(), Store()
    before = write_state(c.state, Stored(), json, store.put, store.delete)
    kept = dict(store)
    c.deltas([d(DeltaType.TEXT_DELTA, 0, text=_text(5))])  # fills chunk 0
    after = write_state(c.state, before, json, store.put, store.delete)
    chunk = content_key("conv-1", "op-1", 0, 0)
    assert chunk in store and chunk not in kept and after.current(store.get)
    assert not after.current(kept.get)  # the batch lost: its part and its chunk
    assert not after.current({**kept, chunk: store[chunk]}.get)  # its part lost, the chunk kept
    assert after.current({**store, chunk: b"not read"}.get)
