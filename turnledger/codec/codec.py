"""Avro single-object encoding of turnledger records.

Layout: C3 01, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's Parsing Canonical Form, then the Avro binary body. Any consumer holding
the `.avsc` files can decode it without a schema registry. Decoding looks the
writer schema up by fingerprint and resolves it into the current reader schema
of the same record (schema evolution), then builds the pydantic model named by
the record's full name. Every failure is a `CodecError`.
"""

from __future__ import annotations

import re
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from pydantic import BaseModel

from turnledger.codec.compiled import Writer, compile_writer
from turnledger.codec.errors import (
    CorruptRecord,
    NotSingleObjectEncoded,
    UnencodableRecord,
    UnknownFingerprint,
)
from turnledger.codec.model_reader import ModelReader, compile_model_reader
from turnledger.codec.models import MODELS_BY_NAME, NAMESPACE
from turnledger.codec.registry import HEADER_SIZE, MAGIC, SchemaEntry, SchemaRegistry


class Codec:
    def __init__(self, registry: SchemaRegistry, models: dict[str, type[BaseModel]] | None = None) -> None:
        self.registry = registry
        self.models = MODELS_BY_NAME if models is None else models
        self._model_writers: dict[str, tuple[SchemaEntry, Writer | None]] = {}
        self._by_type: dict[type[BaseModel], tuple[int, SchemaEntry, Writer | None]] = {}
        self._model_readers: dict[bytes, ModelReader | None] = {}

    def encode(self, model: BaseModel) -> bytes:
        known = self._by_type.get(type(model))
        if known is None or known[0] != self.registry.generation:
            known = self._by_type[type(model)] = self._writing(type(model))
        _, entry, writer = known
        if writer is not None:
            out = bytearray(entry.header)
            try:
                writer(out, model)
            except Exception:  # outside the compiled writer's narrow path: the dump and encode_datum decide
                pass
            else:
                return bytes(out)
        return self.encode_datum(entry, model.model_dump(by_alias=True))

    def _writing(self, model: type[BaseModel]) -> tuple[int, SchemaEntry, Writer | None]:
        """What `encode` writes a `model` with, as of the registry's current generation: the current
        schema of its name and that schema's compiled model writer (kept per class, so a record
        is not looked up by its name each time: ~1 µs of ~4 an output, issue 20)."""
        name = f"{NAMESPACE}.{model.__name__}"
        entry = self.registry.reader(name)
        if entry is None or self.models.get(name) is not model:
            raise UnencodableRecord(f"no schema for {model.__name__}")
        return self.registry.generation, entry, self._model_writer(entry)

    def record_writer(self, model: type[BaseModel]) -> tuple[bytes, Writer] | None:
        """The compiled writer of `model`'s current schema, as a nested record writes it (its Avro
        body, no header), and that schema's fingerprint; None where there is no such writer. It
        raises (any exception) where `encode` would fall back, as `compile_writer`'s writers do."""
        name = f"{NAMESPACE}.{model.__name__}"
        entry = self.registry.reader(name)
        if entry is None or self.models.get(name) is not model:
            return None
        writer = self._model_writer(entry)
        return None if writer is None else (entry.fingerprint, writer)

    def _model_writer(self, entry: SchemaEntry) -> Writer | None:
        """The entry's schema compiled to write models directly (no `model_dump`), or None.

        Only where the datum itself has a compiled writer; a JSON-marked field is written as the
        canonical JSON text of its value, what `to_wire` makes of its dump (a ManifestIssued's
        policy: its dump was ~2% of the engine's CPU, issue 20). Compiled once per schema version.
        """
        known = self._model_writers.get(entry.name)
        if known is not None and known[0] is entry:
            return known[1]
        writer = None
        if entry.fast_writer is not None:
            writer = compile_writer(entry.parsed, self.models)
        self._model_writers[entry.name] = (entry, writer)
        return writer

    def encode_datum(self, entry: SchemaEntry, datum: dict[str, Any]) -> bytes:
        """Encode a plain datum (model field names as in the schema) with a given schema version.

        The schema's compiled writer answers when it can; otherwise (or when it gives up on
        the datum) fastavro writes it, so the bytes and the errors are always fastavro's.
        """
        try:
            wire = datum if entry.to_wire is None else entry.to_wire(datum)
            if entry.fast_writer is not None:
                fast = bytearray(entry.header)
                try:
                    entry.fast_writer(fast, wire)
                except Exception:  # outside the compiled writer's narrow path: fastavro decides
                    pass
                else:
                    return bytes(fast)
            out = BytesIO()
            out.write(entry.header)
            schemaless_writer(out, entry.parsed, wire)
        except Exception as exc:
            raise UnencodableRecord(f"{entry.name}: {exc}") from exc
        return out.getvalue()

    def decode_datum(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """The record's full name and its datum, resolved into the current reader schema."""
        writer = self._writer_of(data)
        reader = self.registry.reader(writer.name) or writer
        if reader is writer and writer.fast_reader is not None and type(data) is bytes:
            try:
                fast, end = writer.fast_reader(data, HEADER_SIZE)
            except Exception:  # outside the compiled reader's narrow path: fastavro decides
                pass
            else:
                if end == len(data):
                    return self._from_wire(writer.name, writer, fast)
        body = BytesIO(data)
        body.seek(HEADER_SIZE)
        try:
            datum = schemaless_reader(
                body, writer.parsed, None if reader is writer else reader.parsed, return_record_name=False
            )
        except Exception as exc:
            raise CorruptRecord(f"{writer.name}: {type(exc).__name__}: {_without_addresses(exc)}") from exc
        if body.tell() != len(data):
            raise CorruptRecord(f"{writer.name}: {len(data) - body.tell()} trailing bytes")
        if not isinstance(datum, dict):
            raise CorruptRecord(f"{writer.name}: not a record")
        return self._from_wire(writer.name, reader, datum)

    @staticmethod
    def _from_wire(name: str, reader: SchemaEntry, datum: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        try:
            return name, datum if reader.from_wire is None else reader.from_wire(datum)
        except Exception as exc:
            raise CorruptRecord(f"{name}: embedded JSON: {exc}") from exc

    def decode(self, data: bytes) -> BaseModel:
        built = self._decode_model(data)
        if built is not None:
            return built
        name, datum = self.decode_datum(data)
        model = self.models.get(name)
        if model is None:
            raise UnknownFingerprint(f"no model for record {name}")
        try:
            return model.model_validate(datum)
        except Exception as exc:
            raise CorruptRecord(f"{name}: {exc}") from exc

    def _decode_model(self, data: bytes) -> BaseModel | None:
        """The model itself, read by the schema's compiled model reader (`codec.model_reader`), or
        None: not written with a current reader schema, no such reader, or any miss. The general
        path then decodes the same bytes, so every refusal keeps its type and message."""
        if type(data) is not bytes or data[:2] != MAGIC:
            return None
        fp = data[2:HEADER_SIZE]
        try:
            reader = self._model_readers[fp]
        except KeyError:
            reader = self._model_readers[fp] = self._compile_model_reader(fp)
        if reader is None:
            return None
        try:
            model, end = reader(data, HEADER_SIZE)
        except Exception:  # off the model reader's path: the general path decides
            return None
        return model if end == len(data) else None

    def _compile_model_reader(self, fp: bytes) -> ModelReader | None:
        """Only for a fingerprint of a current reader schema that has a compiled reader (a registry
        built with `compiled=False`, the reference, has none) and a model of its name."""
        writer = self.registry.writer(fp)
        if writer is None or writer.fast_reader is None or self.registry.reader(writer.name) is not writer:
            return None
        return compile_model_reader(writer.parsed, self.models)

    def _writer_of(self, data: bytes) -> SchemaEntry:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise NotSingleObjectEncoded(f"expected bytes, got {type(data).__name__}")
        if len(data) < HEADER_SIZE or data[:2] != MAGIC:
            raise NotSingleObjectEncoded("missing the C3 01 single-object marker")
        fp = bytes(data[2:HEADER_SIZE])
        writer = self.registry.writer(fp)
        if writer is None:
            raise UnknownFingerprint(f"unknown writer schema fingerprint {fp.hex()}")
        return writer


_OBJECT_REPR = re.compile(r"\s*(from\s+)?<[\w.]+ object at 0x[0-9a-f]+>")


def _without_addresses(exc: Exception) -> str:
    """fastavro names the buffer it read from (`<_io.BytesIO object at 0x...>`): a memory address
    in the detail of a rejection would make a replay of the same record differ byte for byte."""
    return _OBJECT_REPR.sub("", str(exc))
