"""The details of a schema violation (mutation survivors of `streaming/strict_arguments.py`).

The reason code alone was pinned before; these pin the detail a refusal carries, since the
operator reads it to find the offending argument: a JSON-pointer-like path from the root,
the validator's message, at most 300 characters, and the same text as the exception's."""

from __future__ import annotations

import pytest

from turnledger.model.reasons import ReasonCode
from turnledger.model.strict_json import JsonRefusal, parse_json_object
from turnledger.streaming.strict_arguments import ArgumentError, parse_strict, validate_arguments

SCHEMA = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string"}},
        "count": {"type": "integer"},
    },
    "required": ["count"],
}


def refusal(raw: str) -> ArgumentError:
    with pytest.raises(ArgumentError) as caught:
        validate_arguments(raw, SCHEMA)
    return caught.value


def test_a_nested_violation_names_its_path_from_the_root() -> None:
    error = refusal('{"count": 1, "tags": ["a", 5]}')
    assert error.reason is ReasonCode.ARGUMENTS_SCHEMA_VIOLATION
    assert error.detail == "/tags/1: 5 is not of type 'string'"


def test_a_violation_at_the_root_has_the_empty_path() -> None:
    error = refusal('{"tags": []}')
    assert error.detail == "/: 'count' is a required property"


def test_the_detail_is_the_exception_text() -> None:
    error = refusal('{"count": "one"}')
    assert str(error) == error.detail == "/count: 'one' is not of type 'integer'"


def test_a_long_detail_is_cut_at_300_characters() -> None:
    value = "x" * 400
    error = refusal('{"count": "' + value + '"}')
    assert error.detail == ("/count: '" + value + "' is not of type 'integer'")[:300]
    assert len(error.detail) == 300


def test_valid_arguments_carry_their_value() -> None:
    valid = validate_arguments('{"count": 2, "tags": ["a"]}', SCHEMA)
    assert valid.value == {"count": 2, "tags": ["a"]}


@pytest.mark.parametrize("raw", ['{"a": 1, "a": 2}', '{"a": tr', "[1]"])
def test_a_parse_refusal_passes_on_the_strict_parsers_reason_and_detail(raw: str) -> None:
    refusal = parse_json_object(raw)
    assert isinstance(refusal, JsonRefusal) and refusal.detail
    with pytest.raises(ArgumentError) as caught:
        parse_strict(raw)
    assert (caught.value.reason, caught.value.detail, str(caught.value)) == (
        refusal.reason,
        refusal.detail,
        refusal.detail,
    )
