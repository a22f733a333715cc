"""What validating a conversation can yield: a sendable sequence, WAITING, or rejections."""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.model.graph import MessageSequence
from turnledger.model.reasons import ReasonCode


@dataclass(frozen=True, slots=True)
class Rejection:
    """One broken invariant, with the block (and call) it was found on."""

    code: ReasonCode
    detail: str
    block_id: str | None = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Valid:
    """Every emitted call has its terminal result: the sequence may be rendered."""

    sequence: MessageSequence


@dataclass(frozen=True, slots=True)
class Waiting:
    """The graph is sound but some calls lack their terminal result: nothing may be rendered."""

    sequence: MessageSequence
    pending_call_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Invalid:
    """The turn (or history) breaks at least one invariant; it was not applied."""

    rejections: tuple[Rejection, ...]

    @property
    def codes(self) -> frozenset[ReasonCode]:
        return frozenset(r.code for r in self.rejections)


ValidationOutcome = Valid | Waiting | Invalid
