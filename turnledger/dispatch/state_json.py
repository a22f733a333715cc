"""The changelog JSON of a conversation state, re-serializing only the parts that changed.

`StateJson.of(state)` is exactly `state.model_dump_json().encode()` (tests compare), and the
parts of a state split over changelog keys (`state_layout.py`: the head, each operation apart
from its request and from the contents of its assembler's blocks, each revision's blocks) are
pieces of that same JSON. Every changed state's parts are serialized per batch to find the ones
that changed, and most of a state is the very same frozen objects as in the previous state:
states are never mutated in place (every change is a `model_copy`), so an unchanged graph, block
or operation is the same object in the next state and its JSON is reused. The cache belongs to
the instance (the engine's), keyed by identity and dropped when the model is collected, so a new
object that reuses an id is never served a stale entry.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import to_json

from turnledger.dispatch.part_rows import operation_row, progress_row
from turnledger.dispatch.state import ConversationState, OperationState
from turnledger.model.events import DispatchRequested
from turnledger.model.tools import toolset_digest, toolset_json
from turnledger.sequence.graph_state import GraphState

_STATE_FIELDS = (
    "conversation_id",
    "format_version",
    "graph",
    "cancel_generation",
    "turn_ids",
    "operations",
    "handles",
    "paused",
)
if tuple(ConversationState.model_fields) != _STATE_FIELDS:  # pragma: no cover - guards StateJson.of
    raise RuntimeError("ConversationState fields changed: update StateJson.of() to match model_dump_json()")

_OPERATION_FIELDS = (
    "operation_id",
    "state",
    "request",
    "manifest",
    "prepared_revision",
    "attempt_generation",
    "attempt_cancel_generation",
    "idempotency_key",
    "response_handle",
    "attempt_terminated",
    "assembler",
    "committed_revision",
    "updated_at_ms",
    "lease_owner",
    "lease_ms",
    "lease_renewed_at_ms",
    "resumable",
    "replayable",
)
if tuple(OperationState.model_fields) != _OPERATION_FIELDS:  # pragma: no cover - guards _operation
    raise RuntimeError(
        "OperationState fields changed: update StateJson._operation() to match model_dump_json()"
    )

_GRAPH_FIELDS = (
    "conversation_id",
    "revision",
    "blocks",
    "chain_head",
    "sequence_digest",
    "block_ids",
    "calls",
    "results",
    "pending_call_ids",
)
if tuple(GraphState.model_fields) != _GRAPH_FIELDS:  # pragma: no cover - guards _graph
    raise RuntimeError("GraphState fields changed: update StateJson._graph() to match model_dump_json()")
GRAPH_HEAD: set[str] = set(_GRAPH_FIELDS[:3])
PROGRESS_FIELDS = ("assembler", "updated_at_ms", "lease_renewed_at_ms")
"""The fields of an operation a streamed delta changes: its progress part on the changelog
(`state_layout.py`), written apart from the rest so that a delta does not write the manifest, the
keys and the lease again."""
STATIC_FIELDS = tuple(f for f in _OPERATION_FIELDS if f not in {"request", *PROGRESS_FIELDS})
"""The fields of an operation's own part: all but its request and its progress."""
static_fields = attrgetter(*STATIC_FIELDS)
"""An operation's static fields as a tuple: equal tuples, equal part (`state_layout.parts_since`)."""
_TAIL = _OPERATION_FIELDS[4:]
"""The fields after the manifest, in the model's order (its JSON's)."""
_tail = attrgetter(*_TAIL)
M = TypeVar("M", bound=BaseModel)
Content = tuple[int, str, int]
"""A block of an assembler snapshot whose content is kept in chunks: its index, its content, and how
many chunks of `CONTENT_CHUNK` code points of it are kept apart (the rest stays inline)."""
Contents = tuple[Content | None, ...]
"""Per block of an assembler snapshot, its `Content`, or None for a block kept inline."""
CONTENT_CHUNK = 256
"""Code points of an assembler block's content per chunk kept apart (`state_layout.py`). A chunk is
a str slice, so a character is never cut (neither a UTF-8 sequence nor a surrogate pair). A delta
rewrites what the last block holds past its full chunks, ~half a chunk on average, instead of the
whole answer: a larger chunk writes more per delta, a smaller one makes more keys to check
(`Stored.current`: every key of a cached state, every batch) and to delete at the end."""


class CachedJson(weakref.ref[BaseModel]):
    """A cache entry: a weak reference to the model that carries its key and its JSON.

    One GC-tracked object per cached model, where a (weakref, json) tuple with a per-entry
    closure callback would be four: every live graph, block, operation, request and
    manifest has an entry, so these are a large share of the objects a full collection walks.
    """

    __slots__ = ("json", "key")
    key: int
    json: bytes


class CachedRequest(CachedJson):
    """A request's part (`request_part`), with the digest and JSON of the toolset cut out of it
    (empty when it has no tools)."""

    __slots__ = ("digest", "toolset")
    digest: str
    toolset: bytes


_TOOLS_FIELD = b'"tools":'
"""Where a request's JSON holds its tools: the first occurrence is the field itself, since every
field before it (`IngressEvent`'s, then `operation_id` to `model_revision`) is a string or an int,
in whose JSON a quote is escaped."""


class CachedApart(CachedJson):
    """An operation's parts (`operation_apart`, `operation_progress`), with the contents its
    progress was elided of; `json`, the operation's own part, is computed when first asked for (a
    streamed delta changes only the progress)."""

    __slots__ = ("contents", "progress")
    contents: Contents
    progress: bytes


E = TypeVar("E", bound=CachedJson)


def _forgetter(entries: dict[int, E]) -> Callable[[weakref.ref[BaseModel]], None]:
    def forget(entry: weakref.ref[BaseModel]) -> None:
        """Drop the entry of a collected model, unless its id already holds a newer entry."""
        assert isinstance(entry, CachedJson)
        if entries.get(entry.key) is entry:
            del entries[entry.key]

    return forget


class StateJson:
    """Serializes states for the changelog; owns the JSON cache of the parts it has serialized."""

    def __init__(self) -> None:
        self.entries: dict[int, CachedJson] = {}
        self.forget = _forgetter(self.entries)
        self.apart: dict[int, CachedApart] = {}
        """Operations' parts (without request and chunks), per operation (`operation_apart`)."""
        self.forget_apart = _forgetter(self.apart)
        self.requests: dict[int, CachedRequest] = {}
        """Requests' parts and the toolsets cut out of them, per request (`request_part`)."""
        self.forget_request = _forgetter(self.requests)

    def head(self, state: ConversationState, graph: bytes) -> bytes:
        """`model_dump_json()` of the state with `graph` for its graph, and no operations, turn ids or
        handles: the head record of a state split over keys (`state_layout.py`)."""
        return self._of(state, b"", graph, b"[]", b"{}")

    def operation_apart(self, op: OperationState) -> bytes:
        """The operation's own part on the changelog (`state_layout.py`): a row of its fields but its
        request and its progress (`part_rows.operation_row`)."""
        entry = self._apart(op)
        if not entry.json:
            entry.json = operation_row(op)
        return entry.json

    def operation_progress(self, op: OperationState) -> bytes:
        """The operation's progress part, in two lines: a row of its `PROGRESS_FIELDS`, with
        each block of its assembler's snapshot holding only what its chunks do not (`elide_contents`:
        the changelog keeps them under keys of their own, so a streamed delta does not write the
        whole answer), and each block's count of chunks (`assembler_contents`; null: inline)."""
        return self._apart(op).progress

    def request_part(self, request: DispatchRequested) -> CachedRequest:
        """The request's part on the changelog (`state_layout.py`, format 8), `json`: its JSON, or, when
        it has tools, its toolset's digest, a newline, and its JSON with `"tools":[]`; `digest` and
        `toolset`, the toolset's digest and JSON (the JSON cut out, byte for byte), which the
        changelog keeps once under the digest. Computed once per request.

        The request's whole JSON is not kept (`once`, not `model`): only `of` needs it, for a state
        written whole, and keeping it beside the part kept ~800 bytes a cached conversation twice
        (goal 4 of issue 20)."""
        key = id(request)
        hit = self.requests.get(key)
        if hit is not None and hit() is request:
            return hit
        whole = self.once(request)
        digest, toolset, part = "", b"", whole
        if request.tools:
            toolset = toolset_json(request.tools)
            start = whole.find(_TOOLS_FIELD) + len(_TOOLS_FIELD)
            end = start + len(toolset)
            if start < len(_TOOLS_FIELD) or whole[start:end] != toolset:  # pragma: no cover
                raise RuntimeError("a request's JSON does not hold its tools where expected")
            digest = toolset_digest(request.tools)
            part = b"".join((digest.encode(), b"\n", whole[:start], b"[]", whole[end:]))
        entry = CachedRequest(request, self.forget_request)
        entry.key, entry.json, entry.digest, entry.toolset = key, part, digest, toolset
        self.requests[key] = entry
        return entry

    def contents(self, op: OperationState) -> Contents:
        """`assembler_contents(op.assembler)`: what `operation_progress` elided, computed once per
        operation (a delta's write compares the operation's contents with those of the one it
        replaces)."""
        return self._apart(op).contents

    def of(self, state: ConversationState) -> bytes:
        """Exactly `state.model_dump_json().encode()`: the fields in declaration order, pydantic's own
        serializer for every piece."""
        operations = b",".join(to_json(k) + b":" + self.model(op) for k, op in state.operations.items())
        return self._of(
            state, operations, self.model(state.graph), to_json(state.turn_ids), to_json(state.handles)
        )

    def _of(
        self, state: ConversationState, operations: bytes, graph: bytes, turn_ids: bytes, handles: bytes
    ) -> bytes:
        return b"".join(
            (
                b'{"conversation_id":',
                to_json(state.conversation_id),
                b',"format_version":',
                to_json(state.format_version),
                b',"graph":',
                graph,
                b',"cancel_generation":',
                to_json(state.cancel_generation),
                b',"turn_ids":',
                turn_ids,
                b',"operations":{',
                operations,
                b'},"handles":',
                handles,
                b',"paused":',
                to_json(state.paused),
                b"}",
            )
        )

    def model(self, model: BaseModel) -> bytes:
        """`model.model_dump_json()` of a frozen part of the state, computed once per instance."""
        return self._cached(model, self._dump)

    @staticmethod
    def once(model: BaseModel) -> bytes:
        """`model.model_dump_json()` of a block, call or result, not cached: a run of the graph is
        serialized once and its JSON kept by the run (`stored.GraphParts`), so caching its
        blocks too kept every block's JSON twice (~650 bytes a block with its entry, issue 20)."""
        return model.__pydantic_serializer__.to_json(model)

    def _dump(self, model: BaseModel) -> bytes:
        if isinstance(model, OperationState):
            return self._operation(model)
        if isinstance(model, GraphState):
            return self._graph(model)
        return model.__pydantic_serializer__.to_json(model)

    def _cached(self, model: M, dump: Callable[[M], bytes]) -> bytes:
        key, entries = id(model), self.entries
        hit = entries.get(key)
        if hit is not None and hit() is model:
            return hit.json
        value = dump(model)
        entry = CachedJson(model, self.forget)
        entry.key, entry.json = key, value
        entries[key] = entry
        return value

    def _operation(self, op: OperationState) -> bytes:
        """Exactly `op.model_dump_json().encode()`, reusing the JSON of its request and manifest.

        An operation is copied on every event that addresses it, but its request changes only
        once (settled when final) and its manifest only when it is (re)prepared: both stay the
        same objects, and they hold the largest part of its JSON. The scalar fields are serialized as two
        dicts in declaration order (one call each, the same JSON per value as in the model)
        and spliced around the cached parts.
        """
        before, after = self._operation_pieces(op, op.assembler)
        return splice_request(before, self.model(op.request), after)

    def _apart(self, op: OperationState) -> CachedApart:
        """The operation's entry in the `apart` cache (as `_cached`, with its progress and contents)."""
        key = id(op)
        hit = self.apart.get(key)
        if hit is not None and hit() is op:
            return hit
        contents = assembler_contents(op.assembler)
        progress = progress_row(
            elide_contents(op.assembler, contents), op.updated_at_ms, op.lease_renewed_at_ms
        )
        counts = to_json([content and content[2] for content in contents])
        entry = CachedApart(op, self.forget_apart)
        entry.key, entry.json, entry.contents = key, b"", contents
        entry.progress = progress + b"\n" + counts
        self.apart[key] = entry
        return entry

    def _operation_pieces(self, op: OperationState, assembler: dict[str, Any] | None) -> tuple[bytes, bytes]:
        """The JSON before and after the request, with `assembler` for the assembler's snapshot."""
        tail = dict(zip(_TAIL, _tail(op), strict=True))
        tail["assembler"] = assembler
        return self._pieces(op, tail)

    def _pieces(self, op: OperationState, tail: dict[str, Any]) -> tuple[bytes, bytes]:
        """The JSON before the request, and after it with the fields of `tail` after the manifest."""
        manifest = op.manifest
        head = to_json({"operation_id": op.operation_id, "state": op.state})
        after = b"".join(
            (
                b'"manifest":',
                b"null" if manifest is None else self.model(manifest),
                b",",
                to_json(tail)[1:],
            )
        )
        return head[:-1], after

    def _graph(self, graph: GraphState) -> bytes:
        """Exactly `graph.model_dump_json().encode()`, reusing the JSON of every unchanged block.

        Each turn appends blocks to `blocks` (`state.blocks + new`): the earlier blocks are the
        very same frozen objects in the new state, so only the new ones are serialized. The
        fields after `blocks` go through the model's own serializer (with the first three
        excluded) and are spliced after the block list.
        """
        rest = graph.__pydantic_serializer__.to_json(graph, exclude=GRAPH_HEAD)
        return b"".join(
            (
                b'{"conversation_id":',
                to_json(graph.conversation_id),
                b',"revision":',
                to_json(graph.revision),
                b',"blocks":[',
                b",".join([self.model(block) for block in graph.blocks]),
                b"],",
                rest[1:],
            )
        )


def assembler_contents(assembler: dict[str, Any] | None) -> Contents:
    """Per block of an assembler snapshot, in its order: (index, content, chunks kept apart), or None
    for a block kept inline. The chunks of a block are all of its content but for the last such block
    (the one that grows, most often): its full chunks, the rest (less than a chunk) inline, so that a
    delta rewrites that rest in the operation's progress rather than a chunk under a key of its own. The
    assembler snapshots every block with an int index and a str content, each index once
    (`_Block.to_json`); a block of any other shape, or a second block of an index (none is
    written), stays inline, so no two blocks name the same chunks."""
    blocks = None if assembler is None else assembler.get("blocks")
    if type(blocks) is not list:
        return ()
    seen: set[int] = set()
    contents: list[Content | None] = []
    last: int | None = None
    for block in blocks:
        content = None
        if type(block) is dict:
            index, text = block.get("index"), block.get("content")
            if type(index) is int and type(text) is str and index not in seen:
                seen.add(index)
                content, last = (index, text, -(-len(text) // CONTENT_CHUNK)), len(contents)
        contents.append(content)
    if last is not None:
        index, text, _ = contents[last] or (0, "", 0)
        contents[last] = (index, text, len(text) // CONTENT_CHUNK)
    return tuple(contents)


def elide_contents(assembler: dict[str, Any] | None, contents: Contents) -> dict[str, Any] | None:
    """The snapshot with each block of `contents` (its `assembler_contents`) holding only the content
    its chunks do not, where it stands (the keys keep their order, so putting the chunks back gives
    the same JSON)."""
    if assembler is None:
        return None
    blocks: list[Any] | None = None
    for position, content in enumerate(contents):
        if content is not None and content[2]:
            blocks = blocks or list(assembler["blocks"])
            blocks[position] = {**blocks[position], "content": content[1][content[2] * CONTENT_CHUNK :]}
    return assembler if blocks is None else {**assembler, "blocks": blocks}


def splice_request(before: bytes, request: bytes, after: bytes) -> bytes:
    """An operation's JSON from the pieces before and after its request."""
    return b"".join((before, b',"request":', request, b",", after))


def splice_operation(static: bytes, request: bytes, progress: bytes) -> bytes | None:
    """An operation's JSON (its fields in another order than the model's) from its parts in
    changelog format 6 (JSON objects, before rows): its own part (two lines, the JSON before and
    after its request), its request and the first line of its progress part. None when the part
    is not two lines or either piece is not a JSON object's text."""
    lines = static.split(b"\n", 1)
    if len(lines) != 2 or not lines[1].endswith(b"}") or not progress.startswith(b"{"):
        return None
    return b"".join((lines[0], b',"request":', request, b",", lines[1][:-1], b",", progress[1:]))


def state_json(state: ConversationState) -> bytes:
    """`StateJson().of(state)` with a cache of its own (nothing reused across calls)."""
    return StateJson().of(state)
