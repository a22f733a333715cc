"""A turn's own view while it is validated (`sequence/scan.py`) and the builder's edges: what a turn
introduces is seen by its later blocks (the first claim of an id wins), the incremental digest is
the whole-history digest at every revision, the caller's limits reach the rules. Mutation survivors
of `sequence/` pinned by exact rejections."""

from __future__ import annotations

from turnledger.model.graph import sequence_digest
from turnledger.model.limits import Limits
from turnledger.model.reasons import ReasonCode
from turnledger.sequence import GraphState, Invalid, append, submit

from .test_sequence_rules import call, result, text

R = ReasonCode


def _rejections(outcome: GraphState | Invalid) -> list[tuple[ReasonCode, str | None, str]]:
    assert isinstance(outcome, Invalid), outcome
    return [(r.code, r.block_id, r.detail) for r in outcome.rejections]


def _state(*turns: list) -> GraphState:  # type: ignore[type-arg]
    state = GraphState.empty("conv-1")
    for i, blocks in enumerate(turns):
        applied = submit(state, f"t{i}", blocks)
        assert isinstance(applied, GraphState), applied
        state = applied
    return state


def test_a_block_id_used_twice_in_one_turn_is_a_duplicate() -> None:
    outcome = submit(_state(), "t0", [text("u1"), text("u2"), text("u1", body="again")])
    assert _rejections(outcome) == [(R.DUPLICATE_BLOCK_ID, "u1", "block id 'u1' already used")]


def test_a_call_id_emitted_twice_in_one_turn_keeps_the_first_call() -> None:
    """The result in the same turn is checked against the first call, the one that stands."""
    state = _state([text("u1")])
    outcome = submit(
        state, "t1", [call("c1", "call-1"), call("c1b", "call-1", "read"), result("r1", "call-1")]
    )
    assert _rejections(outcome) == [(R.DUPLICATE_CALL_ID, "c1b", "call id 'call-1' already emitted")]


def test_every_later_result_of_a_call_in_one_turn_names_the_first() -> None:
    state = _state([text("u1")], [call("c1", "call-1")])
    outcome = submit(state, "t2", [result("r1", "call-1"), result("r1b", "call-1"), result("r1c", "call-1")])
    assert _rejections(outcome) == [
        (R.DUPLICATE_RESULT, "r1b", "call 'call-1' already has result 'r1'"),
        (R.DUPLICATE_RESULT, "r1c", "call 'call-1' already has result 'r1'"),
    ]


def test_a_call_without_a_tool_name_is_recorded_with_an_empty_one() -> None:
    state = _state([text("u1")])
    nameless = call("c1", "call-1").model_copy(update={"tool_name": None})
    outcome = submit(state, "t1", [nameless, result("r1", "call-1")])
    assert _rejections(outcome) == [
        (R.MALFORMED_BLOCK, "c1", "tool_call block lacks tool_name"),
        (R.RESULT_TOOL_MISMATCH, "r1", "result for tool 'search', call was ''"),
    ]


def test_an_empty_turn_is_malformed_and_says_so() -> None:
    assert _rejections(append(_state(), ())) == [(R.MALFORMED_BLOCK, None, "a turn needs at least one block")]


def test_submit_checks_the_turn_against_the_callers_limits() -> None:
    outcome = submit(_state(), "t0", [text("u1"), text("u2")], Limits(max_blocks_per_turn=1))
    assert _rejections(outcome) == [(R.TOO_MANY_BLOCKS, "u2", "the turn has 2 blocks, at most 1")]


def test_the_incremental_digest_is_the_whole_history_digest_at_every_revision() -> None:
    turns = [[text("u1")], [call("c1", "call-1")], [result("r1", "call-1")], [text("u2")]]
    state = GraphState.empty("conv-1")
    digests = [state.sequence_digest]
    assert state.sequence_digest == sequence_digest("conv-1", 0, ())
    for i, blocks in enumerate(turns):
        applied = submit(state, f"t{i}", blocks)
        assert isinstance(applied, GraphState)
        state = applied
        assert state.sequence_digest == sequence_digest("conv-1", state.revision, state.blocks)
        digests.append(state.sequence_digest)
    assert len(set(digests)) == len(turns) + 1
    assert GraphState.empty("conv-2").sequence_digest != digests[0]
