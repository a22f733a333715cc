"""Deterministic ids and random streams derived from (seed, request identity).

Nothing here reads a clock or the OS RNG: every id and every random choice is a function of the server
seed and a string that identifies the request, so two servers with the same seed serve identical bytes.
"""

from __future__ import annotations

import hashlib
import random

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

#: Fixed epoch for `created` fields: a wall clock would break byte determinism.
CREATED_AT = 1_750_000_000


def digest(*parts: str | bytes | int) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.digest()


def make_id(prefix: str, seed: int, basis: str, label: str, length: int = 24) -> str:
    """An id such as `msg_…`, `toolu_…`, `call_…`, unique per (seed, basis, label)."""
    n = int.from_bytes(digest(seed, basis, label), "big")
    chars = []
    for _ in range(length):
        n, r = divmod(n, len(_ALPHABET))
        chars.append(_ALPHABET[r])
    return prefix + "".join(chars)


def rng_for(seed: int, *parts: str | bytes | int) -> random.Random:
    """A private RNG seeded from the server seed and the given parts."""
    return random.Random(int.from_bytes(digest(seed, *parts)[:16], "big"))
