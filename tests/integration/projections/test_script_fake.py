"""The unit tests' in-memory Redis (`tests/unit/projections/projector_fakes.ScriptRedis`) answers the
projector as the real script does: the same batches, applied through `Projector.apply` against a real
Redis and against the fake, hand `on_applied` the same records, count the same stats, move the same
applied offsets and refuse the same stale epoch. The unit tests of `projections/projector.py` (its
mutation run) rest on that fake; this keeps it honest."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.unit.projections.projector_fakes import ScriptRedis, raw
from tests.unit.projections.test_projector import GARBAGE, REJ, TOPICS, rejected, retracted, seen
from turnledger.projections.applier import EpochChangedError, ensure_epoch
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import DecodedRecord
from turnledger.projections.projector import Projector, ProjectorStats
from turnledger.projections.replies import bytes_hash

pytestmark = pytest.mark.integration

BATCHES = [
    [rejected("c1", 10), rejected("c0", 11), retracted("c2", 0), rejected("c4", 13), raw(REJ, 14, GARBAGE)],
    # delivered again up to its last offset, with new records after it and one of another partition
    [rejected("c0", 11), raw(REJ, 14, GARBAGE), rejected("c3", 15), retracted("c2", 1), rejected("c5", 2, 1)],
    [rejected("c6", 12), rejected("c7", 16), raw(REJ, 17, None)],
]


async def project(redis: Any, keys: ProjectionKeys) -> tuple[Any, ...]:
    """What a projector does with `BATCHES`, then with a stale epoch: what it saw and what Redis holds."""
    applied: list[list[DecodedRecord]] = []
    projector = Projector(redis, "unused:9092", TOPICS, keys, on_applied=applied.append)
    await projector.prepare()
    projector.epoch = ",".join([await ensure_epoch(redis, group.offsets) for group in keys.groups])
    stats = ProjectorStats()
    for batch in BATCHES:
        await projector.apply(batch, stats)
    held = []
    for group in keys.groups:
        offsets = bytes_hash(await redis.hgetall(group.offsets))
        held.append({k: v for k, v in offsets.items() if not k.startswith(b"~")})
    projector.epoch = ",".join(["stale", *projector.epoch.split(",")[1:]])
    with pytest.raises(EpochChangedError) as refused:
        await projector.apply([rejected("c0", 20), rejected("c1", 21)], stats)
    return seen(applied), stats, held, str(refused.value)


@pytest.mark.parametrize("shards", [1, 3])
async def test_the_unit_tests_fake_redis_answers_as_the_script_does(
    redis_client: aioredis.Redis, redis_prefix: str, shards: int
) -> None:
    keys = ProjectionKeys(redis_prefix, one_slot=shards > 1, shards=shards)
    try:
        real = await project(redis_client, keys)
    finally:  # a split projection's keys start with its groups' hash tags, not the prefix
        for group in keys.groups if keys.split else ():
            stray = [key async for key in redis_client.scan_iter(match=f"{group.base}*")]
            await redis_client.delete(*stray, keys.layout)
    assert real == await project(ScriptRedis(), keys)
    assert real[0][0] and real[0][1] and real[2][0]  # something was applied, and offsets held
