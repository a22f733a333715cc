"""Projecting records that did not come from the topics (a fresh fold of the ingress log).

Used to verify a projection: the same planner and script are fed the records in
per-stream order, with synthetic positions `fold:<stream>:0` and offsets 0, 1, 2...
so the result is comparable, key by key, with a projection built by the projector.
"""

from __future__ import annotations

from collections.abc import Iterable

from turnledger.errors import ProjectionError
from turnledger.model.base import Frozen
from turnledger.projections.applier import ScriptApplier
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import DecodedRecord, Planner
from turnledger.projections.shards import plan_groups
from turnledger.redisconn.cluster import RedisClient
from turnledger.topology import PROJECTED_STREAMS

PROJECTED = frozenset(PROJECTED_STREAMS)


class DirectProjector:
    """Keeps the synthetic offsets across calls, so a fold can be projected batch by batch."""

    def __init__(self, redis: RedisClient, keys: ProjectionKeys, batch: int = 500) -> None:
        if batch < 1:
            raise ProjectionError(f"DirectProjector batch: at least 1 record per script call, not {batch}")
        self.keys, self.applier = keys, ScriptApplier(redis)
        self.planners = [Planner(group) for group in keys.groups]
        self.batch = batch
        self.offsets: dict[str, int] = {}

    async def apply(self, records: Iterable[tuple[str, Frozen]]) -> int:
        """Apply `(stream, record)` pairs in order; streams the projector does not read are skipped.

        If a script call fails, the synthetic offsets go back to where this call found them, so that
        the same records given again take the same offsets: what was applied before the failure is
        skipped by the script, the rest applied once."""
        start = dict(self.offsets)
        try:
            return await self._numbered(records)
        except BaseException:
            self.offsets = start
            raise

    async def _numbered(self, records: Iterable[tuple[str, Frozen]]) -> int:
        pending: list[DecodedRecord] = []
        count = 0
        for stream, record in records:
            if stream not in PROJECTED:
                continue
            offset = self.offsets[stream] = self.offsets.get(stream, -1) + 1
            pending.append(DecodedRecord(stream, f"fold:{stream}", 0, offset, record))
            if len(pending) >= self.batch:
                count += await self._apply(pending)
                pending = []
        if pending:
            count += await self._apply(pending)
        return count

    async def _apply(self, records: list[DecodedRecord]) -> int:
        """One script call per slot group (`shards.plan_groups`): the records applied, marks not counted."""
        count = 0
        for group in plan_groups(self.keys, self.planners, records):
            result = await self.applier.apply(group.plan)
            count += sum(1 for i in result.applied_indexes() if i < len(group.records))
        return count


async def project_records(
    redis: RedisClient, keys: ProjectionKeys, records: Iterable[tuple[str, Frozen]], batch: int = 500
) -> int:
    """Project one complete sequence of records (a new DirectProjector each call: offsets restart)."""
    return await DirectProjector(redis, keys, batch).apply(records)
