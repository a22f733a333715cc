"""Memory only: equal fields-sets and equal tool definitions are one object across instances.

Neither changes a model's fields, equality, JSON or encoding (asserted here on every case); what
they change is that a cached conversation no longer pays for its own copy (issue 20).
"""

from __future__ import annotations

import gc

import pytest

from turnledger.codec import decode, encode
from turnledger.model import base, tools
from turnledger.model.events import DispatchRequested
from turnledger.model.graph import Block
from turnledger.model.tools import ToolDefinition

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _block(text: str, **more: object) -> Block:
    fields = {"id": "b0", "role": "user", "kind": "text", "turn_id": "t", "revision": 1, "ordering": 0}
    return Block.model_validate({**fields, "trust_label": "user", "digest": "sha256:0", "text": text, **more})


def test_instances_validated_with_the_same_fields_share_one_fields_set() -> None:
    a, b = _block("one"), _block("two")
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.model_fields_set == {
        "id",
        "role",
        "kind",
        "turn_id",
        "revision",
        "ordering",
        "trust_label",
        "digest",
        "text",
    }
    c = _block("three", call_id="c1")
    assert c.model_fields_set == a.model_fields_set | {"call_id"}
    assert c.__pydantic_fields_set__ is not a.__pydantic_fields_set__


def test_a_copy_shares_its_fields_set_and_adds_a_new_name_to_a_new_shared_one() -> None:
    a = _block("one")
    names = set(a.model_fields_set)
    same = a.model_copy(update={"text": "two"})
    assert same.__pydantic_fields_set__ is a.__pydantic_fields_set__
    more = a.model_copy(update={"call_id": "c1"})
    assert more.model_fields_set == names | {"call_id"} and a.model_fields_set == names
    assert more.__pydantic_fields_set__ is _block("x", call_id="c2").__pydantic_fields_set__
    deep = a.model_copy(update={"signature": "s"}, deep=True)  # pydantic's own copy: copies the set first
    assert deep.model_fields_set == names | {"signature"} and a.model_fields_set == names
    assert same == _block("two") and more.model_dump_json() == _block("one", call_id="c1").model_dump_json()


def test_past_the_bound_a_new_fields_set_is_left_unshared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_FIELDS_SETS", {})
    monkeypatch.setattr(base, "MAX_FIELDS_SETS", 1)
    first, again = _block("one"), _block("two")
    assert first.__pydantic_fields_set__ is again.__pydantic_fields_set__
    other, other_again = _block("one", call_id="c"), _block("two", call_id="c")
    assert other.__pydantic_fields_set__ is not other_again.__pydantic_fields_set__
    assert other.model_fields_set == other_again.model_fields_set
    assert len(base._FIELDS_SETS) == 1


def _request(event_id: str, description: str = "weather") -> DispatchRequested:
    return DispatchRequested(
        conversation_id="c",
        event_id=event_id,
        occurred_at_ms=1,
        operation_id="op",
        adapter="openai-chat@1",
        provider="openai",
        model_revision="gpt-4o@2024-08-06",
        tools=(ToolDefinition(name="get_weather", description=description, input_schema=WEATHER),),
        max_output_tokens=16,
    )


def test_requests_decoded_with_equal_tools_share_the_definitions() -> None:
    first, second = _request("e1"), _request("e2")
    wire = encode(first), encode(second)
    a, b = decode(wire[0]), decode(wire[1])
    assert isinstance(a, DispatchRequested) and isinstance(b, DispatchRequested)
    assert a.tools[0] is b.tools[0]  # the wire's schema is canonical (sorted keys): not `first`'s
    read = DispatchRequested.model_validate_json(a.model_dump_json())  # as a state read back
    assert read.tools[0] is a.tools[0]
    assert (a, b) == (first, second) and (encode(a), encode(b)) == wire
    other = _request("e3", description="the weather")
    assert other.tools[0] is not a.tools[0] and other.tools[0].description == "the weather"


def test_a_definition_no_request_names_any_more_is_not_kept() -> None:
    key = _request("e1", description="held only here").tools[0].model_dump_json().encode()
    gc.collect()
    assert key not in tools._LIVE
    kept = _request("e2", description="held only here")
    assert tools._LIVE[key] is kept.tools[0]


def _fresh(text: str) -> str:
    """An equal string that is not the same object (as decoding gives one per record); not of one
    character, which CPython keeps one object of whatever builds it."""
    assert len(text) > 1, text
    return "".join(list(text))


def test_a_blocks_and_a_requests_few_valued_names_are_one_string_each() -> None:
    names = {"role": "user", "kind": "text", "trust_label": "user", "status": "committed"}
    a, b = (_block("x", **{k: _fresh(v) for k, v in names.items()}) for _ in range(2))
    for name in names:
        assert getattr(a, name) is getattr(b, name), name
    assert a == b and a.model_dump_json() == _block("x", **names).model_dump_json()
    fields = {"adapter": "openai-chat@1", "provider": "openai", "model_revision": "gpt-4o@2024-08-06"}
    first, second = (
        DispatchRequested.model_validate(
            {**_request("e").model_dump(), **{k: _fresh(v) for k, v in fields.items()}}
        )
        for _ in range(2)
    )
    for name in ("adapter", "provider", "model_revision"):
        assert getattr(first, name) is getattr(second, name), name
    assert first == second == _request("e")


def test_a_model_read_back_with_every_field_shares_the_classs_every_field_set() -> None:
    one, two = (Block.model_validate_json(_block(text).model_dump_json()) for text in ("one", "two"))
    assert one.model_fields_set == set(Block.model_fields)
    assert one.__pydantic_fields_set__ is two.__pydantic_fields_set__
    assert one.__pydantic_fields_set__ is not _block("three").__pydantic_fields_set__


def test_past_the_bound_a_new_name_is_left_unshared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_NAMES", {})
    monkeypatch.setattr(base, "MAX_NAMES", 1)
    assert base.shared_name(_fresh("user")) is base.shared_name(_fresh("user"))
    other = _fresh("assistant")
    assert base.shared_name(other) is other and base.shared_name(_fresh("assistant")) is not other
    assert base._NAMES == {"user": "user"}


def test_records_decoded_by_the_model_reader_share_names_and_tools_too() -> None:
    """The compiled model reader skips validation, so it applies the sharing validators itself
    (test_codec_model_reader: every shipped record has a model reader)."""
    first, second = _request("e1"), _request("e2")
    a, b = decode(encode(first)), decode(encode(second))
    assert isinstance(a, DispatchRequested) and isinstance(b, DispatchRequested)
    for name in ("adapter", "provider", "model_revision"):
        assert getattr(a, name) is getattr(b, name), name
    assert a.tools[0] is b.tools[0]


def test_a_sharing_validator_is_registered_for_the_model_reader_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`sharing` returns the validator itself and registers it in `SHARING`, the set the model reader
    applies itself instead of falling back to `model_validate` (`codec/model_reader.py`)."""
    monkeypatch.setattr(base, "SHARING", set(base.SHARING))

    def same(value: str) -> str:
        return value

    assert base.sharing(same) is same
    assert same in base.SHARING
    assert {base.shared_name, tools.shared_tools} <= base.SHARING
