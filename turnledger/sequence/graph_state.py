"""The fold's state for one conversation: committed blocks plus the indexes that make
validation incremental.

A new turn is checked against these indexes only (calls by id, results by call id,
block ids, pending calls) and the digest chain head, so its cost is proportional to
the turn, not to the history. The state is a frozen pydantic model so that the
partition processor can write it to the changelog as JSON and restore it exactly;
the dict fields keep insertion order (emission order), which keeps that JSON
deterministic. States are never mutated in place: `append` builds a new one.
"""

from __future__ import annotations

from pydantic import Field

from turnledger.model.base import Frozen
from turnledger.model.graph import Block, seal_sequence_digest, sequence_seed


class CallRecord(Frozen):
    """What a result must match: the emitted call's tool, arguments and generation."""

    block_id: str
    tool_name: str
    argument_state: str
    argument_digest: str | None = None
    schema_digest: str | None = None
    generation: int | None = None
    revision: int


class ResultRecord(Frozen):
    """The one terminal result a call received."""

    block_id: str
    result_status: str
    revision: int


class GraphState(Frozen):
    conversation_id: str
    revision: int = 0
    blocks: tuple[Block, ...] = ()
    chain_head: str
    sequence_digest: str
    block_ids: dict[str, int] = Field(default_factory=dict)
    calls: dict[str, CallRecord] = Field(default_factory=dict)
    results: dict[str, ResultRecord] = Field(default_factory=dict)
    pending_call_ids: tuple[str, ...] = ()

    @classmethod
    def empty(cls, conversation_id: str) -> GraphState:
        head = sequence_seed(conversation_id)
        return cls(
            conversation_id=conversation_id,
            chain_head=head,
            sequence_digest=seal_sequence_digest(head, 0),
        )

    @property
    def next_ordering(self) -> int:
        return len(self.blocks)

    def call(self, call_id: str) -> CallRecord | None:
        return self.calls.get(call_id)
