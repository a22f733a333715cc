"""A tiny driver for the pure fold: builds ingress events and keeps every output."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnledger.adapters.prefix import RenderCache
from turnledger.dispatch.fold import fold
from turnledger.dispatch.manifest_blocks import ListingCache
from turnledger.dispatch.state import ConversationState
from turnledger.model.base import Frozen
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.events import (
    AttemptTerminated,
    CancelRequested,
    CommittedTurn,
    DispatchAttempt,
    DispatchDecision,
    DispatchRequested,
    DispatchSent,
    ExpiryClaimed,
    HandleBound,
    IngressEvent,
    LeaseRenewed,
    ManifestIssued,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    RecoveryReported,
    Rejected,
    ReplayStarted,
    ResumeStarted,
    StreamDeltas,
    StreamEnded,
    StreamOutcome,
    SubmittedBlock,
    ToolCallReady,
    TurnSubmitted,
)
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.tools import ToolDefinition

ADAPTER = "anthropic-messages@1"
MODEL = "anthropic/claude-sonnet-4@2025-05"

WEATHER = ToolDefinition(
    name="get_weather",
    description="Weather for a city",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


@dataclass
class Conversation:
    conversation_id: str = "conv-1"
    state: ConversationState = field(init=False)
    outputs: list[Frozen] = field(default_factory=list)
    _ids: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    _seq: dict[tuple[str, int], int] = field(default_factory=dict)
    skew_ms: int = 0
    """Added to every event time from now on (`advance`): each event is otherwise 1 ms after the last."""
    limits: Limits = DEFAULT_LIMITS
    """The size limits the fold runs under."""
    renders: RenderCache | None = None
    """The rendered-prefix cache the fold renders through (the engine's; none by default)."""
    listings: ListingCache | None = None
    """The manifest block listings the fold lists through (the engine's; none by default)."""
    events: list[IngressEvent] = field(default_factory=list)
    """Every event folded, in order (to fold them again elsewhere, or to read what was asked)."""

    def __post_init__(self) -> None:
        self.state = ConversationState.empty(self.conversation_id)

    # ------------------------------------------------------------ plumbing
    def _common(self) -> dict[str, Any]:
        n = next(self._ids)  # type: ignore[call-overload]
        at = 1000 + n + self.skew_ms
        return {"conversation_id": self.conversation_id, "event_id": f"e{n}", "occurred_at_ms": at}

    def advance(self, ms: int) -> None:
        self.skew_ms += ms

    def apply(self, event: IngressEvent) -> list[Frozen]:
        self.events.append(event)
        result = fold(self.state, event, limits=self.limits, renders=self.renders, listings=self.listings)
        self.state = result.state
        self.outputs.extend(result.outputs)
        return result.outputs

    def of(self, kind: type[Frozen]) -> list[Any]:
        return [o for o in self.outputs if isinstance(o, kind)]

    # ------------------------------------------------------------ events
    def user(self, text: str, turn_id: str | None = None) -> list[Frozen]:
        turn_id = turn_id or f"u{len(self.state.turn_ids) + 1}"
        block = SubmittedBlock(id=f"{turn_id}-b0", role="user", kind="text", trust_label="user", text=text)
        return self.apply(TurnSubmitted(**self._common(), turn_id=turn_id, blocks=(block,)))

    def tool_results(self, *results: tuple[str, str, str], generation: int = 1) -> list[Frozen]:
        """results: (call_id, tool_name, arguments_json) → success envelopes."""
        from turnledger.model.canonical import digest_of

        turn_id = f"t{len(self.state.turn_ids) + 1}"
        blocks = tuple(
            SubmittedBlock(
                id=f"{turn_id}-r{i}",
                role="tool",
                kind="tool_result",
                trust_label="tool",
                call_id=call_id,
                tool_name=name,
                argument_digest=digest_of(orjson.loads(args)),
                generation=generation,
                result_status="success",
                text=f"result of {call_id}",
            )
            for i, (call_id, name, args) in enumerate(results)
        )
        return self.apply(TurnSubmitted(**self._common(), turn_id=turn_id, blocks=blocks))

    def request(
        self,
        op: str = "op-1",
        adapter: str = ADAPTER,
        max_output_tokens: int = 256,
        settle_within_ms: int | None = None,
    ) -> list[Frozen]:
        return self.apply(
            DispatchRequested(
                **self._common(),
                operation_id=op,
                adapter=adapter,
                provider="anthropic",
                model_revision=MODEL,
                tools=(WEATHER,),
                max_output_tokens=max_output_tokens,
                settle_within_ms=settle_within_ms,
            )
        )

    def attempt(
        self,
        op: str = "op-1",
        revision: int | None = None,
        cancel: int | None = None,
        worker: str = "w1",
        lease_ms: int = 30_000,
        replayable: bool = False,
    ) -> list[Frozen]:
        return self.apply(
            DispatchAttempt(
                **self._common(),
                operation_id=op,
                expected_revision=self.state.graph.revision if revision is None else revision,
                expected_cancel_generation=self.state.cancel_generation if cancel is None else cancel,
                worker_id=worker,
                lease_ms=lease_ms,
                replayable=replayable,
            )
        )

    def manifest_digest(self, op: str = "op-1") -> str:
        manifest = self.state.operations[op].manifest
        assert manifest is not None
        return manifest.manifest_digest

    def sent(self, op: str = "op-1", gen: int = 1) -> list[Frozen]:
        return self.apply(DispatchSent(**self._common(), operation_id=op, attempt_generation=gen))

    def bind(
        self,
        op: str = "op-1",
        gen: int = 1,
        handle: str = "msg_1",
        digest: str | None = None,
        resumable: bool = False,
    ) -> list[Frozen]:
        return self.apply(
            HandleBound(
                **self._common(),
                operation_id=op,
                attempt_generation=gen,
                response_handle=handle,
                manifest_digest=digest or self.manifest_digest(op),
                resumable=resumable,
            )
        )

    def deltas(self, deltas: list[NormalizedDelta], op: str = "op-1", gen: int = 1) -> list[Frozen]:
        return self.apply(
            StreamDeltas(**self._common(), operation_id=op, attempt_generation=gen, deltas=tuple(deltas))
        )

    def ended(
        self,
        outcome: StreamOutcome,
        op: str = "op-1",
        gen: int = 1,
        resumable: bool = False,
        detail: str | None = None,
    ) -> list[Frozen]:
        return self.apply(
            StreamEnded(
                **self._common(),
                operation_id=op,
                attempt_generation=gen,
                outcome=outcome,
                resumable=resumable,
                detail=detail,
            )
        )

    def recovered(self, op: str = "op-1", gen: int = 1, worker: str = "w1") -> list[Frozen]:
        return self.apply(
            RecoveryReported(**self._common(), operation_id=op, attempt_generation=gen, worker_id=worker)
        )

    def resume(
        self, op: str = "op-1", gen: int = 1, handle: str = "msg_1", worker: str = "w1"
    ) -> list[Frozen]:
        return self.apply(
            ResumeStarted(
                **self._common(),
                operation_id=op,
                attempt_generation=gen,
                response_handle=handle,
                worker_id=worker,
            )
        )

    def replay(self, op: str = "op-1", gen: int = 1, worker: str = "w1") -> list[Frozen]:
        return self.apply(
            ReplayStarted(**self._common(), operation_id=op, attempt_generation=gen, worker_id=worker)
        )

    def terminated(self, op: str = "op-1", gen: int = 1, worker: str = "w1") -> list[Frozen]:
        return self.apply(
            AttemptTerminated(**self._common(), operation_id=op, attempt_generation=gen, worker_id=worker)
        )

    def renew(self, op: str = "op-1", gen: int = 1, worker: str = "w1") -> list[Frozen]:
        return self.apply(
            LeaseRenewed(**self._common(), operation_id=op, attempt_generation=gen, worker_id=worker)
        )

    def claim(self, op: str = "op-1", gen: int | None = None, worker: str = "w2") -> list[Frozen]:
        generation = self.state.operations[op].attempt_generation if gen is None else gen
        return self.apply(
            ExpiryClaimed(**self._common(), operation_id=op, attempt_generation=generation, worker_id=worker)
        )

    def cancel(self, op: str | None = None) -> list[Frozen]:
        return self.apply(CancelRequested(**self._common(), operation_id=op, reason="user pressed stop"))

    def dispatch_to_streaming(self, op: str = "op-1", handle: str = "msg_1") -> None:
        self.request(op)
        self.attempt(op)
        gen = self.state.operations[op].attempt_generation
        self.sent(op, gen)
        self.bind(op, gen, handle)


def text_stream(
    text_parts: list[str], handle: str = "msg_1", gen: int = 1, stop: bool = True
) -> list[NormalizedDelta]:
    d = _DeltaMaker(handle, gen)
    out = [d(DeltaType.MESSAGE_START, -1), d(DeltaType.BLOCK_START, 0, block_kind="text")]
    out += [d(DeltaType.TEXT_DELTA, 0, text=t) for t in text_parts]
    out.append(d(DeltaType.BLOCK_STOP, 0))
    if stop:
        out.append(d(DeltaType.MESSAGE_STOP, -1, stop_reason=StopReason.END_TURN, raw_stop_reason="end_turn"))
    return out


def tool_stream(
    calls: list[tuple[str, str, list[str]]],
    handle: str = "msg_1",
    gen: int = 1,
    stop_reason: StopReason = StopReason.TOOL_USE,
    stop: bool = True,
) -> list[NormalizedDelta]:
    """calls: (call_id, tool_name, argument fragments)."""
    d = _DeltaMaker(handle, gen)
    out = [d(DeltaType.MESSAGE_START, -1)]
    for index, (call_id, name, fragments) in enumerate(calls):
        out.append(d(DeltaType.BLOCK_START, index, block_kind="tool_call", call_id=call_id, tool_name=name))
        out += [d(DeltaType.ARGUMENT_FRAGMENT, index, text=f) for f in fragments]
        out.append(d(DeltaType.BLOCK_STOP, index))
    if stop:
        out.append(d(DeltaType.MESSAGE_STOP, -1, stop_reason=stop_reason, raw_stop_reason=str(stop_reason)))
    return out


@dataclass
class _DeltaMaker:
    handle: str
    gen: int
    seq: int = 0

    def __call__(self, type_: DeltaType, index: int, **fields: Any) -> NormalizedDelta:
        delta = NormalizedDelta(
            response_handle=self.handle,
            generation=self.gen,
            block_index=index,
            delta_sequence=self.seq,
            type=type_,
            **fields,
        )
        self.seq += 1
        return delta


__all__ = [
    "CommittedTurn",
    "Conversation",
    "DispatchDecision",
    "ManifestIssued",
    "PreviewRetracted",
    "PreviewUpdated",
    "Quarantined",
    "Rejected",
    "ToolCallReady",
    "text_stream",
    "tool_stream",
]
