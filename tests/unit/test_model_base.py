"""`FastCopy.model_copy` against pydantic's own `BaseModel.model_copy`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from turnledger.dispatch.state import ManifestSeal
from turnledger.model.base import FastCopy
from turnledger.model.events import DispatchSent


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
