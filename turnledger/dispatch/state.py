"""Per-conversation state of the dispatch fold, serializable for the changelog."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from turnledger.model.base import FastCopy
from turnledger.model.events import DispatchRequested, DispatchState
from turnledger.model.limits import AVRO_LONG_MAX
from turnledger.model.manifest import DispatchManifest
from turnledger.sequence.graph_state import GraphState

STATE_FORMAT_VERSION = 3
"""2: an operation keeps its manifest's seal, not the manifest (format 1 held the whole manifest).
3: leases (owner, length, last sign of life), what the provider keeps of the attempt, and the
conversation's pauses per adapter."""

LEGACY_LEASE_OWNER = ""
"""The owner of a lease taken before leases existed (restored from format 2): unknown, so any
worker may act on the attempt; it expires like any other."""

FINAL_STATES = frozenset({DispatchState.COMMITTED, DispatchState.REJECTED, DispatchState.CANCELLED})
ACTIVE_STATES = frozenset({DispatchState.DISPATCHING, DispatchState.SENT, DispatchState.STREAMING})


def attempt_may_produce_output(state: DispatchState, generation: int, terminated: bool) -> bool:
    """Can an operation's active attempt still produce output? A cancelled one counts until it is
    confirmed terminated: the conversation's next attempt waits for that."""
    if state in ACTIVE_STATES:
        return True
    open_states = (DispatchState.UNKNOWN, DispatchState.CANCELLED)
    return state in open_states and generation > 0 and not terminated


def settled_request(op: OperationState, last: bool = False) -> DispatchRequested | None:
    """The request a final operation keeps, when it differs from the one it has: without its policy,
    and without its tools unless it is the conversation's `last` operation.

    Only `prepare` reads the tools and policy (to render the manifest, which keeps them in its
    request body and `toolset_digest`) and an attempt's assembler (to check streamed tool calls
    against their schemas). A final operation is never prepared again, and holds no assembler once
    its attempt is committed or retracted; its request's deadline (`occurred_at_ms`,
    `settle_within_ms`) still goes into every later decision about it. A conversation keeps every
    operation it ran, so a toolset of tens of KB, once per operation, was most of its state on the
    changelog and on every restore (issue 20: 28% of it on the bench mix, whose two tools are small).

    The last operation keeps its tools so that the changelog keeps its toolset, written once per
    conversation under its digest (`state_layout.py`, format 8) for as long as an operation names
    it: an agent conversation sends the same toolset with every request, one at a time, and the
    next request finds it there instead of writing it again. `Step.put` settles the operation
    before a new one when it adds that one."""
    request = op.request
    if op.state not in FINAL_STATES or op.assembler is not None:
        return None
    tools = request.tools if last else ()
    if request.tools is tools and not request.policy:
        return None
    return request.model_copy(update={"tools": tools, "policy": {}})


def settled_state(state: ConversationState) -> ConversationState:
    """`state` with every final operation's request settled (`settled_request`, the last operation
    keeping its tools); `state` itself when none needs it. For states read from a changelog an
    earlier release wrote, whose final operations kept their whole requests: the next write of the
    conversation writes those parts again, small (the fold settles only the operations it puts, and
    a final one is rarely put again)."""
    settled = {}
    last = next(reversed(state.operations), None)
    for operation_id, op in state.operations.items():
        request = settled_request(op, operation_id == last)
        if request is not None:
            settled[operation_id] = op.model_copy(update={"request": request})
    if not settled:
        return state
    return state.model_copy(update={"operations": {**state.operations, **settled}})


_MAY_PRODUCE = ACTIVE_STATES | {DispatchState.UNKNOWN, DispatchState.CANCELLED}
"""The states in which `attempt_may_produce_output` can be true: a conversation keeps every operation
it ran, and `in_flight` asks each of the others on every attempt (issue 20: long conversations)."""


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
    """One dispatch operation: its request, its manifest and its active attempt.

    A final operation's request has no tools and no policy (`settled_request`)."""

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
    lease_owner: str | None = None
    """The worker the attempt belongs to; None once its lease expired (any worker may take over)."""
    lease_ms: int = 0
    lease_renewed_at_ms: int = 0
    """Event time of the holder's last sign of life: the lease expires `lease_ms` after it."""
    resumable: bool = False
    """The provider keeps the response by its bound handle (it can be read again from it)."""
    replayable: bool = False
    """The provider keeps the request's idempotency key (the same request reattaches)."""

    @property
    def may_produce_output(self) -> bool:
        return attempt_may_produce_output(self.state, self.attempt_generation, self.attempt_terminated)

    @property
    def lease_expires_at_ms(self) -> int | None:
        """At most the largest Avro long (a decision carries it): a lease the attempt rules let end
        there, renewed by a later event, would pass it."""
        if self.lease_owner is None:
            return None
        return min(self.lease_renewed_at_ms + self.lease_ms, AVRO_LONG_MAX)

    @property
    def kept_by_provider(self) -> bool:
        """Could another worker continue this attempt (resume by handle, or replay by key)?"""
        return (self.resumable and self.response_handle is not None) or self.replayable


class ConversationState(_State):
    conversation_id: str
    format_version: int = STATE_FORMAT_VERSION
    graph: GraphState
    cancel_generation: int = 0
    turn_ids: tuple[str, ...] = ()
    operations: dict[str, OperationState] = Field(default_factory=dict)
    # response handle -> manifest digest it is bound to
    handles: dict[str, str] = Field(default_factory=dict)
    paused: dict[str, str] = Field(default_factory=dict)
    """adapter id -> the operation that found the graph unrenderable for it (the conversation is
    paused for that adapter until a dispatch with another adapter renders, or a cancel)."""

    @classmethod
    def empty(cls, conversation_id: str) -> ConversationState:
        return cls(conversation_id=conversation_id, graph=GraphState.empty(conversation_id))

    def with_operation(self, op: OperationState) -> ConversationState:
        return self.model_copy(update={"operations": {**self.operations, op.operation_id: op}})

    def in_flight(self, except_id: str | None = None) -> list[OperationState]:
        """Operations whose attempt may still produce output (an UNKNOWN one until confirmed terminated)."""
        return [
            op
            for op in self.operations.values()
            if op.state in _MAY_PRODUCE and op.operation_id != except_id and op.may_produce_output
        ]
