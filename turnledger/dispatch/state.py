"""Per-conversation state of the dispatch fold, serializable for the changelog."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

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
