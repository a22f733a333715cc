"""The validator rules' edges that the one-case-per-rule tests leave open (mutation survivors of
`sequence/rules.py`): each test pins the exact reason codes and details of one boundary."""

from __future__ import annotations

from collections.abc import Callable

from turnledger.model.graph import Block
from turnledger.model.limits import DEFAULT_LIMITS
from turnledger.model.reasons import ReasonCode
from turnledger.sequence import Invalid, Valid, ValidationOutcome

from .test_sequence_rules import append_raw, base, call, result, run, text, with_turn

R = ReasonCode


def rejections(outcome: ValidationOutcome) -> list[tuple[ReasonCode, str | None, str]]:
    assert isinstance(outcome, Invalid), outcome
    return [(r.code, r.block_id, r.detail) for r in outcome.rejections]


def edited(position: int, **update: object) -> Callable[[tuple[Block, ...]], tuple[Block, ...]]:
    """The turn's blocks with one block edited and its digest recomputed (so only the edit is wrong)."""

    def edit(blocks: tuple[Block, ...]) -> tuple[Block, ...]:
        block = blocks[position].model_copy(update=update).with_digest()
        return (*blocks[:position], block, *blocks[position + 1 :])

    return edit


def test_an_empty_id_is_named() -> None:
    outcome = append_raw(edited(0, id=""))
    assert rejections(outcome) == [(R.MALFORMED_BLOCK, "", "empty id")]


def test_every_empty_field_is_named() -> None:
    outcome = append_raw(edited(1, call_id="", tool_name=""), 1)
    assert (R.MALFORMED_BLOCK, "c1", "empty call_id, tool_name") in rejections(outcome)


def test_every_missing_field_is_named() -> None:
    outcome = append_raw(edited(1, tool_name=None, generation=None), 2)
    assert (R.MALFORMED_BLOCK, "r1", "tool_result block lacks generation, tool_name") in rejections(outcome)


def test_only_an_assistant_text_may_carry_a_signature() -> None:
    """Gemini signs an answer's text part; a signature on a user's text, or on a scoped input, is
    still foreign."""
    signed_answer = [text("a1", "assistant", "model", "let me look", signature="c2ln")]
    assert isinstance(run(with_turn(1, [*signed_answer, *base()[1][1:]])), Valid)
    outcome = append_raw(edited(0, signature="c2ln"))
    assert rejections(outcome) == [(R.MALFORMED_BLOCK, "u2", "text block carries signature")]
    outcome = append_raw(edited(1, signature="c2ln"))
    assert rejections(outcome) == [(R.MALFORMED_BLOCK, "s3", "compression_artifact block carries signature")]


def test_every_foreign_field_is_named() -> None:
    outcome = append_raw(edited(0, call_id="call-9", tool_name="search"))
    assert rejections(outcome) == [(R.MALFORMED_BLOCK, "u2", "text block carries call_id, tool_name")]


def test_a_content_digest_mismatch_has_its_detail() -> None:
    outcome = append_raw(lambda b: (b[0].model_copy(update={"text": "edited"}), *b[1:]))
    assert rejections(outcome) == [(R.DIGEST_MISMATCH, "u2", "content digest does not match the block")]


def test_an_argument_digest_mismatch_has_its_detail() -> None:
    outcome = append_raw(edited(1, argument_digest="sha256:00"), 1)
    assert rejections(outcome) == [
        (R.DIGEST_MISMATCH, "c1", "argument digest does not match the call's arguments")
    ]


def test_an_incomplete_call_is_not_also_a_digest_mismatch() -> None:
    """The argument digest is checked only for complete calls: an incomplete one has no digest to match."""
    outcome = append_raw(edited(1, argument_state="incomplete", argument_digest="sha256:00"), 1)
    assert rejections(outcome) == [(R.INCOMPLETE_ARGUMENTS, "c1", "argument state is 'incomplete'")]


def test_arguments_on_a_text_block_are_only_malformed() -> None:
    outcome = append_raw(edited(0, arguments="not json"))
    assert rejections(outcome) == [(R.MALFORMED_BLOCK, "u2", "text block carries arguments")]


def test_a_result_status_on_a_text_block_is_only_malformed() -> None:
    outcome = append_raw(edited(0, result_status="pending"))
    assert rejections(outcome) == [(R.MALFORMED_BLOCK, "u2", "text block carries result_status")]


def test_a_reused_call_id_on_a_call_is_a_duplicate_call_not_a_duplicate_result() -> None:
    outcome = run([*base(), [call("c9", "call-1")]])
    assert rejections(outcome) == [(R.DUPLICATE_CALL_ID, "c9", "call id 'call-1' already emitted")]


def test_system_text_not_from_the_operator_has_its_detail() -> None:
    outcome = run(with_turn(3, [text("u2", "system", "user")]))
    assert rejections(outcome) == [
        (R.SCOPE_BOUNDARY_CROSSED, "u2", "system blocks are operator-labelled text only")
    ]


def test_a_lone_surrogate_names_every_field_that_holds_one() -> None:
    outcome = run(with_turn(2, [result("r2", "call-2", "read"), result("r1", "call-1", text="\ud800")]))
    assert (
        R.UNENCODABLE_TEXT,
        "r1",
        "text holds a lone surrogate (text with no UTF-8 form)",
    ) in rejections(outcome)
    outcome = append_raw(
        lambda b: (b[0].model_copy(update={"text": "\ud800", "trust_label": "\udc00"}), *b[1:])
    )
    assert (
        R.UNENCODABLE_TEXT,
        "u2",
        "trust_label, text holds a lone surrogate (text with no UTF-8 form)",
    ) in rejections(outcome)


def test_a_block_of_exactly_the_byte_limit_is_valid() -> None:
    limit = DEFAULT_LIMITS.max_block_bytes
    assert isinstance(run(with_turn(3, [text("u2", body="x" * limit)])), Valid)
    outcome = run(with_turn(3, [text("u2", body="x" * (limit + 1))]))
    assert rejections(outcome) == [
        (R.BLOCK_TOO_LARGE, "u2", f"content is {limit + 1} bytes, at most {limit}")
    ]


def test_a_reused_call_id_on_another_tool_is_not_checked_as_a_result() -> None:
    outcome = run([*base(), [call("c9", "call-1", tool="read", args='{"q": "z"}', gen=2)]])
    assert rejections(outcome) == [(R.DUPLICATE_CALL_ID, "c9", "call id 'call-1' already emitted")]


def test_a_result_argument_digest_mismatch_has_its_detail() -> None:
    turn = [result("r2", "call-2", "read"), result("r1", "call-1", args='{"q": "y"}')]
    assert rejections(run(with_turn(2, turn))) == [
        (R.RESULT_ARGUMENT_DIGEST_MISMATCH, "r1", "result's argument digest differs from the call's")
    ]
