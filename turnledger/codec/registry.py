"""Parsed schemas by fingerprint (writers) and by full name (the current readers).

Every schema is parsed and fingerprinted once. A registry may hold several
versions of one record: every version it knows can be read (writer lookup by
fingerprint), the reader version is what data is resolved into and encoded with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from turnledger.codec.compiled import Reader, Writer, compile_reader, compile_writer
from turnledger.codec.convert import Convert, compile_converter, from_json_text, to_json_text
from turnledger.codec.history import fingerprint_hex, load_history
from turnledger.codec.loader import Schema, expand, full_name, load_schema_files

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8


@dataclass(frozen=True, slots=True)
class SchemaEntry:
    name: str
    schema: Schema
    parsed: Any
    fingerprint: bytes
    header: bytes
    to_wire: Convert | None
    from_wire: Convert | None
    fast_reader: Reader | None = None
    """The schema compiled for reading data written with it (`codec.compiled`), or None."""
    fast_writer: Writer | None = None
    """The schema compiled for writing (`codec.compiled`), or None."""


def entry_for(schema: Schema, *, compiled: bool = True) -> SchemaEntry:
    """Parse and fingerprint a self-contained schema (CRC-64-AVRO of its Parsing Canonical Form).

    `compiled=False` leaves out the compiled reader and writer: fastavro alone, the reference.
    """
    parsed = parse_schema(schema, named_schemas={})
    fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    return SchemaEntry(
        name=full_name(schema),
        schema=schema,
        parsed=parsed,
        fingerprint=fp,
        header=MAGIC + fp,
        to_wire=compile_converter(schema, to_json_text),
        from_wire=compile_converter(schema, from_json_text),
        fast_reader=compile_reader(parsed) if compiled else None,
        fast_writer=compile_writer(parsed) if compiled else None,
    )


class SchemaRegistry:
    def __init__(self, *, compiled: bool = True) -> None:
        self.compiled = compiled
        self._by_fingerprint: dict[bytes, SchemaEntry] = {}
        self._readers: dict[str, SchemaEntry] = {}
        self.generation = 0
        """Counts the changes of the current readers: what a user cached of them holds while it stays."""

    def add(self, schema: Schema, *, reader: bool = True) -> SchemaEntry:
        """Register a schema version; `reader=False` makes it readable but not the current one."""
        entry = entry_for(schema, compiled=self.compiled)
        self._by_fingerprint[entry.fingerprint] = entry
        if reader:
            self._readers[entry.name] = entry
            self.generation += 1
        return entry

    def writer(self, fp: bytes) -> SchemaEntry | None:
        return self._by_fingerprint.get(fp)

    def reader(self, name: str) -> SchemaEntry | None:
        return self._readers.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._readers)

    def add_writers(self, schemas: Iterable[Schema]) -> None:
        """Register older versions as writers only (those already known are skipped)."""
        for schema in schemas:
            if bytes.fromhex(fingerprint_hex(schema)) not in self._by_fingerprint:
                self.add(schema, reader=False)

    @classmethod
    def from_files(
        cls, history: Traversable | Path | None = None, *, compiled: bool = True
    ) -> SchemaRegistry:
        """Every record schema in `schemas/`, each self-contained, as the current readers, and every
        archived version (`codec.history`, from `history` if given) as a writer.

        `compiled=False`: without the compiled readers and writers (fastavro only, the reference).
        """
        definitions = load_schema_files()
        registry = cls(compiled=compiled)
        for name, schema in definitions.items():
            if schema["type"] == "record":
                registry.add(expand(name, definitions))
        registry.add_writers(load_history(history).values())
        return registry
