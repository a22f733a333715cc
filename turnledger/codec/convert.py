"""Between pydantic dumps and Avro data: the fields that travel as canonical JSON text.

A field marked `"turnledger.json": true` in a schema holds a JSON object in the
model (`dict[str, Any]`) and a string on the wire. `compile_converter` walks a
schema once and returns a function that rewrites exactly those fields (through
records, arrays and nullable unions), or None when the schema has none, so that
the per-record cost is nothing for most records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from turnledger.model.canonical import canonical_json

JSON_ATTRIBUTE = "turnledger.json"

Convert = Callable[[Any], Any]


def to_json_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


def from_json_text(value: Any) -> Any:
    return orjson.loads(value)


def compile_converter(schema: Any, leaf: Convert) -> Convert | None:
    """A converter applying `leaf` to every JSON-marked field of `schema`, or None if none."""
    if isinstance(schema, list):
        return _union(schema, leaf)
    if not isinstance(schema, dict):
        return None
    kind = schema["type"]
    if kind == "record":
        return _record(schema, leaf)
    if kind == "array":
        return _array(schema, leaf)
    if kind == "map":
        return _map(schema, leaf)
    return None


def _record(schema: dict[str, Any], leaf: Convert) -> Convert | None:
    converters = [
        (field["name"], leaf if field.get(JSON_ATTRIBUTE) else compile_converter(field["type"], leaf))
        for field in schema["fields"]
    ]
    active = [(name, conv) for name, conv in converters if conv is not None]
    if not active:
        return None

    def convert(datum: dict[str, Any]) -> dict[str, Any]:
        for name, conv in active:
            if name in datum:
                datum[name] = conv(datum[name])
        return datum

    return convert


def _array(schema: dict[str, Any], leaf: Convert) -> Convert | None:
    item = compile_converter(schema["items"], leaf)
    return None if item is None else lambda values: [item(v) for v in values]


def _map(schema: dict[str, Any], leaf: Convert) -> Convert | None:
    value = compile_converter(schema["values"], leaf)
    return None if value is None else lambda values: {k: value(v) for k, v in values.items()}


def _union(branches: list[Any], leaf: Convert) -> Convert | None:
    active = [c for c in (compile_converter(b, leaf) for b in branches) if c is not None]
    if not active:
        return None
    if len(active) > 1:
        raise ValueError("a union may hold at most one branch with JSON-marked fields")
    inner = active[0]
    return lambda value: None if value is None else inner(value)
