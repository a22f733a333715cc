"""`FastCopy.model_copy` against pydantic's own `BaseModel.model_copy`."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr

from turnledger.dispatch.state import ManifestSeal
from turnledger.model import base
from turnledger.model.base import FastCopy
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchRequested,
    DispatchSent,
    DispatchState,
)


def _full() -> DispatchSent:
    return DispatchSent.model_validate(
        {"conversationId": "c", "eventId": "e", "occurredAtMs": 1, "operationId": "o", "attemptGeneration": 1}
    )


def test_a_copy_is_pydantics_copy() -> None:
    for record in (
        _full(),
        ManifestSeal(manifest_digest="d", conversation_revision=1, cancel_generation=0, request_digest="r"),
    ):
        update = (
            {"conversation_id": "x"} if isinstance(record, DispatchSent) else {"conversation_revision": 2}
        )
        ours, theirs = record.model_copy(update=update), BaseModel.model_copy(record, update=update)
        assert type(ours) is type(theirs)
        assert ours.__dict__ == theirs.__dict__ and list(ours.__dict__) == list(theirs.__dict__)
        assert ours.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
        assert (ours.__pydantic_extra__, ours.__pydantic_private__) == (None, None)
        assert record.__dict__ != ours.__dict__  # the original is unchanged


def test_a_frozen_copy_shares_the_fields_set_only_when_it_adds_no_name() -> None:
    full = _full()
    same_names = full.model_copy(update={"operation_id": "x"})
    assert same_names.__pydantic_fields_set__ is full.__pydantic_fields_set__
    partial = DispatchSent(
        conversation_id="c", event_id="e", occurred_at_ms=1, operation_id="o", attempt_generation=1
    )
    assert partial.__pydantic_fields_set__ == set(DispatchSent.model_fields)  # all given: all set
    fewer = DispatchSent.model_construct(_fields_set={"conversation_id"}, **full.__dict__)
    grown = fewer.model_copy(update={"operation_id": "x"})
    assert grown.__pydantic_fields_set__ == {"conversation_id", "operation_id"}
    assert fewer.__pydantic_fields_set__ == {"conversation_id"}  # a new set: the original unchanged


def test_a_block_ref_is_built_as_validation_builds_it() -> None:
    """`BlockRef.of` skips validation: the instance must be the one `BlockRef(...)` builds."""
    from turnledger.model.graph import Block, BlockRef

    for call_id in (None, "call-1"):
        block = Block(
            id="t/b0",
            role="assistant",
            kind="tool_call" if call_id else "text",
            turn_id="t",
            revision=1,
            ordering=0,
            trust_label="model",
            digest="d" * 64,
            call_id=call_id,
        )
        ours = BlockRef.of(block)
        theirs = BlockRef(id=block.id, role=block.role, kind=block.kind, digest=block.digest, call_id=call_id)
        assert type(ours) is BlockRef
        assert list(ours.__dict__.items()) == list(theirs.__dict__.items())
        assert [type(v) for v in ours.__dict__.values()] == [type(v) for v in theirs.__dict__.values()]
        assert ours.__pydantic_fields_set__ is theirs.__pydantic_fields_set__  # the shared one
        assert (ours.__pydantic_extra__, ours.__pydantic_private__) == (None, None)
        assert ours == theirs and ours.model_dump_json() == theirs.model_dump_json()


def test_of_validated_is_only_for_models_validation_cannot_change() -> None:
    """BlockRef has no validators and no constraints: validating a field of a validated Block again
    can change or refuse nothing (what `of_validated` relies on)."""
    from turnledger.model.graph import Block, BlockRef

    decorators = BlockRef.__pydantic_decorators__
    assert not (decorators.validators or decorators.field_validators or decorators.model_validators)
    for name, info in BlockRef.model_fields.items():
        assert not info.metadata, name
        assert info.annotation == Block.model_fields[name].annotation, name


def _request() -> DispatchRequested:
    return DispatchRequested(
        conversation_id="c",
        event_id="e",
        occurred_at_ms=1,
        operation_id="o",
        adapter="a",
        provider="p",
        model_revision="m",
        max_output_tokens=5,
        policy={"temperature": [0.5]},
    )


def test_a_copy_without_an_update_is_pydantics_own() -> None:
    """No update (None or empty): pydantic's copy, a new instance equal to the original."""
    request = _request()
    for copy in (request.model_copy(), request.model_copy(update={})):
        assert copy is not request and copy == request
        assert copy.__dict__ == request.__dict__ and copy.policy is request.policy  # shallow
        assert copy.model_fields_set == request.model_fields_set


def test_a_deep_copy_copies_the_values_and_still_applies_the_update() -> None:
    """`deep=True` goes to pydantic: nested values are copies, the update is applied on top, and the
    names it adds join the copy's fields-set only."""
    request = _request()
    deep = request.model_copy(update={"max_output_tokens": 9, "settle_within_ms": 3}, deep=True)
    assert (deep.max_output_tokens, deep.settle_within_ms, deep.policy) == (9, 3, {"temperature": [0.5]})
    assert (
        deep.policy is not request.policy and deep.policy["temperature"] is not request.policy["temperature"]
    )
    assert deep.model_fields_set == request.model_fields_set | {"settle_within_ms"}
    assert "settle_within_ms" not in request.model_fields_set
    shallow = request.model_copy(update={"max_output_tokens": 9})
    assert shallow.max_output_tokens == 9 and shallow.policy is request.policy


def test_a_copy_that_updates_only_names_already_set_keeps_the_originals_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Even a set that is not a shared one (past the bound): updating names it holds neither grows
    nor replaces it."""
    monkeypatch.setattr(base, "_FIELDS_SETS", {})
    monkeypatch.setattr(base, "MAX_FIELDS_SETS", 0)
    fewer = DispatchSent.model_construct(_fields_set={"conversation_id"}, **_full().__dict__)
    assert base._FIELDS_SETS == {}
    copy = fewer.model_copy(update={"conversation_id": "x"})
    assert copy.conversation_id == "x" and copy.__pydantic_fields_set__ is fewer.__pydantic_fields_set__


class _WithPrivate(FastCopy):
    """A model with private state: `FastCopy` leaves its copies to pydantic."""

    value: int
    _seen: list[int] = PrivateAttr(default_factory=list)


def test_a_model_with_private_state_keeps_it_in_its_copies() -> None:
    """pydantic copies private attributes; the fast path, which sets none, must not take such a model."""
    original = _WithPrivate(value=1)
    original._seen.append(7)
    copy = original.model_copy(update={"value": 2})
    assert (copy.value, copy._seen, original.value) == (2, [7], 1)


def test_the_json_form_has_wire_names_json_values_and_no_absent_optionals() -> None:
    """`to_json_dict`: camelCase keys, enums as their words, tuples as lists, None fields left out."""
    decision = DispatchDecision(
        conversation_id="c",
        operation_id="o",
        state=DispatchState.SENT,
        conversation_revision=3,
        cancel_generation=0,
        source_event_id="e",
        occurred_at_ms=7,
    )
    wire = decision.to_json_dict()
    assert wire == {
        "conversationId": "c",
        "operationId": "o",
        "state": "SENT",
        "accepted": True,
        "detail": "",
        "conversationRevision": 3,
        "cancelGeneration": 0,
        "attemptGeneration": 0,
        "sourceEventId": "e",
        "occurredAtMs": 7,
        "attemptTerminated": False,
    }
    assert type(wire["state"]) is str
    turn = CommittedTurn(
        conversation_id="c", revision=1, turn_id="t", source_event_id="e", blocks=(), occurred_at_ms=7
    )
    assert turn.to_json_dict()["blocks"] == []


def test_past_the_bound_a_class_still_shares_one_every_field_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model with every field set takes its class's every-field set even when the shared table is
    full (that set is then not in the table): what a decoded or read-back record always has."""
    monkeypatch.setattr(base, "_FIELDS_SETS", {})
    monkeypatch.setattr(base, "MAX_FIELDS_SETS", 0)
    monkeypatch.setattr(base, "_EVERY_FIELD", {})
    first, second = _full(), _full()
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    assert first.__pydantic_fields_set__ is base.every_field(DispatchSent) == set(DispatchSent.model_fields)
    assert base._FIELDS_SETS == {}
    assert {DispatchSent: set(DispatchSent.model_fields)} == base._EVERY_FIELD


class _Open(FastCopy):
    """A model that takes extra attributes (none given: its extras are an empty dict)."""

    model_config = ConfigDict(extra="allow")

    value: int


def test_a_copy_of_a_model_that_takes_extras_has_extras_of_its_own() -> None:
    """An extra set on a copy is the copy's alone, as with pydantic's copy (which copies the dict)."""
    original = _Open(value=1)
    copy = original.model_copy(update={"value": 2})
    copy.added = 5  # type: ignore[attr-defined]
    assert copy.model_dump() == {"value": 2, "added": 5}
    assert original.model_dump() == {"value": 1} and original.__pydantic_extra__ == {}
