"""Typed views of redis-py replies.

The projection's clients are created with the default ``decode_responses=False``, so
every reply is bytes. redis-py types replies as ``bytes | str`` (the flag is a
run-time option), so these helpers narrow them at the boundary. They only narrow the
static type: nothing is converted or checked at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

Reply = bytes | str
"""How redis-py types a single string reply."""


def as_bytes(value: Reply) -> bytes:
    return cast(bytes, value)


def bytes_list(values: list[Any]) -> list[bytes]:
    """A list reply of values or members: LRANGE, ZRANGE/ZREVRANGE without scores."""
    return cast(list[bytes], values)


def scored_list(values: list[Any]) -> list[tuple[bytes, float]]:
    """A ZRANGE ... WITHSCORES reply (scores as the default ``score_cast_func=float`` gives them)."""
    return cast(list[tuple[bytes, float]], values)


def bytes_set(values: set[Reply]) -> set[bytes]:
    """A SMEMBERS reply."""
    return cast(set[bytes], values)


def bytes_hash(raw: Mapping[Reply, Reply]) -> dict[bytes, bytes]:
    """An HGETALL reply."""
    return cast(dict[bytes, bytes], raw)


def text(value: Reply) -> str:
    """A string reply decoded as UTF-8."""
    return as_bytes(value).decode()


def text_or_none(value: Reply | None) -> str | None:
    """A string reply that may be missing (GET, HGET), decoded as UTF-8."""
    return None if value is None else text(value)
