"""Turning a complete provider response into the assistant blocks of the next revision."""

from __future__ import annotations

from collections.abc import Sequence

from turnledger.model.events import SubmittedBlock
from turnledger.model.graph import Block, Role, TrustLabel
from turnledger.sequence.builder import blocks_from_submission
from turnledger.sequence.graph_state import GraphState
from turnledger.streaming.outcomes import CandidateBlock


def candidate_blocks_to_committed(
    graph: GraphState, turn_id: str, generation: int, candidates: Sequence[CandidateBlock]
) -> tuple[Block, ...]:
    """Assistant blocks with stable ids `<turn>/b<index>`, stamped with the attempt generation."""
    submitted = [
        SubmittedBlock(
            id=f"{turn_id}/b{c.block_index}",
            role=Role.ASSISTANT,
            kind=c.kind,
            trust_label=TrustLabel.MODEL,
            text=None if c.call_id else c.text,
            call_id=c.call_id,
            tool_name=c.tool_name,
            arguments=c.arguments,
            generation=generation if c.call_id else None,
            signature=c.signature,
        )
        for c in candidates
    ]
    blocks = blocks_from_submission(graph, turn_id, submitted)
    schema_digests = {f"{turn_id}/b{c.block_index}": c.schema_digest for c in candidates}
    return tuple(
        b.model_copy(update={"schema_digest": schema_digests.get(b.id)}) if schema_digests.get(b.id) else b
        for b in blocks
    )
