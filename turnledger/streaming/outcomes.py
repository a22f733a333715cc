"""What the assembler says: per delta (FeedResult) and per response (AssemblyOutcome).

`Complete` is the only value that carries committable blocks; `Incomplete` carries
none at all, only why, so no caller can commit "the part that looked fine".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from turnledger.model.deltas import StopReason
from turnledger.model.reasons import ReasonCode


class FeedStatus(StrEnum):
    ACCEPTED = "accepted"  # applied now (and any held deltas it unblocked)
    HELD = "held"  # ahead of a sequence gap: kept until the gap fills
    DUPLICATE = "duplicate"  # at or before the applied/acknowledged sequence, or already held: dropped
    FOREIGN = "foreign"  # another (handle, generation): not ours, the caller quarantines it
    LATE = "late"  # after finish() or discard(): the attempt is over, the caller quarantines it
    REFUSED = "refused"  # ahead of the gap with the held buffer full (TOO_MANY_HELD_DELTAS): dropped


@dataclass(frozen=True, slots=True)
class FeedResult:
    status: FeedStatus
    preview_updates: dict[int, str] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return self.status in (FeedStatus.ACCEPTED, FeedStatus.HELD)

    @property
    def duplicate(self) -> bool:
        return self.status is FeedStatus.DUPLICATE

    @property
    def foreign(self) -> bool:
        return self.status is FeedStatus.FOREIGN


@dataclass(frozen=True, slots=True)
class CandidateBlock:
    block_index: int
    kind: str  # "text" | "thinking" | "tool_call"
    text: str = ""
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None  # the raw JSON text, exactly as streamed
    argument_digest: str | None = None  # digest_of(parsed arguments)
    schema_digest: str | None = None
    signature: str | None = None
    item_id: str | None = None  # the provider's id of the item (a Responses reasoning item's rs_ id)


@dataclass(frozen=True, slots=True)
class Complete:
    blocks: tuple[CandidateBlock, ...]
    stop_reason: StopReason
    response_handle: str
    generation: int
    raw_stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None

    @property
    def tool_calls(self) -> tuple[CandidateBlock, ...]:
        return tuple(b for b in self.blocks if b.kind == "tool_call")


@dataclass(frozen=True, slots=True)
class Incomplete:
    reason: ReasonCode
    detail: str
    retract_previews: bool


AssemblyOutcome = Complete | Incomplete
