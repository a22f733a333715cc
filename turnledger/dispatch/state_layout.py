"""A conversation's state on the changelog, split over keys so that a change writes only what changed.

Format 3 wrote the whole state (every committed block, every operation with its request) under
the conversation id on every change: ~8 KB to change a ~1.3 KB operation. Format 4 split it, but
kept a streaming operation's answer so far in its part, so every delta wrote the whole answer
again (bytes per delta linear in the answer's length, issue 20). Format 5 kept those contents
apart, but every delta still wrote the whole operation: its manifest, keys and lease (~550 of the
~1,400 bytes a streamed record wrote). Format 6 kept the operation's progress apart too, but as JSON
objects whose names were half of their bytes. Format 7 writes an operation's parts as rows, JSON
arrays of values in a fixed order (`part_rows.py`): ~1,190 → ~840 changelog bytes per event with
1,000 conversations active at once, where every event writes its operation's parts. Format 8 keeps
a request's toolset apart, once per conversation: an agent sends the same tens of KB of tool
definitions with every request, and format 7 wrote them again in each operation's request part
(86% of the changelog's bytes with 22 tools of ~1 KB, issue 20). Format 8:

- `<conversation>`: the *head*, written on a turn, a new operation, a new chunk of turn ids or
  handles, a pause or a cancel: the operation ids, the starts of the block runs and the chunk
  counts, then the state JSON with no operations, blocks, turn ids or handles (conversation fields,
  graph digests and pending calls; the graph's indexes too when they do not split by revision,
  `_split_indexes`);
- `<conversation>\x1fo\x1f<operation id>`: one operation's own part, written when one of its
  `STATIC_FIELDS` changes (a new state, manifest, lease holder, ...): a row of every field but its
  request and its progress (`part_rows.OPERATION_ROW`);
- `<conversation>\x1fp\x1f<operation id>`: its *progress* (`PROGRESS_FIELDS`: the assembler's
  snapshot, the event time, the lease's last renewal), the part a streamed delta writes, in two
  lines: a row of those fields (the snapshot a row too, or the object it is when it is not of the
  rows' layout), with each block's content cut to what its chunks do not hold (`elide_contents`),
  and each block's count of chunks (null for a block kept inline). The two rows name every field
  but the request, which is read back with them into an equal operation;
- `<conversation>\x1fr\x1f<operation id>`: its request, written when the operation is asked for, again
  without its policy when it is final, and again without its tools when another operation follows
  it (`state.settled_request`). A request with tools is written as its toolset's digest, a newline,
  and its JSON with `"tools":[]` (`StateJson.request_part`); the reader puts the toolset's
  definitions back, parsed once per toolset for all the conversations that name it
  (`model.tools.toolset_of_json`);
- `<conversation>\x1fs\x1f<toolset digest>`: a toolset, the JSON array of the definitions, written
  when a request first names it and deleted when none does. The conversation's last operation keeps
  its tools, so an agent's next request finds its toolset there: it is written once, not once per
  operation;
- `<conversation>\x1fx\x1f<block index>\x1f<n>\x1f<operation id>`: chunk n of the content of the
  operation's assembler block, `CONTENT_CHUNK` code points as a JSON string. The chunks hold all of
  each block's content but the last block's rest past its full chunks (less than a chunk), which
  stays in the operation's progress (`assembler_contents`). The content only grows within an attempt
  and the last block is the one that grows, so a chunk is written once, when it fills: a delta
  writes the operation's progress (a chunk's worth of the answer at most) and, when one fills, that
  chunk, whatever the answer's length. The chunks are deleted when the assembler goes (a commit, a
  retraction) or its content shrinks (a new attempt);
- `<conversation>\x1fb\x1f<ordering>`: the blocks one revision appended (a run from that ordering
  on) and that revision's entries of `block_ids`, `calls` and `results`, written once;
- `<conversation>\x1ft\x1f<n>`, `<conversation>\x1fh\x1f<n>`: turn ids and handles, `CHUNK` per
  chunk, the last chunk rewritten as it grows.

Every value is a `ConversationSnapshot` of format 8. The head sits under the conversation id,
where a format-3 state was: a state restored from an older changelog is rewritten in place, and a
key holds one format at a time. Every part carries the conversation id, so a value read under
another conversation's key is refused. The fold's state is the same model as in format 3
(`ConversationState`, `STATE_FORMAT_VERSION`): only the layout on the changelog changed, and
reading the parts back gives an equal state, whose JSON is byte for byte the one format 3 wrote.

Each format is a new number, not an extension of the one before, because an older reader must not
read it: a format-7 reader would take a format-8 request part for a request without JSON, a format-6
reader would find no JSON object in a format-7 row, a format-5 reader would
take a format-6 operation part (two lines, no assembler) for one without its chunk counts, and a
format-4 reader a format-5 part for an answer cut to nothing, where a release refuses a head of a
format it does not know with its typed `StateDecodeError` ("state format 8"). This release reads
formats 4, 5, 6 and 7 (a changelog written before the upgrade: each operation in one part of two
lines with its contents inline, or of three lines with its progress inline and its contents in
chunks, or in two parts of JSON objects, or of rows with the tools in the request:
`state_read._OPERATION_READERS`) and writes such a state again whole in format 8 the first time it changes,
every key of it: the head's format says how each part is read, so a conversation's keys must not
mix formats. That costs one write of the state per conversation after
the upgrade.

Where each piece lives: the formats and the keys, and why keys never collide, in `state_keys.py`; a
snapshot value built and compared in place and `Stored`, the engine's record of what the store holds,
in `stored.py`; reading a state back in any format this release reads in `state_read.py`; writing
what changed (`write_state`) here.

Pure: it reads and writes through the `get`/`put`/`delete` the engine is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

from turnledger.codec.compiled import long_bytes
from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.state_json import CONTENT_CHUNK, GRAPH_HEAD, Contents, StateJson, static_fields
from turnledger.dispatch.state_keys import (
    CHUNK,
    CONTENTS_INFIX,
    HANDLES_TAG,
    SPLIT_FORMATS,
    TURNS_TAG,
    blocks_key,
    chunk_key,
    content_key,
    format_of,
    head_key,
    is_split,
    operation_key,
    progress_key,
    request_key,
    toolset_key,
)
from turnledger.dispatch.stored import GraphParts, Stored, encode_part, snapshot_base
from turnledger.model.graph import Block
from turnledger.sequence.graph_state import GraphState


def block_runs(blocks: tuple[Block, ...]) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive blocks of one revision: the blocks one turn appended."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(blocks) + 1):
        if i == len(blocks) or blocks[i].revision != blocks[start].revision:
            runs.append((start, i))
            start = i
    return runs


Index = dict[str, Any]


def _split_indexes(
    graph: GraphState, runs: list[tuple[int, int]], skip: tuple[int, int, int] = (0, 0, 0)
) -> list[tuple[Index, Index, Index]] | None:
    """Each run's entries of `block_ids`, `calls` and `results` (its blocks' ids, the calls and results
    of its revision), if concatenating them in run order gives the indexes back exactly, in order;
    else None (the head keeps them). `skip`: the entries of each index already split (those of the
    runs before `runs`)."""
    run_of_revision: dict[int, int] = {}
    for i, (start, _) in enumerate(runs):
        if run_of_revision.setdefault(graph.blocks[start].revision, i) != i:
            return None
    first = runs[0][0] if runs else 0
    run_of_ordering = [i for i, (start, end) in enumerate(runs) for _ in range(start, end)]
    split: list[tuple[Index, Index, Index]] = [({}, {}, {}) for _ in runs]
    columns: tuple[tuple[int, Mapping[str, Any], Callable[[Any], int | None]], ...] = (
        (
            0,
            graph.block_ids,
            lambda o: run_of_ordering[o - first] if first <= o < first + len(run_of_ordering) else None,
        ),
        (1, graph.calls, lambda c: run_of_revision.get(c.revision)),
        (2, graph.results, lambda r: run_of_revision.get(r.revision)),
    )
    for column, index, run_of in columns:
        last = 0
        for key, value in islice(index.items(), skip[column], None):
            run = run_of(value)
            if run is None or run < last:
                return None
            split[run][column][key] = value
            last = run
    return split


def _extends(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Does `new` hold `old`'s entries first, in order (what `{**old, **more}` builds)?"""
    return len(new) >= len(old) and list(islice(new.items(), len(old))) == list(old.items())


def _graph_head(graph: GraphState, indexes: bool) -> bytes:
    """The graph's JSON with `"blocks":[]`, and with empty indexes unless `indexes`."""
    if indexes:
        rest = graph.__pydantic_serializer__.to_json(graph, exclude=GRAPH_HEAD)
    else:
        rest = b"".join(
            (
                b'{"chain_head":',
                to_json(graph.chain_head),
                b',"sequence_digest":',
                to_json(graph.sequence_digest),
                b',"block_ids":{},"calls":{},"results":{},"pending_call_ids":',
                to_json(graph.pending_call_ids),
                b"}",
            )
        )
    return b"".join(
        (
            b'{"conversation_id":',
            to_json(graph.conversation_id),
            b',"revision":',
            to_json(graph.revision),
            b',"blocks":[],',
            rest[1:],
        )
    )


def graph_parts(graph: GraphState, json: StateJson, previous: GraphParts | None = None) -> GraphParts:
    """The head's graph JSON and the run parts of `graph`; from `previous` (the parts of the graph
    it was appended to) only the new runs are built, when the old runs and their index entries are
    provably unchanged, else all of them."""
    if previous is not None and previous.split:
        grown = _grown(graph, previous, json)
        if grown is not None:
            return grown
    runs = block_runs(graph.blocks)
    split = _split_indexes(graph, runs)
    parts = _run_parts(graph, runs, split, json)
    return GraphParts(
        graph,
        _graph_head(graph, indexes=split is None),
        parts,
        split is not None,
        _keyed(graph.conversation_id, parts),
    )


def _keyed(conversation_id: str, runs: dict[int, bytes]) -> dict[str, bytes]:
    return {blocks_key(conversation_id, start): part for start, part in runs.items()}


def _grown(graph: GraphState, previous: GraphParts, json: StateJson) -> GraphParts | None:
    old, blocks = previous.graph, graph.blocks
    n = len(old.blocks)
    if len(blocks) < n or blocks[:n] != old.blocks:
        return None
    if 0 < n < len(blocks) and blocks[n].revision == old.blocks[-1].revision:
        return None  # the last old run grows (a revision is appended once: not in the fold)
    pairs = ((graph.block_ids, old.block_ids), (graph.calls, old.calls), (graph.results, old.results))
    if not all(_extends(new, before) for new, before in pairs):
        return None
    runs = [(start + n, end + n) for start, end in block_runs(blocks[n:])]
    split = _split_indexes(graph, runs, (len(old.block_ids), len(old.calls), len(old.results)))
    if split is None:
        return None
    new = _run_parts(graph, runs, split, json)
    keyed = {**previous.keyed, **_keyed(graph.conversation_id, new)}
    return GraphParts(graph, _graph_head(graph, indexes=False), {**previous.runs, **new}, True, keyed)


def _run_parts(
    graph: GraphState,
    runs: list[tuple[int, int]],
    split: list[tuple[Index, Index, Index]] | None,
    json: StateJson,
) -> dict[int, bytes]:
    blocks, model = graph.blocks, json.once
    parts: dict[int, bytes] = {}
    for i, (start, end) in enumerate(runs):
        lines = [b"[" + b",".join(map(model, blocks[start:end])) + b"]"]
        if split is not None:
            block_ids, calls, results = split[i]
            lines += [to_json(block_ids), _models_json(calls, model), _models_json(results, model)]
        parts[start] = b"\n".join(lines)
    return parts


def _models_json(models: Index, model: Callable[[BaseModel], bytes]) -> bytes:
    return b"{" + b",".join(to_json(key) + b":" + model(value) for key, value in models.items()) + b"}"


def state_parts(
    state: ConversationState,
    json: StateJson,
    graph: GraphParts | None = None,
    since: Stored | None = None,
) -> tuple[dict[str, bytes], GraphParts | None]:
    """Key → JSON of every part of the state (one part, the whole state, for an unsplittable id), and
    the graph's parts (`graph`: those of the previous state, reused if its graph is the same).

    `since`: what `write_state` wrote last, whose parts are those of its `source`: a part of what is
    the same object in both states (an operation, its request, the turn ids, the handles) is taken
    from it rather than serialized again (a turn leaves every earlier operation as it was)."""
    conversation_id = state.conversation_id
    if not is_split(conversation_id):
        return {head_key(conversation_id): json.of(state)}, None
    if graph is None or graph.graph is not state.graph:
        graph = graph_parts(state.graph, json, graph)
    previous = _source_of(since, conversation_id)
    known: Mapping[str, bytes] = {} if since is None else since.parts
    parts = {conversation_id: _head_part(state, graph, json)}
    for tag, items in ((TURNS_TAG, state.turn_ids), (HANDLES_TAG, state.handles)):
        if previous is not None and items is (previous.turn_ids if tag == TURNS_TAG else previous.handles):
            for index in range(_chunks(len(items))):
                key = chunk_key(conversation_id, tag, index)
                parts[key] = known[key]
            continue
        for index, chunk in enumerate(_item_chunks(items)):
            parts[chunk_key(conversation_id, tag, index)] = to_json(chunk)
    before = {} if previous is None else previous.operations
    operations = state.operations.items()
    if previous is not None:
        kept = _kept_operations(state, previous)
        if kept:
            start = 1 + _chunks(len(previous.turn_ids)) + _chunks(len(previous.handles))
            parts.update(islice(known.items(), start, start + 3 * kept))
            operations = islice(operations, kept, None)  # type: ignore[assignment]
    for operation_id, op in operations:
        keys = (
            operation_key(conversation_id, operation_id),
            progress_key(conversation_id, operation_id),
            request_key(conversation_id, operation_id),
        )
        prior = before.get(operation_id)
        if prior is op:
            for key in keys:
                parts[key] = known[key]
            continue
        own, progress, request = keys
        same_own = prior is not None and static_fields(op) == static_fields(prior)
        parts[own] = known[own] if same_own else json.operation_apart(op)
        parts[progress] = json.operation_progress(op)
        same_request = prior is not None and op.request is prior.request
        parts[request] = known[request] if same_request else json.request_part(op.request).json
    parts.update(graph.keyed)
    parts.update(_toolset_parts(state, json))
    for operation_id, op in state.operations.items():  # last: a delta's new chunk is the last key
        if op.assembler is not None and (contents := json.contents(op)):
            parts.update(_content_parts(conversation_id, operation_id, contents))
    return parts, graph


def _toolset_parts(state: ConversationState, json: StateJson) -> dict[str, bytes]:
    """Key → JSON of each toolset an operation's request names, once, in the order first named."""
    parts: dict[str, bytes] = {}
    for op in state.operations.values():
        if op.request.tools:
            entry = json.request_part(op.request)
            parts[toolset_key(state.conversation_id, entry.digest)] = entry.toolset
    return parts


def _kept_operations(state: ConversationState, previous: ConversationState) -> int:
    """How many of the state's first operations are those of `previous` (the same ids, the very same
    objects): their three parts are the three of each that follow the head and the turn id and
    handle chunks in the parts of `previous`, in the same order (`state_parts`)."""
    kept = 0
    for (operation_id, op), (prior_id, prior) in zip(
        state.operations.items(), previous.operations.items(), strict=False
    ):
        if op is not prior or operation_id != prior_id:
            break
        kept += 1
    return kept


def _source_of(since: Stored | None, conversation_id: str) -> ConversationState | None:
    """The state whose parts `since` holds, when it holds every part of it (it was written, not read)."""
    if since is None or since.source is None or since.source.conversation_id != conversation_id:
        return None
    return since.source


def _item_chunks(items: tuple[str, ...] | Mapping[str, str]) -> list[Any]:
    """Turn ids (a tuple) or handles (a dict) in chunks of `CHUNK`, as their parts hold them."""
    if isinstance(items, tuple):
        return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]
    pairs = list(items.items())
    return [dict(pairs[i : i + CHUNK]) for i in range(0, len(pairs), CHUNK)]


def _chunks(items: int) -> int:
    return -(-items // CHUNK)


def _content_parts(
    conversation_id: str,
    operation_id: str,
    contents: Contents,
    before: tuple[Contents, Mapping[str, bytes]] | None = None,
) -> dict[str, bytes]:
    """Key → JSON of the content chunks of the operation's blocks, in block then chunk order. `before`:
    the contents the operation had and the parts written of them; a block whose content starts with
    what it was reuses the JSON of those full chunks (the content only grows within an attempt)."""
    earlier = {} if before is None else {index: text for index, text, _ in filter(None, before[0])}
    known: Mapping[str, bytes] = {} if before is None else before[1]
    parts: dict[str, bytes] = {}
    for index, text, count in filter(None, contents):
        old = earlier.get(index)
        kept = 0 if old is None or not text.startswith(old) else len(old) // CONTENT_CHUNK
        for chunk in range(count):
            key = content_key(conversation_id, operation_id, index, chunk)
            parts[key] = known[key] if chunk < kept else _chunk(text, chunk)
    return parts


def _head_part(state: ConversationState, graph: GraphParts, json: StateJson) -> bytes:
    """The head: the operation ids, the starts of the block runs, the chunk counts, then the state JSON
    with no operations, blocks, turn ids or handles."""
    chunks = (_chunks(len(state.turn_ids)), _chunks(len(state.handles)))
    meta = to_json((list(state.operations), list(graph.runs), *chunks))
    return meta + b"\n" + json.head(state, graph.head)


def parts_since(state: ConversationState, json: StateJson, old: Stored) -> dict[str, bytes] | None:
    """`state_parts(state, json, old.graph)[0]`, the same keys in the same order with the same JSON,
    from the parts of the state `old` was written from: only the parts of what differs from it are
    serialized again (an event changes one operation, e.g. a delta, or the cancel generation). None
    when the graph, the turn ids, the handles or the operation ids differ (a turn, a new operation,
    a new handle: `state_parts` then builds them, taking those of unchanged objects from `old`), or
    `old` was read rather than written.

    A streamed delta changes its operation's progress (its own part only when a static field
    changes, compared as a tuple: `static_fields`) and, when a chunk fills, adds it: the chunks are
    the last keys, so a new chunk of the last streaming operation is appended; when keys go (a
    commit, a retraction, a new attempt) or a new one does not go last, every chunk is put in order
    again (`_with_chunks_again`), still reusing the full ones.

    Every state is a new frozen object, and an unchanged part of it the same object as before, so
    "unchanged" is identity (or equality of the head's few scalar fields)."""
    previous = old.source
    if (
        previous is None
        or old.graph is None
        or previous.graph is not state.graph
        or old.graph.graph is not state.graph
        or previous.turn_ids is not state.turn_ids
        or previous.handles is not state.handles
        or previous.conversation_id != state.conversation_id
        or not is_split(state.conversation_id)
        or list(previous.operations) != list(state.operations)
    ):
        return None
    parts = dict(old.parts)
    conversation_id = state.conversation_id
    head = (state.format_version, state.cancel_generation, state.paused)
    if head != (previous.format_version, previous.cancel_generation, previous.paused):
        parts[conversation_id] = _head_part(state, old.graph, json)
    before = previous.operations
    regroup = False
    for operation_id, op in state.operations.items():
        prior = before[operation_id]
        if op is prior:
            continue
        if op.request is not prior.request:
            return None  # a toolset may come or go: its parts go before the chunks (`state_parts`)
        if static_fields(op) != static_fields(prior):
            parts[operation_key(conversation_id, operation_id)] = json.operation_apart(op)
        parts[progress_key(conversation_id, operation_id)] = json.operation_progress(op)
        if op.assembler is not prior.assembler and not regroup:
            contents, was = json.contents(op), json.contents(prior)
            grown = _grown_chunks(conversation_id, operation_id, contents, was)
            if grown is None or (grown[1] and not _chunks_last(parts, conversation_id, operation_id, was)):
                regroup = True  # keys gone, or new ones that do not go last: every chunk in order again
            else:
                parts.update(grown[0])
                parts.update(grown[1])
    return _with_chunks_again(parts, state, previous, json, old.parts) if regroup else parts


def _grown_chunks(
    conversation_id: str, operation_id: str, contents: Contents, was: Contents
) -> tuple[dict[str, bytes], dict[str, bytes]] | None:
    """The chunks that changed from `was` to `contents`, those of keys it had and those of new keys
    in order, when its keys stay and the new ones follow them (the same blocks and maybe more, only
    the last one of them with more chunks); else None. A block's chunks change from its last full
    chunk on when its content grew (the earlier ones are the same), all of them when it changed
    otherwise, none when it did not."""
    now, before = [c for c in contents if c is not None], [c for c in was if c is not None]
    if len(now) < len(before):
        return None
    changed: dict[str, bytes] = {}
    added: dict[str, bytes] = {}
    for position, (index, text, count) in enumerate(now):
        had, first = 0, 0
        if position < len(before):
            index_before, old, had = before[position]
            if index != index_before or count < had or (count > had and position < len(before) - 1):
                return None
            if count == had and text == old:
                continue
            first = len(old) // CONTENT_CHUNK if text.startswith(old) else 0
        for chunk in range(first, count):
            key = content_key(conversation_id, operation_id, index, chunk)
            (changed if chunk < had else added)[key] = _chunk(text, chunk)
    return changed, added


def _chunk(text: str, chunk: int) -> bytes:
    return to_json(text[chunk * CONTENT_CHUNK : (chunk + 1) * CONTENT_CHUNK])


def _chunks_last(parts: dict[str, bytes], conversation_id: str, operation_id: str, was: Contents) -> bool:
    """May new chunks of the operation go last in `parts`, where `state_parts` puts them: is its last
    key the operation's last chunk (of `was`), or no chunk at all (the chunks are the last keys)?"""
    tail = next(reversed(parts), "")
    for index, _, count in reversed([c for c in was if c is not None]):
        if count:
            return tail == content_key(conversation_id, operation_id, index, count - 1)
    return not tail.startswith(conversation_id + CONTENTS_INFIX)


def _with_chunks_again(
    parts: dict[str, bytes],
    state: ConversationState,
    previous: ConversationState,
    json: StateJson,
    known: Mapping[str, bytes],
) -> dict[str, bytes]:
    """`parts` with the content chunks of every operation built again, last and in the order
    `state_parts` puts them; `known`: the parts of `previous`, whose JSON of the full chunks that
    stay the same is reused."""
    conversation_id = state.conversation_id
    prefix = conversation_id + CONTENTS_INFIX
    again = {key: part for key, part in parts.items() if not key.startswith(prefix)}
    for operation_id, op in state.operations.items():
        was = json.contents(previous.operations[operation_id])
        again.update(_content_parts(conversation_id, operation_id, json.contents(op), (was, known)))
    return again


def changed_parts(old: Stored, new: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """The keys to write (new or different JSON) and the keys to delete (no longer parts)."""
    before = old.parts
    writes = [key for key, part in new.items() if (prior := before.get(key)) is not part and prior != part]
    deletes = [key for key in before if key not in new]
    return writes, deletes


def write_state(
    state: ConversationState,
    old: Stored,
    json: StateJson,
    put: Callable[[str, bytes], None],
    delete: Callable[[str], None],
) -> Stored:
    """Write the parts of `state` that differ from `old` (what the store holds), delete the keys that
    are no longer parts; returns what the store holds now."""
    conversation_id = state.conversation_id
    format_version = format_of(conversation_id)
    since = parts_since(state, json, old)
    parts, graph = (since, old.graph) if since is not None else state_parts(state, json, old.graph, old)
    writes, deletes = changed_parts(old, parts)
    if old.format_version != format_version and old.format_version in SPLIT_FORMATS:
        writes = list(parts)  # a split state read in format 4: every key again (module docstring)
    base = snapshot_base(conversation_id, format_version)
    for key in writes:
        put(key, encode_part(conversation_id, format_version, parts[key], base))
    for key in deletes:
        delete(key)
    return Stored(
        conversation_id, format_version, parts, graph, _kept_raw(old, parts, writes, format_version), state
    )


def _kept_raw(
    old: Stored, parts: dict[str, bytes], writes: list[str], format_version: int
) -> dict[str, bytes] | None:
    """The values of `old` still in the store that are not the encoding of their JSON in
    `format_version`: those read as other bytes, and those of another format left unwritten
    (their JSON did not change), rebuilt as read."""
    if old.raw is None and old.format_version == format_version:
        return None
    written = set(writes)
    base = snapshot_base(old.conversation_id, old.format_version) if old.parts else b""
    raw: dict[str, bytes] = {}
    for key in parts:
        if key in written or key not in old.parts:
            continue
        value = None if old.raw is None else old.raw.get(key)
        if value is None and old.format_version != format_version:
            part = old.parts[key]
            value = base + long_bytes(len(part)) + part
        if value is not None:
            raw[key] = value
    return raw or None
