"""Every record schema version ever shipped, kept so that data written with it stays readable.

Topics outlive schema changes: the changelog is replayed on every restart, auditors re-fold
the ingress log from its first record. A record names its writer schema only by fingerprint,
so the codec must know every version that ever wrote one. `schemas/history/` holds each
shipped version of each record schema in Parsing Canonical Form, named
`<full name>@<fingerprint hex>.avsc`. The registry registers them as writers (never as the
current reader): old data is resolved into the current schema like any older writer.

A version is archived when it is shipped: a unit test fails while a current schema is
missing from the history, and `python -m turnledger.codec.history` archives it. A file
is never edited or removed, since some topic may still hold data written with it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from fastavro.schema import fingerprint, to_parsing_canonical_form

from turnledger.codec.loader import SCHEMA_DIR, SCHEMA_PACKAGE, Schema, expand, full_name, load_schema_files

HISTORY_DIR = "history"


def canonical_text(schema: Schema) -> str:
    return str(to_parsing_canonical_form(schema))


def fingerprint_hex(schema: Schema) -> str:
    return str(fingerprint(canonical_text(schema), "CRC-64-AVRO"))


def file_name(schema: Schema) -> str:
    return f"{full_name(schema)}@{fingerprint_hex(schema)}.avsc"


def history_dir() -> Traversable:
    return files(SCHEMA_PACKAGE).joinpath(SCHEMA_DIR).joinpath(HISTORY_DIR)


def load_history(directory: Traversable | Path | None = None) -> dict[str, Schema]:
    """Every archived version, by file name."""
    directory = history_dir() if directory is None else directory
    if not directory.is_dir():
        return {}
    return {
        entry.name: json.loads(entry.read_text(encoding="utf-8"))
        for entry in sorted(directory.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".avsc")
    }


def current_record_schemas() -> list[Schema]:
    """The current version of every record schema, self-contained, as the registry uses them."""
    definitions = load_schema_files()
    return [expand(name, definitions) for name, schema in definitions.items() if schema["type"] == "record"]


def missing(schemas: Iterable[Schema], archived: Iterable[str]) -> list[Schema]:
    have = set(archived)
    return [schema for schema in schemas if file_name(schema) not in have]


def archive(directory: Path) -> list[Path]:
    """Write every current record schema that is not archived yet; returns the new files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for schema in missing(current_record_schemas(), load_history(directory)):
        path = directory / file_name(schema)
        path.write_text(canonical_text(schema) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    target = Path(str(history_dir()))
    written = archive(target)
    for path in written:
        print(f"archived {path.name}")
    print(f"{len(written)} new version(s) in {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
