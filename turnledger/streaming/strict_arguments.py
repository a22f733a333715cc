"""Tool-argument validation: the gate between a private buffer and a committable call.

Strict JSON is the one parse the message-graph validator uses too (`model/strict_json.py`):
no NaN or infinities, no duplicate keys at any depth, an object, representable in canonical
JSON (no lone surrogates, integers within 64 bits), because its digest is what the result is
later matched against. A text that is a proper prefix of some JSON text (a cut stream or an
output limit, even inside a literal such as `nu`) is TRUNCATED_ARGUMENTS, anything else that
fails is INVALID_ARGUMENTS_JSON.

Schema validation uses `jsonschema` with the validator class the schema declares
(Draft 2020-12 by default); validators are cached per canonical schema, since one
toolset validates thousands of calls. A schema within the subset `schema_subset.py` compiles is
checked by that compiled check first, which answers valid or not as `jsonschema` does; only an
instance it finds invalid goes to `jsonschema`, for the error's words.
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
from turnledger.model.canonical import canonical_json
from turnledger.model.reasons import ReasonCode
from turnledger.model.strict_json import JsonObject, JsonRefusal, parse_json_object
from turnledger.streaming.schema_subset import Check, compile_root


class ArgumentError(StreamFormatError):
    def __init__(self, reason: ReasonCode, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ValidArguments:
    value: dict[str, Any]
    digest: str


def parse_strict(raw: str) -> dict[str, Any]:
    """Parse tool arguments strictly (`model/strict_json.py`); ArgumentError says why not."""
    parsed = _parsed(raw)
    return parsed.value


def _parsed(raw: str) -> JsonObject:
    parsed = parse_json_object(raw)
    if isinstance(parsed, JsonRefusal):
        raise ArgumentError(parsed.reason, parsed.detail)
    return parsed


@lru_cache(maxsize=1024)
def _validator(schema_json: bytes) -> tuple[Validator, Check | None]:
    """The schema's `jsonschema` validator (its schema checked first), and its compiled check if any."""
    schema = json.loads(schema_json)
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    validator: Validator = cls(schema)
    return validator, compile_root(schema, cls)


def validate_arguments(raw: str, schema: Mapping[str, Any]) -> ValidArguments:
    """Strict parse, canonical digest, then JSON-Schema validation against `schema`."""
    parsed = _parsed(raw)
    value, digest = parsed.value, parsed.digest
    validator, check = _validator(canonical_json(dict(schema)))
    if check is not None and check(value):
        return ValidArguments(value, digest)
    error = next(iter(validator.iter_errors(value)), None)
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path)
        raise ArgumentError(ReasonCode.ARGUMENTS_SCHEMA_VIOLATION, f"/{path}: {error.message}"[:300])
    return ValidArguments(value, digest)
