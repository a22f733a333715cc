"""Tool-call arguments: the raw JSON text a model produced, and its digest.

Arguments count as complete only when the text passes the strict JSON parse the stream
path uses too (`model/strict_json.py`): an object, no duplicate keys, no NaN, nothing
canonical JSON cannot hold (so two different texts never share a digest). A text that
is a proper prefix of some JSON text is truncated (INCOMPLETE_ARGUMENTS in the
validator); anything else that fails is INVALID_ARGUMENTS_JSON.
"""

from __future__ import annotations

from functools import lru_cache

from turnledger.model.strict_json import JsonRefusal, parse_json_object


@lru_cache(maxsize=256)
def argument_verdict(text: str) -> str | JsonRefusal:
    """The digest of the parsed arguments (key order and whitespace do not matter), or why not.

    Cached: the builder and two rules of the validator ask about the same text."""
    parsed = parse_json_object(text)
    return parsed if isinstance(parsed, JsonRefusal) else parsed.digest


def argument_digest_of(text: str | None) -> str | None:
    """Digest of the parsed arguments, or None when absent or refused."""
    if text is None:
        return None
    verdict = argument_verdict(text)
    return None if isinstance(verdict, JsonRefusal) else verdict
