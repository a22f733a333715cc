"""Who processes which ingress partition: a fixed list (`--partitions`), or Kafka's consumer group.

Why group rebalancing is safe although aiokafka lacks KIP-447
-------------------------------------------------------------
aiokafka speaks only v0 of the transactional APIs. Its TxnOffsetCommit carries no group
generation or member id, so the broker cannot refuse the offsets of a member the group has already
moved on from; and a rebalance listener cannot stop a member that does not run it (paused,
partitioned away) or that finishes its commit after the revocation. That is aio-libs/aiokafka#844:
with one producer per process, a revoked worker still commits its offsets and outputs, and the
partition's new owner processes the same records again.

What makes it safe here is that ownership of a partition is *also* the ownership of one
transactional.id, `transactional_id(app, topic, partition)` — the same in every process — and
that every owner, before it reads anything, runs InitProducerId for it (`partition.py`). The
transaction coordinator serialises everything done under one transactional.id:

* InitProducerId bumps the epoch, and from then on every request of an older producer (a zombie:
  revoked, paused past its session timeout, or just slow) — AddPartitionsToTxn, Produce,
  TxnOffsetCommit, EndTxn — is refused with INVALID_PRODUCER_EPOCH; aiokafka raises
  ProducerFenced, the zombie's open transaction is aborted, and none of it becomes visible to a
  read_committed reader or to the committed offsets.
* The race that remains is the zombie's commit against the new owner's start. The coordinator
  orders the two. If EndTxn(commit) arrives first, the coordinator answers the new owner's
  InitProducerId only once that commit is complete (its markers are written, the offsets are
  materialised); the new owner then reads the committed offset and the changelog *after*
  InitProducerId returned, so it starts exactly where the zombie's commit left off, with the state
  that commit wrote. If InitProducerId arrives first, the zombie's transaction is aborted and its
  EndTxn is fenced; the new owner starts from the offset before it and processes those records
  once. Either way every input offset is committed by exactly one transaction, together with its
  outputs and state. `tests/integration/test_ownership.py` pauses an owner inside its commit, lets
  the group move its partitions, and resumes it: its commit is fenced and every output exists once.
* Reading the committed offset before InitProducerId would not be safe: aiokafka's OffsetFetch
  (v1-v3) predates RequireStable (v7), so it can return an offset that an in-flight transaction is
  about to move.

So the group only decides *who should* own a partition; fencing decides who *can* write for it.
Two processes that both believe they own a partition for a moment (the zombie and its successor)
cost wasted work, never a duplicate. The changelog partition is the input partition's number, so
the state moves with the partition, and the offsets group is dedicated to the processor.

Rebalance protocol (aiokafka's, eager): before rejoining, every member is told that all its
partitions are revoked; it asks each of its partitions to commit its open batch and stop, and
waits (bounded below the rebalance timeout: a straggler is cancelled, its transaction left to be
aborted by the next owner's InitProducerId). Then the new assignment arrives; the sticky assignor
gives most partitions back to their previous owners, and a partition given back keeps its state
when its committed offset proves that nobody committed in between (`partition.py`). Partitions not
given back drop their state.

A fenced partition in a group means this process lost it without being told (it was paused past
its session timeout, or a transaction timed out during a long outage): it drops the partition and
asks to rejoin the group, so that the group confirms who owns what.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from turnledger.errors import ProcessorError
from turnledger.kafka.clients import (
    describe_partitions,
    kafka_outage,
    read_committed_consumer,
    wait_for_topics,
)
from turnledger.kafka.group_member import group_member_consumer
from turnledger.observability import runtime_metrics as live
from turnledger.processors.config import ProcessorConfig

log = logging.getLogger(__name__)

NEVER_ASSIGNED = TopicPartition("", -1)
"""Fetching this partition returns nothing and takes nothing from the partitions' own fetches."""


class PartitionHost(Protocol):
    """What an ownership drives: the app that runs one processor per owned partition."""

    def acquire(self, partitions: Sequence[int]) -> None: ...
    async def release(self, partitions: Sequence[int]) -> None: ...
    def keep_only(self, partitions: Sequence[int]) -> None: ...
    def fail(self, exc: BaseException) -> None: ...


class Ownership(Protocol):
    ends_when_idle: bool
    """True: the app ends once none of its partitions runs (all fenced); False: it stays a member."""

    def consumer(self) -> AIOKafkaConsumer: ...
    async def start(self, host: PartitionHost, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> None: ...
    def fenced(self, consumer: AIOKafkaConsumer, partition: int) -> None: ...
    async def close(self) -> None: ...


async def owned_partitions(
    config: ProcessorConfig, requested: Sequence[int] | None, stop: asyncio.Event | None = None
) -> list[int]:
    """The ingress partitions to process: `requested`, checked to exist, or all of them when None."""
    topic = config.topics.ingress
    existing = await describe_partitions(config.bootstrap, topic, backoff=config.outage, stop=stop)
    if not existing:
        raise ProcessorError(
            f"input topic {topic!r} does not exist on {config.bootstrap}; create the topics first "
            "(`turnledger process --create-topics N`, or ensure_topics())"
        )
    partitions = existing if requested is None else sorted(requested)
    missing = sorted(set(partitions) - set(existing))
    if missing:
        raise ProcessorError(
            f"partitions {missing} do not exist: {topic!r} has partitions 0..{len(existing) - 1}"
        )
    return partitions


class StaticOwnership:
    """`--partitions`: a fixed list, assigned once and never revoked; the group id only stores offsets.

    Running the same partition in two static processes is safe (the later one fences the earlier,
    which exits as fenced) but nothing moves a partition when its process dies."""

    ends_when_idle = True

    def __init__(self, config: ProcessorConfig, partitions: Sequence[int] | None = None) -> None:
        self._config = config
        self.requested = None if partitions is None else list(partitions)
        self.partitions: list[int] = []

    def consumer(self) -> AIOKafkaConsumer:
        cfg = self._config
        return read_committed_consumer(cfg.bootstrap, group_id=cfg.offsets_group, client_id=cfg.app_id)

    async def start(self, host: PartitionHost, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> None:
        config = self._config
        self.partitions = await owned_partitions(config, self.requested, stop)
        consumer.assign([TopicPartition(config.topics.ingress, p) for p in self.partitions])
        for tp in consumer.assignment():
            consumer.pause(tp)
        host.acquire(self.partitions)

    def fenced(self, consumer: AIOKafkaConsumer, partition: int) -> None:
        """Another process owns the partition now; this one lets it go (the others run on)."""

    async def close(self) -> None:
        pass


class _Rebalances(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka awaits these in its coordination task: revocation before rejoining, assignment after."""

    def __init__(self, host: PartitionHost, topic: str) -> None:
        self.host = host
        self.topic = topic

    def _ours(self, tps: set[TopicPartition]) -> list[int]:
        return sorted(tp.partition for tp in tps if tp.topic == self.topic)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        partitions = self._ours(revoked)
        if partitions:
            log.info("rebalance: partitions %s revoked; committing their open batches", partitions)
        await self.host.release(partitions)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        partitions = self._ours(assigned)
        log.info("rebalance: partitions %s assigned", partitions)
        live.PROCESSOR_REBALANCES.inc()
        self.host.keep_only(partitions)
        self.host.acquire(partitions)


class GroupOwnership:
    """Kafka's consumer group spreads the ingress partitions over every process of the group."""

    ends_when_idle = False

    def __init__(self, config: ProcessorConfig) -> None:
        self._config = config
        self._keepalive: asyncio.Task[None] | None = None

    def consumer(self) -> AIOKafkaConsumer:
        config = self._config
        group = config.group
        return group_member_consumer(
            config.bootstrap,
            group_id=config.offsets_group,
            client_id=config.app_id,
            session_timeout_ms=group.session_timeout_ms,
            heartbeat_interval_ms=group.heartbeat_interval_ms,
            rebalance_timeout_ms=group.rebalance_timeout_ms,
            partition_assignment_strategy=(StickyPartitionAssignor,),
        )

    async def start(self, host: PartitionHost, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> None:
        topic = self._config.topics.ingress
        await wait_for_topics(self._config.bootstrap, [topic], backoff=self._config.outage, stop=stop)
        consumer.subscribe([topic], listener=_Rebalances(host, topic))
        log.info("joining consumer group %r for %r", self._config.offsets_group, topic)
        self._keepalive = asyncio.create_task(
            _keep_member_active(consumer, self._config.bootstrap, stop, host.fail), name="group-keepalive"
        )

    def fenced(self, consumer: AIOKafkaConsumer, partition: int) -> None:
        log.warning(
            "partition %d: fenced although assigned here (this process was paused past its session "
            "timeout, or a transaction timed out in an outage); asking the group to confirm ownership",
            partition,
        )
        request_rejoin(consumer)

    async def close(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)
            self._keepalive = None


def request_rejoin(consumer: AIOKafkaConsumer) -> None:
    """Make the member rejoin its group at once (a rebalance, with revocation first).

    aiokafka has no public call for it; its coordinator's `request_rejoin` is what a failed
    heartbeat uses."""
    coordinator = getattr(consumer, "_coordinator", None)
    rejoin: Callable[[], None] | None = getattr(coordinator, "request_rejoin", None)
    if rejoin is not None:
        rejoin()


async def _keep_member_active(
    consumer: AIOKafkaConsumer, bootstrap: str, stop: asyncio.Event, fail: Callable[[BaseException], None]
) -> None:
    """Keep one fetch in flight at all times, and surface the group coordinator's errors.

    aiokafka leaves the group, and never rejoins on its own, once no fetch has been in progress for
    max_poll_interval — which is the normal state of a member whose partitions are all restoring, or
    that has none. A fetch of `NEVER_ASSIGNED` counts as activity and returns nothing; `getmany`
    also raises errors the coordinator could not handle (authorisation, an unknown group protocol)."""
    classify = kafka_outage(bootstrap, "stay in the consumer group")
    while not stop.is_set():
        try:
            await consumer.getmany(NEVER_ASSIGNED, timeout_ms=1000)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outage = classify(exc)
            if outage is None:
                fail(exc)
                return
            log.warning("consumer group: %s; fetching again in 1s", outage)
            await asyncio.sleep(1)
