"""Turning a complete provider response into the assistant blocks of the next revision."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnledger.model.graph import Block, BlockStatus, Role, TrustLabel
from turnledger.sequence.builder import committed_block
from turnledger.sequence.graph_state import GraphState
from turnledger.streaming.outcomes import CandidateBlock


def candidate_blocks_to_committed(
    graph: GraphState, turn_id: str, generation: int, candidates: Sequence[CandidateBlock], api: str
) -> tuple[Block, ...]:
    """Assistant blocks with stable ids `<turn>/b<index>`, stamped with the attempt generation; a
    signed block names `api` (the operation adapter's) as the one that minted its signature."""
    revision = graph.revision + 1
    schema_digests = {f"{turn_id}/b{c.block_index}": c.schema_digest for c in candidates}
    return tuple(
        committed_block(fields, turn_id, revision, graph.next_ordering + offset, schema_digests[fields["id"]])
        for offset, fields in enumerate(_submitted(turn_id, generation, c, api) for c in candidates)
    )


def _submitted(turn_id: str, generation: int, c: CandidateBlock, api: str) -> dict[str, Any]:
    """The fields of the `SubmittedBlock` the candidate is, as its `model_dump(exclude_none=True)`
    gives them (the same keys, values and types), without building it: the candidate's fields are
    already typed (the assembler's dataclass)."""
    fields: dict[str, Any] = {
        "id": f"{turn_id}/b{c.block_index}",
        "role": Role.ASSISTANT.value,
        "kind": c.kind,
        "trust_label": TrustLabel.MODEL.value,
        "status": BlockStatus.COMMITTED,
    }
    optional = {
        "text": None if c.call_id else c.text,
        "call_id": c.call_id,
        "tool_name": c.tool_name,
        "arguments": c.arguments,
        "generation": generation if c.call_id else None,
        "signature": c.signature,
        "signed_by": api if c.signature is not None else None,
        "item_id": c.item_id,
    }
    fields.update((name, value) for name, value in optional.items() if value is not None)
    return fields
