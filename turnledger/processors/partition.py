"""The processor of one ingress partition: owning it, folding its batches, committing each exactly once.

A `PartitionProcessor` exists once per partition per process and lives across *terms*: each time
the process is given the partition (at start with static ownership, on every assignment with group
ownership) a term runs `run(feed)` until the processor is asked to stop or is fenced. A term:

1. initialises the partition's transactional producer. InitProducerId for the partition's
   transactional.id fences every earlier producer of the partition — a live zombie, a dead process,
   our own previous term — and makes the coordinator finish (commit or abort) its open transaction
   before answering;
2. only then reads the committed offset: now it is final (aiokafka's OffsetFetch predates
   RequireStable, KIP-447, so read earlier it could miss a commit still in flight);
   ends its own hanging transactions, which no coordinator will end, with the marker its changelog
   proves, or reports them (`hanging.py`), on its changelog partition and every output partition;
3. restores the state from the changelog, unless the store it kept from its previous term is
   provably current: the committed offset equals the one its last commit wrote, so nobody has
   committed anything for the partition since (every commit moves the offset forward);
4. seeks to the committed offset and processes batch after batch, one transaction each.

A Kafka outage anywhere in a term is ridden out by starting the term over (after a backoff), which
also settles a transaction whose outcome the outage left unknown (see `transaction.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition

from turnledger.errors import KafkaUnavailableError, ServiceUnavailable
from turnledger.kafka.clients import close_client, kafka_outage, start_client, transactional_producer
from turnledger.observability import runtime_metrics as live
from turnledger.processors.batching import collect_batch
from turnledger.processors.changelog import RestoreResult, read_position, restore_from_changelog, settle
from turnledger.processors.config import ProcessorConfig, ProcessorExit, ProcessorMetrics, transactional_id
from turnledger.processors.contract import PartitionFold, PoisonHook
from turnledger.processors.errors import ProcessorError, ProducerFencedError, TooManyAbortsError
from turnledger.processors.feed import PartitionFeed
from turnledger.processors.folding import FoldingBatch, FoldOutcome, SegmentedBatch
from turnledger.processors.gc_tuning import tune_gc
from turnledger.processors.hanging import HangingSweep, TransactionLogReader
from turnledger.processors.hanging_evidence import CLOCK_SLACK_MS, ChangelogEvidence
from turnledger.processors.store import OverlayStore, PartitionStore, open_partition_store, read_cache_of
from turnledger.processors.transaction import BatchAborted, PartitionTransactions, ProducerBroken
from turnledger.records import OutputRecord, SourceRecord
from turnledger.retry import StopRequested

log = logging.getLogger(__name__)

ReadyHook = Callable[["PartitionProcessor"], None]
FoldForPartition = Callable[[int], PartitionFold]
PoisonHookFor = Callable[[PartitionFold], PoisonHook]


def _later(a: int | None, b: int | None) -> int | None:
    """The later of two input offsets, None being before any."""
    if a is None or b is None:
        return b if a is None else a
    return max(a, b)


async def _timed(commit: Awaitable[None]) -> float:
    """How long `commit` takes. Timed inside the task: a pipelined commit is awaited only once the
    next batch is gathered and folded, so timing it from there counted that batch too (before
    session 19, `turnledger_processor_transaction_seconds` and the bench's `txn_commit_ms_*`
    read 120-150 ms for the window's commits on a slow machine where they took 22)."""
    start = time.monotonic()
    await commit
    return time.monotonic() - start


def _always() -> bool:
    return True


@dataclass(slots=True)
class _InFlight:
    """A folded batch whose transaction is being committed."""

    batch: list[SourceRecord]
    overlay: OverlayStore
    outcome: FoldOutcome
    next_offset: int
    task: asyncio.Future[float]
    """The commit; its result is how long the commit itself took (`_timed`)."""


class _CommitAborted(BatchAborted):
    """The commit of `batch` was aborted (`_finish`, the one place a batch's transaction ends), as
    `aborted` (raised from its own cause) says."""

    def __init__(self, batch: list[SourceRecord], aborted: BatchAborted) -> None:
        super().__init__(f"the commit of offsets {batch[0].offset}..{batch[-1].offset} was aborted")
        self.batch = batch
        self.aborted = aborted


class PartitionProcessor:
    """Folds one ingress partition exactly once, term after term; see the module docstring."""

    def __init__(
        self,
        config: ProcessorConfig,
        partition: int,
        fold_factory: FoldForPartition,
        poison_hook_for: PoisonHookFor,
        *,
        on_ready: ReadyHook | None = None,
    ) -> None:
        """`on_ready(processor)` runs at the start of every term, once the state is restored and the
        consumer positioned, before the first batch (readiness probes, test hooks)."""
        self.config = config
        self.partition = partition
        self.tp = TopicPartition(config.topics.ingress, partition)
        self.transactional_id = transactional_id(config.app_id, config.topics.ingress, partition)
        self.metrics = ProcessorMetrics()
        self.committed_offset: int | None = None
        """The offset our last commit wrote (or found at the start of the term): what the store holds."""
        self.store: PartitionStore | None = None
        self.fold: PartitionFold | None = None
        self.on_poison: PoisonHook | None = None
        self.ready = asyncio.Event()
        self._fold_factory = fold_factory
        self._poison_hook_for = poison_hook_for
        self._on_ready = on_ready
        self._store_current = False
        self._stop = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._streams = {topic: str(stream) for topic, stream in config.topics.by_topic().items()}
        self._partition_label = str(partition)

    # ------------------------------------------------------------------------------ term control

    def begin_term(self) -> asyncio.Event:
        """A fresh stop signal for the term about to run; call it before creating the term's task."""
        self._stop = asyncio.Event()
        self.ready.clear()
        return self._stop

    def stop(self) -> None:
        """Ask the running term to commit its open batch and return; safe from a signal handler."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def drop_state(self) -> None:
        """Forget the state: the partition is no longer ours (or the store can no longer be trusted)."""
        self._store_current = False
        if self.store is not None:
            self.store.close()
            self.store = None
        self.fold = None

    def close(self) -> None:
        """The process is done with the partition: close the store (still readable if it is in memory)."""
        self._store_current = False
        if self.store is not None:
            self.store.close()

    # ------------------------------------------------------------------------------------ a term

    async def run(self, feed: PartitionFeed) -> ProcessorExit:
        """One term: own the partition and process it until `stop()` or fenced, starting over after
        outages; raises only on failures that waiting cannot fix."""
        stop = self._stop
        delays = self.config.outage.delays()
        outage_began: float | None = None
        try:
            while not stop.is_set():
                try:
                    await self._own(feed)
                    if stop.is_set():
                        break
                    outage_began = None
                    delays = self.config.outage.delays()
                    if self._on_ready is not None:
                        self._on_ready(self)
                    self.ready.set()
                    await self._loop(feed)
                except ProducerFencedError as exc:
                    live.PROCESSOR_FENCED.inc()
                    log.error("partition %d: %s", self.partition, exc)
                    self.drop_state()
                    return ProcessorExit.FENCED
                except StopRequested:
                    break
                except (ServiceUnavailable, ProducerBroken) as exc:
                    outage_began = outage_began or time.monotonic()
                    await self._wait_before_starting_over(exc, outage_began, next(delays), stop)
                except Exception as exc:
                    outage = kafka_outage(self.config.bootstrap, f"process partition {self.partition}")(exc)
                    if outage is None:
                        raise
                    outage_began = outage_began or time.monotonic()
                    await self._wait_before_starting_over(outage, outage_began, next(delays), stop)
                finally:
                    await self._close_producer()
                    feed.pause()
            return ProcessorExit.STOPPED
        finally:
            feed.close()
            self.ready.clear()

    async def _wait_before_starting_over(
        self, exc: BaseException, began: float, delay: float, stop: asyncio.Event
    ) -> None:
        waited = time.monotonic() - began
        limit = self.config.outage.max_outage_s
        if limit is not None and waited >= limit:
            raise exc
        log.warning(
            "partition %d: %s; starting the partition over in %.1fs (%.1fs into the outage)",
            self.partition,
            exc,
            delay,
            waited,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)

    async def _own(self, feed: PartitionFeed) -> None:
        """Steps 1-3 of the module docstring, then the seek; the partition stays paused until ready."""
        cfg = self.config
        feed.pause()
        self.metrics.ownerships += 1
        live.PROCESSOR_TERMS.inc()
        self._producer = await start_client(
            lambda: transactional_producer(
                cfg.bootstrap,
                self.transactional_id,
                transaction_timeout_ms=cfg.transaction_timeout_ms,
                retry_backoff_ms=cfg.producer_retry_backoff_ms,
                max_batch_size=cfg.producer_max_batch_bytes,
            ),
            bootstrap=cfg.bootstrap,
            action=f"initialise the producer of partition {self.partition}",
        )
        log.info(
            "partition %d: producer %r initialised (predecessors fenced)",
            self.partition,
            self.transactional_id,
        )
        reported = await feed.committed()
        changelog = TopicPartition(cfg.topics.changelog, self.partition)
        evidence = ChangelogEvidence(
            cfg.bootstrap, changelog, margin_ms=cfg.transaction_timeout_ms + CLOCK_SLACK_MS
        )
        coordinator = TransactionLogReader(cfg.bootstrap, self.transactional_id)
        hanging = HangingSweep(self._producer, changelog, cfg.topics.outputs, evidence, coordinator)
        await hanging.sweep_written()
        await settle(cfg.bootstrap, changelog, sweep=hanging.sweep_changelog)
        resume: int | None = None
        kept = False
        if self._store_current and self.store is not None:
            position = await read_position(cfg.bootstrap, changelog)
            resume = _later(position, reported)
            kept = position is not None and resume == self.committed_offset
        if kept:
            how = self._keep_store()
        else:
            restored = await self._restore()
            resume = _later(restored.position, reported)
            if resume is None and restored.records:
                self._offsets_not_ready(f"its changelog holds {restored.records} state records")
            how = f"restored {restored.records} state records"
        if resume is None and self.committed_offset is not None:
            self._offsets_not_ready(
                f"an earlier term of this process committed offset {self.committed_offset}"
            )
        if reported != resume:
            log.warning(
                "partition %d: the group coordinator reported committed offset %s, the changelog's position "
                "is %s; resuming at %s (the position commits with the state, so it wins)",
                self.partition,
                reported,
                resume,
                resume,
            )
        committed = resume
        self.committed_offset = committed
        await feed.seek(committed)
        feed.resume()
        log.info(
            "partition %d: resuming %s at offset %s; %s",
            self.partition,
            self.tp.topic,
            "beginning" if committed is None else committed,
            how,
        )

    def _keep_store(self) -> str:
        """The store of the previous term is current, and kept with its fold. The fold's cache may hold
        states the last term wrote into overlays it left behind (a batch folded, never committed nor
        discarded): the store's rollback stamp is replaced, so the engine checks them before use."""
        assert self.store is not None
        self.store.lineage.rolled_back()
        return f"kept the state of its previous term ({len(self.store)} keys)"  # type: ignore[arg-type]

    def _offsets_not_ready(self, evidence: str) -> None:
        """No committed offset, though the partition has been committed before: never start over from
        the log start on that answer (it would process the partition twice). An OffsetFetch can say
        "none" for a topic the coordinator does not know yet, e.g. just after a broker restart; the term
        is started over after a backoff. (If the group's offsets really expired, this repeats with this
        message until an operator restores them.)"""
        cause = ProcessorError(
            f"the group {self.config.offsets_group!r} has no committed offset for partition "
            f"{self.partition}, "
            f"although {evidence}"
        )
        raise KafkaUnavailableError(
            self.config.bootstrap, cause, action=f"read the committed offset of partition {self.partition}"
        )

    async def _restore(self) -> RestoreResult:
        cfg = self.config
        self.drop_state()
        fold = self._fold_factory(self.partition)
        self.store = open_partition_store(
            cfg.state_dir, cfg.topics.changelog, self.partition, read_cache_of(fold)
        )
        result = await restore_from_changelog(cfg.bootstrap, cfg.topics.changelog, self.partition, self.store)
        self.fold = fold
        self.on_poison = self._poison_hook_for(self.fold)
        self._store_current = True
        self.metrics.restored_records = result.records
        self.metrics.restores += 1
        self.metrics.restore_seconds_last = result.seconds
        live.PROCESSOR_RESTORE_SECONDS.observe(result.seconds)
        if cfg.gc_gen0_threshold is not None:
            tune_gc(cfg.gc_gen0_threshold)
        return result

    async def _close_producer(self) -> None:
        if self._producer is not None:
            await close_client(self._producer)
            self._producer = None

    # ------------------------------------------------------------------------------- the batches

    async def _loop(self, feed: PartitionFeed) -> None:
        """Batch after batch, one transaction each, with one commit in flight while the next batch is
        collected and folded ("Pipelined commits" in docs/architecture.md): batch k+1 folds on top of
        batch k's uncommitted writes, and its transaction begins only once k's committed. If k's
        commit fails, k+1's fold is thrown away with it and both are folded again from the committed
        offset."""
        cfg = self.config
        assert self._producer is not None
        transactions = PartitionTransactions(
            self._producer,
            transactional_id=self.transactional_id,
            source=self.tp,
            changelog_topic=cfg.topics.changelog,
            offsets_group=cfg.offsets_group,
        )
        aborts = 0  # in a row, for reasons other than an outage: these give up eventually
        failures = 0  # in a row, for any reason: these set the backoff
        inflight: _InFlight | None = None
        try:
            while True:
                batch: list[SourceRecord] = []
                gathered: FoldingBatch | SegmentedBatch | None = None
                if not self._stop.is_set():
                    assert self.store is not None and self.fold is not None and self.on_poison is not None
                    base = inflight.overlay if inflight is not None else self.store
                    close_when = self._batch_closes(inflight)
                    gathering = FoldingBatch if close_when is None else SegmentedBatch
                    gathered = gathering(self.fold, self.on_poison, OverlayStore(base))
                    batch = await collect_batch(
                        feed.fetch,
                        max_records=cfg.batch_max_records,
                        max_ms=cfg.batch_max_ms,
                        stop=self._stop,
                        idle_poll_ms=cfg.idle_poll_ms,
                        close_when=close_when,
                        on_records=gathered.fold_records,
                    )
                if not batch and inflight is None:
                    if self._stop.is_set():
                        return
                    continue
                try:
                    overlay, outcome = None, None
                    if batch and gathered is not None:
                        overlay, outcome = gathered.overlay, gathered.outcome(batch)
                    if inflight is not None:
                        done, inflight = inflight, None
                        await self._finish(done)
                        aborts = failures = 0
                    if overlay is not None and outcome is not None:
                        assert self.store is not None
                        overlay.rebase(self.store)
                        inflight = self._begin(batch, overlay, outcome, transactions)
                        if not cfg.pipelined_commits:
                            done, inflight = inflight, None
                            await self._finish(done)
                            aborts = failures = 0
                except _CommitAborted as exc:
                    failed, cause = exc.batch, exc.aborted
                    self.metrics.aborted_batches += 1
                    live.PROCESSOR_ABORTS.inc()
                    failures += 1
                    log.warning(
                        "partition %d: offsets %d..%d rolled back (%s); folding them again",
                        self.partition,
                        failed[0].offset,
                        batch[-1].offset if batch else failed[-1].offset,
                        cause,
                    )
                    await feed.seek(self.committed_offset)
                    if kafka_outage(cfg.bootstrap, "commit")(cause.__cause__ or cause) is None:
                        aborts += 1
                        if aborts >= cfg.max_consecutive_aborts:
                            raise TooManyAbortsError(
                                f"partition {self.partition}: the batch at offset {failed[0].offset} failed "
                                f"to commit {aborts} times in a row; giving up (see the errors above)"
                            ) from exc
                    delay_ms = min(cfg.retry_backoff_ms * 2 ** (failures - 1), 5_000)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), timeout=delay_ms / 1000)
        finally:
            if inflight is not None:
                # leaving with a commit in flight (cancelled, fenced, an outage): its outcome is unknown
                # here, so the store is not trusted; the next term settles it (InitProducerId)
                inflight.task.cancel()
                with contextlib.suppress(BaseException):
                    await inflight.task
                self._store_current = False

    def _batch_closes(self, inflight: _InFlight | None) -> Callable[[], bool] | None:
        """Group commit: a batch closes once the commit before it has ended (at once when none is in
        flight), since the next transaction can begin and waiting longer only adds latency; its
        records are folded and written as they arrive (`SegmentedBatch`). None: the window
        (`batch_max_ms`), whose records are folded as they arrive and written at its close
        (`FoldingBatch`)."""
        if not (self.config.pipelined_commits and self.config.group_commit):
            return None
        if inflight is None:
            return _always
        return inflight.task.done

    def _begin(
        self,
        batch: list[SourceRecord],
        overlay: OverlayStore,
        outcome: FoldOutcome,
        transactions: PartitionTransactions,
    ) -> _InFlight:
        next_offset = batch[-1].offset + 1
        task = asyncio.ensure_future(_timed(transactions.commit(outcome.outputs, overlay.dirty, next_offset)))
        return _InFlight(batch, overlay, outcome, next_offset, task)

    async def _finish(self, inflight: _InFlight) -> None:
        """Wait for a batch's commit; then, and only then, its writes reach the store."""
        try:
            seconds = await inflight.task
        except BatchAborted as exc:
            inflight.overlay.discard()
            raise _CommitAborted(inflight.batch, exc) from exc
        except BaseException:
            inflight.overlay.discard()
            raise
        batch, outcome, overlay = inflight.batch, inflight.outcome, inflight.overlay
        m = self.metrics
        m.observe_commit(seconds)
        self._count_committed(batch, outcome.outputs, len(overlay.dirty), outcome.poisoned, seconds)
        m.records_in += len(batch)
        m.outputs_out += len(outcome.outputs)
        m.changelog_out += len(overlay.dirty)
        m.batches += 1
        m.poison_records += outcome.poisoned
        self._store_current = False  # until the committed writes are in the store
        overlay.commit()
        self._store_current = True
        self.committed_offset = inflight.next_offset

    def _count_committed(
        self,
        batch: list[SourceRecord],
        outputs: list[OutputRecord],
        changelog: int,
        poisoned: int,
        seconds: float,
    ) -> None:
        """The live counters, from what the transaction that just committed wrote (and only then: a
        batch aborted and folded again is counted once, when it commits)."""
        live.PROCESSOR_BATCH_RECORDS.observe(len(batch))
        live.PROCESSOR_TRANSACTION_SECONDS.observe(seconds)
        live.PROCESSOR_RECORDS.labels(self._partition_label).inc(len(batch))
        for topic, n in Counter(out.topic for out in outputs).items():
            live.PROCESSOR_OUTPUTS.labels(self._streams.get(topic, topic)).inc(n)
        live.PROCESSOR_CHANGELOG.inc(changelog)
        if poisoned:
            live.PROCESSOR_POISON.inc(poisoned)
