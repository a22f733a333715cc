"""Runs planned batches through the projection Lua script (loaded once, called by EVALSHA)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import NoScriptError

from turnledger.errors import ProjectionError
from turnledger.projections.keys import EPOCH_FIELD
from turnledger.projections.plan import BatchPlan
from turnledger.projections.script import APPLY_SCRIPT
from turnledger.redisconn.cluster import RedisClient


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: int
    skipped: int
    flags: str = ""
    """One character per group of the plan: "1" applied by this call, "0" skipped (applied before)."""

    def applied_indexes(self) -> list[int]:
        return [i for i, flag in enumerate(self.flags) if flag == "1"]


class ScriptApplier:
    """One script call per batch: records whose offset is not above the applied offset are no-ops.

    A run-time error inside the script (an unknown op) aborts the call before any write
    only if it happens before the first write, so the planner never emits unknown ops.
    """

    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis
        self._sha: str | None = None

    async def load(self) -> str:
        self._sha = await self.redis.script_load(APPLY_SCRIPT)
        return self._sha

    async def apply(self, plan: BatchPlan, *, epoch: str | None = None) -> ApplyResult:
        """Run the plan; with `epoch`, only if the offsets hash still carries that token, else raise
        `EpochChangedError` having applied nothing. A missing script (Redis restarted, or SCRIPT
        FLUSH) is loaded again and the call retried once."""
        if not plan.groups:
            return ApplyResult(0, 0)
        sha = self._sha or await self.load()
        try:
            result = await self._call(sha, plan, epoch)
        except NoScriptError:
            result = await self._call(await self.load(), plan, epoch)
        if int(result[0]) < 0:
            raise EpochChangedError(epoch)
        flags = result[2] if len(result) > 2 else b""
        return ApplyResult(
            int(result[0]), int(result[1]), flags.decode() if isinstance(flags, bytes) else flags
        )

    async def _call(self, sha: str, plan: BatchPlan, epoch: str | None) -> list[Any]:
        # The script returns {n_applied, n_skipped, flags}: redis-py gives [int, int, bytes].
        args = [plan.argv] if epoch is None else [plan.argv, epoch]
        result = await self.redis.evalsha(sha, len(plan.keys), *plan.keys, *args)
        return cast(list[Any], result)


class EpochChangedError(ProjectionError):
    """The offsets hash is not the one the projector positioned itself from (Redis restarted empty)."""

    def __init__(self, epoch: str | None) -> None:
        super().__init__(
            f"the projection's offsets no longer carry epoch {epoch!r}: Redis lost them (a restart without "
            "persistence, or the projection was dropped); position again from what Redis holds"
        )


async def ensure_epoch(redis: RedisClient, offsets_key: str) -> str:
    """The epoch token of the offsets hash, creating one if it has none (the first projector to see an
    empty Redis makes it; every other adopts it)."""
    await redis.hsetnx(offsets_key, EPOCH_FIELD, secrets.token_hex(8))
    token = await redis.hget(offsets_key, EPOCH_FIELD)
    if token is None:  # dropped between the two calls: try once more
        await redis.hsetnx(offsets_key, EPOCH_FIELD, secrets.token_hex(8))
        token = await redis.hget(offsets_key, EPOCH_FIELD)
    return token.decode() if isinstance(token, bytes) else str(token)
