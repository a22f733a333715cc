"""A compiled check of the JSON Schemas most tool definitions are, deciding valid or not as `jsonschema` does.

`jsonschema` walks a schema keyword by keyword through generators, dozens of calls for an object of two
strings: ~16 µs a call in a tight loop and ~55 µs inside the engine (issue 20: its code is cold there,
run once every twenty events), 2.5% of the engine's CPU on the bench mix. Most tool schemas use a few
keywords (`type`, `properties`, `required`, `additionalProperties`, `enum`, `items`, bounds), which
compile here to a tree of closures that answers valid or not.

The rules it keeps:

- it decides only validity, never the error: `strict_arguments.validate_arguments` asks `jsonschema`
  for the error of an instance found invalid here, so every refusal keeps `jsonschema`'s words;
- each keyword is checked by the same Python expression `jsonschema`'s keyword function evaluates
  (`jsonschema/_keywords.py`, the draft 6+ type checker): `len` for lengths, `<` / `<=` for bounds,
  `re.search` for patterns, `isinstance` for types (`integer` takes a float with an integral value);
- a schema with any keyword outside `KEYWORDS` (`$ref`, `anyOf`, `patternProperties`, `prefixItems`,
  an unknown one, ...) or a keyword value outside what is compiled (an `items` array, an `enum` of
  other than strings) compiles to None, anywhere in the tree, and `jsonschema` decides alone;
- only dialects whose keywords above mean the same are compiled (`DIALECTS`: drafts 6 and 7, 2019-09,
  2020-12, the last the default without `$schema`); draft 4 (boolean `exclusiveMinimum`, no float
  integers) and draft 3 are not;
- annotations (`ANNOTATIONS`) assert nothing in `jsonschema` without a format checker, and none here.

`tests/unit/streaming/test_schema_subset.py` holds it to `jsonschema`'s `is_valid` on generated schemas
and instances of every compiled dialect.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft6Validator, Draft7Validator, Draft201909Validator, Draft202012Validator
from jsonschema.protocols import Validator

Check = Callable[[Any], bool]
Compiler = Callable[[Any, Mapping[str, Any]], "Check | None"]

DIALECTS: frozenset[type[Validator]] = frozenset(
    {Draft6Validator, Draft7Validator, Draft201909Validator, Draft202012Validator}
)

ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
    | {"format"}
)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _is_array(value: Any) -> bool:
    return isinstance(value, list)


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _is_boolean(value: Any) -> bool:
    return isinstance(value, bool)


def _is_null(value: Any) -> bool:
    return value is None


TYPES: Mapping[str, Check] = {
    "object": _is_object,
    "array": _is_array,
    "string": _is_string,
    "boolean": _is_boolean,
    "null": _is_null,
    "number": _is_number,
    "integer": _is_integer,
}
"""The draft 6+ type checker's test of each type name, for the values a JSON parse gives."""


def _type(types: Any, _: Mapping[str, Any]) -> Check | None:
    names = [types] if isinstance(types, str) else types
    if not isinstance(names, list) or not all(isinstance(name, str) and name in TYPES for name in names):
        return None
    tests = tuple(TYPES[name] for name in names)
    return lambda value: any(test(value) for test in tests)


def _strings(values: Any) -> frozenset[str] | None:
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        return None
    return frozenset(values)


def _enum(values: Any, _: Mapping[str, Any]) -> Check | None:
    allowed = _strings(values)
    if allowed is None:
        return None
    return lambda value: isinstance(value, str) and value in allowed


def _const(const: Any, _: Mapping[str, Any]) -> Check | None:
    if not isinstance(const, str):
        return None
    return lambda value: isinstance(value, str) and value == const


def _properties(properties: Any, _: Mapping[str, Any]) -> Check | None:
    if not isinstance(properties, dict):
        return None
    checks = []
    for name, subschema in properties.items():
        check = compile_schema(subschema)
        if check is None:
            return None
        checks.append((name, check))

    def holds(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        return all(check(value[name]) for name, check in checks if name in value)

    return holds


def _required(names: Any, _: Mapping[str, Any]) -> Check | None:
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return None
    return lambda value: not isinstance(value, dict) or all(name in value for name in names)


def _additional_properties(additional: Any, schema: Mapping[str, Any]) -> Check | None:
    known = schema.get("properties", {})
    if not isinstance(known, dict):
        return None
    check = compile_schema(additional)
    if check is None:
        return None
    return lambda value: (
        not isinstance(value, dict) or all(check(value[name]) for name in value if name not in known)
    )


def _items(items: Any, _: Mapping[str, Any]) -> Check | None:
    check = compile_schema(items)  # an array of schemas (per position) is no schema: None
    if check is None:
        return None
    return lambda value: not isinstance(value, list) or all(check(item) for item in value)


def _pattern(pattern: Any, _: Mapping[str, Any]) -> Check | None:
    if not isinstance(pattern, str):
        return None
    return lambda value: not isinstance(value, str) or re.search(pattern, value) is not None


def _itself(value: Any) -> Any:
    return value


def _below(measured: Any, limit: Any) -> bool:
    return bool(measured < limit)


def _above(measured: Any, limit: Any) -> bool:
    return bool(measured > limit)


def _at_or_below(measured: Any, limit: Any) -> bool:
    return bool(measured <= limit)


def _at_or_above(measured: Any, limit: Any) -> bool:
    return bool(measured >= limit)


KEYWORDS: Mapping[str, Compiler] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional_properties,
    "items": _items,
    "pattern": _pattern,
}
"""Keyword → its compiler: the check of a value (True: the keyword holds), or None when the keyword's
value is outside what is compiled. Each fails exactly where `jsonschema`'s function of that keyword
yields an error."""

Bound = tuple[Check, Callable[[Any], Any], Callable[[Any, Any], bool]]

BOUNDS: Mapping[str, Bound] = {
    "minLength": (_is_string, len, _below),
    "maxLength": (_is_string, len, _above),
    "minItems": (_is_array, len, _below),
    "maxItems": (_is_array, len, _above),
    "minProperties": (_is_object, len, _below),
    "maxProperties": (_is_object, len, _above),
    "minimum": (_is_number, _itself, _below),
    "maximum": (_is_number, _itself, _above),
    "exclusiveMinimum": (_is_number, _itself, _at_or_below),
    "exclusiveMaximum": (_is_number, _itself, _at_or_above),
}
"""Keywords that bound a number: (the values it applies to, their measure, when the measure fails the
bound). A value it does not apply to holds."""


def _bound(limit: Any, bound: Bound) -> Check | None:
    if not _is_number(limit):
        return None
    applies, measure, fails = bound
    return lambda value: not applies(value) or not fails(measure(value), limit)


def _always(_: Any) -> bool:
    return True


def _never(_: Any) -> bool:
    return False


def compile_schema(schema: Any) -> Check | None:
    """The check of a (sub)schema within the subset, else None."""
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict):
        return None
    checks: list[Check] = []
    for keyword, value in schema.items():
        if keyword in ANNOTATIONS:
            continue
        compiler, bound = KEYWORDS.get(keyword), BOUNDS.get(keyword)
        if compiler is not None:
            check = compiler(value, schema)
        else:
            check = None if bound is None else _bound(value, bound)
        if check is None:
            return None
        checks.append(check)
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


def compile_root(schema: Mapping[str, Any], dialect: type[Validator]) -> Check | None:
    """The check of a tool's input schema validated as `dialect` (`validator_for` of it), else None."""
    if dialect not in DIALECTS:
        return None
    return compile_schema({keyword: value for keyword, value in schema.items() if keyword != "$schema"})
