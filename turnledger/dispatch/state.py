"""Per-conversation state of the dispatch fold, serializable for the changelog."""

from __future__ import annotations

import weakref
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

from turnledger.model.base import FastCopy
from turnledger.model.events import DispatchRequested, DispatchState
from turnledger.model.manifest import DispatchManifest
from turnledger.sequence.graph_state import GraphState

STATE_FORMAT_VERSION = 2
"""2: an operation keeps its manifest's seal, not the manifest (format 1 held the whole manifest)."""

FINAL_STATES = frozenset({DispatchState.COMMITTED, DispatchState.REJECTED, DispatchState.CANCELLED})
ACTIVE_STATES = frozenset({DispatchState.DISPATCHING, DispatchState.SENT, DispatchState.STREAMING})


class _State(FastCopy):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ManifestSeal(_State):
    """What the fold needs of an issued manifest: its digest and the revision it was prepared at.

    The manifest itself, with the request body and the block list, is on the manifests topic;
    the fold only binds handles and idempotency keys to its digest and checks the CAS against
    its revision. Keeping the whole manifest made every operation carry a copy of the
    conversation so far, so a conversation's state grew with the square of its turns.
    """

    manifest_digest: str
    conversation_revision: int
    cancel_generation: int
    request_digest: str

    @classmethod
    def of(cls, manifest: DispatchManifest) -> ManifestSeal:
        return cls(
            manifest_digest=manifest.manifest_digest,
            conversation_revision=manifest.conversation_revision,
            cancel_generation=manifest.cancel_generation,
            request_digest=manifest.request_digest,
        )


class OperationState(_State):
    """One dispatch operation: its request, its manifest and its active attempt."""

    operation_id: str
    state: DispatchState
    request: DispatchRequested
    manifest: ManifestSeal | None = None
    prepared_revision: int = 0
    attempt_generation: int = 0
    attempt_cancel_generation: int = 0
    idempotency_key: str | None = None
    response_handle: str | None = None
    # True once the active attempt can no longer produce output (provider finished,
    # errored, or the worker confirmed it terminated): only then may a new generation start.
    attempt_terminated: bool = False
    assembler: dict[str, Any] | None = None
    committed_revision: int | None = None
    updated_at_ms: int = 0

    @property
    def may_produce_output(self) -> bool:
        if self.state in ACTIVE_STATES:
            return True
        return self.state == DispatchState.UNKNOWN and not self.attempt_terminated


class ConversationState(_State):
    conversation_id: str
    format_version: int = STATE_FORMAT_VERSION
    graph: GraphState
    cancel_generation: int = 0
    turn_ids: tuple[str, ...] = ()
    operations: dict[str, OperationState] = Field(default_factory=dict)
    # response handle -> manifest digest it is bound to
    handles: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def empty(cls, conversation_id: str) -> ConversationState:
        return cls(conversation_id=conversation_id, graph=GraphState.empty(conversation_id))

    def with_operation(self, op: OperationState) -> ConversationState:
        return self.model_copy(update={"operations": {**self.operations, op.operation_id: op}})

    def in_flight(self, except_id: str | None = None) -> list[OperationState]:
        """Operations whose attempt may still produce output (an UNKNOWN one until confirmed terminated)."""
        return [
            op for op in self.operations.values() if op.operation_id != except_id and op.may_produce_output
        ]


# ---------------------------------------------------------------- the changelog JSON, incrementally

_STATE_FIELDS = (
    "conversation_id",
    "format_version",
    "graph",
    "cancel_generation",
    "turn_ids",
    "operations",
    "handles",
)
if tuple(ConversationState.model_fields) != _STATE_FIELDS:  # pragma: no cover - guards state_json
    raise RuntimeError("ConversationState fields changed: update state_json() to match model_dump_json()")


class _CachedJson(weakref.ref[BaseModel]):
    """A cache entry: a weak reference to the model that carries its key and its JSON.

    One GC-tracked object per cached model, where a (weakref, json) tuple with a per-entry
    closure callback would be four: every live graph, block, operation, request and
    manifest has an entry, so these are a large share of the objects a full collection walks.
    """

    __slots__ = ("json", "key")
    key: int
    json: bytes


_json_cache: dict[int, _CachedJson] = {}


def _model_json(model: BaseModel) -> bytes:
    """`model.model_dump_json()` of a frozen part of the state, computed once per instance.

    States are never mutated in place (every change is a `model_copy`), so an unchanged
    graph or operation is the very same object in the next state and its JSON is reused.
    Keyed by identity and dropped when the instance is collected, so a new object that
    reuses the id is never served a stale entry.
    """
    key = id(model)
    hit = _json_cache.get(key)
    if hit is not None and hit() is model:
        return hit.json
    if isinstance(model, OperationState):
        value = _operation_json(model)
    elif isinstance(model, GraphState):
        value = _graph_json(model)
    else:
        value = model.__pydantic_serializer__.to_json(model)
    entry = _CachedJson(model, _forget)
    entry.key, entry.json = key, value
    _json_cache[key] = entry
    return value


def _forget(entry: weakref.ref[BaseModel]) -> None:
    """Drop the entry of a collected model, unless its id already holds a newer entry."""
    assert isinstance(entry, _CachedJson)
    if _json_cache.get(entry.key) is entry:
        del _json_cache[entry.key]


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
)
if tuple(OperationState.model_fields) != _OPERATION_FIELDS:  # pragma: no cover - guards _operation_json
    raise RuntimeError("OperationState fields changed: update _operation_json() to match model_dump_json()")


def _operation_json(op: OperationState) -> bytes:
    """Exactly `op.model_dump_json().encode()`, reusing the JSON of its request and manifest.

    An operation is copied on every event that addresses it, but its request never
    changes and its manifest only when it is (re)prepared: both stay the same objects,
    and they hold the largest part of its JSON (the manifest's full request body).
    The scalar fields are serialized as two dicts in declaration order (one call each,
    the same JSON per value as in the model) and spliced around the cached parts.
    """
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
        }
    )
    return b"".join(
        (
            head[:-1],
            b',"request":',
            _model_json(op.request),
            b',"manifest":',
            b"null" if manifest is None else _model_json(manifest),
            b",",
            tail[1:],
        )
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
if tuple(GraphState.model_fields) != _GRAPH_FIELDS:  # pragma: no cover - guards _graph_json
    raise RuntimeError("GraphState fields changed: update _graph_json() to match model_dump_json()")
_GRAPH_HEAD: set[str] = set(_GRAPH_FIELDS[:3])


def _graph_json(graph: GraphState) -> bytes:
    """Exactly `graph.model_dump_json().encode()`, reusing the JSON of every unchanged block.

    Each turn appends blocks to `blocks` (`state.blocks + new`): the earlier blocks are the
    very same frozen objects in the new state, so only the new ones are serialized; without
    this every dirty conversation re-serialized its whole history per batch. The fields
    after `blocks` go through the model's own serializer (with the first three excluded) and
    are spliced after the block list.
    """
    rest = graph.__pydantic_serializer__.to_json(graph, exclude=_GRAPH_HEAD)
    return b"".join(
        (
            b'{"conversation_id":',
            to_json(graph.conversation_id),
            b',"revision":',
            to_json(graph.revision),
            b',"blocks":[',
            b",".join([_model_json(block) for block in graph.blocks]),
            b"],",
            rest[1:],
        )
    )


def state_json(state: ConversationState) -> bytes:
    """Exactly `state.model_dump_json().encode()`, re-serializing only the parts that changed.

    The whole state (all committed blocks, every operation with its request and manifest)
    is written to the changelog per dirty conversation per batch; most of it is the same
    objects as in the previous state. The fields are spelled out in declaration order with
    pydantic's own serializer for every piece, so the bytes are identical (tests compare).
    """
    operations = b",".join(to_json(k) + b":" + _model_json(op) for k, op in state.operations.items())
    return b"".join(
        (
            b'{"conversation_id":',
            to_json(state.conversation_id),
            b',"format_version":',
            to_json(state.format_version),
            b',"graph":',
            _model_json(state.graph),
            b',"cancel_generation":',
            to_json(state.cancel_generation),
            b',"turn_ids":',
            to_json(state.turn_ids),
            b',"operations":{',
            operations,
            b'},"handles":',
            to_json(state.handles),
            b"}",
        )
    )
