"""Committed blocks built without validating their values again (sequence/block_fields.py) are the
blocks `Block(**fields)` and a copy with the digest built: the same values of the same types, the
same fields-set, the same JSON; anything validation could refuse or change takes the validated path."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given
from pydantic import (
    Field,
    PrivateAttr,
    PydanticDeprecatedSince20,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
    root_validator,
    validator,
)

from tests.strategies import Conversation, conversations
from turnledger.model.base import shared_name
from turnledger.model.graph import ArgumentState, Block, BlockKind, BlockStatus
from turnledger.sequence import block_fields, builder
from turnledger.sequence.block_fields import PLAN, plain_values
from turnledger.sequence.builder import committed_block


def _validated(fields: dict[str, Any], schema_digest: str | None = None) -> Block:
    original = builder.plain_values
    builder.plain_values = lambda fields: None  # type: ignore[assignment]
    try:
        return committed_block(dict(fields), "turn-1", 3, 7, schema_digest)
    finally:
        builder.plain_values = original


def _same(fast: Block, slow: Block) -> None:
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__)
    assert [type(v) for v in fast.__dict__.values()] == [type(v) for v in slow.__dict__.values()]
    assert fast.model_fields_set == slow.model_fields_set
    assert _json(fast) == _json(slow)
    assert fast.model_dump(exclude_unset=True) == slow.model_dump(exclude_unset=True)
    assert fast.to_json_dict() == slow.to_json_dict()
    assert (fast.__pydantic_extra__, fast.__pydantic_private__) == (None, None)


def _json(block: Block) -> str:
    try:
        return block.model_dump_json()
    except ValueError as exc:  # text with no UTF-8 form (a lone surrogate)
        return type(exc).__name__


def test_the_plan_is_read_from_the_block_model() -> None:
    assert PLAN is not None
    assert PLAN.required == {"id", "role", "kind", "turn_id", "revision", "ordering", "trust_label"}
    assert set(PLAN.shares) == {"role", "kind", "trust_label", "status"}
    assert PLAN.types["revision"] == (int, False) and PLAN.types["text"] == (str, True)
    assert list(PLAN.defaults) == list(Block.model_fields)


@given(conversations())
def test_every_submitted_block_is_built_as_validation_builds_it(conversation: Conversation) -> None:
    built = 0
    for _, blocks in conversation.turns:
        for submitted in blocks:
            fields = submitted.model_dump(exclude_none=True)
            assert plain_values({**fields, "turn_id": "t", "revision": 1, "ordering": 0}) is not None
            _same(committed_block(dict(fields), "turn-1", 3, 7), _validated(fields))
            _same(committed_block(dict(fields), "turn-1", 3, 7, "sha256:s"), _validated(fields, "sha256:s"))
            built += 1
    assert built == sum(len(blocks) for _, blocks in conversation.turns)


_CALL = {
    "id": "b",
    "role": "assistant",
    "kind": "tool_call",
    "trust_label": "model",
    "call_id": "c",
    "tool_name": "t",
}


@pytest.mark.parametrize(
    "fields",
    [
        {
            "id": "b",
            "role": "assistant",
            "kind": BlockKind.TEXT,
            "trust_label": "model",
            "status": BlockStatus.COMMITTED,
            "text": "é",
        },
        {"id": "b", "role": "user", "kind": "text", "trust_label": "user"},
        {**_CALL, "arguments": '{"a": 1}'},
        {**_CALL, "arguments": '{"a": '},
        {
            "id": "b",
            "role": "tool",
            "kind": "tool_result",
            "trust_label": "tool",
            "call_id": "c",
            "generation": 2,
            "result_status": "success",
            "text": "x",
        },
        {"id": "b", "role": "user", "kind": "text", "trust_label": "user", "text": "\ud800"},
    ],
    ids=["enums", "defaults", "complete-call", "incomplete-call", "result", "no-utf8"],
)
def test_enums_defaults_calls_and_undigestable_text(fields: dict[str, Any]) -> None:
    fast = committed_block(dict(fields), "turn-1", 3, 7)
    _same(fast, _validated(fields))
    assert type(fast.kind) is str and fast.role is shared_name(fast.role)
    if "status" not in fields:
        assert fast.status is BlockStatus.COMMITTED and "status" not in fast.model_fields_set
    if fields["kind"] == "tool_call":
        assert type(fast.argument_state) is str
        assert fast.argument_state == (
            ArgumentState.INCOMPLETE if fields["arguments"].endswith(" ") else "complete"
        )
    assert (fast.digest == "") == (fields.get("text") == "\ud800")


@pytest.mark.parametrize(
    "change",
    [
        {"revision": True},
        {"ordering": 1.0},
        {"generation": "2"},
        {"text": b"bytes"},
        {"unknown": "x"},
        {"role": None},
    ],
)
def test_values_validation_could_refuse_or_change_take_the_validated_path(change: dict[str, Any]) -> None:
    fields = {"id": "b", "role": "user", "kind": "text", "trust_label": "user", **change}
    revision, ordering = fields.pop("revision", 1), fields.pop("ordering", 0)
    assert plain_values({**fields, "turn_id": "t", "revision": revision, "ordering": ordering}) is None
    try:
        expected: Block | None = _validated_as(fields, revision, ordering)
    except ValidationError:
        expected = None
    if expected is None:
        with pytest.raises(ValidationError):
            committed_block(dict(fields), "turn-1", revision, ordering)
    else:
        _same(committed_block(dict(fields), "turn-1", revision, ordering), expected)


def _validated_as(fields: dict[str, Any], revision: Any, ordering: Any) -> Block:
    return builder._validated_block(
        {**fields, "turn_id": "turn-1", "revision": revision, "ordering": ordering}, None
    )


def test_a_missing_required_field_takes_the_validated_path() -> None:
    assert (
        plain_values(
            {"id": "b", "role": "user", "kind": "text", "turn_id": "t", "revision": 1, "ordering": 0}
        )
        is None
    )
    assert block_fields.PLAN is PLAN


def test_the_sharing_validators_apply_to_the_values_given() -> None:
    role, trust = "".join(["assis", "tant"]), "".join(["mod", "el"])
    fields = {"id": "b", "role": role, "kind": "text", "trust_label": trust, "text": "hi"}
    kept_role, kept_trust = shared_name("assistant"), shared_name("model")
    assert role is not kept_role and trust is not kept_trust
    fast = committed_block(dict(fields), "turn-1", 3, 7)
    assert fast.role is kept_role and fast.trust_label is kept_trust
    _same(fast, _validated(fields))


def test_the_plan_is_built_when_asked_as_at_import() -> None:
    plan = block_fields._plan_of(Block)
    assert plan is not None and PLAN is not None
    assert (plan.defaults, plan.types, plan.required) == (PLAN.defaults, PLAN.types, PLAN.required)
    assert plan.shares == PLAN.shares and set(plan.shares.values()) == {shared_name}
    assert plan.defaults["status"] is BlockStatus.COMMITTED and plan.defaults["id"] is None
    assert block_fields._Plan().__dict__ == {
        "defaults": {},
        "types": {},
        "required": frozenset(),
        "shares": {},
    }


def _other_blocks() -> dict[str, type[Block]]:
    """Models like `Block` but for one thing validation does that the plan cannot do itself."""

    def derived(name: str, namespace: dict[str, Any]) -> type[Block]:
        return type(name, (Block,), {"__module__": __name__, **namespace})

    def not_sharing(value: str) -> str:
        return value

    annotated = {"__annotations__": {"revision": int}}
    return {
        "model validator": derived("A", {"check": model_validator(mode="after")(lambda self: self)}),
        "own field validator": derived("B", {"check": field_validator("text")(not_sharing)}),
        "sharing before": derived("C", {"check": field_validator("text", mode="before")(shared_name)}),
        "shared twice": derived("D", {"again": field_validator("role")(shared_name)}),
        "serializer": derived("E", {"show": field_serializer("text")(lambda self, v: v)}),
        "private": derived("F", {"_secret": PrivateAttr(default=None)}),
        "constrained": derived("G", {**annotated, "revision": Field(ge=0)}),
        "factory": derived("H", {"__annotations__": {"text": str}, "text": Field(default_factory=str)}),
        "float": derived("I", {"__annotations__": {"generation": float | None}, "generation": None}),
        "v1 validator": derived("J", {"check": _v1_validator("text")}),
        "v1 root validator": derived("K", {"check": _v1_root_validator()}),
    }


def _v1_validator(field: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PydanticDeprecatedSince20)
        return validator(field, allow_reuse=True)(lambda cls, v: v)


def _v1_root_validator() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PydanticDeprecatedSince20)
        return root_validator(skip_on_failure=True, allow_reuse=True)(lambda cls, values: values)


@pytest.mark.parametrize("case", sorted(_other_blocks()))
def test_a_model_validation_does_more_for_has_no_plan(case: str) -> None:
    assert block_fields._plan_of(_other_blocks()[case]) is None


def test_exactly_the_required_fields_take_the_plain_path() -> None:
    assert PLAN is not None
    required = {"id": "b", "role": "user", "kind": "text", "trust_label": "user"}
    required |= {"turn_id": "t", "revision": 1, "ordering": 0}
    assert set(required) == PLAN.required
    values = plain_values(required)
    assert values is not None and values["digest"] == "" and values["text"] is None
