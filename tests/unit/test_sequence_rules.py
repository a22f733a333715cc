"""One case per validator rule: the case must produce the rule's code, and must stop
producing it when that rule's row is removed from the table."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnledger.model.events import SubmittedBlock
from turnledger.model.graph import Block
from turnledger.model.limits import DEFAULT_LIMITS
from turnledger.model.reasons import ReasonCode
from turnledger.sequence import (
    RULES,
    GraphState,
    Invalid,
    Valid,
    ValidationOutcome,
    Waiting,
    append,
    argument_digest_of,
    blocks_from_submission,
    sequence_of,
    submit,
    validate_blocks,
)
from turnledger.sequence import builder as builder_module

Turns = list[list[SubmittedBlock]]


def text(
    id: str, role: str = "user", trust: str = "user", body: str = "hello", **kw: object
) -> SubmittedBlock:
    return SubmittedBlock(id=id, role=role, kind="text", trust_label=trust, text=body, **kw)


def call(
    id: str, call_id: str, tool: str = "search", args: str = '{"q": "x"}', gen: int = 1
) -> SubmittedBlock:
    return SubmittedBlock(
        id=id,
        role="assistant",
        kind="tool_call",
        trust_label="model",
        call_id=call_id,
        tool_name=tool,
        arguments=args,
        generation=gen,
    )


def result(id: str, call_id: str, tool: str = "search", args: str = '{"q": "x"}', gen: int = 1, **kw: object):
    fields: dict[str, object] = {
        "id": id,
        "role": "tool",
        "kind": "tool_result",
        "trust_label": "tool",
        "call_id": call_id,
        "tool_name": tool,
        "argument_digest": argument_digest_of(args),
        "generation": gen,
        "result_status": "success",
        "text": "42",
    }
    return SubmittedBlock(**{**fields, **kw})


def snippet(
    id: str, role: str = "user", trust: str = "retrieved", kind: str = "retrieved_snippet", body: str = "doc"
):
    return SubmittedBlock(id=id, role=role, kind=kind, trust_label=trust, text=body)


def base() -> Turns:
    return [
        [text("sys", "system", "operator", "be brief"), text("u1", body="assistant: pretend"), snippet("s1")],
        [text("a1", "assistant", "model", "let me look"), call("c1", "call-1"), call("c2", "call-2", "read")],
        [result("r2", "call-2", "read"), result("r1", "call-1"), snippet("s2", role="tool")],
        [text("u2"), snippet("s3", kind="compression_artifact")],
    ]


def run(turns: Turns, conversation_id: str = "conv-1") -> ValidationOutcome:
    state = GraphState.empty(conversation_id)
    for i, blocks in enumerate(turns):
        applied = submit(state, f"t{i}", blocks)
        if isinstance(applied, Invalid):
            return applied
        state = applied
    return sequence_of(state)


def with_turn(index: int, blocks: list[SubmittedBlock]) -> Turns:
    turns = base()
    turns[index] = blocks
    return turns


def append_raw(edit: Callable[[tuple[Block, ...]], tuple[Block, ...]], index: int = 3) -> ValidationOutcome:
    """Append the base's turn `index` as edited blocks, bypassing the builder's derivations."""
    turns = base()
    state = GraphState.empty("conv-1")
    for i, blocks in enumerate(turns[:index]):
        applied = submit(state, f"t{i}", blocks)
        assert isinstance(applied, GraphState)
        state = applied
    applied = append(state, edit(blocks_from_submission(state, "t-raw", turns[index])))
    return applied if isinstance(applied, Invalid) else sequence_of(applied)


def _first_copy(blocks: tuple[Block, ...], **update: object) -> tuple[Block, ...]:
    return (blocks[0].model_copy(update=update), *blocks[1:])


CASES: dict[str, tuple[ReasonCode, Callable[[], ValidationOutcome]]] = {
    "unknown_role": (ReasonCode.UNKNOWN_ROLE, lambda: run(with_turn(3, [text("u2", role="assistant:")]))),
    "unknown_kind": (
        ReasonCode.UNKNOWN_KIND,
        lambda: run(with_turn(3, [SubmittedBlock(id="v", role="user", kind="video", trust_label="user")])),
    ),
    "planned": (ReasonCode.PLANNED_BLOCK, lambda: run(with_turn(3, [text("u2", status="planned")]))),
    "malformed": (
        ReasonCode.MALFORMED_BLOCK,
        lambda: run(with_turn(3, [SubmittedBlock(id="u2", role="user", kind="text", trust_label="user")])),
    ),
    "blank_text": (ReasonCode.MALFORMED_BLOCK, lambda: run(with_turn(3, [text("u2", body=" \n")]))),
    "out_of_sequence": (
        ReasonCode.BLOCK_OUT_OF_SEQUENCE,
        lambda: append_raw(lambda b: _first_copy(b, ordering=0)),
    ),
    "digest_mismatch": (
        ReasonCode.DIGEST_MISMATCH,
        lambda: append_raw(lambda b: _first_copy(b, text="edited after digest")),
    ),
    "call_argument_digest_mismatch": (
        ReasonCode.DIGEST_MISMATCH,
        lambda: append_raw(lambda b: (b[0], b[1].model_copy(update={"argument_digest": "sha256:00"})), 1),
    ),
    "duplicate_block_id": (ReasonCode.DUPLICATE_BLOCK_ID, lambda: run(with_turn(3, [text("u1")]))),
    "scope_boundary": (
        ReasonCode.SCOPE_BOUNDARY_CROSSED,
        lambda: run(with_turn(3, [text("u2"), snippet("s3", "system")])),
    ),
    "incomplete_arguments": (
        ReasonCode.INCOMPLETE_ARGUMENTS,
        lambda: run(with_turn(1, [call("c1", "call-1", args='{"q": "x"')])),
    ),
    "invalid_arguments": (
        ReasonCode.INVALID_ARGUMENTS_JSON,
        lambda: run(with_turn(1, [call("c1", "call-1", args='{"q": "x", "q": "y"}')])),
    ),
    "unencodable_text": (
        ReasonCode.UNENCODABLE_TEXT,
        lambda: run(with_turn(3, [text("u2", body="a \ud800")])),
    ),
    "block_too_large": (
        ReasonCode.BLOCK_TOO_LARGE,
        lambda: run(with_turn(3, [text("u2", body="x" * (DEFAULT_LIMITS.max_block_bytes + 1))])),
    ),
    "too_many_blocks": (
        ReasonCode.TOO_MANY_BLOCKS,
        lambda: run(with_turn(3, [text(f"u2-{i}") for i in range(DEFAULT_LIMITS.max_blocks_per_turn + 1)])),
    ),
    "non_terminal_result": (
        ReasonCode.NON_TERMINAL_RESULT,
        lambda: run(
            with_turn(2, [result("r2", "call-2", "read"), result("r1", "call-1", result_status="pending")])
        ),
    ),
    "duplicate_call_id": (
        ReasonCode.DUPLICATE_CALL_ID,
        lambda: run(with_turn(1, [call("c1", "call-1"), call("c2", "call-1")])),
    ),
    "orphaned_result": (ReasonCode.ORPHANED_RESULT, lambda: run(with_turn(3, [result("r9", "call-9")]))),
    "duplicate_result": (
        ReasonCode.DUPLICATE_RESULT,
        lambda: run(with_turn(3, [result("r9", "call-1", result_status="error")])),
    ),
    "result_tool_mismatch": (
        ReasonCode.RESULT_TOOL_MISMATCH,
        lambda: run(with_turn(2, [result("r2", "call-2", "read"), result("r1", "call-1", "write")])),
    ),
    "result_argument_digest_mismatch": (
        ReasonCode.RESULT_ARGUMENT_DIGEST_MISMATCH,
        lambda: run(
            with_turn(2, [result("r2", "call-2", "read"), result("r1", "call-1", args='{"q": "y"}')])
        ),
    ),
    "result_generation_mismatch": (
        ReasonCode.RESULT_GENERATION_MISMATCH,
        lambda: run(with_turn(2, [result("r2", "call-2", "read"), result("r1", "call-1", gen=2)])),
    ),
}


def codes(outcome: ValidationOutcome) -> frozenset[ReasonCode]:
    return outcome.codes if isinstance(outcome, Invalid) else frozenset()


def test_base_conversation_is_valid() -> None:
    outcome = run(base())
    assert isinstance(outcome, Valid)
    assert outcome.sequence.conversation_revision == 4
    assert [e.result_id for e in outcome.sequence.tool_edges] == ["r1", "r2"]
    assert outcome.sequence.blocks[1].role == "user"  # "assistant: pretend" is content


def test_every_rule_has_a_case() -> None:
    assert {rule.check.__name__ for rule in RULES} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_rejects_its_case(name: str) -> None:
    code, case = CASES[name]
    assert code in codes(case())


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_passes_that_rule_when_the_row_is_removed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    code, case = CASES[name]
    with_rule = count(case(), code)
    monkeypatch.setattr(builder_module, "RULES", tuple(r for r in RULES if r.check.__name__ != name))
    assert count(case(), code) < with_rule


def count(outcome: ValidationOutcome, code: ReasonCode) -> int:
    return sum(r.code == code for r in outcome.rejections) if isinstance(outcome, Invalid) else 0


def test_missing_result_is_waiting_not_invalid() -> None:
    outcome = run(with_turn(2, [result("r2", "call-2", "read")])[:3])
    assert isinstance(outcome, Waiting)
    assert outcome.pending_call_ids == ("call-1",)


def test_cancel_and_error_results_are_terminal() -> None:
    turn = [
        result("r2", "call-2", "read", result_status="cancel"),
        result("r1", "call-1", result_status="error"),
    ]
    assert isinstance(run(with_turn(2, turn)), Valid)


def test_call_id_reused_in_a_later_turn_is_a_duplicate() -> None:
    turns = [*base(), [call("c9", "call-1")]]
    assert ReasonCode.DUPLICATE_CALL_ID in codes(run(turns))


def test_result_before_its_call_is_orphaned() -> None:
    turns = base()
    turns.insert(1, [result("r0", "call-1")])
    assert ReasonCode.ORPHANED_RESULT in codes(run(turns))


def test_truncated_arguments_from_the_builder_are_incomplete() -> None:
    turns = with_turn(1, [call("c1", "call-1", args='{"q": "x"}'[:5])])
    assert ReasonCode.INCOMPLETE_ARGUMENTS in codes(run(turns))


def test_arguments_that_are_not_an_object_are_invalid_not_incomplete() -> None:
    """Complete JSON that is not an object: what the stream path says too (INVALID_ARGUMENTS_JSON)."""
    outcome = run(with_turn(1, [call("c1", "call-1", args="[1]")]))
    assert isinstance(outcome, Invalid)
    assert [(r.code, r.block_id) for r in outcome.rejections] == [(ReasonCode.INVALID_ARGUMENTS_JSON, "c1")]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ('{"q": nu', ReasonCode.INCOMPLETE_ARGUMENTS),
        ('{"q": tr', ReasonCode.INCOMPLETE_ARGUMENTS),
        ('{"q": 1.', ReasonCode.INCOMPLETE_ARGUMENTS),
        ('{"q": "abc', ReasonCode.INCOMPLETE_ARGUMENTS),
        ("", ReasonCode.INCOMPLETE_ARGUMENTS),
        ('{"q": 1, "q": 2}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"q": {"a": 1, "a": 1}}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"q": 18446744073709551616}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"q": 1e400}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"q": NaN}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"q": "\\ud800"}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"q": 1} x', ReasonCode.INVALID_ARGUMENTS_JSON),
    ],
)
def test_call_arguments_get_exactly_one_code(args: str, code: ReasonCode) -> None:
    outcome = run(with_turn(1, [call("c1", "call-1", args=args)]))
    assert isinstance(outcome, Invalid)
    assert [(r.code, r.block_id) for r in outcome.rejections] == [(code, "c1")]


def test_integers_beyond_64_bits_no_longer_share_a_digest() -> None:
    """orjson read both as the same float; the strict parse refuses both."""
    assert argument_digest_of('{"n": 18446744073709551616}') is None
    assert argument_digest_of('{"n": 18446744073709551617}') is None
    assert argument_digest_of('{"n": 18446744073709551615}') != argument_digest_of(
        '{"n": 18446744073709551614}'
    )


@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param([text("u2"), snippet("s3", trust="user")], id="snippet-not-retrieved"),
        pytest.param([text("u2"), snippet("s3", role="assistant")], id="snippet-as-assistant"),
        pytest.param([text("u2"), snippet("s3", role="tool")], id="tool-snippet-in-user-turn"),
        pytest.param([text("a9", "assistant", "model"), snippet("s3")], id="snippet-in-assistant-turn"),
        pytest.param([text("u2", "system", "user")], id="system-text-not-operator"),
        pytest.param([text("u2", trust="operator")], id="operator-label-on-user"),
        pytest.param([text("u2", "tool", "tool")], id="tool-role-text-is-fine-but-result-role-is-checked"),
    ],
)
def test_scope_boundaries(blocks: list[SubmittedBlock]) -> None:
    outcome = run(with_turn(3, blocks))
    if blocks[0].role == "tool":
        assert isinstance(outcome, Valid)
    else:
        assert ReasonCode.SCOPE_BOUNDARY_CROSSED in codes(outcome)


def test_result_and_call_roles_are_fixed() -> None:
    bad_result = result("r1", "call-1", role="user")
    assert ReasonCode.SCOPE_BOUNDARY_CROSSED in codes(
        run(with_turn(2, [result("r2", "call-2", "read"), bad_result]))
    )
    bad_call = call("c1", "call-1").model_copy(update={"role": "user"})
    assert ReasonCode.SCOPE_BOUNDARY_CROSSED in codes(run(with_turn(1, [bad_call])))


def test_only_scoped_inputs_make_a_user_turn() -> None:
    assert isinstance(run(with_turn(3, [snippet("s3")])), Valid)
    assert ReasonCode.SCOPE_BOUNDARY_CROSSED in codes(run(with_turn(3, [snippet("s3", role="tool")])))


def test_foreign_fields_are_malformed() -> None:
    assert ReasonCode.MALFORMED_BLOCK in codes(run(with_turn(3, [text("u2", call_id="call-1")])))


def test_empty_turn_is_malformed() -> None:
    assert ReasonCode.MALFORMED_BLOCK in codes(run([*base(), []]))


def test_invalid_turn_leaves_the_state_unchanged() -> None:
    state = GraphState.empty("conv-1")
    for i, blocks in enumerate(base()):
        applied = submit(state, f"t{i}", blocks)
        assert isinstance(applied, GraphState)
        state = applied
    before = state.model_dump_json()
    rejected = submit(state, "t-bad", [text("u9"), result("r9", "call-1")])
    assert isinstance(rejected, Invalid)
    assert state.model_dump_json() == before
    assert submit(state, "t-ok", [text("u9")]) != rejected


def test_graph_state_round_trips_through_json() -> None:
    state = GraphState.empty("conv-1")
    for i, blocks in enumerate(base()[:2]):
        applied = submit(state, f"t{i}", blocks)
        assert isinstance(applied, GraphState)
        state = applied
    assert state.pending_call_ids == ("call-1", "call-2")
    restored = GraphState.model_validate_json(state.model_dump_json())
    assert restored == state
    assert restored.model_dump_json() == state.model_dump_json()
    assert submit(restored, "t2", base()[2]) == submit(state, "t2", base()[2])


def test_validate_blocks_matches_the_incremental_fold() -> None:
    outcome = run(base())
    assert isinstance(outcome, Valid)
    assert validate_blocks("conv-1", outcome.sequence.blocks) == outcome
    swapped = list(outcome.sequence.blocks)
    swapped[6], swapped[4] = swapped[4], swapped[6]
    assert isinstance(validate_blocks("conv-1", swapped), Invalid)


def test_an_invalid_outcome_names_the_code_of_every_rejection_once() -> None:
    from turnledger.sequence.validation import Rejection

    outcome = Invalid(
        (
            Rejection(ReasonCode.DUPLICATE_CALL_ID, "first", "b1", "call-1"),
            Rejection(ReasonCode.ORPHANED_RESULT, "second", "b2"),
            Rejection(ReasonCode.DUPLICATE_CALL_ID, "third", "b3", "call-1"),
        )
    )
    assert outcome.codes == frozenset({ReasonCode.DUPLICATE_CALL_ID, ReasonCode.ORPHANED_RESULT})
    assert Invalid(()).codes == frozenset()


def _rejections(outcome: ValidationOutcome) -> list[tuple[ReasonCode, str, str | None]]:
    assert isinstance(outcome, Invalid), outcome
    return [(r.code, r.detail, r.block_id) for r in outcome.rejections]


@pytest.mark.parametrize(
    ("index", "blocks", "detail", "block_id"),
    [
        (0, [text("sys", "system", "operator", "")], "text of the system text block is blank", "sys"),
        (3, [text("u2", body="")], "text of the user text block is blank", "u2"),
        (3, [text("u2", body="\u3000\t\x85")], "text of the user text block is blank", "u2"),
        (3, [text("u2"), snippet("s3", body=" ")], "text of the user retrieved_snippet block is blank", "s3"),
        (
            2,
            [result("r2", "call-2", "read"), result("r1", "call-1"),
             snippet("s2", role="tool", kind="compression_artifact", body="\n")],
            "text of the tool compression_artifact block is blank",
            "s2",
        ),
    ],
)  # fmt: skip
def test_blank_submitted_text_is_one_malformed_block_naming_role_and_kind(
    index: int, blocks: list[SubmittedBlock], detail: str, block_id: str
) -> None:
    assert _rejections(run(with_turn(index, blocks))) == [(ReasonCode.MALFORMED_BLOCK, detail, block_id)]


def test_text_with_one_visible_character_is_not_blank() -> None:
    outcome = run(with_turn(3, [text("u2", body=" \n.\t"), snippet("s3", body="\u3000x")]))
    assert isinstance(outcome, Valid)


def test_blank_assistant_text_and_blank_tool_results_are_not_refused() -> None:
    """Assistant text is what the provider said; a tool's output may be empty (the Anthropic and Bedrock
    adapters render a blank result without text)."""
    turns = base()
    turns[1] = [text("a1", "assistant", "model", "\n\n"), call("c1", "call-1"), call("c2", "call-2", "read")]
    turns[2] = [result("r2", "call-2", "read", text=""), result("r1", "call-1", text=" \n")]
    turns.append([text("a2", "assistant", "model", "")])
    outcome = run(turns)
    assert isinstance(outcome, Valid)
    texts = [b.text for b in outcome.sequence.blocks if b.id in ("a1", "r2", "r1", "a2")]
    assert texts == ["\n\n", "", " \n", ""]


def _assistant_text(**kw: object) -> SubmittedBlock:
    return text("a9", "assistant", "model", "said", **kw)


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"signed_by": "gemini"}, "text block names who signed it (signed_by) but carries no signature"),
        ({"signed_by": "", "signature": "c2ln"}, "empty signed_by"),
        ({"item_id": "rs_1"}, "text block carries item_id"),
    ],
)
def test_a_signer_without_a_signature_or_an_empty_one_is_malformed(
    fields: dict[str, object], detail: str
) -> None:
    outcome = run(with_turn(3, [text("u2"), _assistant_text(**fields)]))
    assert isinstance(outcome, Invalid)
    assert [(r.code, r.detail) for r in outcome.rejections] == [(ReasonCode.MALFORMED_BLOCK, detail)]


def test_a_signature_with_its_signer_is_valid() -> None:
    outcome = run(with_turn(3, [text("u2"), _assistant_text(signature="c2ln", signed_by="gemini")]))
    assert isinstance(outcome, Valid)
    assert [(b.signature, b.signed_by) for b in outcome.sequence.blocks[-1:]] == [("c2ln", "gemini")]


def test_an_item_id_is_a_thinking_blocks_and_never_empty() -> None:
    def thinking(**kw: object) -> SubmittedBlock:
        return SubmittedBlock(id="th", role="assistant", kind="thinking", trust_label="model", text="t", **kw)

    valid = run(
        with_turn(3, [text("u2"), thinking(item_id="rs_1", signature="enc", signed_by="openai-responses")])
    )
    assert isinstance(valid, Valid)
    assert valid.sequence.blocks[-1].item_id == "rs_1"
    empty = run(with_turn(3, [text("u2"), thinking(item_id="")]))
    assert isinstance(empty, Invalid)
    assert [(r.code, r.detail) for r in empty.rejections] == [(ReasonCode.MALFORMED_BLOCK, "empty item_id")]
