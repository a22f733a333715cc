"""Avro single-object encoding of every turnledger record (fastavro, no schema registry)."""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel

from turnledger.codec.codec import Codec
from turnledger.codec.errors import (
    CodecError,
    CorruptRecord,
    NotSingleObjectEncoded,
    UnencodableRecord,
    UnknownFingerprint,
)
from turnledger.codec.registry import SchemaEntry, SchemaRegistry


@cache
def default_codec() -> Codec:
    """The codec over the shipped `.avsc` files, loaded and parsed once per process."""
    return Codec(SchemaRegistry.from_files())


def encode(model: BaseModel) -> bytes:
    return default_codec().encode(model)


def decode(data: bytes) -> BaseModel:
    return default_codec().decode(data)


__all__ = [
    "Codec",
    "CodecError",
    "CorruptRecord",
    "NotSingleObjectEncoded",
    "SchemaEntry",
    "SchemaRegistry",
    "UnencodableRecord",
    "UnknownFingerprint",
    "decode",
    "default_codec",
    "encode",
]
