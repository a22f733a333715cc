"""Tool-argument validation: the gate between a private buffer and a committable call.

Strict JSON, stricter than `json.loads`:
- NaN, Infinity and -Infinity are refused (not JSON; canonical JSON cannot hold them);
- duplicate object keys are refused, at any depth: parsers disagree on which value
  wins (Python keeps the last, others the first), so the tool could execute other
  arguments than the ones we digested;
- the document must be an object (every provider's tool input is an object);
- it must be representable in canonical JSON (orjson: no lone surrogates, integers
  within 64 bits), because its digest is what the result is later matched against.

A document that fails to parse *at its end* is reported as truncated (a prefix of
some JSON text: a cut stream or an output limit), anything else as invalid JSON.

Schema validation uses `jsonschema` with the validator class the schema declares
(Draft 2020-12 by default); validators are cached per canonical schema, since one
toolset validates thousands of calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import validators
from jsonschema.protocols import Validator

from turnledger.errors import StreamFormatError
from turnledger.model.canonical import CanonicalJsonError, canonical_json, digest_of
from turnledger.model.reasons import ReasonCode


class ArgumentError(StreamFormatError):
    def __init__(self, reason: ReasonCode, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ValidArguments:
    value: dict[str, Any]
    digest: str


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {duplicate!r}")
    return result


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys, parse_constant=_refuse_constant)


def parse_strict(raw: str) -> dict[str, Any]:
    """Parse tool arguments strictly; ArgumentError says why not."""
    try:
        value = _DECODER.decode(raw)
    except json.JSONDecodeError as exc:
        truncated = exc.pos >= len(raw.rstrip()) or exc.msg.startswith("Unterminated string")
        reason = ReasonCode.TRUNCATED_ARGUMENTS if truncated else ReasonCode.INVALID_ARGUMENTS_JSON
        raise ArgumentError(reason, f"{exc.msg} at {exc.pos} of {len(raw)}") from None
    except (ValueError, RecursionError) as exc:
        raise ArgumentError(ReasonCode.INVALID_ARGUMENTS_JSON, str(exc)) from None
    if not isinstance(value, dict):
        raise ArgumentError(
            ReasonCode.INVALID_ARGUMENTS_JSON, f"arguments are a {type(value).__name__}, not an object"
        )
    return value


@lru_cache(maxsize=1024)
def _validator(schema_json: bytes) -> Validator:
    schema = json.loads(schema_json)
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    validator: Validator = cls(schema)
    return validator


def validate_arguments(raw: str, schema: Mapping[str, Any]) -> ValidArguments:
    """Strict parse, canonical digest, then JSON-Schema validation against `schema`."""
    value = parse_strict(raw)
    try:
        digest = digest_of(value)
    except CanonicalJsonError as exc:
        raise ArgumentError(ReasonCode.INVALID_ARGUMENTS_JSON, f"not canonicalizable: {exc}") from None
    error = next(iter(_validator(canonical_json(dict(schema))).iter_errors(value)), None)
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path)
        raise ArgumentError(ReasonCode.ARGUMENTS_SCHEMA_VIOLATION, f"/{path}: {error.message}"[:300])
    return ValidArguments(value, digest)
