"""`codec.convert`: which fields of a schema travel as JSON text, found once per schema.

The shipped schemas mark JSON fields only in records, arrays of records and nullable unions; a map
of such records is allowed by the schema language and must convert too, so the schemas here are
built for the test. The leaf marks what it touched, so every assertion says exactly which values
were converted and which were left as they were.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from turnledger.codec.convert import JSON_ATTRIBUTE, compile_converter, from_json_text, to_json_text


def _leaf(value: Any) -> Any:
    return ("converted", value)


def _record(name: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


JSON_FIELD = {"name": "args", "type": "string", JSON_ATTRIBUTE: True}
PLAIN_FIELD = {"name": "note", "type": "string"}
CALL = _record("Call", JSON_FIELD, PLAIN_FIELD)


def test_a_record_converts_its_marked_fields_only() -> None:
    convert = compile_converter(CALL, _leaf)
    assert convert is not None
    assert convert({"args": {"a": 1}, "note": "n"}) == {"args": ("converted", {"a": 1}), "note": "n"}


def test_a_marked_field_absent_from_the_datum_is_not_added() -> None:
    convert = compile_converter(CALL, _leaf)
    assert convert is not None
    assert convert({"note": "n"}) == {"note": "n"}


def test_a_field_marked_false_is_not_converted() -> None:
    unmarked = {**JSON_FIELD, JSON_ATTRIBUTE: False}
    assert compile_converter(_record("R", unmarked, PLAIN_FIELD), _leaf) is None


@pytest.mark.parametrize(
    "schema",
    [
        _record("Plain", PLAIN_FIELD),
        {"type": "array", "items": "string"},
        {"type": "map", "values": _record("Plain", PLAIN_FIELD)},
        ["null", "string"],
        "string",
        {"type": "enum", "name": "E", "symbols": ["A"]},
    ],
    ids=["record", "array", "map", "union", "primitive", "enum"],
)
def test_schemas_without_marked_fields_have_no_converter(schema: Any) -> None:
    assert compile_converter(schema, _leaf) is None


def test_records_nested_in_records_arrays_and_maps_are_converted() -> None:
    schema = _record(
        "Outer",
        {"name": "one", "type": CALL},
        {"name": "many", "type": {"type": "array", "items": "Call"}},
        {"name": "named", "type": {"type": "map", "values": "Call"}},
        PLAIN_FIELD,
    )
    # a named reference ("Call") is not followed: the expanded schemas the registry uses inline them
    inline = _record(
        "Outer",
        {"name": "one", "type": CALL},
        {"name": "many", "type": {"type": "array", "items": CALL}},
        {"name": "named", "type": {"type": "map", "values": CALL}},
        PLAIN_FIELD,
    )
    datum = {
        "one": {"args": 1, "note": "a"},
        "many": [{"args": 2, "note": "b"}, {"args": 3, "note": "c"}],
        "named": {"x": {"args": 4, "note": "d"}, "y": {"args": 5, "note": "e"}},
        "note": "top",
    }
    referenced = compile_converter(schema, _leaf)
    assert referenced is not None
    assert referenced(
        {"one": {"args": 1, "note": "a"}, "many": [{"args": 2}], "named": {"x": {"args": 4}}, "note": "t"}
    ) == {
        "one": {"args": ("converted", 1), "note": "a"},
        "many": [{"args": 2}],
        "named": {"x": {"args": 4}},
        "note": "t",
    }
    convert = compile_converter(inline, _leaf)
    assert convert is not None
    assert convert(datum) == {
        "one": {"args": ("converted", 1), "note": "a"},
        "many": [{"args": ("converted", 2), "note": "b"}, {"args": ("converted", 3), "note": "c"}],
        "named": {"x": {"args": ("converted", 4), "note": "d"}, "y": {"args": ("converted", 5), "note": "e"}},
        "note": "top",
    }


@pytest.mark.parametrize("branches", [["null", CALL], [CALL, "null"], ["string", CALL]])
def test_a_union_converts_its_record_branch_and_passes_null_through(branches: list[Any]) -> None:
    convert = compile_converter(_record("Holder", {"name": "call", "type": branches}), _leaf)
    assert convert is not None
    assert convert({"call": None}) == {"call": None}
    assert convert({"call": {"args": [1], "note": "n"}}) == {
        "call": {"args": ("converted", [1]), "note": "n"}
    }


def test_a_union_with_two_branches_holding_marked_fields_is_refused() -> None:
    other = _record("Other", JSON_FIELD)
    with pytest.raises(ValueError) as refused:
        compile_converter(["null", CALL, other], _leaf)
    assert str(refused.value) == "a union may hold at most one branch with JSON-marked fields"


def test_json_text_is_canonical_and_reads_back() -> None:
    value = {"b": [1, 2.5, "é"], "a": {"z": None, "y": True}}
    text = to_json_text(value)
    assert text == '{"a":{"y":true,"z":null},"b":[1,2.5,"é"]}'
    assert isinstance(text, str)
    assert from_json_text(text) == value
    assert from_json_text(text.encode("utf-8")) == orjson.loads(text)
