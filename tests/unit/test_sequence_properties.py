"""Generated conversations validate; every single mutation from the spec's list is
rejected with its code or leaves the sequence WAITING, never Valid."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import assume, given
from hypothesis import strategies as st

from tests.strategies import Conversation, Turn, conversations, fold
from turnledger.model.events import SubmittedBlock
from turnledger.model.graph import SCOPED_INPUT_KINDS, BlockKind, sequence_digest
from turnledger.model.reasons import ReasonCode
from turnledger.sequence import GraphState, Invalid, Valid, Waiting, sequence_of, submit, validate_blocks

Where = tuple[int, int]  # (turn index, block index)


def positions(conv: Conversation, predicate: Callable[[SubmittedBlock], bool]) -> list[Where]:
    return [
        (t, b)
        for t, (_, blocks) in enumerate(conv.turns)
        for b, block in enumerate(blocks)
        if predicate(block)
    ]


def is_result(block: SubmittedBlock) -> bool:
    return block.kind == BlockKind.TOOL_RESULT


def is_call(block: SubmittedBlock) -> bool:
    return block.kind == BlockKind.TOOL_CALL


def block_at(conv: Conversation, where: Where) -> SubmittedBlock:
    return conv.turns[where[0]][1][where[1]]


def replace_block(conv: Conversation, where: Where, block: SubmittedBlock | None) -> Conversation:
    """Replace (or, with None, remove) one block; a turn left without its owner goes too."""
    turns = list(conv.turns)
    turn_id, blocks = turns[where[0]]
    new = list(blocks)
    if block is None:
        del new[where[1]]
    else:
        new[where[1]] = block
    own_roles = {b.role for b in new if b.kind not in SCOPED_INPUT_KINDS}
    new = [b for b in new if b.kind not in SCOPED_INPUT_KINDS or b.role in own_roles]
    if new:
        turns[where[0]] = (turn_id, tuple(new))
    else:
        del turns[where[0]]
    return conv.with_turns(tuple(turns))


def insert_turn(conv: Conversation, index: int, turn: Turn) -> Conversation:
    return conv.with_turns((*conv.turns[:index], turn, *conv.turns[index:]))


def edited(block: SubmittedBlock, **update: object) -> SubmittedBlock:
    return block.model_copy(update=update)


def call_turn_of(conv: Conversation, call_id: str | None) -> int:
    return next(t for t, b in positions(conv, is_call) if block_at(conv, (t, b)).call_id == call_id)


def rejected_with(conv: Conversation, code: ReasonCode) -> bool:
    outcome = fold(conv)
    return isinstance(outcome, Invalid) and code in outcome.codes


# ---------------------------------------------------------------- valid conversations


@given(conversations(allow_missing=True))
def test_generated_conversations_validate(conv: Conversation) -> None:
    state = fold(conv)
    assert isinstance(state, GraphState), state
    outcome = sequence_of(state)
    if conv.missing_call_ids:
        assert isinstance(outcome, Waiting)
        assert set(outcome.pending_call_ids) == set(conv.missing_call_ids)
    else:
        assert isinstance(outcome, Valid)
        assert all(edge.result_id is not None for edge in outcome.sequence.tool_edges)


@given(conversations(allow_missing=True))
def test_digests_are_deterministic_and_incremental(conv: Conversation) -> None:
    first, second = fold(conv), fold(conv)
    assert isinstance(first, GraphState)
    assert first.model_dump_json() == second.model_dump_json()
    whole = sequence_digest(conv.conversation_id, first.revision, first.blocks)
    assert first.sequence_digest == whole
    replayed = validate_blocks(conv.conversation_id, first.blocks)
    assert not isinstance(replayed, Invalid)
    assert replayed.sequence == sequence_of(first).sequence


@given(conversations(), st.data())
def test_state_restored_from_json_continues_identically(conv: Conversation, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(conv.turns)))
    state = fold(conv.with_turns(conv.turns[:cut]))
    assert isinstance(state, GraphState)
    restored = GraphState.model_validate_json(state.model_dump_json())
    assert restored == state
    for turn_id, blocks in conv.turns[cut:]:
        applied = submit(restored, turn_id, blocks)
        assert isinstance(applied, GraphState)
        restored = applied
    assert restored == fold(conv)


# ---------------------------------------------------------------- single mutations


@given(conversations(with_calls=True), st.data())
def test_dropping_a_result_waits(conv: Conversation, data: st.DataObject) -> None:
    where = positions(conv, is_result)
    assume(where)
    target = data.draw(st.sampled_from(where))
    outcome = fold(replace_block(conv, target, None))
    assert isinstance(outcome, GraphState)
    waiting = sequence_of(outcome)
    assert isinstance(waiting, Waiting)
    assert waiting.pending_call_ids == (block_at(conv, target).call_id,)


@given(conversations(with_calls=True), st.data(), st.booleans())
def test_duplicating_a_result_is_rejected(conv: Conversation, data: st.DataObject, later: bool) -> None:
    where = positions(conv, is_result)
    assume(where)
    target = data.draw(st.sampled_from(where))
    copy = edited(block_at(conv, target), id="dup-result")
    if later:
        mutated = insert_turn(conv, len(conv.turns), ("turn-dup", (copy,)))
    else:
        mutated = insert_turn(conv, target[0] + 1, ("turn-dup", (copy,)))
    assert rejected_with(mutated, ReasonCode.DUPLICATE_RESULT)


@given(conversations(with_calls=True), st.data())
def test_result_moved_before_its_call_is_orphaned(conv: Conversation, data: st.DataObject) -> None:
    where = positions(conv, is_result)
    assume(where)
    target = data.draw(st.sampled_from(where))
    moved = block_at(conv, target)
    without = replace_block(conv, target, None)
    mutated = insert_turn(without, call_turn_of(without, moved.call_id), ("turn-early", (moved,)))
    assert rejected_with(mutated, ReasonCode.ORPHANED_RESULT)


@given(conversations(with_calls=True), st.data())
def test_changed_argument_digest_is_rejected(conv: Conversation, data: st.DataObject) -> None:
    where = positions(conv, is_result)
    assume(where)
    target = data.draw(st.sampled_from(where))
    block = block_at(conv, target)
    digest = data.draw(st.sampled_from([f"sha256:{c * 64}" for c in "0f"]))
    mutated = replace_block(conv, target, edited(block, argument_digest=digest))
    assert rejected_with(mutated, ReasonCode.RESULT_ARGUMENT_DIGEST_MISMATCH)


@given(conversations(with_calls=True), st.data())
def test_changed_generation_is_rejected(conv: Conversation, data: st.DataObject) -> None:
    where = positions(conv, is_result)
    assume(where)
    target = data.draw(st.sampled_from(where))
    block = block_at(conv, target)
    generation = data.draw(st.integers(0, 10).filter(lambda g: g != block.generation))
    mutated = replace_block(conv, target, edited(block, generation=generation))
    assert rejected_with(mutated, ReasonCode.RESULT_GENERATION_MISMATCH)


@given(conversations(with_calls=True), st.data())
def test_arguments_truncated_at_any_byte_are_rejected(conv: Conversation, data: st.DataObject) -> None:
    where = positions(conv, is_call)
    assume(where)
    target = data.draw(st.sampled_from(where))
    block = block_at(conv, target)
    raw = (block.arguments or "").encode()
    cut = data.draw(st.integers(0, len(raw) - 1))
    truncated = raw[:cut].decode("utf-8", errors="ignore")
    mutated = replace_block(conv, target, edited(block, arguments=truncated))
    assert rejected_with(mutated, ReasonCode.INCOMPLETE_ARGUMENTS)


@given(conversations(), st.data())
def test_unknown_kind_is_rejected(conv: Conversation, data: st.DataObject) -> None:
    turn = data.draw(st.integers(0, len(conv.turns) - 1))
    turn_id, blocks = conv.turns[turn]
    kind = data.draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in set(BlockKind)))
    injected = SubmittedBlock(id="unknown-kind", role=blocks[0].role, kind=kind, trust_label="user", text="?")
    at = data.draw(st.integers(0, len(blocks)))
    turns = list(conv.turns)
    turns[turn] = (turn_id, (*blocks[:at], injected, *blocks[at:]))
    assert rejected_with(conv.with_turns(tuple(turns)), ReasonCode.UNKNOWN_KIND)


@given(conversations(), st.data())
def test_planned_block_is_rejected(conv: Conversation, data: st.DataObject) -> None:
    target = data.draw(st.sampled_from(positions(conv, lambda _: True)))
    mutated = replace_block(conv, target, edited(block_at(conv, target), status="planned"))
    assert rejected_with(mutated, ReasonCode.PLANNED_BLOCK)
