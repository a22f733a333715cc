"""The projector's follow mode: apply what the topics commit, for ever, through moves and outages.

Exactly once without fencing. The position of every partition lives in Redis, moved by the same
script call that applies the batch, and the script applies a record only if its offset is above
the partition's applied offset. So it does not matter who applies a batch, or how often: a
projector that lost its partitions in a rebalance (or was paused past its session timeout) and
still applies a late batch finds its offsets already applied and changes nothing; the new owner
starts at `applied + 1`, read from Redis when the partition is assigned to it. Two projectors that
briefly share a partition both apply in offset order and each offset takes effect once. This is
why the projector needs a consumer group only to *spread* the partitions, never to protect them.

Outages. A Kafka outage is waited out by the consumer and, where it surfaces, by retrying. A Redis
outage makes the failed batch's records be fetched again once Redis answers: every owned
partition is positioned again from the offsets in Redis. A Redis that comes back empty (no
persistence) has lost the offsets too, and its projection must be rebuilt from offset 0; the
offsets hash carries an epoch token (read before positioning, checked by every script call), so
a batch is never applied onto a hash that is not the one its positions came from — were it simply
retried, it would land on an empty projection and move the offsets past everything before it. On
`EpochChangedError` the follower adopts (or creates) the new epoch and positions every partition
again from what Redis holds now. Recognising the restart by the script vanishing from Redis's
script cache would not do: another projector may have loaded it again first.

Failover. A replica promoted to primary holds the primary's writes up to where replication had
reached: the last batches the projector applied may be missing there, with their offsets. The
script's writes and the offsets they move replicate as one, so what the new primary holds is a
projection up to its own offsets, and positioning from them fetches the missing batches again. A
primary that is demoted rather than stopped (a managed failover, `REPLICAOF`) keeps its connections
and answers writes with `READONLY`: a `RedisFailoverError`, an outage like any other, after which
the pooled connections are dropped, so that the next command reaches the node the URL names now.
An old primary may also go on taking writes for a while (Sentinel converts it to a replica some
seconds after promoting another; a primary's writes that had not reached the replica are lost
anyway), and a projector that then has nothing to apply would never write again to find out. So
while idle it compares, every `verify_every_s`, the applied offsets Redis holds for its partitions
with those it saw applied (`known`); any that went back make it position every partition again.

Sentinels that name no primary are an outage too, but they are asked why (`redisconn.sentinel_probe`,
`Rechecks`: at the outage's first sighting, then at most every `RECHECK_EVERY_S` while it lasts), while
following and while loading the script: sentinels that refuse us (their password changed under a running
projector) end it, as a Redis that refuses it does. An outage `turnledger project`'s `diagnose` met at the
start was sighted, and its sentinels asked, there: the load asks them next `RECHECK_EVERY_S` later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from turnledger.errors import RedisFailoverError, RedisUnavailableError
from turnledger.kafka.clients import (
    LEAVE_WITHIN_S,
    close_client,
    kafka_outage,
    read_committed_consumer,
    start_client,
    wait_for_topics,
)
from turnledger.kafka.group_member import group_member_consumer
from turnledger.kafka.positions import seek_all
from turnledger.kafka.reading import partitions_of, source_record
from turnledger.observability import runtime_metrics as live
from turnledger.projections.applier import EpochChangedError, ensure_epoch
from turnledger.projections.settings import FollowSettings
from turnledger.projections.shards import EPOCH_SEPARATOR
from turnledger.records import SourceRecord
from turnledger.redisconn.cluster import drop_connections
from turnledger.redisconn.sentinel_probe import Rechecks
from turnledger.retry import Classify, StopRequested, ride_out

if TYPE_CHECKING:
    from turnledger.projections.projector import Projector, ProjectorStats

log = logging.getLogger(__name__)


class _Rebalances(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, follower: Follower) -> None:
        self.follower = follower

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.follower.unpositioned -= revoked
        self.follower.forget(revoked)
        if revoked:
            log.info("rebalance: %d partitions revoked", len(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("rebalance: %d partitions assigned: %s", len(assigned), _names(assigned))
        live.PROJECTOR_REBALANCES.inc()
        self.follower.assigned = True
        self.follower.to_position(assigned)


def _field(tp: TopicPartition) -> str:
    """A partition's field in the offsets hash."""
    return f"{tp.topic}:{tp.partition}"


def _names(tps: set[TopicPartition]) -> str:
    return ", ".join(sorted(f"{tp.topic}-{tp.partition}" for tp in tps))


class Follower:
    def __init__(
        self, projector: Projector, settings: FollowSettings, diagnosed: RedisUnavailableError | None = None
    ) -> None:
        """`diagnosed`: the outage `client.diagnose` met just before (its sentinels asked why already)."""
        self.projector = projector
        self.settings = settings
        self.consumer: AIOKafkaConsumer | None = None
        self.unpositioned: set[TopicPartition] = set()
        """Owned partitions to seek to `applied + 1` (kept paused until then)."""
        self.assigned = False
        """An assignment arrived (static: the partitions were listed)."""
        self.outage: str | None = None
        """What the follower is waiting out now (Kafka or Redis), None when its last round went through."""
        self.known: dict[str, int] = {}
        """`topic:partition` -> the offset Redis was last seen to hold applied for an owned partition:
        read when it was positioned, raised by every batch (applied or skipped, Redis then holds at
        least the batch's offsets). Redis holding less is a failover that lost writes."""
        self.verified_at: float | None = None
        """`time.monotonic()` at the last comparison with Redis; None before the first, so the first idle
        round compares at once whatever the clock's origin (the machine's boot)."""
        self.rechecks = Rechecks(projector.redis)
        """When the sentinels of a Sentinel URL are asked why they named no primary."""
        self.rechecks.asked(diagnosed)

    def readiness(self) -> str | None:
        """None once following: the consumer started, partitions assigned and positioned, no outage."""
        if self.consumer is None:
            return "the consumer has not started (waiting for Kafka or Redis)"
        if not self.assigned:
            return "no partition assignment yet"
        if self.outage is not None:
            return self.outage
        if self.unpositioned:
            return f"{len(self.unpositioned)} partitions not positioned at their applied offsets yet"
        return None

    def forget(self, tps: set[TopicPartition]) -> None:
        for tp in tps:
            self.known.pop(_field(tp), None)

    def saw_applied(self, raw: list[SourceRecord]) -> None:
        for record in raw:
            field = f"{record.topic}:{record.partition}"
            self.known[field] = max(self.known.get(field, -1), record.offset)

    async def regressed(self) -> list[str]:
        """The owned partitions whose applied offset in Redis is below the one this projector saw."""
        from turnledger.projections.projector import applied_offsets

        assert self.consumer is not None
        owned = {_field(tp) for tp in self.consumer.assignment()}
        applied = await applied_offsets(self.projector.redis, self.projector.keys)
        return sorted(f for f, offset in self.known.items() if f in owned and applied.get(f, -1) < offset)

    def to_position(self, tps: set[TopicPartition]) -> None:
        assert self.consumer is not None
        for tp in tps:
            self.consumer.pause(tp)
        self.unpositioned |= tps

    async def run(
        self, stop: asyncio.Event, report: Callable[[ProjectorStats], None] | None
    ) -> ProjectorStats:
        from turnledger.projections.projector import ProjectorStats, redis_outage

        stats = ProjectorStats()
        began = time.perf_counter()
        p, s = self.projector, self.settings
        redis_classify = redis_outage(p.redis)
        try:
            await self._load_script(stop)
            self.consumer = await start_client(
                self._new_consumer,
                bootstrap=p.bootstrap,
                action="project the output topics",
                backoff=s.outage,
                stop=stop,
            )
            await self._own(stop)
            await self._follow(stop, report, stats, redis_classify)
        except StopRequested:
            pass
        finally:
            if self.consumer is not None:
                await close_client(self.consumer, LEAVE_WITHIN_S if s.group_id is not None else None)
            stats.seconds = time.perf_counter() - began
        return stats

    def _new_consumer(self) -> AIOKafkaConsumer:
        s = self.settings
        reading: dict[str, Any] = {
            "client_id": "turnledger-projector",
            "fetch_max_wait_ms": s.fetch_ms,
            "max_partition_fetch_bytes": 4 * 1024 * 1024,
        }
        if s.group_id is None:
            return read_committed_consumer(self.projector.bootstrap, group_id=None, **reading)
        return group_member_consumer(
            self.projector.bootstrap,
            group_id=s.group_id,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            **reading,
        )

    async def _own(self, stop: asyncio.Event) -> None:
        consumer, p = self.consumer, self.projector
        assert consumer is not None
        await wait_for_topics(
            p.bootstrap,
            list(p.streams),
            backoff=self.settings.outage,
            stop=stop,
            hint="the processor creates them: `turnledger process --create-topics N`",
        )
        if self.settings.group_id is None:
            partitions = await ride_out(
                lambda: partitions_of(consumer, p.bootstrap, p.streams),
                waiting_for=f"Kafka at {p.bootstrap} to list the projected topics",
                classify=kafka_outage(p.bootstrap, "list the projected topics"),
                backoff=self.settings.outage,
                stop=stop,
            )
            consumer.assign(partitions)
            self.to_position(set(partitions))
            self.assigned = True
        else:
            consumer.subscribe(list(p.streams), listener=_Rebalances(self))
            log.info("joining consumer group %r for %d topics", self.settings.group_id, len(p.streams))

    async def _load_script(self, stop: asyncio.Event) -> None:
        from turnledger.projections.projector import redis_outage, url_of

        p = self.projector
        await ride_out(
            self.rechecks.attempting(p.prepare),
            waiting_for=f"Redis at {url_of(p.redis)} to load the projection script",
            classify=redis_outage(p.redis),
            backoff=self.settings.outage,
            stop=stop,
        )

    async def _position(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        pending = self.unpositioned & consumer.assignment()
        if not pending:
            self.unpositioned.clear()
            return
        p = self.projector
        await p.keep_layout()
        # before the offsets: see the module doc (each slot group's: `shards.py`)
        p.epoch = EPOCH_SEPARATOR.join([await ensure_epoch(p.redis, g.offsets) for g in p.keys.groups])
        start = await p.start_positions(sorted(pending))
        self.forget(pending)
        self.known.update({_field(tp): position - 1 for tp, position in start.items()})
        await seek_all(consumer, sorted(pending), start)
        for tp in pending:
            consumer.resume(tp)
        self.unpositioned -= pending
        log.info("positioned %d partitions at their applied offsets + 1 (from Redis)", len(pending))

    async def _follow(
        self,
        stop: asyncio.Event,
        report: Callable[[ProjectorStats], None] | None,
        stats: ProjectorStats,
        redis_classify: Classify,
    ) -> None:
        consumer, p, s = self.consumer, self.projector, self.settings
        assert consumer is not None
        kafka_classify = kafka_outage(p.bootstrap, "fetch the projected topics")
        delays = s.outage.delays()
        outage_began: float | None = None
        while not stop.is_set():
            try:
                await self._position()
                fetched = await consumer.getmany(timeout_ms=s.fetch_ms, max_records=p.batch_size)
                raw = [source_record(r) for records in fetched.values() for r in records]
                if raw:  # every partition of the fetch in one script call
                    await p.apply(raw, stats)
                    self.saw_applied(raw)
                    if report is not None:
                        report(stats)
                elif self.verified_at is None or time.monotonic() - self.verified_at >= s.verify_every_s:
                    self.verified_at = time.monotonic()
                    regressed = await self.regressed()
                    if regressed:
                        log.warning(
                            "Redis holds older applied offsets than this projector applied for %s: a "
                            "failover lost the last writes, or Redis was emptied; positioning every "
                            "partition again",
                            ", ".join(regressed),
                        )
                        self.to_position(consumer.assignment())
                outage_began = None
                self.outage = None
                self.rechecks.passed()
                delays = s.outage.delays()
            except EpochChangedError as exc:
                log.warning("%s: positioning every partition again", exc)
                self.to_position(consumer.assignment())
            except Exception as exc:
                outage = redis_classify(exc) or kafka_classify(exc)
                outage = await self.rechecks.refusal(outage, exc) or outage
                if outage is None or (outage is exc and not outage.retriable):
                    raise
                if not outage.retriable:
                    raise outage from exc  # refused, not down: RedisAccessError
                if isinstance(outage, RedisFailoverError):
                    await drop_connections(p.redis)
                now = time.monotonic()
                outage_began = outage_began or now
                self.outage = str(outage)
                limit = s.outage.max_outage_s
                if limit is not None and now - outage_began >= limit:
                    raise outage from exc
                delay = next(delays)
                log.warning(
                    "projector: %s; retrying in %.1fs (%.1fs into the outage)",
                    outage,
                    delay,
                    now - outage_began,
                )
                self.to_position(consumer.assignment())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
