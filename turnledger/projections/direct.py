"""Projecting records that did not come from the topics (a fresh fold of the ingress log).

Used to verify a projection: the same planner and script are fed the records in
per-stream order, with synthetic positions `fold:<stream>:0` and offsets 0, 1, 2...
so the result is comparable, key by key, with a projection built by the projector.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from turnledger.model.base import Frozen
from turnledger.projections.applier import ScriptApplier
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import DecodedRecord, Planner
from turnledger.projections.streams import PROJECTED_STREAMS

PROJECTED = frozenset(PROJECTED_STREAMS)


async def project_records(
    redis: aioredis.Redis, keys: ProjectionKeys, records: Iterable[tuple[str, Frozen]], batch: int = 500
) -> int:
    """Apply `(stream, record)` pairs in order; streams the projector does not read are skipped."""
    planner, applier = Planner(keys), ScriptApplier(redis)
    offsets: dict[str, int] = {}
    pending: list[DecodedRecord] = []
    count = 0
    for stream, record in records:
        if stream not in PROJECTED:
            continue
        offset = offsets[stream] = offsets.get(stream, -1) + 1
        pending.append(DecodedRecord(stream, f"fold:{stream}", 0, offset, record))
        if len(pending) >= batch:
            count += (await applier.apply(planner.plan(pending))).applied
            pending = []
    if pending:
        count += (await applier.apply(planner.plan(pending))).applied
    return count
