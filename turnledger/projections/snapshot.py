"""Whole-projection operations by what its keys start with (`ProjectionKeys.base`: the key prefix, or
its hash-tagged form on a cluster): dump for comparison, drop for rebuild.

Dropping uses SCAN + DEL on the prefix, never FLUSHALL/FLUSHDB: the Redis may hold
other projections (a verification prefix) or other applications' data. Both drop and dump take only the
keys a projection names (`keys.is_key_under`): on a single Redis, `tl:` is also what the keys of a
projection under `tl:v2:` start with. On a cluster, SCAN asks
every primary (`RedisCluster.scan_iter`), and a projection's keys share one slot, so one DEL
takes many.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from turnledger.errors import ProjectionError
from turnledger.projections.keys import ProjectionKeys, is_key_under
from turnledger.projections.replies import (
    bytes_hash,
    bytes_list,
    bytes_set,
    scored_list,
    text,
    text_or_none,
)
from turnledger.redisconn.cluster import RedisClient

KeysProgress = Callable[[int, int | None], None]
"""`(keys, total)` of a walk over a projection's keys: the keys done so far (a drop's deleted, told after
each DEL; a comparison's read, told after each key) with a total of None (SCAN finds the keys as it walks,
so how many there are is known only at its end), then, the walk over, the keys done as the total."""

POSITION_KEYS = ("offsets", "layout")
"""Keys that record where a projection read from and how it is split, not what it holds: left out of
comparisons."""


async def drop_prefix(
    redis: RedisClient, prefix: str, chunk: int = 500, deleted: Callable[[int], None] | None = None
) -> int:
    """Delete the keys of the projection whose keys start with `prefix`; the count deleted. `deleted`
    is told the count so far after each DEL."""
    if not prefix:
        raise ProjectionError("refusing to drop an empty key prefix (that would be the whole database)")
    dropped = 0
    batch: list[bytes] = []
    async for key in redis.scan_iter(match=_glob_escape(prefix) + "*", count=chunk):
        if not is_key_under(prefix, key.decode()):
            continue
        batch.append(key)
        if len(batch) >= chunk:
            dropped += await redis.delete(*batch)
            batch = []
            if deleted is not None:
                deleted(dropped)
    if batch:
        dropped += await redis.delete(*batch)
        if deleted is not None:
            deleted(dropped)
    return dropped


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


async def snapshot(
    redis: RedisClient, prefix: str, read: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Every key under `prefix` (name relative to it) with its full value, positions excluded; `read`
    is told the count read so far after each key.

    Two projections of the same records compare equal however their sources were
    partitioned or interleaved: lists are per conversation (one partition each), the
    rejections log is ordered by time and content, previews carry their markers."""
    skip = {f"{ProjectionKeys(prefix).base}{name}" for name in POSITION_KEYS}
    out: dict[str, Any] = {}
    async for raw_key in redis.scan_iter(match=_glob_escape(prefix) + "*", count=500):
        key = raw_key.decode()
        if key in skip or not is_key_under(prefix, key):
            continue
        out[key[len(prefix) :]] = await _value(redis, key)
        if read is not None:
            read(len(out))
    return dict(sorted(out.items()))


async def snapshot_projection(
    redis: RedisClient, keys: ProjectionKeys, read: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """`snapshot` of the whole projection: of each slot group when split, its names then led by the
    group's number (`#3/history:c-1`); `read`: the count read so far over every group."""
    if not keys.split:
        return await snapshot(redis, keys.base, read)
    out: dict[str, Any] = {}
    for index, group in enumerate(keys.groups):
        told = None if read is None else partial(_after, read, len(out))
        for name, value in (await snapshot(redis, group.base, told)).items():
            out[f"#{index}/{name}"] = value
    return out


async def compare_projections(
    redis: RedisClient, left: ProjectionKeys, right: ProjectionKeys, progress: KeysProgress | None = None
) -> list[str]:
    """`diff_snapshots` of the two projections, `left` read first; `progress`: the keys read of both."""
    told = None if progress is None else partial(_counted, progress, 0)
    first = await snapshot_projection(redis, left, told)
    told = None if progress is None else partial(_counted, progress, len(first))
    second = await snapshot_projection(redis, right, told)
    if progress is not None:
        progress(len(first) + len(second), len(first) + len(second))
    return diff_snapshots(first, second)


async def drop_projection(
    redis: RedisClient, *layouts: ProjectionKeys, progress: KeysProgress | None = None
) -> int:
    """Drop every key of the projection (its layout, each slot group), as split in any of `layouts`
    (what Redis holds, and what it is about to be); `progress`: the keys deleted over all of them."""
    bases = {base: None for keys in layouts for base in _bases(keys)}
    dropped = 0
    for base in bases:
        told = None if progress is None else partial(_counted, progress, dropped)
        dropped += await drop_prefix(redis, base, deleted=told)
    if progress is not None:
        progress(dropped, dropped)
    return dropped


def _counted(progress: KeysProgress, before: int, done: int) -> None:
    """`progress` told `before + done` keys, of a total not known yet."""
    progress(before + done, None)


def _after(read: Callable[[int], None], before: int, done: int) -> None:
    read(before + done)


def _bases(keys: ProjectionKeys) -> tuple[str, ...]:
    return (keys.base, *(group.base for group in keys.groups)) if keys.split else (keys.base,)


async def _value(redis: RedisClient, key: str) -> Any:
    kind = text(await redis.type(key))
    if kind == "hash":
        return {k.decode(): v.decode() for k, v in sorted(bytes_hash(await redis.hgetall(key)).items())}
    if kind == "zset":
        return [(m.decode(), s) for m, s in scored_list(await redis.zrange(key, 0, -1, withscores=True))]
    if kind == "list":
        return [v.decode() for v in bytes_list(await redis.lrange(key, 0, -1))]
    if kind == "set":
        return sorted(m.decode() for m in bytes_set(await redis.smembers(key)))
    if kind == "string":
        return text_or_none(await redis.get(key))
    return f"<{kind}>"


def diff_snapshots(left: dict[str, Any], right: dict[str, Any]) -> list[str]:
    """Human-readable differences (key names relative to the prefixes)."""
    out = []
    for key in sorted(set(left) | set(right)):
        if key not in right:
            out.append(f"only in the first: {key}")
        elif key not in left:
            out.append(f"only in the second: {key}")
        elif left[key] != right[key]:
            out.append(f"differs: {key}")
    return out
