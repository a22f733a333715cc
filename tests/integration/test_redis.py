"""Redis as turnledger uses it: atomic Lua scripts over keys passed in KEYS (EVAL)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

pytestmark = pytest.mark.integration

APPLY_IF_NEWER = """
local applied = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
local offset = tonumber(ARGV[2])
if offset <= applied then return {0, applied} end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], offset)
return {1, offset}
"""


async def test_lua_script_applies_once_and_round_trips_exact_values(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    offsets, state = f"{redis_prefix}offsets", f"{redis_prefix}state"
    keys = (offsets, state)

    async def apply(offset: int, field: str, value: str) -> list[int]:
        return list(await redis_client.eval(APPLY_IF_NEWER, 2, *keys, "topic:0", offset, field, value))  # type: ignore[misc]

    assert await apply(5, "conv-1", "v1") == [1, 5]
    assert await apply(5, "conv-1", "replayed") == [0, 5]
    assert await apply(3, "conv-1", "stale") == [0, 5]
    assert await apply(9, "conv-2", "v2\u00e9") == [1, 9]
    assert await redis_client.hgetall(state) == {b"conv-1": b"v1", b"conv-2": "v2\u00e9".encode()}
    assert await redis_client.hget(offsets, "topic:0") == b"9"
    assert await redis_client.eval("return redis.call('TYPE', KEYS[1])['ok']", 1, state) == b"hash"  # type: ignore[misc]
