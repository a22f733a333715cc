"""The working set of one fold step: the event, the evolving state, the outputs, and how they are written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turnledger.adapters.admission import ModelRegistry, builtin_registry
from turnledger.adapters.prefix import RenderCache
from turnledger.dispatch.live_assemblers import LiveAssemblers, had_previews
from turnledger.dispatch.manifest_blocks import ListingCache
from turnledger.dispatch.state import ConversationState, OperationState, settled_request
from turnledger.dispatch.turn_size import EncodedRecords
from turnledger.model.base import Frozen
from turnledger.model.events import (
    DispatchDecision,
    DispatchState,
    IngressEvent,
    PreviewRetracted,
    Quarantined,
    Rejected,
)
from turnledger.model.limits import DEFAULT_LIMITS, Limits, printable
from turnledger.model.reasons import ReasonCode

OutputRecord = Frozen


_NO_LEASE: dict[str, Any] = {"lease_owner": None, "lease_ms": 0, "lease_renewed_at_ms": 0}


@dataclass(slots=True)
class FoldResult:
    state: ConversationState
    outputs: list[OutputRecord] = field(default_factory=list)


@dataclass(slots=True)
class Step:
    """The working set of one event: the event, the evolving state, the outputs so far.

    Slotted (as is `FoldResult`): one of each per ingress event, and a `__dict__` each was two more
    GC-tracked objects per event."""

    event: IngressEvent
    state: ConversationState
    outputs: list[OutputRecord] = field(default_factory=list)
    live: LiveAssemblers = field(default_factory=LiveAssemblers)
    """The engine's live assemblers (a fresh set restores every assembler from its snapshot)."""
    models: ModelRegistry = field(default_factory=builtin_registry)
    """The model registry admission counts against (the engine's configuration, not the log's)."""
    limits: Limits = DEFAULT_LIMITS
    """The size limits (the engine's configuration; a replay must fold under the same ones)."""
    renders: RenderCache | None = None
    """The engine's rendered prefixes: a dispatch renders only what is new since the last (no output
    depends on it)."""
    listings: ListingCache | None = None
    """The engine's manifest block listings: a dispatch lists only the blocks new since the last (no
    output depends on it)."""
    encoded: EncodedRecords | None = None
    """The engine's records encoded by the fold (a turn's size check), so it does not encode them again."""

    @property
    def at(self) -> int:
        return self.event.occurred_at_ms

    def reject(self, reason: ReasonCode, detail: str, operation_id: str | None = None) -> None:
        self.outputs.append(
            Rejected(
                conversation_id=self.state.conversation_id,
                operation_id=operation_id,
                reason=reason,
                detail=detail,
                event_type=type(self.event).__name__,
                event_id=self.event.event_id,
                occurred_at_ms=self.at,
            )
        )

    def quarantine(self, op_id: str, generation: int, reason: ReasonCode, detail: str = "") -> None:
        self.outputs.append(
            Quarantined(
                conversation_id=self.state.conversation_id,
                operation_id=op_id,
                attempt_generation=generation,
                reason=reason,
                event_type=type(self.event).__name__,
                event_id=self.event.event_id,
                detail=detail,
                occurred_at_ms=self.at,
            )
        )

    def put(self, op: OperationState, **updates: Any) -> OperationState:
        """Store `op` (with `updates` and this event's time) in the state: one copy of the operation.

        The lease ends with the attempt: once it can produce nothing more, no one holds it. A final
        operation keeps its request without policy, and without tools unless it is the last
        (`settled_request`): a new operation settles the one before it."""
        op = op.model_copy(update={**updates, "updated_at_ms": self.at})
        if op.lease_owner is not None and not op.may_produce_output:
            op = op.model_copy(update=_NO_LEASE)
        operations = self.state.operations
        last = next(reversed(operations), None)
        new = op.operation_id not in operations
        if new and last is not None:
            before = operations[last]
            settled = settled_request(before)
            if settled is not None:
                self.state = self.state.with_operation(before.model_copy(update={"request": settled}))
        settled = settled_request(op, new or last == op.operation_id)
        if settled is not None:
            op = op.model_copy(update={"request": settled})
        self.state = self.state.with_operation(op)
        return op

    def transition(
        self,
        op: OperationState,
        new_state: DispatchState,
        *,
        accepted: bool = True,
        reason: ReasonCode | None = None,
        detail: str = "",
        **updates: Any,
    ) -> OperationState:
        previous = op.state
        op = self.put(op, state=new_state, **updates)
        self.decide(op, previous, accepted=accepted, reason=reason, detail=detail)
        return op

    def decide(
        self,
        op: OperationState,
        previous: DispatchState | None,
        *,
        accepted: bool = True,
        reason: ReasonCode | None = None,
        detail: str = "",
    ) -> None:
        """Emit the operation's `DispatchDecision`. Every field comes from a validated model's field
        of the same type, or is `accepted`, `reason` and `detail`, checked here by type: such values
        pass validation unchanged, so the decision is built without it (`of_validated`, ~4% of the
        engine's CPU on the bench mix); anything else is validated as usual."""
        values: dict[str, Any] = {
            "conversation_id": self.state.conversation_id,
            "operation_id": op.operation_id,
            "state": op.state,
            "previous_state": previous,
            "accepted": accepted,
            "reason": reason,
            "detail": detail,
            "conversation_revision": self.state.graph.revision,
            "cancel_generation": self.state.cancel_generation,
            "attempt_generation": op.attempt_generation,
            "idempotency_key": op.idempotency_key,
            "manifest_digest": op.manifest.manifest_digest if op.manifest else None,
            "response_handle": op.response_handle,
            "source_event_id": self.event.event_id,
            "occurred_at_ms": self.at,
            "lease_owner": op.lease_owner,
            "lease_expires_at_ms": op.lease_expires_at_ms,
            "deadline_at_ms": op.request.deadline_at_ms,
            "attempt_terminated": op.attempt_terminated,
        }
        if type(accepted) is bool and type(detail) is str and (reason is None or type(reason) is ReasonCode):
            self.outputs.append(DispatchDecision.of_validated(values))
        else:
            self.outputs.append(DispatchDecision.model_validate(values))

    def cancel(
        self,
        op: OperationState,
        reason: ReasonCode | None,
        detail: str,
        retract_reason: ReasonCode | None = None,
    ) -> OperationState:
        """Final for the client at once: previews retracted (with `retract_reason`, else `reason`),
        later blocks quarantined. An attempt someone holds must still be confirmed terminated by its
        holder or its lease's expiry; one whose lease already expired (nobody reads it any more,
        though the provider may keep it) counts as terminated now, or nothing would ever confirm it."""
        retract_reason = retract_reason or reason or ReasonCode.AFTER_CANCEL
        if op.lease_owner is None and op.may_produce_output:
            op = op.model_copy(update={"attempt_terminated": True})
        return self.transition(
            self.retract(op, retract_reason), DispatchState.CANCELLED, reason=reason, detail=detail
        )

    def retract(self, op: OperationState, reason: ReasonCode) -> OperationState:
        """Drop the attempt's candidates; announce the retraction of its previews if it had any."""
        if op.assembler is not None and had_previews(op):
            self.outputs.append(
                PreviewRetracted(
                    conversation_id=self.state.conversation_id,
                    operation_id=op.operation_id,
                    attempt_generation=op.attempt_generation,
                    reason=reason,
                    occurred_at_ms=self.at,
                )
            )
        return op.model_copy(update={"assembler": None})


def rejection_detail(rejection: Any) -> str:
    where = " ".join(
        f"{name}={value}"
        for name, value in (("block", rejection.block_id), ("call", rejection.call_id))
        if value
    )
    detail = f"{rejection.detail} ({where})" if where else str(rejection.detail)
    return printable(detail)  # a lone surrogate in an id must not make the Rejected unencodable
