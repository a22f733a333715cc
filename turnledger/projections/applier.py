"""Runs planned batches through the projection Lua script (loaded once, called by EVALSHA)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from turnledger.projections.plan import BatchPlan
from turnledger.projections.script import APPLY_SCRIPT


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: int
    skipped: int


class ScriptApplier:
    """One script call per batch: records whose offset is not above the applied offset are no-ops.

    A run-time error inside the script (an unknown op) aborts the call before any write
    only if it happens before the first write, so the planner never emits unknown ops.
    """

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._sha: str | None = None

    async def load(self) -> str:
        self._sha = await self.redis.script_load(APPLY_SCRIPT)
        return self._sha

    async def apply(self, plan: BatchPlan) -> ApplyResult:
        if not plan.groups:
            return ApplyResult(0, 0)
        sha = self._sha or await self.load()
        try:
            result = await self._call(sha, plan)
        except NoScriptError:  # Redis restarted or SCRIPT FLUSH: load again, then retry once
            result = await self._call(await self.load(), plan)
        return ApplyResult(int(result[0]), int(result[1]))

    async def _call(self, sha: str, plan: BatchPlan) -> list[int]:
        # The script returns {n_applied, n_skipped}, which redis-py gives as a list of ints.
        result = await self.redis.evalsha(sha, len(plan.keys), *plan.keys, plan.argv)
        return cast(list[int], result)
