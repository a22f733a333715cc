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

from pydantic import Field, field_validator

from turnledger.model.base import Frozen, shared_name
from turnledger.model.deltas import NormalizedDelta
from turnledger.model.graph import Block, BlockStatus
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition, shared_tools


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
    signed_by: str | None = None
    item_id: str | None = None


class TurnSubmitted(IngressEvent):
    """User, system, tool-result or scoped-input blocks, committed as one revision."""

    turn_id: str
    blocks: tuple[SubmittedBlock, ...]
    expected_revision: int | None = None


DEFAULT_SETTLE_WITHIN_MS = 600_000
"""An operation whose DispatchRequested sets no bound must be final within 10 minutes of it."""

DEFAULT_LEASE_MS = 30_000


class DispatchRequested(IngressEvent):
    operation_id: str
    adapter: str
    provider: str
    model_revision: str
    tools: tuple[ToolDefinition, ...] = ()
    max_output_tokens: int
    policy: dict[str, Any] = Field(default_factory=dict)
    settle_within_ms: int | None = None
    """The operator's bound: the operation is final within this long of the request, or an
    ExpiryClaimed after it cancels it (DEADLINE_EXCEEDED). None: DEFAULT_SETTLE_WITHIN_MS."""

    _shared_names = field_validator("adapter", "provider", "model_revision")(shared_name)

    _share_tools = field_validator("tools")(shared_tools)

    @property
    def deadline_at_ms(self) -> int:
        within = DEFAULT_SETTLE_WITHIN_MS if self.settle_within_ms is None else self.settle_within_ms
        return self.occurred_at_ms + within


class DispatchAttempt(IngressEvent):
    """The worker asks for the send acceptance point (the dispatch CAS)."""

    operation_id: str
    expected_revision: int
    expected_cancel_generation: int
    worker_id: str
    lease_ms: int = DEFAULT_LEASE_MS
    """How long the accepted attempt belongs to this worker without a sign of life from it."""
    replayable: bool = False
    """The worker's provider keeps idempotency keys for this request: the same request with the
    same key reattaches to the same response, so the generation can be replayed (ReplayStarted)."""


class DispatchSent(IngressEvent):
    operation_id: str
    attempt_generation: int


class HandleBound(IngressEvent):
    operation_id: str
    attempt_generation: int
    response_handle: str
    manifest_digest: str
    resumable: bool = False
    """The provider keeps the response by its handle (a broken read can be resumed from it)."""


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
    detail: str | None = None
    """Why the stream ended, as the worker saw it, in names only (`HTTP 429 rate_limit_error`,
    `transport ended: ReadTimeout`); the fold's decision repeats it (at most `ENDED_DETAIL_CHARS`)."""


class CancelRequested(IngressEvent):
    """Cancels the operation (or, without one, every open operation) and bumps cancelGeneration."""

    operation_id: str | None = None
    reason: str = ""
    worker_gave_up: bool = False
    reason_code: ReasonCode | None = None
    """The typed reason the CANCELLED decision carries (else WORKER_GAVE_UP when a worker gave up)."""


class RecoveryReported(IngressEvent):
    """A restarted worker reports an attempt it owned: DISPATCHING/SENT/STREAMING → UNKNOWN."""

    operation_id: str
    attempt_generation: int
    worker_id: str


class ResumeStarted(IngressEvent):
    """The same generation continues from its bound handle; the resuming worker takes the lease."""

    operation_id: str
    attempt_generation: int
    response_handle: str
    worker_id: str = ""


class ReplayStarted(IngressEvent):
    """The same generation is sent again with its idempotency key (the provider reattaches)."""

    operation_id: str
    attempt_generation: int
    worker_id: str


class AttemptTerminated(IngressEvent):
    """The old attempt is confirmed terminated: a new generation may be allocated."""

    operation_id: str
    attempt_generation: int
    worker_id: str = ""
    """Empty in events written before leases: accepted from anyone, as they were."""


class LeaseRenewed(IngressEvent):
    """The lease holder is alive (sent when it has appended nothing else for a while)."""

    operation_id: str
    attempt_generation: int
    worker_id: str


class ExpiryClaimed(IngressEvent):
    """Someone claims that the attempt's lease, or the operation's deadline, has passed.

    The fold checks the claim against the times it has seen: an expired lease settles
    the attempt (UNKNOWN, LEASE_EXPIRED), a passed deadline the operation (CANCELLED,
    DEADLINE_EXCEEDED); otherwise the claim is refused with the times that still hold."""

    operation_id: str
    attempt_generation: int
    worker_id: str


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
    ReplayStarted,
    LeaseRenewed,
    ExpiryClaimed,
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
    lease_owner: str | None = None
    lease_expires_at_ms: int | None = None
    deadline_at_ms: int | None = None
    attempt_terminated: bool = False


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
    """Topic `turnledger.previews`: revocable text appended to a block's preview (one per block per
    ingress event).

    `text` is what the event added, at `text_offset` (Unicode code points) of the block's text so far,
    so an answer's preview bytes grow with its length, not with its square. Offset 0 carries the whole
    text so far (the first preview of a read, and every record of the schema's earlier version). A
    reader appends `text` only when what it holds has exactly `text_offset` code points: a record that
    ends at or before it is one it has applied, one that starts beyond it means it missed one (a gap).
    """

    conversation_id: str
    operation_id: str
    attempt_generation: int
    block_index: int
    text: str
    through_sequence: int
    occurred_at_ms: int
    text_offset: int = 0

    @property
    def text_end(self) -> int:
        """The length (code points) of the block's preview text once this record is applied."""
        return self.text_offset + len(self.text)


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
    """Topic `turnledger.changelog` (compacted): the fold's state, or from format 4 one part of it (the key
    names the part, `dispatch/state_layout.py`; the head's key is the conversation id)."""

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
