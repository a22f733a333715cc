"""A worker's share of the manifests topic: partitions dealt by a consumer group, restarts costing open work.

Workers join one consumer group on `turnledger.manifests`; Kafka deals its partitions out and
moves them when a worker leaves or dies. A worker sees only its partitions' operations, so it
attempts, renews, sweeps and adopts only those; the ledger's CAS and lease checks stay the
arbiter whenever two workers meet an operation during a move.

What a worker needs of a partition is the records of its open operations (every record of an
operation that is still open comes after that operation's first record). So the offset the
worker commits for a partition is a low watermark: the first offset of its oldest open
operation, or its position when none is open. A worker assigned the partition reads from
there: everything of the open operations, and in between only what settled since the oldest
of them began. That costs at most the traffic of one operation's lifetime (which its deadline
bounds), never the partition's history. A partition never committed (a new group) is read
from its beginning once.

While an assigned partition catches up to the end it had when assigned, its records only fill
the board; then its PREPARED and open operations are taken (as `go_live` does at start), so a
replayed history never starts attempts for operations that have long settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from turnledger.codec import CodecError
from turnledger.gateway.board import OperationKey, key_of
from turnledger.kafka.clients import (
    LEAVE_WITHIN_S,
    close_client,
    start_topic_reader,
    step_until_stopped,
)
from turnledger.kafka.group_member import group_member_consumer
from turnledger.kafka.tail import decode_record
from turnledger.model.events import DispatchDecision, ManifestIssued
from turnledger.retry import Backoff, StopRequested

if TYPE_CHECKING:
    from turnledger.gateway.worker import DispatchWorker

log = logging.getLogger(__name__)

Record = ManifestIssued | DispatchDecision


class _Rebalances(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, feed: ManifestFeed) -> None:
        self.feed = feed

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.feed.release(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.feed.assigned(assigned)


class ManifestFeed:
    def __init__(
        self,
        worker: DispatchWorker,
        bootstrap: str,
        topic: str,
        group_id: str,
        *,
        stop: asyncio.Event,
        outage: Backoff,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        commit_every_s: float = 1.0,
        fetch_ms: int = 200,
        on_live: Callable[[], Awaitable[None]] | None = None,
        leave_step_s: float = LEAVE_WITHIN_S,
    ) -> None:
        self.worker = worker
        self.bootstrap, self.topic, self.group_id = bootstrap, topic, group_id
        self.stop, self.outage = stop, outage
        self.session_timeout_ms, self.heartbeat_interval_ms = session_timeout_ms, heartbeat_interval_ms
        self.commit_every_s, self.fetch_ms = commit_every_s, fetch_ms
        self.on_live = on_live
        self.leave_step_s = leave_step_s
        self.consumer: AIOKafkaConsumer | None = None
        self.first_offsets: dict[TopicPartition, dict[OperationKey, int]] = defaultdict(dict)
        """Per owned partition: the first offset of each operation seen there that is still open."""
        self.keys: dict[TopicPartition, set[OperationKey]] = defaultdict(set)
        self.unpositioned: set[TopicPartition] = set()
        self.catching_up: dict[TopicPartition, int] = {}  # partition → the end to reach before taking work
        self.records_read = 0
        self._joined = False  # the group dealt this worker its share at least once (perhaps nothing)
        self._last_commit: float | None = None
        """`time.monotonic()` at the last commit; None before the first (the first step commits: the clock
        counts from an unspecified point, the machine's boot, so 0 would wait for the machine's uptime)."""

    # -- group membership ------------------------------------------------------------------

    def assigned(self, tps: set[TopicPartition]) -> None:
        log.info("manifests: partitions %s assigned", sorted(tp.partition for tp in tps))
        assert self.consumer is not None
        for tp in tps:
            self.consumer.pause(tp)
        self.unpositioned |= tps
        self._joined = True

    async def release(self, tps: set[TopicPartition]) -> None:
        """Commit the watermarks of partitions leaving this worker and drop their operations here
        (their attempts stop where they stand; the new owner continues them through their leases)."""
        if not tps:
            return
        log.info("manifests: partitions %s revoked", sorted(tp.partition for tp in tps))
        with contextlib.suppress(Exception):
            await self._commit(tps)
        for tp in tps:
            keys = self.keys.pop(tp, set())
            self.first_offsets.pop(tp, None)
            self.catching_up.pop(tp, None)
            await self.worker.release(keys)
        self.unpositioned -= tps

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            self.consumer = await start_topic_reader(
                self._new_consumer,
                bootstrap=self.bootstrap,
                topic=self.topic,
                backoff=self.outage,
                stop=self.stop,
            )
            self.consumer.subscribe([self.topic], listener=_Rebalances(self))
            await step_until_stopped(
                self._step, bootstrap=self.bootstrap, topic=self.topic, backoff=self.outage, stop=self.stop
            )
        except StopRequested:
            pass
        finally:
            if self.consumer is not None:
                await self._leave(self.consumer)

    async def _leave(self, consumer: AIOKafkaConsumer) -> None:
        """Commit the watermarks and stop the consumer, each step waiting at most `leave_step_s`.

        When the whole event loop is being cancelled (a host's `asyncio.run` ending), aiokafka's own
        tasks are cancelled with this one, and the last commit would be retried for ever. A commit
        lost here costs the share's next owner a few manifests read again, which observing
        tolerates; for the consumer's stop, see `close_client`."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._commit(consumer.assignment()), self.leave_step_s)
        await close_client(consumer, self.leave_step_s)

    def _new_consumer(self) -> AIOKafkaConsumer:
        return group_member_consumer(
            self.bootstrap,
            group_id=self.group_id,
            client_id=f"{self.worker.config.worker_id}-manifests",
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            fetch_max_wait_ms=self.fetch_ms,
        )

    async def _step(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        await self._position()
        fetched = await consumer.getmany(timeout_ms=self.fetch_ms, max_records=2000)
        for tp, messages in fetched.items():
            records: list[Record] = []
            self.records_read += len(messages)
            self.worker.stats.bump("manifest_records_read", len(messages))
            for message in messages:
                record = self._decoded(message)
                if record is None:
                    continue
                key = key_of(record.manifest if isinstance(record, ManifestIssued) else record)
                self.keys[tp].add(key)
                self.first_offsets[tp].setdefault(key, message.offset)
                records.append(record)
            live = tp not in self.catching_up
            if live:
                await self.worker.observe(records)
            else:
                await self.worker.board.apply(records)
            self._forget_settled(tp)
        await self._caught_up()
        if self._last_commit is None or time.monotonic() - self._last_commit >= self.commit_every_s:
            await self._commit(consumer.assignment())

    def _decoded(self, message: object) -> Record | None:
        value = getattr(message, "value", None)
        if value is None:
            return None
        try:
            record = decode_record(value)
        except CodecError as exc:
            log.warning(
                "%s: undecodable record at offset %s: %s", self.topic, getattr(message, "offset", "?"), exc
            )
            return None
        return record if isinstance(record, ManifestIssued | DispatchDecision) else None

    def _forget_settled(self, tp: TopicPartition) -> None:
        open_now = self.worker.board.open
        first = self.first_offsets[tp]
        for key in [k for k in first if k not in open_now and k in self.worker.board.latest]:
            del first[key]

    async def _position(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        pending = sorted(self.unpositioned & consumer.assignment(), key=lambda tp: tp.partition)
        self.unpositioned.clear()
        if not pending:
            return
        ends = await consumer.end_offsets(pending)
        for tp in pending:
            committed = await consumer.committed(tp)
            await consumer.position(tp)  # let the assignment's own reset settle before seeking
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
            self.catching_up[tp] = ends[tp]
            consumer.resume(tp)
            log.info("manifests partition %d: from %s, catching up to %d", tp.partition, committed, ends[tp])

    async def _caught_up(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        done = []
        # a rebalance may revoke a partition while a position is awaited (`release` runs then): walk
        # a copy, and take only what is still catching up, and still this worker's, afterwards
        for tp, end in list(self.catching_up.items()):
            if tp in consumer.assignment() and await consumer.position(tp) >= end:
                done.append(tp)
        for tp in done:
            if self.catching_up.pop(tp, None) is None:
                continue
            if self.worker.live:
                self.worker.take(self.keys[tp])
        if self._joined and not self.worker.live and not self.catching_up and not self.unpositioned:
            # live with every assigned partition caught up, or with none assigned (more workers than
            # partitions): such a worker waits for a share, and takes it when the group deals one
            await self.worker.go_live(only=set().union(*self.keys.values()))
            if self.on_live is not None:
                await self.on_live()

    async def _commit(self, tps: set[TopicPartition]) -> None:
        consumer = self.consumer
        if consumer is None or not tps:
            return
        offsets = {}
        for tp in tps:
            if tp in self.catching_up or tp in self.unpositioned:
                continue  # not positioned yet: what it had committed still holds
            first = self.first_offsets.get(tp)
            watermark = min(first.values()) if first else await consumer.position(tp)
            offsets[tp] = OffsetAndMetadata(watermark, "")
        if offsets:
            await consumer.commit(offsets)
        self._last_commit = time.monotonic()
