"""Reading the `.avsc` contracts: the codec's only file access, done once.

The files live in `schemas/` at the repository root; `turnledger/_schemas` is a
symlink to it, shipped as package data, so the same lookup works in an editable
checkout and in an installed wheel.

Each file defines one named type and refers to others by full name. `expand`
inlines a referenced type at its first occurrence (as Avro's Parsing Canonical
Form does), so every top-level schema is self-contained: its fingerprint is the
one any Avro implementation computes from the same files, and fastavro needs no
shared named-schema state to read or write it.
"""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from typing import Any

SCHEMA_PACKAGE = "turnledger"
SCHEMA_DIR = "_schemas"

Schema = dict[str, Any]

_NAMED = frozenset({"record", "enum", "fixed"})


def full_name(schema: Schema) -> str:
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def load_schema_files() -> dict[str, Schema]:
    """Every `.avsc` file as JSON, keyed by the full name of the type it defines."""
    directory = files(SCHEMA_PACKAGE).joinpath(SCHEMA_DIR)
    schemas: dict[str, Schema] = {}
    for entry in sorted(directory.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".avsc"):
            schema = json.loads(entry.read_text(encoding="utf-8"))
            schemas[full_name(schema)] = schema
    return schemas


def expand(name: str, definitions: dict[str, Schema]) -> Schema:
    """The named type `name` with every referenced named type inlined once: a schema of the caller's
    own, which shares no list or dict with `definitions` (`walk` rebuilds only what it inlines into)."""
    defined: set[str] = set()

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            if node in definitions and node not in defined:
                return walk(definitions[node])
            return node
        if isinstance(node, list):
            return [walk(branch) for branch in node]
        kind = node["type"]
        if kind in _NAMED:
            defined.add(full_name(node))
            if kind == "record":
                return {**node, "fields": [{**f, "type": walk(f["type"])} for f in node["fields"]]}
            return dict(node)
        if kind == "array":
            return {**node, "items": walk(node["items"])}
        if kind == "map":
            return {**node, "values": walk(node["values"])}
        return {**node, "type": walk(kind)}

    expanded: Schema = copy.deepcopy(walk(definitions[name]))
    return expanded
