"""Schema-valid tool arguments from a JSON schema and an RNG.

The scripted model must call offered tools with arguments that validate against their schema (the
assembler downstream validates them and would otherwise reject every fake call). Only the JSON-schema
subset that tool definitions use in practice is covered: type (or a list of types), properties/required,
enum/const, string length, numeric bounds, array items and lengths, anyOf/oneOf (first branch).
"""

from __future__ import annotations

import random
from typing import Any

_WORDS = (
    "paris", "berlin", "oslo", "lima", "kyoto", "alpha", "beta", "gamma", "delta", "report", "invoice",
    "ledger", "weather", "orders", "status", "summary",
)  # fmt: skip


def generate(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value valid under `schema` (a dict; `True`/missing means anything, we then give a string)."""
    if not isinstance(schema, dict):
        return rng.choice(_WORDS)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return generate(branches[0], rng, depth)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            if isinstance(part, dict):
                merged.update(part)
        return generate(merged, rng, depth)
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "null")
    if typ is None:
        typ = "object" if "properties" in schema else "string"
    if typ == "object":
        return _object(schema, rng, depth)
    if typ == "array":
        return _array(schema, rng, depth)
    if typ == "integer":
        lo = int(schema.get("minimum", 0))
        hi = int(schema.get("maximum", lo + 100))
        if "exclusiveMinimum" in schema:
            lo = max(lo, int(schema["exclusiveMinimum"]) + 1)
        if "exclusiveMaximum" in schema:
            hi = min(hi, int(schema["exclusiveMaximum"]) - 1)
        return rng.randint(lo, max(lo, hi))
    if typ == "number":
        lo_f = float(schema.get("minimum", 0.0))
        hi_f = float(schema.get("maximum", lo_f + 100.0))
        return round(lo_f + (hi_f - lo_f) * rng.random(), 2) if hi_f > lo_f else lo_f
    if typ == "boolean":
        return rng.random() < 0.5
    if typ == "null":
        return None
    return _string(schema, rng)


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    text = rng.choice(_WORDS)
    if rng.random() < 0.5:
        text = f"{text} {rng.choice(_WORDS)}"
    min_len = int(schema.get("minLength", 0))
    max_len = int(schema.get("maxLength", 10_000))
    while len(text) < min_len:
        text += "x"
    return text[:max_len]


def _array(schema: dict[str, Any], rng: random.Random, depth: int) -> list[Any]:
    lo = int(schema.get("minItems", 0))
    hi = int(schema.get("maxItems", max(lo, 3)))
    n = rng.randint(max(lo, min(1, hi)), max(lo, min(hi, 3))) if depth < 4 else lo
    items = schema.get("items", {})
    return [generate(items, rng, depth + 1) for _ in range(n)]


def _object(schema: dict[str, Any], rng: random.Random, depth: int) -> dict[str, Any]:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)]
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in required or (depth < 3 and rng.random() < 0.5):
            out[name] = generate(sub, rng, depth + 1)
    for name in required:  # required but not described: any value is valid
        out.setdefault(name, rng.choice(_WORDS))
    return out
