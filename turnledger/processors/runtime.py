"""The Kafka runtime: one exactly-once partition processor per input partition.

Each `PartitionProcessor` owns one ingress partition end to end: a transactional
producer whose `transactional.id` is derived from the partition, a `read_committed`
consumer statically assigned to that partition, and the partition's state store.
Every batch becomes one Kafka transaction carrying the fold's outputs, one changelog
record per state key the batch changed, and the consumed offset.

aiokafka 0.14 speaks only v0 of the transactional APIs (no KIP-447 group metadata),
so the only thing that fences a zombie is its `transactional.id`: a second processor
on the same partition initialises the same id, which bumps the producer epoch and
aborts the first one's open transaction. That is why the id must be a pure function
of (app, topic, partition) and why assignment is static (`consumer.assign`): with
group rebalancing a revoked worker could still commit (aio-libs/aiokafka#844).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import itertools
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from turnledger.errors import KafkaUnavailableError, TurnledgerError
from turnledger.processors.contract import FoldFactory, PartitionFold, PoisonHook
from turnledger.processors.errors import (
    PoisonHookError,
    ProcessorError,
    ProducerFencedError,
    TooManyAbortsError,
)
from turnledger.processors.poison import json_poison_hook
from turnledger.processors.positions import seek_settled
from turnledger.processors.store import (
    OverlayStore,
    PartitionStore,
    open_partition_store,
    restore_from_changelog,
)
from turnledger.processors.writer import BatchWriter
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Topics

log = logging.getLogger(__name__)


def transactional_id(app_id: str, topic: str, partition: int) -> str:
    """The one transactional.id for this (app, input topic, partition): stable across restarts and
    machines, so whoever starts processing the partition fences whoever processed it before."""
    return f"{app_id}-{topic}-{partition}"


GC_GEN0_THRESHOLD = 10_000
"""CPython's default is 700. The fold allocates many short-lived, mostly acyclic objects per event
(pydantic models, dicts, decoded records), so young collections run every few events and almost
never find a cycle; each also sometimes escalates to a full collection that traverses every live
state. 10k keeps the garbage pending between collections to a few MB."""


def tune_gc(gen0_threshold: int = GC_GEN0_THRESHOLD) -> None:
    """Collect once, move every surviving object (modules, restored state, caches) to the permanent
    generation with `gc.freeze()`, and raise (never lower) the gen0 threshold.

    Frozen objects are no longer traversed by collections but refcounting still frees them (only
    cyclic garbage among them would stay; the restored store holds bytes, the rest is modules and
    caches). Process-wide: it is called from the Kafka runtime only, never from the pure core.
    Calling it again (once per partition) only freezes what was allocated since.
    """
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, gen0_threshold), gen1, gen2)


@dataclass(frozen=True, slots=True)
class ProcessorConfig:
    bootstrap: str
    app_id: str = "turnledger"
    topics: Topics = field(default_factory=Topics)
    batch_max_records: int = 500
    batch_max_ms: int = 100
    state_dir: Path | None = None
    group_id: str | None = None
    """Used only to store committed offsets (no group membership); defaults to `app_id`. Keep it dedicated
    to the processor: the broker accepts v0 transactional offset commits from anyone for the group."""
    transaction_timeout_ms: int = 10_000
    """Kafka Streams' EOS value: a crashed processor's open transaction stops holding back read_committed
    readers (the LSO) after this long, unless a successor fences it sooner."""
    idle_poll_ms: int = 100
    producer_retry_backoff_ms: int = 20
    """aiokafka's default is 100 ms. A Kafka 4.x broker answers a produce that races the previous
    transaction's markers with a retriable NOT_ENOUGH_REPLICAS (KIP-890 verification, as old produce
    versions know no better error); each such retry stalls the whole batch for the backoff."""
    producer_max_batch_bytes: int = 512 * 1024
    """aiokafka's default 16 KiB makes `send()` wait for the previous batch of a partition to drain, which
    inside a transaction means waiting for AddPartitionsToTxn; stays below the broker's 1 MB default."""
    max_consecutive_aborts: int = 10
    retry_backoff_ms: int = 200
    gc_gen0_threshold: int | None = GC_GEN0_THRESHOLD
    """After the state is restored, `tune_gc` freezes the heap and raises the gen0 threshold to this;
    None leaves the interpreter's GC settings alone."""

    @property
    def offsets_group(self) -> str:
        return self.group_id or self.app_id

    def __post_init__(self) -> None:
        if self.batch_max_records < 1 or self.batch_max_ms < 1:
            raise ValueError("batch_max_records and batch_max_ms must be positive")


@dataclass(slots=True)
class ProcessorMetrics:
    records_in: int = 0
    outputs_out: int = 0
    changelog_out: int = 0
    batches: int = 0
    poison_records: int = 0
    aborted_batches: int = 0
    restored_records: int = 0
    txn_commit_seconds_total: float = 0.0
    txn_commit_seconds_max: float = 0.0

    def observe_commit(self, seconds: float) -> None:
        self.txn_commit_seconds_total += seconds
        self.txn_commit_seconds_max = max(self.txn_commit_seconds_max, seconds)


class ProcessorExit(enum.Enum):
    STOPPED = "stopped"  # stop() or SIGTERM: the open batch was committed
    FENCED = "fenced"  # another processor took over the partition


Fetch = Callable[[int, int], Awaitable[list[SourceRecord]]]
"""(timeout_ms, max_records) → the records available now, waiting at most timeout_ms for the first one."""


async def collect_batch(
    fetch: Fetch,
    *,
    max_records: int,
    max_ms: int,
    stop: asyncio.Event,
    idle_poll_ms: int = 100,
    clock: Callable[[], float] = time.monotonic,
) -> list[SourceRecord]:
    """Gather up to `max_records`, for at most `max_ms` counted from the first record's arrival.

    Counting from the first record bounds the latency a batch adds to any record without
    committing empty transactions while idle. Returns `[]` after one idle poll so the
    caller can notice `stop`; once `stop` is set it returns what it has at once.
    """
    batch: list[SourceRecord] = []
    deadline: float | None = None
    while len(batch) < max_records and not stop.is_set():
        if deadline is None:
            timeout_ms = idle_poll_ms
        else:
            remaining_ms = int((deadline - clock()) * 1000)
            if remaining_ms <= 0:
                break
            timeout_ms = min(remaining_ms, idle_poll_ms)
        records = await fetch(timeout_ms, max_records - len(batch))
        if records:
            if deadline is None:
                deadline = clock() + max_ms / 1000
            batch.extend(records)
        elif deadline is None:
            break
    return batch


@dataclass(frozen=True, slots=True)
class FoldOutcome:
    outputs: list[OutputRecord]
    poisoned: int


def _validated(outputs: object) -> list[OutputRecord]:
    if not isinstance(outputs, list):
        raise TypeError(f"process_batch must return a list of OutputRecord, got {type(outputs).__name__}")
    for out in outputs:
        if not isinstance(out, OutputRecord) or not isinstance(out.value, bytes):
            raise TypeError(f"process_batch returned {out!r}, not an OutputRecord with bytes value")
    return outputs


def fold_batch(
    fold: PartitionFold, records: Sequence[SourceRecord], overlay: OverlayStore, on_poison: PoisonHook
) -> FoldOutcome:
    """Run the fold over a batch, isolating records on which it raises.

    First the whole batch in one call (the fast path). If that raises, its writes are
    discarded and the batch is folded again one record at a time, each on its own
    overlay: a record that still raises has its writes discarded and is replaced by
    `on_poison(record, exc)`'s outputs; the others keep theirs. The fold must keep all
    its state in the store for this to be exact.
    """
    try:
        return FoldOutcome(_validated(fold.process_batch(records, overlay)), 0)
    except Exception as exc:
        overlay.discard()
        log.warning(
            "fold raised on a batch of %d records (%r); retrying one record at a time", len(records), exc
        )
    outputs: list[OutputRecord] = []
    poisoned = 0
    for record in records:
        layer = OverlayStore(overlay)
        try:
            produced = _validated(fold.process_batch([record], layer))
        except Exception as exc:
            layer.discard()
            poisoned += 1
            log.error(
                "poison record %s-%d@%d (%s: %s): emitting on_poison outputs",
                record.topic,
                record.partition,
                record.offset,
                type(exc).__name__,
                exc,
            )
            try:
                produced = _validated(on_poison(record, exc))
            except Exception as hook_exc:
                raise PoisonHookError(
                    f"on_poison raised {hook_exc!r} for {record.topic}-{record.partition}@{record.offset}; "
                    "the batch is not committed"
                ) from hook_exc
        else:
            layer.commit()
        outputs.extend(produced)
    return FoldOutcome(outputs, poisoned)


def _to_input(message: object) -> SourceRecord:
    return SourceRecord(
        topic=message.topic,  # type: ignore[attr-defined]
        partition=message.partition,  # type: ignore[attr-defined]
        offset=message.offset,  # type: ignore[attr-defined]
        key=message.key,  # type: ignore[attr-defined]
        value=message.value,  # type: ignore[attr-defined]
        timestamp_ms=message.timestamp,  # type: ignore[attr-defined]
    )


def _retrieve_exception(future: asyncio.Future[object]) -> None:
    """A failed transaction fails every pending send with the same error; it is handled once, at the
    commit, and must not be logged again per record as "exception was never retrieved"."""
    if not future.cancelled():
        future.exception()


def _fatal_error(producer: AIOKafkaProducer) -> BaseException | None:
    """The error that made the producer unusable (it can then neither commit nor abort), else None.

    aiokafka has no public accessor; its transaction manager keeps the error on the
    transaction waiter, which nobody awaits once we stop, so it is retrieved here too.
    """
    txn_manager = getattr(producer, "_txn_manager", None)
    if txn_manager is None or not txn_manager.is_fatal_error():
        return None
    waiter = txn_manager.wait_for_transaction_end()
    if waiter.done() and not waiter.cancelled():
        return waiter.exception() or ProcessorError("fatal producer error")
    return ProcessorError("fatal producer error")


ReadyHook = Callable[["PartitionProcessor"], None]


class PartitionProcessor:
    """Folds one ingress partition exactly once; see the module docstring for the fencing model."""

    def __init__(
        self,
        config: ProcessorConfig,
        partition: int,
        fold: PartitionFold,
        on_poison: PoisonHook,
        *,
        store: PartitionStore | None = None,
        on_ready: ReadyHook | None = None,
    ) -> None:
        """`on_ready(processor)` runs once state is restored and the consumer positioned, before the first
        batch (readiness probes, tests that inspect the restored state)."""
        self.config = config
        self.partition = partition
        self.fold = fold
        self.on_poison = on_poison
        self.tp = TopicPartition(config.topics.ingress, partition)
        self.transactional_id = transactional_id(config.app_id, config.topics.ingress, partition)
        self.metrics = ProcessorMetrics()
        self.store: PartitionStore = store or open_partition_store(
            config.state_dir, config.topics.changelog, partition
        )
        self.committed_offset: int | None = None
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._writer: BatchWriter | None = None
        self._on_ready = on_ready

    def stop(self) -> None:
        """Ask the processor to commit its open batch and return; safe to call from a signal handler."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def run(self) -> ProcessorExit:
        """Start, restore, process until `stop()`; returns how it ended, raises on any other failure."""
        try:
            await self._start()
            if self._stop.is_set():
                return ProcessorExit.STOPPED
            if self._on_ready is not None:
                self._on_ready(self)
            self.ready.set()
            await self._loop()
            return ProcessorExit.STOPPED
        except ProducerFencedError as exc:
            log.error("partition %d: %s", self.partition, exc)
            return ProcessorExit.FENCED
        finally:
            await self._close()

    async def _start(self) -> None:
        """Producer first, then offsets and state.

        `producer.start()` runs InitProducerId for our transactional.id, which fences any
        previous owner of the partition and makes the coordinator finish (commit or
        abort) its open transaction before answering. Only after that are the committed
        offset and the changelog final; read earlier, they could miss a commit that was
        in flight (aiokafka's OffsetFetch predates RequireStable, KIP-447).
        """
        cfg = self.config
        self._producer = AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap,
            transactional_id=self.transactional_id,
            transaction_timeout_ms=cfg.transaction_timeout_ms,
            enable_idempotence=True,
            acks="all",
            retry_backoff_ms=cfg.producer_retry_backoff_ms,
            max_batch_size=cfg.producer_max_batch_bytes,
        )
        try:
            await self._producer.start()
        except KafkaConnectionError as exc:
            raise KafkaUnavailableError(cfg.bootstrap, exc) from exc
        self._writer = BatchWriter(self._producer)
        log.info(
            "partition %d: producer %r initialised (predecessors fenced)",
            self.partition,
            self.transactional_id,
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=cfg.bootstrap,
            group_id=cfg.offsets_group,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        try:
            await self._consumer.start()
        except KafkaConnectionError as exc:
            raise KafkaUnavailableError(cfg.bootstrap, exc) from exc
        self._consumer.assign([self.tp])
        self.committed_offset = await self._consumer.committed(self.tp)
        self.store.clear()
        restored = await restore_from_changelog(
            cfg.bootstrap, cfg.topics.changelog, self.partition, self.store
        )
        self.metrics.restored_records = restored.records
        if cfg.gc_gen0_threshold is not None:
            tune_gc(cfg.gc_gen0_threshold)
        await self._seek_committed()
        log.info(
            "partition %d: resuming %s at offset %s with %d restored state records",
            self.partition,
            self.tp.topic,
            "beginning" if self.committed_offset is None else self.committed_offset,
            restored.records,
        )

    async def _seek_committed(self) -> None:
        """Back to the committed offset (the beginning when none), explicitly and only once the
        assignment's own offset reset settled: `seek_to_beginning` could lose to it (positions.py)."""
        assert self._consumer is not None
        await seek_settled(self._consumer, self.tp, self.committed_offset)

    async def _fetch(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        assert self._consumer is not None
        fetched = await self._consumer.getmany(self.tp, timeout_ms=timeout_ms, max_records=max_records)
        return [_to_input(m) for m in fetched.get(self.tp, [])]

    async def _loop(self) -> None:
        cfg = self.config
        aborts = 0
        while not self._stop.is_set():
            batch = await collect_batch(
                self._fetch,
                max_records=cfg.batch_max_records,
                max_ms=cfg.batch_max_ms,
                stop=self._stop,
                idle_poll_ms=cfg.idle_poll_ms,
            )
            if not batch:
                continue
            if await self._process(batch):
                aborts = 0
                continue
            aborts += 1
            self.metrics.aborted_batches += 1
            if aborts >= cfg.max_consecutive_aborts:
                raise TooManyAbortsError(
                    f"partition {self.partition}: the batch at offset {batch[0].offset} failed to commit "
                    f"{aborts} times in a row; giving up (see the errors above)"
                )
            await asyncio.sleep(min(cfg.retry_backoff_ms * 2 ** (aborts - 1), 5_000) / 1000)

    async def _process(self, batch: list[SourceRecord]) -> bool:
        """Fold and commit one batch; False when the transaction aborted and the batch must be retried."""
        overlay = OverlayStore(self.store)
        outcome = fold_batch(self.fold, batch, overlay, self.on_poison)
        next_offset = batch[-1].offset + 1
        started = time.monotonic()
        try:
            await self._commit(outcome.outputs, overlay, next_offset)
        except ProcessorError:
            raise
        except Exception as exc:
            log.warning(
                "partition %d: transaction for offsets %d..%d failed (%r); rolled back, will retry",
                self.partition,
                batch[0].offset,
                batch[-1].offset,
                exc,
            )
            overlay.discard()
            await self._seek_committed()
            return False
        m = self.metrics
        m.observe_commit(time.monotonic() - started)
        m.records_in += len(batch)
        m.outputs_out += len(outcome.outputs)
        m.changelog_out += len(overlay.dirty)
        m.batches += 1
        m.poison_records += outcome.poisoned
        overlay.commit()
        self.committed_offset = next_offset
        return True

    async def _commit(self, outputs: list[OutputRecord], overlay: OverlayStore, next_offset: int) -> None:
        producer = self._producer
        assert producer is not None and self._writer is not None
        in_transaction = False
        try:
            await producer.begin_transaction()
            in_transaction = True
            changelog = self.config.topics.changelog
            futures = await self._writer.write(
                itertools.chain(
                    ((out.topic, None, out.key, out.value) for out in outputs),
                    ((changelog, self.partition, k.encode("utf-8"), v) for k, v in overlay.dirty.items()),
                )
            )
            for future in futures:
                future.add_done_callback(_retrieve_exception)
            await producer.send_offsets_to_transaction({self.tp: next_offset}, self.config.offsets_group)
            # A produce that failed for good must abort the batch, never be committed around.
            await asyncio.gather(*futures)
            await producer.commit_transaction()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            fatal = _fatal_error(producer)
            if isinstance(exc, ProducerFenced) or isinstance(fatal, ProducerFenced):
                raise ProducerFencedError(self.transactional_id) from exc
            if fatal is not None:
                raise ProcessorError(
                    f"partition {self.partition}: producer failed fatally: {fatal!r}"
                ) from exc
            if in_transaction:
                try:
                    await producer.abort_transaction()
                except ProducerFenced as fenced:
                    raise ProducerFencedError(self.transactional_id) from fenced
                except Exception as abort_exc:
                    raise ProcessorError(
                        f"partition {self.partition}: aborting the failed transaction failed too "
                        f"({abort_exc!r}); the producer cannot be reused"
                    ) from exc
            raise

    async def _close(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()
        self.store.close()
        m = self.metrics
        log.info(
            "partition %d: closed after %d batches, %d records in, %d outputs, %d changelog records, "
            "%d poison, %d aborted; committed offset %s",
            self.partition,
            m.batches,
            m.records_in,
            m.outputs_out,
            m.changelog_out,
            m.poison_records,
            m.aborted_batches,
            self.committed_offset,
        )


async def ingress_partitions(bootstrap: str, topic: str) -> list[int]:
    """All partition numbers of `topic`, for `--partitions all`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await admin.start()
    except KafkaConnectionError as exc:
        raise KafkaUnavailableError(bootstrap, exc) from exc
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    parts = [p["partition"] for t in described if t["error_code"] == 0 for p in t["partitions"]]
    if not parts:
        raise ProcessorError(
            f"input topic {topic!r} does not exist on {bootstrap}; create the topics first "
            "(`turnledger process --create-topics N`, or ensure_topics())"
        )
    return sorted(parts)


async def owned_partitions(config: ProcessorConfig, requested: Sequence[int] | None) -> list[int]:
    """The ingress partitions to process: `requested`, checked to exist, or all of them when None."""
    existing = await ingress_partitions(config.bootstrap, config.topics.ingress)
    partitions = existing if requested is None else list(requested)
    missing = sorted(set(partitions) - set(existing))
    if missing:
        raise ProcessorError(
            f"partitions {missing} do not exist: {config.topics.ingress!r} has partitions "
            f"0..{len(existing) - 1}"
        )
    return partitions


class ProcessorApp:
    """Runs one `PartitionProcessor` per partition as asyncio tasks in this process.

    A fenced partition stops alone (another process owns it now); any other failure of
    one partition stops all of them cleanly, committing their open batches, so a
    supervisor restarts the whole process instead of it limping on with a dead partition.
    """

    def __init__(
        self,
        config: ProcessorConfig,
        fold_factory: FoldFactory,
        on_poison: PoisonHook | None = None,
        partitions: Sequence[int] | None = None,
        *,
        on_ready: ReadyHook | None = None,
    ) -> None:
        """`on_poison` defaults to the fold's own `on_poison` method, else `json_poison_hook`."""
        self.on_ready = on_ready
        self.config = config
        self.fold_factory = fold_factory
        self.on_poison = on_poison
        self.partitions = list(partitions) if partitions is not None else None
        self.processors: dict[int, PartitionProcessor] = {}
        self._stop_requested = False
        self._tasks: list[asyncio.Task[ProcessorExit]] = []

    def stop(self) -> None:
        self._stop_requested = True
        for processor in self.processors.values():
            processor.stop()

    def cancel(self) -> None:
        """Stop at once: cancel every partition's task without committing its open batch (what a second
        signal does; the open transactions are aborted by the next owner's fencing or the timeout)."""
        self.stop()
        for task in self._tasks:
            task.cancel()

    async def run(self, *, handle_signals: bool = True) -> dict[int, ProcessorExit]:
        """Run until every partition has stopped; raises the first non-fencing failure."""
        partitions = await owned_partitions(self.config, self.partitions)
        for p in partitions:
            fold = self.fold_factory(p)
            self.processors[p] = PartitionProcessor(
                self.config, p, fold, self._poison_hook(fold), on_ready=self.on_ready
            )
        if self._stop_requested:
            self.stop()
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        tasks = {
            asyncio.create_task(proc.run(), name=f"partition-{p}"): p for p, proc in self.processors.items()
        }
        self._tasks = list(tasks)
        results: dict[int, ProcessorExit] = {}
        failure: BaseException | None = None
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    p = tasks[task]
                    try:
                        results[p] = task.result()
                    except asyncio.CancelledError:
                        log.warning("partition %d cancelled", p)
                    except Exception as exc:
                        trace = None if isinstance(exc, TurnledgerError) else exc
                        log.error("partition %d failed: %s", p, exc, exc_info=trace)
                        if failure is None:
                            failure = exc
                            self.stop()
        finally:
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        if failure is not None:
            raise failure
        return results

    def _poison_hook(self, fold: PartitionFold) -> PoisonHook:
        if self.on_poison is not None:
            return self.on_poison
        hook = getattr(fold, "on_poison", None)
        if callable(hook):
            return hook  # type: ignore[no-any-return]
        log.warning("%s has no on_poison; poisoned records get JSON rejections", type(fold).__name__)
        return json_poison_hook(self.config.topics)

    def _on_signal(self, sig: signal.Signals) -> None:
        """First signal: commit the open batches and stop. Second: cancel at once (nothing more commits;
        open transactions are aborted by the next owner's fencing or the transaction timeout)."""
        if self._stop_requested:
            log.warning("received %s again: cancelling without committing open batches", sig.name)
            self.cancel()
            return
        log.info("received %s: committing open batches and stopping", sig.name)
        self.stop()
