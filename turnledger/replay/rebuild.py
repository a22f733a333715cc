"""`replay rebuild`: drop a projection, project the topics again, verify against a fresh fold.

The verification projection is built under a separate prefix (`verify:<prefix>`) from
the engine's outputs for the whole ingress log, through the same planner and script,
then the two are compared key by key (applied offsets excluded) and the verification
keys are dropped again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from turnledger.kafka.reading import NamedProgress, ReadProgress, told_as
from turnledger.projections.direct import DirectProjector
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector, ProjectorStats
from turnledger.projections.shards import discover
from turnledger.projections.snapshot import compare_projections, drop_projection
from turnledger.redisconn.cluster import RedisClient
from turnledger.replay.refold import refold
from turnledger.topology import Topics

VERIFY_PREFIX = "verify:"


@dataclass
class RebuildReport:
    dropped_keys: int
    projected: ProjectorStats
    verified: bool
    folded_records: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


async def project_fresh_fold(
    redis: RedisClient,
    bootstrap: str,
    topics: Topics,
    keys: ProjectionKeys,
    progress: ReadProgress | None = None,
) -> int:
    """Project the engine's outputs for the whole ingress log under `keys`; returns records applied.
    `progress`: the ingress offsets folded and projected (`refold`'s)."""
    projection, applied = DirectProjector(redis, keys), 0
    async for folded in refold(bootstrap, topics, progress=progress):
        applied += await projection.apply((o.stream, o.record) for o in folded.outputs)  # type: ignore[misc]
    return applied


async def rebuild(
    redis: RedisClient,
    bootstrap: str,
    topics: Topics,
    keys: ProjectionKeys,
    *,
    verify: bool = True,
    progress: NamedProgress | None = None,
) -> RebuildReport:
    """Drop the projection under `keys.prefix` (as Redis holds it split, and as `keys` splits it),
    project the topics again split as `keys` says, and verify it against a fresh fold split alike.
    `progress` is told each phase: the keys "dropping" deleted (`KeysProgress`: no total until the drop
    is over), the offsets "projecting" the output topics, then (verifying) "folding" the ingress topic
    and the keys of both projections read "comparing" them (no total until both are read)."""
    dropping = None if progress is None else partial(progress, "dropping")
    dropped = await drop_projection(redis, await discover(keys.prefix, redis), keys, progress=dropping)
    projector = Projector(redis, bootstrap, topics, keys)
    stats = await projector.run_to_end(progress=told_as(progress, "projecting"))
    report = RebuildReport(dropped_keys=dropped, projected=stats, verified=verify)
    if not verify:
        return report
    check = keys.beside(VERIFY_PREFIX + keys.prefix)
    await drop_projection(redis, check)
    try:
        report.folded_records = await project_fresh_fold(
            redis, bootstrap, topics, check, told_as(progress, "folding")
        )
        comparing = None if progress is None else partial(progress, "comparing")
        report.differences = await compare_projections(redis, keys, check, comparing)
    finally:
        await drop_projection(redis, check)
    return report
