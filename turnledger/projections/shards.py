"""A projection split in slot groups (`ProjectionKeys.shards`): a batch becomes one plan per group.

Each group is a projection of its own, applied exactly once by the offsets it keeps, so a batch is
planned per group: the records of the group's conversations (records of none go to group 0), then,
when the projection is split, one *mark* per source partition of the batch at its last offset, which
runs no op and moves the group's applied offset. With the marks every group holds at least the offsets
of every batch it was given, so where the projector starts again (each partition at the lowest
applied offset of all the groups, `lowest_applied`) is never far behind, and a group that came back
empty (a cluster node restarted without persistence) is rebuilt from the topics while the others skip
what they hold.

The groups' script calls are separate: a crash between two leaves some groups ahead of others, which
the next start reads again from the lowest offsets, each group skipping what it applied. What one
conversation shows is always whole (it lives in one group); listings that span groups (the
conversations, the rejections, the counters) may show one group's batch before another's.

The group count is part of the projection (`layout`): the first projector writes it, every other
checks that its own is the same (`ensure_layout`) and readers take it from there (`discover`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from turnledger.errors import ProjectionError
from turnledger.model.events import ManifestIssued
from turnledger.projections.keys import EPOCH_FIELD, MAX_SHARDS, ProjectionKeys, shard_of
from turnledger.projections.plan import BatchPlan, DecodedRecord, Planner
from turnledger.projections.replies import bytes_hash, text_or_none
from turnledger.redisconn.cluster import RedisClient


class ProjectionLayoutError(ProjectionError):
    """The projection in Redis is split in another number of slot groups than this command was told."""

    def __init__(self, prefix: str, held: int, asked: int) -> None:
        self.held, self.asked = held, asked
        super().__init__(
            f"the projection under key prefix {prefix!r} is split in {held} slot group(s), and this "
            f"projector was started with --shards {asked}: start it with --shards {held} (or without "
            f"--shards), or rebuild the projection in {asked} with `turnledger replay rebuild --shards "
            f"{asked}`"
        )


@dataclass
class GroupPlan:
    """One group's script call: `plan`, and the batch index of each of its groups that is a record
    (the marks, after them, have none)."""

    keys: ProjectionKeys
    plan: BatchPlan
    records: list[int] = field(default_factory=list)


def conversation_of(item: DecodedRecord) -> str | None:
    record = item.record
    if isinstance(record, ManifestIssued):
        return record.manifest.conversation_id
    conversation_id: str | None = getattr(record, "conversation_id", None)
    return conversation_id


def plan_groups(
    keys: ProjectionKeys, planners: Sequence[Planner], records: Sequence[DecodedRecord]
) -> list[GroupPlan]:
    """One `GroupPlan` per slot group (`planners[i]` plans group i), in group order; a projection not
    split gets exactly `Planner.plan` of the batch."""
    plans = [GroupPlan(group, BatchPlan.start(group)) for group in keys.groups]
    last: dict[str, int] = {}
    for index, item in enumerate(records):
        shard = shard_of(conversation_of(item), keys.shards)
        target = plans[shard]
        target.plan.add(item.source, item.offset, planners[shard].ops(target.plan, item))
        target.records.append(index)
        last[item.source] = max(last.get(item.source, -1), item.offset)
    if keys.split:
        for target in plans:
            for source, offset in sorted(last.items()):
                target.plan.add(source, offset, [])
    return plans


def lowest_applied(held: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """`topic:partition` -> the lowest offset every group applied (a partition some group never
    applied is absent: it starts from the beginning)."""
    if not held:
        return {}
    common = set(held[0]).intersection(*held[1:])
    return {source: min(group[source] for group in held) for source in sorted(common)}


def _group_count(keys: ProjectionKeys, held: str | None) -> int:
    """The group count a layout key holds (1 without one); a `ProjectionError` for anything else."""
    if held is None:
        return 1
    if not (held.isascii() and held.isdigit()) or not 0 < int(held) <= MAX_SHARDS:
        raise ProjectionError(
            f"{keys.layout} holds {held!r}, not a slot group count: rebuild the projection "
            "(`turnledger replay rebuild --shards N`)"
        )
    return int(held)


async def discover(prefix: str, redis: RedisClient) -> ProjectionKeys:
    """The keys of the projection under `prefix` as it is split in Redis (`layout`; 1 group when the
    projection has no layout, as one written before slot groups existed)."""
    keys = ProjectionKeys.of(prefix, redis)
    count = _group_count(keys, text_or_none(await redis.get(keys.layout)))
    return keys if count == 1 else ProjectionKeys.of(prefix, redis, count)


async def ensure_layout(redis: RedisClient, keys: ProjectionKeys) -> None:
    """Record the projection's group count when it is split and has none yet, else check that it
    is `keys.shards` (`ProjectionLayoutError`). A projection of one group has no layout (as every
    one written before slot groups existed): one that holds offsets under its base is one group."""
    held = text_or_none(await redis.get(keys.layout))
    if held is None and keys.split:
        if await redis.exists(ProjectionKeys(keys.prefix, one_slot=keys.one_slot).offsets):
            raise ProjectionLayoutError(keys.prefix, 1, keys.shards)
        await redis.set(keys.layout, str(keys.shards), nx=True)
        held = text_or_none(await redis.get(keys.layout))
    count = _group_count(keys, held)
    if count != keys.shards:
        raise ProjectionLayoutError(keys.prefix, count, keys.shards)


EPOCH_SEPARATOR = ","
"""Joins the groups' epoch tokens (hex) into the one `Projector.epoch` the follower keeps."""


def group_epochs(epoch: str | None, keys: ProjectionKeys) -> list[str | None]:
    """Each group's epoch token out of `Projector.epoch` (None: apply unguarded)."""
    if epoch is None:
        return [None] * keys.shards
    tokens: list[str | None] = list(epoch.split(EPOCH_SEPARATOR))
    if len(tokens) != keys.shards:
        raise ProjectionError(f"epoch {epoch!r} names {len(tokens)} groups, the projection has {keys.shards}")
    return tokens


async def group_offsets(redis: RedisClient, group: ProjectionKeys) -> dict[str, int]:
    raw = bytes_hash(await redis.hgetall(group.offsets))
    return {k.decode(): int(v) for k, v in raw.items() if k.decode() != EPOCH_FIELD}


async def applied_offsets_of(redis: RedisClient, keys: ProjectionKeys) -> dict[str, int]:
    """Where the projection stands: each partition's lowest applied offset over the groups."""
    return lowest_applied([await group_offsets(redis, group) for group in keys.groups])
