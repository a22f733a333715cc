"""The view a rule gets while one turn is validated: the committed indexes plus what
the turn itself has introduced so far (blocks before the current one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from turnledger.model.graph import SCOPED_INPUT_KINDS, ArgumentState, Block, BlockKind
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.sequence.graph_state import CallRecord, GraphState, ResultRecord


@dataclass(slots=True)
class TurnScan:
    state: GraphState
    blocks: Sequence[Block]
    turn_roles: frozenset[str]
    """Roles of the turn's own (non-scoped) blocks; what scoped inputs may attach to."""
    limits: Limits = DEFAULT_LIMITS
    index: int = 0
    block_ids: set[str] = field(default_factory=set)
    calls: dict[str, CallRecord] = field(default_factory=dict)
    results: dict[str, ResultRecord] = field(default_factory=dict)

    @classmethod
    def start(cls, state: GraphState, blocks: Sequence[Block], limits: Limits = DEFAULT_LIMITS) -> TurnScan:
        roles = frozenset(b.role for b in blocks if b.kind not in SCOPED_INPUT_KINDS)
        return cls(state=state, blocks=blocks, turn_roles=roles, limits=limits)

    @property
    def revision(self) -> int:
        return self.state.revision + 1

    @property
    def expected_ordering(self) -> int:
        return self.state.next_ordering + self.index

    @property
    def turn_id(self) -> str:
        return self.blocks[0].turn_id

    def knows_block(self, block_id: str) -> bool:
        return block_id in self.block_ids or block_id in self.state.block_ids

    def call(self, call_id: str) -> CallRecord | None:
        return self.calls.get(call_id) or self.state.call(call_id)

    def result(self, call_id: str) -> ResultRecord | None:
        return self.results.get(call_id) or self.state.results.get(call_id)

    def record(self, block: Block) -> None:
        """Take the (checked) block into the turn's view; the first claim of an id wins."""
        self.block_ids.add(block.id)
        if block.call_id is None:
            return
        if block.kind == BlockKind.TOOL_CALL and self.call(block.call_id) is None:
            self.calls[block.call_id] = CallRecord(
                block_id=block.id,
                tool_name=block.tool_name or "",
                argument_state=block.argument_state or ArgumentState.INCOMPLETE,
                argument_digest=block.argument_digest,
                schema_digest=block.schema_digest,
                generation=block.generation,
                revision=self.revision,
            )
        elif block.kind == BlockKind.TOOL_RESULT and self.result(block.call_id) is None:
            self.results[block.call_id] = ResultRecord(
                block_id=block.id, result_status=block.result_status or "", revision=self.revision
            )
