"""The compiled schema check (`streaming/schema_subset.py`) decides as `jsonschema` does, or not at all.

The property: for every schema built from the compiled keywords, in every compiled dialect, and every
JSON value, the check is `jsonschema`'s `is_valid`. The values come from small pools (a few names,
strings, numbers with integral floats among them, booleans beside 0 and 1), generated and probed at
each place of the schema (`probes`), so that both answers are common and the type checker's edges (a
bool is no integer, 1.0 is one) are met at every depth."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import exceptions, validators

from turnledger.model.canonical import digest_of
from turnledger.streaming import strict_arguments
from turnledger.streaming.schema_subset import DIALECTS, compile_root, compile_schema
from turnledger.streaming.strict_arguments import ArgumentError, validate_arguments

DIALECT_URIS = (
    None,
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-06/schema#",
)

NAMES = ("a", "b", "c")
STRINGS = ("", "a", "b", "ab", "abc", "é")
NUMBERS = (-1, 0, 1, 2, 3, 1.0, 2.0, 1.5, -0.5)
TYPE_NAMES = ("object", "array", "string", "boolean", "null", "number", "integer")

scalars = st.one_of(st.sampled_from(STRINGS), st.sampled_from(NUMBERS), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
    ),
    max_leaves=8,
)

limits = st.sampled_from((0, 1, 2, 3, 2.0))
bounds = st.sampled_from(NUMBERS)
type_values = st.one_of(
    st.sampled_from(TYPE_NAMES),
    st.lists(st.sampled_from(TYPE_NAMES), min_size=1, max_size=3, unique=True),
)


def _keywords(schemas: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Some of the compiled keywords, each with a value of its compiled kind, and an annotation or two;
    half of them typed (a type is where the checkers' edges are)."""
    optional: dict[str, st.SearchStrategy[Any]] = {
        "enum": st.lists(st.sampled_from(STRINGS), min_size=1, max_size=3, unique=True),
        "const": st.sampled_from(STRINGS),
        "properties": st.dictionaries(st.sampled_from(NAMES), schemas, max_size=3),
        "required": st.lists(st.sampled_from(NAMES), max_size=3, unique=True),
        "additionalProperties": schemas,
        "items": schemas,
        "pattern": st.sampled_from(("^a", "b$", "é", "^$")),
        "minLength": limits,
        "maxLength": limits,
        "minItems": limits,
        "maxItems": limits,
        "minProperties": limits,
        "maxProperties": limits,
        "minimum": bounds,
        "maximum": bounds,
        "exclusiveMinimum": bounds,
        "exclusiveMaximum": bounds,
        "description": st.just("an annotation"),
        "format": st.sampled_from(("email", "date-time")),
    }
    return st.one_of(
        st.fixed_dictionaries({}, optional=optional),
        st.fixed_dictionaries({"type": type_values}, optional=optional),
    )


schemas = st.recursive(
    st.one_of(st.booleans(), st.just({}), _keywords(st.booleans())),
    _keywords,
    max_leaves=6,
)


EDGES: tuple[Any, ...] = (*STRINGS, *NUMBERS, True, False, None, [], {})


def probes(schema: Any, depth: int = 0) -> list[Any]:
    """Values at every edge of `schema`: each scalar of the pools (and the empty containers) at the
    top, in each property, extra property and item, and objects whose properties all take probes of
    their own schemas at once (where a valid instance of a schema with several required ones is)."""
    found: list[Any] = list(EDGES)
    if not isinstance(schema, dict) or depth > 3:
        return found
    properties = schema.get("properties", {})
    for schemas in (schema.get("items"), schema.get("additionalProperties")):
        if schemas is not None:
            inner = probes(schemas, depth + 1)
            found += [[value] for value in inner] + [{"x": value} for value in inner]
    inner_of = {name: probes(sub, depth + 1) for name, sub in properties.items()}
    for name, inner in inner_of.items():
        found += [{name: value} for value in inner]
    for i in range(max((len(inner) for inner in inner_of.values()), default=0)):
        found.append({name: inner[i % len(inner)] for name, inner in inner_of.items()})
    return found


def _root(schema: Any, uri: str | None) -> dict[str, Any]:
    root = schema if isinstance(schema, dict) else {"allOf": [schema]}
    return root if uri is None else {"$schema": uri, **root}


@pytest.mark.parametrize("uri", DIALECT_URIS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, instances=st.lists(values, min_size=1, max_size=6))
def test_the_check_is_jsonschemas_is_valid(uri: str | None, schema: Any, instances: list[Any]) -> None:
    if not isinstance(schema, dict):
        schema = {"items": schema}
    root = _root(schema, uri)
    cls = validators.validator_for(root)
    try:
        cls.check_schema(root)
    except exceptions.SchemaError:
        return
    check = compile_root(root, cls)
    assert check is not None, root
    validator = cls(root)
    for instance in instances + probes(root):
        assert check(instance) is validator.is_valid(instance), (root, instance)


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        ({"type": "integer"}, [1, 1.0, -2, 2.0], [True, 1.5, "1", None]),
        ({"type": "number"}, [1, 1.5, -0.5], [False, "1", [1]]),
        ({"type": "boolean"}, [True, False], [0, 1, None]),
        ({"type": ["string", "null"]}, ["", None], [0, [], {}]),
        ({"enum": ["c", "f"]}, ["c", "f"], ["C", 0, None, ["c"], {"c": 1}]),
        ({"const": "x"}, ["x"], ["y", 0, ["x"]]),
        ({"required": ["a"]}, [{"a": None}, [], "a", 3], [{}, {"b": 1}]),
        ({"properties": {"a": False}}, [{}, {"b": 1}, []], [{"a": 1}]),
        ({"properties": {"a": {}}, "additionalProperties": False}, [{"a": 1}, {}, 5], [{"b": 1}]),
        ({"additionalProperties": {"type": "string"}}, [{"a": "x"}, {}], [{"a": 1}]),
        ({"items": {"type": "integer"}}, [[], [1, 2.0], {"a": "x"}], [[1, "2"], [True]]),
        ({"minLength": 2}, ["ab", "éé", 5], ["a", ""]),
        ({"maxLength": 1}, ["", "é"], ["ab"]),
        ({"minItems": 1, "maxItems": 2}, [[1], [1, 2], "x"], [[], [1, 2, 3]]),
        ({"minProperties": 1}, [{"a": 1}, []], [{}]),
        ({"maxProperties": 0}, [{}, "a"], [{"a": 1}]),
        ({"minimum": 1, "maximum": 2}, [1, 2, 1.5, "9", True], [0, 2.5, 0.99]),
        ({"exclusiveMinimum": 1, "exclusiveMaximum": 2}, [1.5, "0"], [1, 2, 1.0]),
        ({"pattern": "^a"}, ["abc", 5, None], ["ba", ""]),
        ({"description": "d", "title": "t", "format": "email"}, ["not an email", 1], []),
    ],
)
def test_each_keyword_holds_and_fails_where_jsonschema_says(
    schema: dict[str, Any], valid: list[Any], invalid: list[Any]
) -> None:
    check = compile_schema(schema)
    assert check is not None
    validator = validators.Draft202012Validator(schema)
    assert [check(value) for value in valid] == [True] * len(valid)
    assert [check(value) for value in invalid] == [False] * len(invalid)
    expected = [True] * len(valid) + [False] * len(invalid)
    assert [validator.is_valid(value) for value in valid + invalid] == expected


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/x", "$defs": {"x": {}}},
        {"anyOf": [{"type": "string"}]},
        {"allOf": [{}]},
        {"not": {}},
        {"patternProperties": {"^a": {}}, "additionalProperties": False},
        {"prefixItems": [{}], "items": False},
        {"items": [{"type": "string"}]},
        {"enum": ["a", 1]},
        {"enum": "a"},
        {"const": 1},
        {"type": "strnig"},
        {"type": ["string", 5]},
        {"required": "a"},
        {"required": ["a", 1]},
        {"properties": []},
        {"properties": {"a": {"uniqueItems": True}}},
        {"additionalProperties": {"multipleOf": 2}},
        {"additionalProperties": False, "properties": 5},
        {"items": {"x-vendor": 1}},
        {"pattern": 5},
        {"minLength": "2"},
        {"maximum": True},
        {"properties": {"a": {"$schema": "http://json-schema.org/draft-04/schema#"}}},
        {"if": {}, "then": {}},
        "a string",
        None,
    ],
)
def test_a_schema_outside_the_subset_is_not_compiled(schema: Any) -> None:
    assert compile_schema(schema) is None


def test_only_the_dialects_whose_keywords_mean_the_same_are_compiled() -> None:
    schema = {"type": "object"}
    compiled = {cls.__name__ for cls in DIALECTS if compile_root(schema, cls) is not None}
    assert compiled == {"Draft6Validator", "Draft7Validator", "Draft201909Validator", "Draft202012Validator"}
    for uri in ("http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-03/schema#"):
        root = {"$schema": uri, **schema}
        assert compile_root(root, validators.validator_for(root)) is None
    root = {"$schema": DIALECT_URIS[3], "type": "integer"}
    check = compile_root(root, validators.validator_for(root))
    assert check is not None and check(1.0) is True and check("1") is False


class _NoJsonschema:
    def iter_errors(self, instance: Any) -> Any:
        raise AssertionError(f"jsonschema asked about {instance!r}")


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"],
    "additionalProperties": False,
}


def test_valid_arguments_within_the_subset_never_reach_jsonschema(monkeypatch: pytest.MonkeyPatch) -> None:
    _, check = strict_arguments._validator(b'{"type":"object"}')
    assert check is not None
    schema_json = strict_arguments.canonical_json(WEATHER)
    _, weather_check = strict_arguments._validator(schema_json)
    monkeypatch.setattr(strict_arguments, "_validator", lambda _: (_NoJsonschema(), weather_check))
    valid = validate_arguments('{"city": "Paris", "unit": "c"}', WEATHER)
    assert valid.value == {"city": "Paris", "unit": "c"}
    with pytest.raises(AssertionError, match="jsonschema asked about"):
        validate_arguments('{"city": "Paris", "unit": "k"}', WEATHER)


def test_an_invalid_instance_is_refused_in_jsonschemas_words() -> None:
    with pytest.raises(ArgumentError) as caught:
        validate_arguments('{"city": "Paris", "unit": "k"}', WEATHER)
    assert caught.value.detail == "/unit: 'k' is not one of ['c', 'f']"
    with pytest.raises(ArgumentError) as caught:
        validate_arguments('{"city": "Paris", "wind": 1}', WEATHER)
    assert caught.value.detail == "/: Additional properties are not allowed ('wind' was unexpected)"


def test_a_schema_outside_the_subset_is_still_validated_by_jsonschema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}
    assert strict_arguments._validator(strict_arguments.canonical_json(schema))[1] is None
    valid = validate_arguments('{"n": 4}', schema)
    assert (valid.value, valid.digest) == ({"n": 4}, digest_of({"n": 4}))
    with pytest.raises(ArgumentError) as caught:
        validate_arguments('{"n": 3}', schema)
    assert caught.value.detail == "/n: 3 is not a multiple of 2"
