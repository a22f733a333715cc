"""A typed mirror of one fold step's state work, for `bench_typed_state.py` (not used by turnledger).

The operation, the conversation and the decision as plain slotted classes with positional
constructors, and the step `Step.transition` takes with the pydantic state (`dispatch/step.py`): copy
the operation with its new state and progress, end the lease of an attempt that can produce nothing
more, put it in a copy of the conversation, emit the decision. Written so that mypyc compiles it to
native classes (`bench_typed_state.py --compiled`); interpreted, it is the same code as Python."""

from __future__ import annotations

from typing import Final

ACTIVE: Final = frozenset({"DISPATCHING", "SENT", "STREAMING"})
OPEN: Final = frozenset({"UNKNOWN", "CANCELLED"})
FINAL: Final = frozenset({"COMMITTED", "REJECTED", "CANCELLED"})


class Request:
    __slots__ = ("deadline_at_ms", "policy", "tools")

    def __init__(self, deadline_at_ms: int, tools: tuple[object, ...], policy: dict[str, object]) -> None:
        self.deadline_at_ms = deadline_at_ms
        self.tools = tools
        self.policy = policy


class Op:
    __slots__ = (
        "assembler",
        "attempt_cancel_generation",
        "attempt_generation",
        "attempt_terminated",
        "committed_revision",
        "idempotency_key",
        "lease_ms",
        "lease_owner",
        "lease_renewed_at_ms",
        "manifest_digest",
        "operation_id",
        "prepared_revision",
        "replayable",
        "request",
        "response_handle",
        "resumable",
        "state",
        "updated_at_ms",
    )

    def __init__(
        self,
        operation_id: str,
        state: str,
        request: Request,
        manifest_digest: str | None,
        prepared_revision: int,
        attempt_generation: int,
        attempt_cancel_generation: int,
        idempotency_key: str | None,
        response_handle: str | None,
        attempt_terminated: bool,
        assembler: dict[str, object] | None,
        committed_revision: int | None,
        updated_at_ms: int,
        lease_owner: str | None,
        lease_ms: int,
        lease_renewed_at_ms: int,
        resumable: bool,
        replayable: bool,
    ) -> None:
        self.operation_id = operation_id
        self.state = state
        self.request = request
        self.manifest_digest = manifest_digest
        self.prepared_revision = prepared_revision
        self.attempt_generation = attempt_generation
        self.attempt_cancel_generation = attempt_cancel_generation
        self.idempotency_key = idempotency_key
        self.response_handle = response_handle
        self.attempt_terminated = attempt_terminated
        self.assembler = assembler
        self.committed_revision = committed_revision
        self.updated_at_ms = updated_at_ms
        self.lease_owner = lease_owner
        self.lease_ms = lease_ms
        self.lease_renewed_at_ms = lease_renewed_at_ms
        self.resumable = resumable
        self.replayable = replayable

    def copy(self) -> Op:
        return Op(
            self.operation_id,
            self.state,
            self.request,
            self.manifest_digest,
            self.prepared_revision,
            self.attempt_generation,
            self.attempt_cancel_generation,
            self.idempotency_key,
            self.response_handle,
            self.attempt_terminated,
            self.assembler,
            self.committed_revision,
            self.updated_at_ms,
            self.lease_owner,
            self.lease_ms,
            self.lease_renewed_at_ms,
            self.resumable,
            self.replayable,
        )

    def may_produce_output(self) -> bool:
        if self.state in ACTIVE:
            return True
        return self.state in OPEN and self.attempt_generation > 0 and not self.attempt_terminated

    def lease_expires_at_ms(self) -> int | None:
        return None if self.lease_owner is None else self.lease_renewed_at_ms + self.lease_ms

    def settles(self) -> bool:
        request = self.request
        return self.state in FINAL and self.assembler is None and bool(request.tools or request.policy)


class Conv:
    __slots__ = ("cancel_generation", "conversation_id", "operations", "revision")

    def __init__(
        self, conversation_id: str, revision: int, cancel_generation: int, operations: dict[str, Op]
    ) -> None:
        self.conversation_id = conversation_id
        self.revision = revision
        self.cancel_generation = cancel_generation
        self.operations = operations

    def with_operation(self, op: Op) -> Conv:
        operations = dict(self.operations)
        operations[op.operation_id] = op
        return Conv(self.conversation_id, self.revision, self.cancel_generation, operations)


class Decision:
    __slots__ = (
        "accepted",
        "attempt_generation",
        "attempt_terminated",
        "cancel_generation",
        "conversation_id",
        "conversation_revision",
        "deadline_at_ms",
        "detail",
        "idempotency_key",
        "lease_expires_at_ms",
        "lease_owner",
        "manifest_digest",
        "occurred_at_ms",
        "operation_id",
        "previous_state",
        "reason",
        "response_handle",
        "source_event_id",
        "state",
    )

    def __init__(
        self,
        conversation_id: str,
        operation_id: str,
        state: str,
        previous_state: str | None,
        accepted: bool,
        reason: str | None,
        detail: str,
        conversation_revision: int,
        cancel_generation: int,
        attempt_generation: int,
        idempotency_key: str | None,
        manifest_digest: str | None,
        response_handle: str | None,
        source_event_id: str,
        occurred_at_ms: int,
        lease_owner: str | None,
        lease_expires_at_ms: int | None,
        deadline_at_ms: int | None,
        attempt_terminated: bool,
    ) -> None:
        self.conversation_id = conversation_id
        self.operation_id = operation_id
        self.state = state
        self.previous_state = previous_state
        self.accepted = accepted
        self.reason = reason
        self.detail = detail
        self.conversation_revision = conversation_revision
        self.cancel_generation = cancel_generation
        self.attempt_generation = attempt_generation
        self.idempotency_key = idempotency_key
        self.manifest_digest = manifest_digest
        self.response_handle = response_handle
        self.source_event_id = source_event_id
        self.occurred_at_ms = occurred_at_ms
        self.lease_owner = lease_owner
        self.lease_expires_at_ms = lease_expires_at_ms
        self.deadline_at_ms = deadline_at_ms
        self.attempt_terminated = attempt_terminated


def transition(
    conv: Conv, op: Op, new_state: str, assembler: dict[str, object], at: int, event_id: str
) -> tuple[Conv, Decision]:
    """One `Step.transition` with a progress update: the conversation with the new operation, the decision."""
    previous = op.state
    new = op.copy()
    new.state = new_state
    new.assembler = assembler
    new.lease_renewed_at_ms = at
    new.updated_at_ms = at
    if new.lease_owner is not None and not new.may_produce_output():
        new.lease_owner = None
        new.lease_ms = 0
        new.lease_renewed_at_ms = 0
    if new.settles():
        new.request = Request(new.request.deadline_at_ms, (), {})
    conv = conv.with_operation(new)
    return conv, Decision(
        conv.conversation_id,
        new.operation_id,
        new.state,
        previous,
        True,
        None,
        "",
        conv.revision,
        conv.cancel_generation,
        new.attempt_generation,
        new.idempotency_key,
        new.manifest_digest,
        new.response_handle,
        event_id,
        at,
        new.lease_owner,
        new.lease_expires_at_ms(),
        new.request.deadline_at_ms,
        new.attempt_terminated,
    )


def run(conv: Conv, operation_id: str, steps: int, event_id: str) -> int:
    """`steps` transitions of the operation, each on the conversation the one before left."""
    decided = 0
    for i in range(steps):
        conv, decision = transition(
            conv, conv.operations[operation_id], "STREAMING", {"i": i}, 1000 + i, event_id
        )
        decided += decision.accepted
    return decided
