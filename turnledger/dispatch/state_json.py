"""The changelog JSON of a conversation state, re-serializing only the parts that changed.

`StateJson.of(state)` is exactly `state.model_dump_json().encode()` (tests compare), and the
parts of a state split over changelog keys (`state_layout.py`: the head, each operation apart
from its request, each revision's blocks) are pieces of that same JSON. Every changed state's
parts are serialized per batch to find the ones that changed, and most of a state is the very
same frozen objects as in the previous state: states are never mutated in place (every
change is a `model_copy`), so an unchanged graph, block or operation is the same object
in the next state and its JSON is reused. The cache belongs to the instance (the
engine's), keyed by identity and dropped when the model is collected, so a new object
that reuses an id is never served a stale entry.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel
from pydantic_core import to_json

from turnledger.dispatch.state import ConversationState, OperationState
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
M = TypeVar("M", bound=BaseModel)


class CachedJson(weakref.ref[BaseModel]):
    """A cache entry: a weak reference to the model that carries its key and its JSON.

    One GC-tracked object per cached model, where a (weakref, json) tuple with a per-entry
    closure callback would be four: every live graph, block, operation, request and
    manifest has an entry, so these are a large share of the objects a full collection walks.
    """

    __slots__ = ("json", "key")
    key: int
    json: bytes


def _forgetter(entries: dict[int, CachedJson]) -> Callable[[weakref.ref[BaseModel]], None]:
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
        self.apart: dict[int, CachedJson] = {}
        """Operations without their request, per operation (`operation_apart`)."""
        self.forget_apart = _forgetter(self.apart)

    def head(self, state: ConversationState, graph: bytes) -> bytes:
        """`model_dump_json()` of the state with `graph` for its graph, and no operations, turn ids or
        handles: the head record of a state split over keys (`state_layout.py`)."""
        return self._of(state, b"", graph, b"[]", b"{}")

    def operation_apart(self, op: OperationState) -> bytes:
        """The operation's JSON without its request, in two lines: what comes before the request and
        what comes after it (`splice_request` puts it back)."""
        return self._cached(self.apart, op, self._apart)

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
        return self._cached(self.entries, model, self._dump)

    @staticmethod
    def once(model: BaseModel) -> bytes:
        """`model.model_dump_json()` of a block, call or result, not cached: a run of the graph is
        serialized once and its JSON kept by the run (`state_layout.GraphParts`), so caching its
        blocks too kept every block's JSON twice (~650 bytes a block with its entry, issue 20)."""
        return model.__pydantic_serializer__.to_json(model)

    def _dump(self, model: BaseModel) -> bytes:
        if isinstance(model, OperationState):
            return self._operation(model)
        if isinstance(model, GraphState):
            return self._graph(model)
        return model.__pydantic_serializer__.to_json(model)

    def _cached(self, entries: dict[int, CachedJson], model: M, dump: Callable[[M], bytes]) -> bytes:
        key = id(model)
        hit = entries.get(key)
        if hit is not None and hit() is model:
            return hit.json
        value = dump(model)
        entry = CachedJson(model, self.forget if entries is self.entries else self.forget_apart)
        entry.key, entry.json = key, value
        entries[key] = entry
        return value

    def _operation(self, op: OperationState) -> bytes:
        """Exactly `op.model_dump_json().encode()`, reusing the JSON of its request and manifest.

        An operation is copied on every event that addresses it, but its request never
        changes and its manifest only when it is (re)prepared: both stay the same objects,
        and they hold the largest part of its JSON. The scalar fields are serialized as two
        dicts in declaration order (one call each, the same JSON per value as in the model)
        and spliced around the cached parts.
        """
        before, after = self._operation_pieces(op)
        return splice_request(before, self.model(op.request), after)

    def _apart(self, op: OperationState) -> bytes:
        before, after = self._operation_pieces(op)
        return before + b"\n" + after

    def _operation_pieces(self, op: OperationState) -> tuple[bytes, bytes]:
        manifest = op.manifest
        head = to_json({"operation_id": op.operation_id, "state": op.state})
        tail = to_json(
            {
                "prepared_revision": op.prepared_revision,
                "attempt_generation": op.attempt_generation,
                "attempt_cancel_generation": op.attempt_cancel_generation,
                "idempotency_key": op.idempotency_key,
                "response_handle": op.response_handle,
                "attempt_terminated": op.attempt_terminated,
                "assembler": op.assembler,
                "committed_revision": op.committed_revision,
                "updated_at_ms": op.updated_at_ms,
                "lease_owner": op.lease_owner,
                "lease_ms": op.lease_ms,
                "lease_renewed_at_ms": op.lease_renewed_at_ms,
                "resumable": op.resumable,
                "replayable": op.replayable,
            }
        )
        after = b"".join(
            (b'"manifest":', b"null" if manifest is None else self.model(manifest), b",", tail[1:])
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


def splice_request(before: bytes, request: bytes, after: bytes) -> bytes:
    """An operation's JSON from the pieces before and after its request (`operation_apart`)."""
    return b"".join((before, b',"request":', request, b",", after))


def state_json(state: ConversationState) -> bytes:
    """`StateJson().of(state)` with a cache of its own (nothing reused across calls)."""
    return StateJson().of(state)
