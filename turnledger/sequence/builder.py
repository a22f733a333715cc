"""Building the message graph from committed turns, one turn at a time.

`append` is the validator's entry point: it checks only the new turn's blocks
against the indexes carried in `GraphState` and either returns the advanced state
or rejects the whole turn (the state is immutable, so an invalid turn leaves it as
it was). `sequence_of` renders the state as MessageSequence.v1, or WAITING while
an emitted call lacks its terminal result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import groupby
from typing import Any

from turnledger.model.canonical import CanonicalJsonError, digest_of
from turnledger.model.events import SubmittedBlock
from turnledger.model.graph import (
    ArgumentState,
    Block,
    BlockKind,
    MessageSequence,
    ToolEdge,
    block_digest,
    content_fields_of,
    seal_sequence_digest,
    sequence_chain,
)
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.reasons import ReasonCode
from turnledger.sequence.arguments import argument_digest_of
from turnledger.sequence.block_fields import plain_block, plain_values
from turnledger.sequence.graph_state import GraphState
from turnledger.sequence.rules import RULES
from turnledger.sequence.scan import TurnScan
from turnledger.sequence.validation import Invalid, Rejection, Valid, ValidationOutcome, Waiting


def blocks_from_submission(
    state: GraphState, turn_id: str, submitted: Sequence[SubmittedBlock]
) -> tuple[Block, ...]:
    """Turn a producer's blocks into the next revision's blocks (not yet validated).

    The processor, not the producer, assigns revision, ordering and content digest;
    for tool calls it derives argument state and digest from the raw arguments, so
    a producer cannot declare truncated arguments complete.
    """
    revision = state.revision + 1
    return tuple(
        committed_block(sb.model_dump(exclude_none=True), turn_id, revision, state.next_ordering + offset)
        for offset, sb in enumerate(submitted)
    )


def committed_block(
    fields: dict[str, Any], turn_id: str, revision: int, ordering: int, schema_digest: str | None = None
) -> Block:
    """The block of one submitted block's `fields` (as `SubmittedBlock.model_dump(exclude_none=True)`
    gives them) at `revision` and `ordering`, with its content digest and, for a call a toolset
    names, its `schema_digest`. Built once, without validating the values again where that could
    neither refuse nor change one (`block_fields.py`): the blocks of a turn are ~6% of a dispatch's
    CPU (issue 20)."""
    if fields["kind"] == BlockKind.TOOL_CALL:
        arguments = argument_digest_of(fields.get("arguments"))
        fields["argument_digest"] = arguments
        fields["argument_state"] = ArgumentState.INCOMPLETE if arguments is None else ArgumentState.COMPLETE
    fields["turn_id"], fields["revision"], fields["ordering"] = turn_id, revision, ordering
    values = plain_values(fields)
    if values is None:
        return _validated_block(fields, schema_digest)
    given = set(fields)
    try:
        values["digest"] = digest_of(content_fields_of(values))
        given.add("digest")
    except CanonicalJsonError:
        pass  # no digest for text with no UTF-8 form: the validator rejects it (UNENCODABLE_TEXT)
    if schema_digest:
        values["schema_digest"] = schema_digest
        given.add("schema_digest")
    return plain_block(values, given)


def _validated_block(fields: dict[str, Any], schema_digest: str | None) -> Block:
    """`committed_block` by validation: for values `plain_values` leaves to it."""
    block = Block(**fields)
    update: dict[str, Any] = {}
    try:
        digest = block_digest(block)
    except CanonicalJsonError:
        digest = None
    if digest is not None:
        update["digest"] = digest
    if schema_digest:
        update["schema_digest"] = schema_digest
    return block.model_copy(update=update) if update else block


def append(
    state: GraphState, blocks: Sequence[Block], limits: Limits = DEFAULT_LIMITS
) -> GraphState | Invalid:
    """Validate one turn against the state's indexes (and `limits`) and apply it, all or nothing."""
    if not blocks:
        return Invalid((Rejection(ReasonCode.MALFORMED_BLOCK, "a turn needs at least one block"),))
    scan = TurnScan.start(state, blocks, limits)
    rejections = list(_rejections(scan))
    if rejections:
        return Invalid(tuple(rejections))
    return _advance(state, scan)


def _rejections(scan: TurnScan) -> Iterator[Rejection]:
    for index, block in enumerate(scan.blocks):
        scan.index = index
        for rule in RULES:
            detail = rule.check(block, scan)
            if detail is not None:
                yield Rejection(rule.code, detail, block.id, block.call_id)
        scan.record(block)


def _advance(state: GraphState, scan: TurnScan) -> GraphState:
    head = sequence_chain(state.conversation_id, scan.blocks, state.chain_head)
    answered = scan.results.keys()
    pending = tuple(c for c in state.pending_call_ids if c not in answered) + tuple(
        c for c in scan.calls if c not in answered
    )
    return state.model_copy(
        update={
            "revision": scan.revision,
            "blocks": state.blocks + tuple(scan.blocks),
            "chain_head": head,
            "sequence_digest": seal_sequence_digest(head, scan.revision),
            "block_ids": {**state.block_ids, **{b.id: b.ordering for b in scan.blocks}},
            "calls": {**state.calls, **scan.calls},
            "results": {**state.results, **scan.results},
            "pending_call_ids": pending,
        }
    )


def submit(
    state: GraphState,
    turn_id: str,
    submitted: Sequence[SubmittedBlock],
    limits: Limits = DEFAULT_LIMITS,
) -> GraphState | Invalid:
    """`blocks_from_submission` then `append`: what the fold does with a TurnSubmitted."""
    return append(state, blocks_from_submission(state, turn_id, submitted), limits)


def sequence_of(state: GraphState, *, edges: bool = True) -> Valid | Waiting:
    """MessageSequence.v1 of the state; WAITING while any emitted call lacks its result.

    `edges=False` leaves out the tool edges (one per call of the whole history): a dispatch renders,
    lists and digests the blocks only, and built them for nothing (issue 20: long conversations).

    Built without validating again (`of_validated`): every field is a validated field of the
    state, or of its call and result records, with the same annotation (a result's `str` status
    into the edge's `str | None`), so validation could neither refuse nor change one; a dispatch
    builds the sequence of the whole history, one edge per call (issue 20: long conversations)."""
    sequence = MessageSequence.of_validated(
        {
            "conversation_id": state.conversation_id,
            "conversation_revision": state.revision,
            "sequence_digest": state.sequence_digest,
            "blocks": state.blocks,
            "tool_edges": tool_edges(state) if edges else (),
        }
    )
    if state.pending_call_ids:
        return Waiting(sequence, state.pending_call_ids)
    return Valid(sequence)


def tool_edges(state: GraphState) -> tuple[ToolEdge, ...]:
    results = state.results
    return tuple(
        ToolEdge.of_validated(
            {
                "call_id": call_id,
                "tool_name": call.tool_name,
                "call_block_id": call.block_id,
                "schema_digest": call.schema_digest,
                "argument_state": call.argument_state,
                "argument_digest": call.argument_digest,
                "generation": call.generation,
                "result_id": None if (result := results.get(call_id)) is None else result.block_id,
                "result_status": None if result is None else result.result_status,
            }
        )
        for call_id, call in state.calls.items()
    )


def validate_blocks(conversation_id: str, blocks: Sequence[Block]) -> ValidationOutcome:
    """Validate a whole history by folding `append` over its turns (runs of one revision).

    For tests and replay; the processor appends turn by turn as they arrive.
    """
    state = GraphState.empty(conversation_id)
    for _, turn in groupby(blocks, key=lambda b: b.revision):
        result = append(state, tuple(turn))
        if isinstance(result, Invalid):
            return result
        state = result
    return sequence_of(state)
