"""Tool-call arguments: the raw JSON text a model produced, and its digest.

Arguments count as complete only when the text parses as strict JSON *and* is an
object: every proper prefix of a serialized object is either unparsable or not an
object, so this is also what catches arguments truncated at any byte.
"""

from __future__ import annotations

from typing import Any

import orjson

from turnledger.model.canonical import CanonicalJsonError, digest_of


def parse_arguments(text: str | None) -> dict[str, Any] | None:
    """The arguments as a JSON object, or None when absent, unparsable or not an object."""
    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def argument_digest_of(text: str | None) -> str | None:
    """Digest of the parsed arguments (so key order and whitespace do not matter), or None."""
    parsed = parse_arguments(text)
    if parsed is None:
        return None
    try:
        return digest_of(parsed)
    except CanonicalJsonError:
        return None
