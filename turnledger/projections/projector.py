"""The projector: output topics -> Redis, exactly once per partition offset.

Each fetched batch is decoded, planned and applied by one script call that also
moves the partitions' applied offsets (`applier.py`). The Redis offsets hash is the
only position: on start every partition is sought to `applied + 1`, so a restart,
a replay from offset 0 or a zombie projector re-delivering a batch changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiokafka import TopicPartition

from turnledger.codec import CodecError, decode
from turnledger.errors import RedisUnavailableError
from turnledger.kafka.clients import close_client
from turnledger.kafka.reading import ReadProgress, partitions_of, read_to_end, start_reader
from turnledger.model.base import Frozen
from turnledger.observability import runtime_metrics as live
from turnledger.projections.applier import ScriptApplier, ensure_epoch
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import BatchPlan, DecodedRecord, Planner
from turnledger.projections.settings import FollowSettings
from turnledger.projections.shards import (
    EPOCH_SEPARATOR,
    GroupPlan,
    applied_offsets_of,
    discover,
    ensure_layout,
    group_epochs,
    plan_groups,
)
from turnledger.records import SourceRecord
from turnledger.redisconn.cluster import RedisClient
from turnledger.redisconn.naming import client_url
from turnledger.redisconn.refusals import classify
from turnledger.retry import Classify
from turnledger.topology import PROJECTED_STREAMS, Topics

if TYPE_CHECKING:
    from turnledger.projections.follow import Follower

log = logging.getLogger(__name__)

OnApplied = Callable[[list[DecodedRecord]], None]
BeforeApply = Callable[[BatchPlan], Awaitable[None]]
"""Test hook run before each script call; raising there simulates a crash before EVALSHA."""


def decode_record(stream: str, raw: SourceRecord) -> DecodedRecord:
    """Never raises: an undecodable record becomes a DecodedRecord without a record, counted later."""
    if raw.value is None:
        return DecodedRecord(stream, raw.topic, raw.partition, raw.offset, None, "record without a value")
    try:
        record = decode(raw.value)
    except CodecError as exc:
        log.warning("undecodable record %s:%d@%d: %s", raw.topic, raw.partition, raw.offset, exc)
        return DecodedRecord(stream, raw.topic, raw.partition, raw.offset, None, str(exc))
    if not isinstance(record, Frozen):
        detail = f"decoded a {type(record).__name__}, which is not a turnledger record"
        return DecodedRecord(stream, raw.topic, raw.partition, raw.offset, None, detail)
    return DecodedRecord(stream, raw.topic, raw.partition, raw.offset, record)


@dataclass
class ProjectorStats:
    batches: int = 0
    applied: int = 0
    skipped: int = 0
    undecodable: int = 0
    seconds: float = 0.0
    by_stream: dict[str, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return self.applied + self.skipped


async def applied_offsets(redis: RedisClient, keys: ProjectionKeys) -> dict[str, int]:
    """`topic:partition` -> the applied offset (of a projection split in slot groups: the lowest of
    the groups', `shards.lowest_applied`)."""
    try:
        return await applied_offsets_of(redis, keys)
    except Exception as exc:
        failure = classify(exc, redis)
        if failure is None:
            raise
        raise failure from exc


def _count(decoded: Sequence[DecodedRecord], applied: Sequence[DecodedRecord]) -> None:
    applied_by_stream = Counter(d.stream for d in applied)
    for stream, n in Counter(d.stream for d in decoded).items():
        done = applied_by_stream.get(stream, 0)
        if done:
            live.PROJECTOR_RECORDS.labels(stream, "applied").inc(done)
        if n - done:
            live.PROJECTOR_RECORDS.labels(stream, "skipped").inc(n - done)
    undecodable = sum(1 for d in applied if d.record is None)
    if undecodable:
        live.PROJECTOR_UNDECODABLE.inc(undecodable)


def redis_outage(redis: RedisClient) -> Classify:
    """Classifier for `ride_out` (`redisconn.refusals`): a Redis that cannot be reached, times out or
    is still loading is an outage to wait out; one that refuses our login or TLS is a
    `RedisAccessError`, raised at once."""
    return lambda exc: classify(exc, redis)


url_of = client_url


class Projector:
    def __init__(
        self,
        redis: RedisClient,
        bootstrap: str,
        topics: Topics,
        keys: ProjectionKeys,
        *,
        batch_size: int = 1000,
        before_apply: BeforeApply | None = None,
        on_applied: OnApplied | None = None,
        adopt_layout: bool = False,
    ) -> None:
        """`on_applied(records)` runs after every script call with the decoded records that call
        applied (never those it skipped as applied before): what the live metrics count.
        `adopt_layout`: split the projection as Redis holds it, whatever `keys.shards` says (`prepare`)."""
        self.adopt_layout = adopt_layout
        self.redis = redis
        self.bootstrap = bootstrap
        self.streams = topics.by_topic(PROJECTED_STREAMS)
        self.keys = keys
        self.batch_size = batch_size
        self.before_apply = before_apply
        self.on_applied = on_applied
        self.planners = [Planner(group) for group in keys.groups]
        self.applier = ScriptApplier(redis)
        self.follower: Follower | None = None
        """The follow mode's state while `run_forever` runs (readiness)."""
        self.epoch: str | None = None
        """The offsets hash's epoch token read before positioning (`applier.ensure_epoch`); of a
        projection split in slot groups, each group's, joined (`shards.group_epochs`)."""

    async def prepare(self) -> None:
        """Load the script, and record or check how the projection is split (`shards.ensure_layout`:
        a `ProjectionLayoutError` when Redis holds it split otherwise)."""
        await self.applier.load()
        if self.adopt_layout:
            held = await discover(self.keys.prefix, self.redis)
            if held.shards != self.keys.shards:
                self.keys, self.planners = held, [Planner(group) for group in held.groups]
        await ensure_layout(self.redis, self.keys)

    async def keep_layout(self) -> None:
        """Record the projection's split again if a node that held it came back empty (`prepare`);
        before each positioning."""
        await ensure_layout(self.redis, self.keys)

    async def start_positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """applied + 1 for every partition Redis knows; the others start at the beginning."""
        applied = await applied_offsets(self.redis, self.keys)
        positions = {}
        for tp in partitions:
            offset = applied.get(f"{tp.topic}:{tp.partition}")
            if offset is not None:
                positions[tp] = offset + 1
        return positions

    async def apply(self, raw: Sequence[SourceRecord], stats: ProjectorStats) -> None:
        """Plan and apply one batch in one script call (one per slot group, `shards.py`, sent at once:
        the groups live on several nodes; one after another, 8 groups projected 0.88x a single Redis,
        at once 0.99x), guarded by `self.epoch` when set (`ScriptApplier.apply`). What a group applied
        is counted even when another group's call failed, whose failure is then raised."""
        decoded = [decode_record(self.streams[r.topic], r) for r in raw]
        epochs = group_epochs(self.epoch, self.keys)
        applied: list[DecodedRecord] = []
        failure: BaseException | None = None
        plans = zip(plan_groups(self.keys, self.planners, decoded), epochs, strict=True)
        outcomes = await asyncio.gather(
            *(self._apply_group(group, epoch, decoded) for group, epoch in plans), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                failure = failure or outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                applied += outcome
        _count(decoded, applied)
        if self.on_applied is not None:
            self.on_applied(applied)
        if failure is not None:
            raise failure
        stats.batches += 1
        stats.applied += len(applied)
        stats.skipped += len(decoded) - len(applied)
        stats.undecodable += sum(1 for d in decoded if d.record is None)
        for d in decoded:
            stats.by_stream[d.stream] = stats.by_stream.get(d.stream, 0) + 1

    async def _apply_group(
        self, group: GroupPlan, epoch: str | None, decoded: Sequence[DecodedRecord]
    ) -> list[DecodedRecord]:
        """One group's script call: the decoded records it applied (not its marks)."""
        if self.before_apply is not None:
            await self.before_apply(group.plan)
        began = time.perf_counter()
        try:
            result = await self.applier.apply(group.plan, epoch=epoch)
        except Exception as exc:
            failure = classify(exc, self.redis)
            if failure is None:
                raise
            raise failure from exc
        live.PROJECTOR_APPLY_SECONDS.observe(time.perf_counter() - began)
        records = group.records
        return [decoded[records[i]] for i in result.applied_indexes() if i < len(records)]

    async def run_to_end(
        self, start: Mapping[TopicPartition, int] | None = None, progress: ReadProgress | None = None
    ) -> ProjectorStats:
        """Project everything up to the topics' current last stable offsets, then return.

        `start` overrides the Redis positions (tests use it to re-deliver from offset 0).
        `progress(done, total)`: the offsets applied of the lag when the read began (`read_to_end`)."""
        stats = ProjectorStats()
        began = time.perf_counter()
        await self.prepare()
        self.epoch = EPOCH_SEPARATOR.join(
            [await ensure_epoch(self.redis, group.offsets) for group in self.keys.groups]
        )
        consumer = await start_reader(self.bootstrap, action="project the output topics")
        try:
            partitions = await partitions_of(consumer, self.bootstrap, self.streams)
            positions = dict(start) if start is not None else await self.start_positions(partitions)
            async for batch in read_to_end(consumer, partitions, positions, self.batch_size, progress):
                await self.apply(batch, stats)
        finally:
            await close_client(consumer)
        stats.seconds = time.perf_counter() - began
        return stats

    async def run_forever(
        self,
        stop: asyncio.Event | None = None,
        report: Callable[[ProjectorStats], None] | None = None,
        *,
        follow: FollowSettings | None = None,
        diagnosed: RedisUnavailableError | None = None,
    ) -> ProjectorStats:
        """Follow the topics until `stop` is set (or the task is cancelled): every partition by static
        assignment, or, with `follow.group_id`, the partitions the consumer group assigns; outages of
        Kafka and Redis are ridden out as `follow.outage` says (`follow.py`). `diagnosed`: the outage
        `client.diagnose` met just before, whose sentinels are not asked again at once."""
        from turnledger.projections.follow import Follower

        self.follower = Follower(self, follow or FollowSettings(), diagnosed)
        return await self.follower.run(stop or asyncio.Event(), report)

    def readiness(self) -> str | None:
        """`/readyz`: None while following with every owned partition positioned and no outage."""
        if self.follower is None:
            return "not following the topics"
        return self.follower.readiness()
