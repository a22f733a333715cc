"""Canonical JSON and `sha256:` digests.

Canonical form: UTF-8, object keys sorted, no insignificant whitespace, no NaN or
infinities. orjson produces exactly that with OPT_SORT_KEYS, and its number and
string formatting does not depend on the Python version, so digests are stable
across processes and interpreters (pinned by golden vectors in the tests).

orjson writes a float NaN or infinity as `null` rather than refusing it. Nothing the ledger
folds can hold one: every value reaches it decoded from JSON or Avro, which have neither (the
schemas carry no float), and the gateway client refuses them in what it sends
(`gateway/event_arguments.py`). A caller of its own that passes one gets `null`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from turnledger.errors import CanonicalJsonError

__all__ = ["CanonicalJsonError", "canonical_json", "digest_of", "sha256_digest"]

_OPTIONS = orjson.OPT_SORT_KEYS


def canonical_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise CanonicalJsonError(str(exc)) from exc


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    """Digest of the canonical JSON of a JSON-compatible value."""
    return sha256_digest(canonical_json(value))
