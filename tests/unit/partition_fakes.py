"""An in-memory Kafka for `processors.partition.PartitionProcessor`, so that its terms run with no broker.

`FakeKafka` holds what the broker would for one ingress partition: the log, the group's committed
offset, the changelog (the state and its position record) and the committed outputs. Its
transactions keep Kafka's rules: a commit writes outputs, state, position and offset together or
nothing; a producer initialised again (`init_producer`, InitProducerId) fences every earlier one, whose
next commit is refused. A test scripts what the next commits do (`then`), starts other owners'
commits (`commit_elsewhere`) and outages at InitProducerId (`outages_at_init`).

`install` swaps the partition module's Kafka glue (producer start, changelog restore and position,
the hanging-transaction sweep, the transactions) for these fakes; `FakeFeed` is the partition's
slice of the consumer, which sets the term's stop once the log is read and committed."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition

from turnledger.errors import KafkaUnavailableError
from turnledger.processors import partition
from turnledger.processors.changelog import RestoreResult
from turnledger.processors.config import ProcessorConfig, transactional_id
from turnledger.processors.contract import PoisonHook, StateStore
from turnledger.processors.errors import ProducerFencedError
from turnledger.processors.hanging_evidence import CLOCK_SLACK_MS
from turnledger.processors.poison import json_poison_hook
from turnledger.processors.store import PartitionStore
from turnledger.records import OutputRecord, SourceRecord
from turnledger.retry import Backoff
from turnledger.topology import Topics

TOPICS = Topics("t.")
INGRESS = TOPICS.ingress
BOOTSTRAP = "kafka.test:9092"
RESTORE_SECONDS = 0.25
GROUP = "turnledger"
CHANGELOG = TopicPartition(TOPICS.changelog, 0)
TRANSACTIONAL_ID = transactional_id(GROUP, INGRESS, 0)
QUICK = Backoff(initial_s=0.001, max_s=0.001, jitter=0)
"""Outages retried at once (a millisecond), for as long as they last."""


def config(**overrides: Any) -> ProcessorConfig:
    base: dict[str, Any] = {
        "bootstrap": BOOTSTRAP,
        "topics": TOPICS,
        "batch_max_records": 3,
        "batch_max_ms": 1,
        "retry_backoff_ms": 1,
        "outage": QUICK,
        "gc_gen0_threshold": None,
    }
    return ProcessorConfig(**{**base, **overrides})


class CounterFold:
    """Counts records per key (state `key -> count`, output `key:count`); raises on a value `boom`.
    `calls` holds how many records each call was given."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
        self.calls.append(len(records))
        out = []
        for record in records:
            if record.value == b"boom":
                raise ValueError("boom")
            key = (record.key or b"").decode()
            count = int(store.get(key) or b"0") + 1
            store.put(key, str(count).encode())
            out.append(OutputRecord("t.out", record.key, f"{key}:{count}".encode()))
        return out


def _fold_for(number: int) -> CounterFold:
    assert number == 0
    return CounterFold()


def _poison_hook_for(fold: object) -> PoisonHook:
    assert isinstance(fold, CounterFold)
    return json_poison_hook(TOPICS)


def processor(cfg: ProcessorConfig | None = None, **kwargs: Any) -> partition.PartitionProcessor:
    return partition.PartitionProcessor(cfg or config(), 0, _fold_for, _poison_hook_for, **kwargs)


@dataclass
class Wait:
    """A commit that waits for `event`, then ends as `then` says."""

    event: asyncio.Event
    then: BaseException | None = None


Outcome = BaseException | asyncio.Event | Wait | Callable[[], None] | None
"""What a scripted commit does: raise the exception without writing, wait for the event then commit
(`Wait`: then end as it says), commit then call the function (it may raise after the commit is
written, as a lost acknowledgement does), or (None) just commit."""


@dataclass
class FakeKafka:
    log: list[SourceRecord] = field(default_factory=list)
    committed: int | None = None
    """The group's committed offset of the partition."""
    reported: int | str | None = "committed"
    """What the group coordinator answers an OffsetFetch with: the committed offset, or a stale one."""
    state: dict[str, bytes] = field(default_factory=dict)
    position: int | None = None
    """The changelog's position record: the input offset its state belongs to."""
    outputs: list[OutputRecord] = field(default_factory=list)
    epoch: int = 0
    outages_at_init: int = 0
    commits: int = 0
    restores: int = 0
    closed_producers: int = 0
    script: deque[Outcome] = field(default_factory=deque)
    producers: list[FakeProducer] = field(default_factory=list)
    sweeps: list[str] = field(default_factory=list)
    position_errors: deque[Exception] = field(default_factory=deque)
    """Raised by the next reads of the changelog's position (a term that keeps its store reads it)."""

    def append(self, *keys: str, value: bytes = b"v") -> None:
        for key in keys:
            self.log.append(SourceRecord(INGRESS, 0, len(self.log), key.encode(), value))

    def then(self, *outcomes: Outcome) -> None:
        self.script.extend(outcomes)

    def counts(self) -> list[str]:
        return [out.value.decode() for out in self.outputs if out.topic == "t.out" and out.value]

    def init_producer(self) -> int:
        if self.outages_at_init:
            self.outages_at_init -= 1
            raise OSError("connection refused")
        self.epoch += 1
        return self.epoch

    def write(self, outputs: Sequence[OutputRecord], writes: Mapping[str, bytes | None], offset: int) -> None:
        self.outputs.extend(outputs)
        for key, value in writes.items():
            if value is None:
                self.state.pop(key, None)
            else:
                self.state[key] = value
        self.position = self.committed = offset
        self.commits += 1

    def commit_elsewhere(self, fold: CounterFold, upto: int) -> None:
        """Another owner folds the log from the committed offset to `upto` and commits it (its
        InitProducerId fencing ours first)."""
        self.epoch += 1
        start = self.committed or 0
        view = _DictStore(dict(self.state))
        outputs = fold.process_batch(self.log[start:upto], view)
        self.write(outputs, view.data, upto)


@dataclass
class _DictStore:
    data: dict[str, bytes]

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


class FakeProducer:
    def __init__(self, kafka: FakeKafka) -> None:
        self.epoch = kafka.init_producer()


class FakeTransactions:
    """`PartitionTransactions` over `FakeKafka`: a producer's commit is refused once it is fenced."""

    def __init__(self, producer: FakeProducer, kafka: FakeKafka, transactional_id: str) -> None:
        self.producer, self.kafka, self.transactional_id = producer, kafka, transactional_id

    async def commit(
        self, outputs: Sequence[OutputRecord], state_writes: Mapping[str, bytes | None], next_offset: int
    ) -> None:
        await asyncio.sleep(0)
        kafka = self.kafka
        outcome = kafka.script.popleft() if kafka.script else None
        if isinstance(outcome, asyncio.Event):
            outcome = Wait(outcome)
        if isinstance(outcome, Wait):
            await outcome.event.wait()
            outcome = outcome.then
        if self.producer.epoch != kafka.epoch:
            raise ProducerFencedError(self.transactional_id)
        if isinstance(outcome, BaseException):
            raise outcome
        kafka.write(outputs, dict(state_writes), next_offset)
        if callable(outcome):
            outcome()


class FakeFeed:
    """The partition's slice of the consumer: reads `kafka.log` from its position, at most the
    records asked for; once the log is read and committed it sets `stop` (the term then returns)."""

    def __init__(
        self,
        kafka: FakeKafka,
        stop: asyncio.Event,
        *,
        stop_when_done: bool = True,
        per_fetch: int | None = None,
    ) -> None:
        self.kafka, self.stop, self.stop_when_done, self.per_fetch = kafka, stop, stop_when_done, per_fetch
        self.position = 0
        self.idle_fetches = 0
        """Fetches still to come back empty (nothing arrived yet) before the log is read."""
        self.timeouts: list[int] = []
        self.paused = True
        self.seeks: list[int | None] = []
        self.closed = False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    async def committed(self) -> int | None:
        kafka = self.kafka
        return kafka.committed if kafka.reported == "committed" else kafka.reported  # type: ignore[return-value]

    async def seek(self, offset: int | None) -> int:
        self.seeks.append(offset)
        self.position = offset or 0
        return self.position

    async def fetch(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        await asyncio.sleep(0)
        if self.stop.is_set():
            return []
        assert not self.paused, "a paused partition was fetched"
        self.timeouts.append(timeout_ms)
        if self.idle_fetches:
            self.idle_fetches -= 1
            return []
        records = self.kafka.log[
            self.position : self.position + min(max_records, self.per_fetch or max_records)
        ]
        self.position += len(records)
        if not records and self.stop_when_done and self.kafka.committed == len(self.kafka.log):
            self.stop.set()
        return records

    def close(self) -> None:
        self.closed = True


def install(monkeypatch: pytest.MonkeyPatch, kafka: FakeKafka) -> None:
    def transactional_producer(bootstrap: str, txn_id: str, **options: int) -> Callable[[], FakeProducer]:
        settings = {"transaction_timeout_ms": 60_000, "retry_backoff_ms": 20, "max_batch_size": 512 * 1024}
        assert (bootstrap, txn_id, options) == (BOOTSTRAP, TRANSACTIONAL_ID, settings)
        return lambda: FakeProducer(kafka)

    async def start_client(
        factory: Callable[[], Callable[[], FakeProducer]], *, bootstrap: str, action: str
    ) -> FakeProducer:
        try:
            producer = factory()()  # made, then started: InitProducerId
        except OSError as exc:  # as `start_client` gives up with its default backoff (NO_WAIT)
            raise KafkaUnavailableError(bootstrap, exc, action=action) from exc
        kafka.producers.append(producer)
        return producer

    async def close_client(producer: FakeProducer) -> None:
        assert producer is kafka.producers[-1]
        kafka.closed_producers += 1

    class Evidence:
        def __init__(self, bootstrap: str, changelog: TopicPartition, *, margin_ms: int) -> None:
            assert (bootstrap, changelog, margin_ms) == (BOOTSTRAP, CHANGELOG, 60_000 + CLOCK_SLACK_MS)

    class Coordinator:
        def __init__(self, bootstrap: str, txn_id: str) -> None:
            assert (bootstrap, txn_id) == (BOOTSTRAP, TRANSACTIONAL_ID)

    async def read_position(bootstrap: str, changelog: object) -> int | None:
        assert (bootstrap, changelog) == (BOOTSTRAP, TopicPartition(TOPICS.changelog, 0))
        if kafka.position_errors:
            raise kafka.position_errors.popleft()
        return kafka.position

    async def restore(bootstrap: str, topic: str, number: int, store: PartitionStore) -> RestoreResult:
        assert (bootstrap, topic, number) == (BOOTSTRAP, TOPICS.changelog, 0)
        kafka.restores += 1
        for key, value in kafka.state.items():
            store.put(key, value)
        return RestoreResult(records=len(kafka.state), position=kafka.position, seconds=RESTORE_SECONDS)

    async def settle(bootstrap: str, changelog: object, *, sweep: Callable[[], None]) -> None:
        assert (bootstrap, changelog) == (BOOTSTRAP, CHANGELOG)
        sweep()

    class Sweep:
        def __init__(
            self,
            producer: FakeProducer,
            changelog: TopicPartition,
            outputs: object,
            evidence: object,
            coordinator: object,
        ) -> None:
            assert producer is kafka.producers[-1] and (changelog, outputs) == (CHANGELOG, TOPICS.outputs)
            assert isinstance(evidence, Evidence) and isinstance(coordinator, Coordinator)

        async def sweep_written(self) -> None:
            kafka.sweeps.append("written")

        def sweep_changelog(self) -> None:
            kafka.sweeps.append("changelog")

    def transactions(
        producer: FakeProducer,
        *,
        transactional_id: str,
        source: TopicPartition,
        changelog_topic: str,
        offsets_group: str,
    ) -> FakeTransactions:
        assert (source, changelog_topic, offsets_group) == (
            TopicPartition(INGRESS, 0),
            TOPICS.changelog,
            GROUP,
        )
        assert transactional_id == TRANSACTIONAL_ID
        return FakeTransactions(producer, kafka, transactional_id)

    for name, fake in {
        "start_client": start_client,
        "close_client": close_client,
        "read_position": read_position,
        "restore_from_changelog": restore,
        "settle": settle,
        "HangingSweep": Sweep,
        "transactional_producer": transactional_producer,
        "ChangelogEvidence": Evidence,
        "TransactionLogReader": Coordinator,
        "PartitionTransactions": transactions,
    }.items():
        monkeypatch.setattr(partition, name, fake)


async def run_term(proc: partition.PartitionProcessor, kafka: FakeKafka, **feed_options: Any) -> Any:
    """One term of `proc` over `kafka` until the log is read and committed; returns (exit, feed)."""
    stop = proc.begin_term()
    feed = FakeFeed(kafka, stop, **feed_options)
    return await asyncio.wait_for(proc.run(feed), timeout=30), feed
