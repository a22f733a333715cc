"""Every record on every turnledger topic, as frozen pydantic models.

Ingress events (topic `turnledger.ingress`, key = conversation id) carry the time
and the ids they need: the pure core never reads a clock or draws randomness.
Output records are what the partition processor emits. Each class maps to one
Avro record in `schemas/` (same field names in camelCase); `dict` fields travel as
canonical JSON strings.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from turnledger.model.base import Frozen
from turnledger.model.deltas import NormalizedDelta
from turnledger.model.graph import Block, BlockStatus
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition


class DispatchState(StrEnum):
    WAITING = "WAITING"
    REJECTED = "REJECTED"
    PAUSED = "PAUSED"
    PREPARED = "PREPARED"
    DISPATCHING = "DISPATCHING"
    SENT = "SENT"
    STREAMING = "STREAMING"
    COMMITTED = "COMMITTED"
    UNKNOWN = "UNKNOWN"
    CANCELLED = "CANCELLED"


class StreamOutcome(StrEnum):
    COMPLETED = "completed"  # the transport closed after the provider's final event
    DISCONNECTED = "disconnected"
    PROVIDER_ERROR = "provider_error"


# ---------------------------------------------------------------- ingress


class IngressEvent(Frozen):
    conversation_id: str
    event_id: str
    occurred_at_ms: int


class SubmittedBlock(Frozen):
    """A block as a producer submits it; the processor assigns revision, ordering, digest."""

    id: str
    role: str
    kind: str
    trust_label: str
    status: str = BlockStatus.COMMITTED
    text: str | None = None
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None
    argument_digest: str | None = None
    generation: int | None = None
    result_status: str | None = None
    signature: str | None = None


class TurnSubmitted(IngressEvent):
    """User, system, tool-result or scoped-input blocks, committed as one revision."""

    turn_id: str
    blocks: tuple[SubmittedBlock, ...]
    expected_revision: int | None = None


class DispatchRequested(IngressEvent):
    operation_id: str
    adapter: str
    provider: str
    model_revision: str
    tools: tuple[ToolDefinition, ...] = ()
    max_output_tokens: int
    policy: dict[str, Any] = Field(default_factory=dict)


class DispatchAttempt(IngressEvent):
    """The worker asks for the send acceptance point (the dispatch CAS)."""

    operation_id: str
    expected_revision: int
    expected_cancel_generation: int
    worker_id: str


class DispatchSent(IngressEvent):
    operation_id: str
    attempt_generation: int


class HandleBound(IngressEvent):
    operation_id: str
    attempt_generation: int
    response_handle: str
    manifest_digest: str


class StreamDeltas(IngressEvent):
    """One or more normalized deltas of one attempt, in stream order."""

    operation_id: str
    attempt_generation: int
    deltas: tuple[NormalizedDelta, ...]


class StreamEnded(IngressEvent):
    operation_id: str
    attempt_generation: int
    outcome: StreamOutcome
    resumable: bool = False
    last_delta_sequence: int = -1


class CancelRequested(IngressEvent):
    """Cancels the operation (or, without one, every open operation) and bumps cancelGeneration."""

    operation_id: str | None = None
    reason: str = ""
    worker_gave_up: bool = False


class RecoveryReported(IngressEvent):
    """A restarted worker reports an attempt it owned: DISPATCHING/SENT/STREAMING → UNKNOWN."""

    operation_id: str
    attempt_generation: int
    worker_id: str


class ResumeStarted(IngressEvent):
    """The same generation continues from its handle (query / resume / replay)."""

    operation_id: str
    attempt_generation: int
    response_handle: str


class AttemptTerminated(IngressEvent):
    """The old attempt is confirmed terminated: a new generation may be allocated."""

    operation_id: str
    attempt_generation: int


INGRESS_EVENT_TYPES: tuple[type[IngressEvent], ...] = (
    TurnSubmitted,
    DispatchRequested,
    DispatchAttempt,
    DispatchSent,
    HandleBound,
    StreamDeltas,
    StreamEnded,
    CancelRequested,
    RecoveryReported,
    ResumeStarted,
    AttemptTerminated,
)


# ---------------------------------------------------------------- outputs


class CommittedTurn(Frozen):
    """Topic `turnledger.committed`: one revision of a conversation."""

    conversation_id: str
    revision: int
    turn_id: str
    source_event_id: str
    operation_id: str | None = None
    attempt_generation: int | None = None
    blocks: tuple[Block, ...]
    occurred_at_ms: int


class ManifestIssued(Frozen):
    """Topic `turnledger.manifests`: a PREPARED operation's manifest."""

    manifest: DispatchManifest
    occurred_at_ms: int


class DispatchDecision(Frozen):
    """Topic `turnledger.manifests`: every state change and CAS decision of an operation."""

    conversation_id: str
    operation_id: str
    state: DispatchState
    previous_state: DispatchState | None = None
    accepted: bool = True
    reason: ReasonCode | None = None
    detail: str = ""
    conversation_revision: int
    cancel_generation: int
    attempt_generation: int = 0
    idempotency_key: str | None = None
    manifest_digest: str | None = None
    response_handle: str | None = None
    source_event_id: str
    occurred_at_ms: int


class ToolCallReady(Frozen):
    """Topic `turnledger.tool-calls`: a call of a canonical response that may now run."""

    conversation_id: str
    revision: int
    operation_id: str
    attempt_generation: int
    block_id: str
    call_id: str
    tool_name: str
    arguments: str
    argument_digest: str
    schema_digest: str | None = None
    occurred_at_ms: int


class PreviewUpdated(Frozen):
    """Topic `turnledger.previews`: revocable text so far (coalesced per batch)."""

    conversation_id: str
    operation_id: str
    attempt_generation: int
    block_index: int
    text: str
    through_sequence: int
    occurred_at_ms: int


class PreviewRetracted(Frozen):
    conversation_id: str
    operation_id: str
    attempt_generation: int
    reason: ReasonCode
    occurred_at_ms: int


class Quarantined(Frozen):
    """Topic `turnledger.quarantine`: a late block, kept for audit, never applied."""

    conversation_id: str
    operation_id: str
    attempt_generation: int
    reason: ReasonCode
    event_type: str
    event_id: str
    detail: str = ""
    occurred_at_ms: int


class Rejected(Frozen):
    """Topic `turnledger.rejections`: a typed rejection with the source coordinates."""

    conversation_id: str | None = None
    operation_id: str | None = None
    reason: ReasonCode
    detail: str = ""
    event_type: str | None = None
    event_id: str | None = None
    source_topic: str | None = None
    source_partition: int | None = None
    source_offset: int | None = None
    occurred_at_ms: int = 0


class ConversationSnapshot(Frozen):
    """Topic `turnledger.changelog` (compacted, key = conversation id): the fold's state."""

    conversation_id: str
    format_version: int
    state: bytes


OUTPUT_RECORD_TYPES: tuple[type[Frozen], ...] = (
    CommittedTurn,
    ManifestIssued,
    DispatchDecision,
    ToolCallReady,
    PreviewUpdated,
    PreviewRetracted,
    Quarantined,
    Rejected,
    ConversationSnapshot,
)
