"""A processor process: one consumer, one `PartitionProcessor` per owned partition, signals, failures.

The app starts its consumer (riding out a Kafka that is not up yet), lets its ownership
(`ownership.py`: a static list or the consumer group) hand it partitions, and runs a term of each
partition's processor as an asyncio task. It is the `PartitionHost` the ownership drives.

Failures: a fenced partition stops alone (another process owns it now; in a group the process also
asks to rejoin); Kafka outages are ridden out inside the partitions; any other failure of one
partition stops all of them cleanly, committing their open batches, and `run()` raises it, so a
supervisor restarts the whole process instead of it limping on with a dead partition.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer

from turnledger.errors import TurnledgerError
from turnledger.kafka.clients import close_client, start_client
from turnledger.processors.config import ProcessorConfig, ProcessorExit
from turnledger.processors.contract import FoldFactory, PartitionFold, PoisonHook
from turnledger.processors.feed import PartitionFeed
from turnledger.processors.ownership import GroupOwnership, Ownership, StaticOwnership
from turnledger.processors.partition import PartitionProcessor, ReadyHook
from turnledger.processors.poison import json_poison_hook
from turnledger.retry import StopRequested

log = logging.getLogger(__name__)


class ProcessorApp:
    def __init__(
        self,
        config: ProcessorConfig,
        fold_factory: FoldFactory,
        on_poison: PoisonHook | None = None,
        partitions: Sequence[int] | None = None,
        *,
        on_ready: ReadyHook | None = None,
        group: bool = False,
    ) -> None:
        """`group=False`: own `partitions` (all when None) statically; `group=True`: join the consumer group
        `config.offsets_group` and own what it assigns. `on_poison` defaults to the fold's own
        `on_poison` method, else `json_poison_hook`."""
        if group and partitions is not None:
            raise ValueError("a group member owns what the group assigns: pass partitions or group, not both")
        self.config = config
        self.fold_factory = fold_factory
        self.on_poison = on_poison
        self.on_ready = on_ready
        self.ownership: Ownership = GroupOwnership(config) if group else StaticOwnership(config, partitions)
        self.processors: dict[int, PartitionProcessor] = {}
        """Every partition this app has processed, with its metrics (and its state while it owns it)."""
        self.results: dict[int, ProcessorExit] = {}
        """How each partition's last term that returned ended (a cancelled or failed term leaves the
        entry of the term before it)."""
        self._terms: dict[int, asyncio.Task[ProcessorExit]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._finished = asyncio.Event()
        self._failure: BaseException | None = None
        self._started = False
        self._assigned = False
        self._signals = 0

    # ----------------------------------------------------------------------------------- control

    def stop(self) -> None:
        """Commit every open batch and return from `run()`; safe from a signal handler."""
        self._stopping.set()
        for processor in self.processors.values():
            processor.stop()
        self._check_finished()

    def cancel(self) -> None:
        """Stop at once: cancel every partition's term without committing its open batch (what a second
        signal does; the open transactions are aborted by the next owner's fencing or the timeout)."""
        self.stop()
        for task in self._terms.values():
            task.cancel()

    @property
    def owned(self) -> list[int]:
        """The partitions with a running term."""
        return sorted(self._terms)

    def readiness(self) -> str | None:
        """None once the consumer is up, an assignment arrived and every owned partition is processing;
        else what the process still waits for (`/readyz`)."""
        if not self._started:
            return "the consumer has not started (waiting for Kafka or its topics)"
        if not self._assigned:
            return "no partition assignment from the consumer group yet"
        starting = [p for p in self.owned if not self.processors[p].ready.is_set()]
        if starting:
            return f"partitions {starting} are restoring their state"
        return None

    def consumer_lag(self) -> dict[int, int]:
        """Per owned partition: the last stable offset the consumer saw minus the committed offset."""
        consumer = self._consumer
        lag: dict[int, int] = {}
        if consumer is None:
            return lag
        for p in self.owned:
            processor = self.processors[p]
            try:
                stable = consumer.last_stable_offset(processor.tp)
                end = stable if stable is not None else consumer.highwater(processor.tp)
            except (AssertionError, KeyError, ValueError):  # not (or no longer) assigned
                continue
            if end is not None:
                lag[p] = max(0, end - (processor.committed_offset or 0))
        return lag

    def state_sizes(self) -> dict[int, int]:
        sizes: dict[int, int] = {}
        for p in self.owned:
            store = self.processors[p].store
            if store is not None:
                try:
                    sizes[p] = len(store)  # type: ignore[arg-type]
                except TypeError:
                    continue
        return sizes

    async def run(self, *, handle_signals: bool = True) -> dict[int, ProcessorExit]:
        """Run until stopped (or, with static ownership, until every partition ended); raises the first
        failure that is not fencing or an outage."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            self._consumer = await start_client(
                self.ownership.consumer,
                bootstrap=self.config.bootstrap,
                action="start the processor's consumer",
                backoff=self.config.outage,
                stop=self._stopping,
            )
            await self.ownership.start(self, self._consumer, self._stopping)
            self._started = True
            self._check_finished()
            await self._finished.wait()
        except StopRequested:
            pass
        finally:
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            await self._shutdown()
        if self._failure is not None:
            raise self._failure
        return dict(self.results)

    async def _shutdown(self) -> None:
        self.stop()
        if self._terms:
            await asyncio.gather(*self._terms.values(), return_exceptions=True)
        await self.ownership.close()
        if self._consumer is not None:
            await close_client(self._consumer)  # leaves the group: the others rebalance at once
        for processor in self.processors.values():
            processor.close()
            _log_closed(processor)

    # ------------------------------------------------------------------- PartitionHost (ownership)

    def acquire(self, partitions: Sequence[int]) -> None:
        """Start a term for each partition (no-op for one already running, or while stopping)."""
        assert self._consumer is not None
        self._assigned = True
        for p in partitions:
            if self._stopping.is_set() or p in self._terms:
                continue
            processor = self.processors.get(p)
            if processor is None:
                processor = self.processors[p] = PartitionProcessor(
                    self.config, p, self.fold_factory, self._poison_hook, on_ready=self.on_ready
                )
            stop = processor.begin_term()
            task = asyncio.create_task(
                processor.run(PartitionFeed(self._consumer, processor.tp, stop)), name=f"partition-{p}"
            )
            task.add_done_callback(functools.partial(self._term_done, p))
            self._terms[p] = task

    async def release(self, partitions: Sequence[int]) -> None:
        """Stop the partitions' terms: a ready one commits its open batch, one still starting is
        cancelled (starting costs nothing to redo); stragglers are cancelled once the revocation budget
        is spent, their open transactions left to the next owner's InitProducerId."""
        tasks = []
        for p in partitions:
            task = self._terms.get(p)
            if task is None:
                continue
            processor = self.processors[p]
            if processor.ready.is_set():
                processor.stop()
            else:
                processor.stop()
                task.cancel()
            tasks.append(task)
        if not tasks:
            return
        budget = self.config.group.revocation_budget_s
        _, pending = await asyncio.wait(tasks, timeout=budget)
        for task in pending:
            log.warning("%s: still committing after %.1fs of revocation; cancelled", task.get_name(), budget)
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def keep_only(self, partitions: Sequence[int]) -> None:
        """Drop the state of every partition not in `partitions` (it was not given back)."""
        keep = set(partitions)
        for p, processor in self.processors.items():
            if p not in keep and p not in self._terms:
                processor.drop_state()

    def fail(self, exc: BaseException) -> None:
        if self._failure is None:
            trace = None if isinstance(exc, TurnledgerError) else exc
            log.error("processor failed: %s", exc, exc_info=trace)
            self._failure = exc
        self.stop()

    # ------------------------------------------------------------------------------------ internals

    def _term_done(self, partition: int, task: asyncio.Task[ProcessorExit]) -> None:
        if self._terms.get(partition) is task:
            del self._terms[partition]
        if task.cancelled():
            log.info("partition %d: term cancelled", partition)
        elif (exc := task.exception()) is not None:
            log.error(
                "partition %d failed: %s",
                partition,
                exc,
                exc_info=None if isinstance(exc, TurnledgerError) else exc,
            )
            self.fail(exc)
        else:
            how = self.results[partition] = task.result()
            if how is ProcessorExit.FENCED and self._consumer is not None and not self._stopping.is_set():
                self.ownership.fenced(self._consumer, partition)
        self._check_finished()

    def _check_finished(self) -> None:
        if self._terms:
            return
        if (
            self._failure is not None
            or self._stopping.is_set()
            or (self._started and self.ownership.ends_when_idle)
        ):
            self._finished.set()

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
        open transactions are aborted by the next owner's fencing or the transaction timeout). Counted
        apart from `stop()`: a process already stopping after a failure still commits on its first."""
        self._signals += 1
        if self._signals > 1:
            log.warning("received %s again: cancelling without committing open batches", sig.name)
            self.cancel()
            return
        log.info("received %s: committing open batches and stopping", sig.name)
        self.stop()


def _log_closed(processor: PartitionProcessor) -> None:
    m = processor.metrics
    log.info(
        "partition %d: closed after %d batches, %d records in, %d outputs, %d changelog records, "
        "%d poison, %d aborted, %d ownerships, %d restores; committed offset %s",
        processor.partition,
        m.batches,
        m.records_in,
        m.outputs_out,
        m.changelog_out,
        m.poison_records,
        m.aborted_batches,
        m.ownerships,
        m.restores,
        processor.committed_offset,
    )
