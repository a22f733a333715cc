"""A partition processor's terms over an in-memory Kafka (`partition_fakes`): every input offset is
committed once with its outputs and state, across aborts, outages, fencing and terms that keep or
restore their store. The same runs against the real broker are in tests/integration (test_processor_eos,
test_ownership); these pin each branch of `partition.py` exactly, in milliseconds."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError

from tests.unit.partition_fakes import (
    BOOTSTRAP,
    INGRESS,
    RESTORE_SECONDS,
    TOPICS,
    TRANSACTIONAL_ID,
    CounterFold,
    FakeFeed,
    FakeKafka,
    Wait,
    config,
    install,
    processor,
    run_term,
)
from tests.unit.recorded_asyncio import RecordedAsyncio, record_asyncio
from turnledger.errors import KafkaUnavailableError, StateStoreError
from turnledger.processors.config import ProcessorExit
from turnledger.processors.errors import ProducerFencedError, TooManyAbortsError
from turnledger.processors.poison import json_poison_hook
from turnledger.processors.store import MemoryStateStore
from turnledger.processors.transaction import BatchAborted, ProducerBroken
from turnledger.retry import Backoff, StopRequested


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
    kafka = FakeKafka()
    install(monkeypatch, kafka)
    return kafka


def aborted(cause: BaseException) -> BatchAborted:
    """What `PartitionTransactions.commit` raises for a transaction it aborted cleanly."""
    exc = BatchAborted(f"transaction aborted: {cause!r}")
    exc.__cause__ = cause
    return exc


EXPECTED = ["a:1", "b:1", "a:2", "c:1", "a:3", "b:2", "a:4"]


def seven(kafka: FakeKafka) -> None:
    kafka.append("a", "b", "a", "c", "a", "b", "a")


@pytest.mark.parametrize(
    ("pipelined", "group_commit"),
    [(True, False), (True, True), (False, False)],
    ids=["window", "group", "serial"],
)
async def test_a_term_folds_every_record_once_and_commits_outputs_state_and_offset_together(
    kafka: FakeKafka, pipelined: bool, group_commit: bool
) -> None:
    seven(kafka)
    proc = processor(config(pipelined_commits=pipelined, group_commit=group_commit))
    exit_, feed = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.STOPPED
    assert kafka.counts() == EXPECTED
    assert kafka.state == {"a": b"4", "b": b"2", "c": b"1"} and kafka.position == kafka.committed == 7
    assert proc.committed_offset == 7 and proc.store is not None and len(proc.store) == 3  # type: ignore[arg-type]
    m = proc.metrics
    assert (m.records_in, m.outputs_out, m.ownerships, m.restores, m.aborted_batches) == (7, 7, 1, 1, 0)
    assert m.batches == kafka.commits and m.changelog_out >= 3
    assert feed.seeks == [None] and feed.paused and feed.closed and not proc.ready.is_set()
    assert kafka.restores == 1 and kafka.closed_producers == 1 and kafka.sweeps == ["written", "changelog"]


async def test_batches_hold_at_most_batch_max_records_each_one_transaction(kafka: FakeKafka) -> None:
    seven(kafka)
    proc = processor(config(pipelined_commits=False))
    await run_term(proc, kafka)
    assert (proc.metrics.batches, kafka.commits) == (3, 3)  # 3 + 3 + 1
    assert proc.metrics.changelog_out == 2 + 3 + 1  # the keys each batch changed: a,b | a,c,b | a


async def test_a_second_term_keeps_its_store_when_nobody_committed_since(kafka: FakeKafka) -> None:
    kafka.append("a", "b", "a")
    proc = processor()
    await run_term(proc, kafka)
    store = proc.store
    kafka.append("a", "c")
    await run_term(proc, kafka)
    assert proc.store is store and kafka.restores == 1 and proc.metrics.restores == 1
    assert kafka.counts() == ["a:1", "b:1", "a:2", "a:3", "c:1"]
    assert proc.metrics.ownerships == 2 and kafka.epoch == 2


async def test_a_second_term_restores_when_another_owner_committed_in_between(kafka: FakeKafka) -> None:
    kafka.append("a", "b", "a")
    proc = processor()
    await run_term(proc, kafka)
    kafka.append("a", "c", "a")
    kafka.commit_elsewhere(CounterFold(), upto=5)  # the others folded a, c
    exit_, feed = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.STOPPED and kafka.restores == 2 and proc.metrics.restores == 2
    assert feed.seeks == [5]
    assert kafka.counts() == ["a:1", "b:1", "a:2", "a:3", "c:1", "a:4"]


async def test_a_store_is_not_kept_when_the_changelog_lost_its_position(kafka: FakeKafka) -> None:
    kafka.append("a", "b")
    proc = processor()
    await run_term(proc, kafka)
    kafka.position = None  # e.g. a changelog written before position records: no proof the store is current
    kafka.append("a")
    await run_term(proc, kafka)
    assert kafka.restores == 2
    assert kafka.counts() == ["a:1", "b:1", "a:2"]


async def test_a_store_is_kept_under_a_stale_group_offset_and_not_under_a_later_one(kafka: FakeKafka) -> None:
    kafka.append("a", "b", "a", "a")
    proc = processor()
    await run_term(proc, kafka)
    kafka.reported = 3  # stale, before the changelog's 4: the later of the two is where this term resumes
    kafka.append("b")
    _, feed = await run_term(proc, kafka)
    assert kafka.restores == 1 and feed.seeks == [4]
    kafka.reported = 6  # after what this process committed (5): the store may be behind, so it is restored
    kafka.append("c", "d")
    _, feed = await run_term(proc, kafka)
    assert kafka.restores == 2 and feed.seeks == [6]
    assert kafka.counts() == ["a:1", "b:1", "a:2", "a:3", "b:2", "d:1"]


async def test_the_changelog_position_wins_over_a_stale_group_offset_at_restore(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    seven(kafka)
    kafka.commit_elsewhere(CounterFold(), upto=4)
    kafka.reported = 2
    caplog.set_level(logging.WARNING, "turnledger.processors.partition")
    _, feed = await run_term(processor(), kafka)
    assert feed.seeks == [4]
    assert kafka.counts() == ["a:1", "b:1", "a:2", "c:1", "a:3", "b:2", "a:4"]
    assert "reported committed offset 2, the changelog's position is 4; resuming at 4" in caplog.text


@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "serial"])
async def test_an_aborted_commit_folds_its_batch_again_from_the_committed_offset(
    kafka: FakeKafka, pipelined: bool
) -> None:
    seven(kafka)
    kafka.then(None, aborted(ValueError("coordinator said no")))
    proc = processor(config(pipelined_commits=pipelined))
    exit_, feed = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.STOPPED
    assert kafka.counts() == EXPECTED  # the aborted batch's overlay was discarded: no count doubled
    assert kafka.state == {"a": b"4", "b": b"2", "c": b"1"}
    assert proc.metrics.aborted_batches == 1 and proc.metrics.records_in == 7
    assert feed.seeks == [None, 3]


async def test_the_same_batch_failing_max_consecutive_aborts_times_gives_up(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    seven(kafka)
    kafka.then(None, *[aborted(ValueError("no")) for _ in range(3)])
    proc = processor(config(max_consecutive_aborts=3))
    caplog.set_level(logging.WARNING, "turnledger.processors.partition")
    with pytest.raises(
        TooManyAbortsError, match="partition 0: the batch at offset 3 failed to commit 3 times in a row"
    ) as raised:
        await run_term(proc, kafka)
    assert kafka.committed == 3 and kafka.counts() == EXPECTED[:3]
    assert proc.metrics.aborted_batches == 3
    # the batch in flight [3..5] failed while [6] was folded on top of it: both are folded again
    assert str(raised.value.__cause__) == "the commit of offsets 3..5 was aborted"
    rolled_back = (
        "partition 0: offsets 3..6 rolled back (transaction aborted: ValueError('no')); folding them again"
    )
    assert caplog.text.count(rolled_back) == 3


async def test_aborts_for_an_outage_never_give_up_and_a_success_resets_the_count(kafka: FakeKafka) -> None:
    seven(kafka)
    outage = [aborted(KafkaConnectionError("broker gone")) for _ in range(4)]
    kafka.then(aborted(ValueError("no")), None, aborted(ValueError("no")), *outage)
    proc = processor(config(max_consecutive_aborts=2, pipelined_commits=False))
    exit_, _ = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.STOPPED and kafka.counts() == EXPECTED
    assert proc.metrics.aborted_batches == 6


async def test_a_fenced_commit_ends_the_term_as_fenced_and_forgets_the_state(kafka: FakeKafka) -> None:
    seven(kafka)
    fence = asyncio.Event()
    kafka.then(None, fence)
    proc = processor(config(pipelined_commits=False))
    stop = proc.begin_term()
    term = asyncio.ensure_future(proc.run(FakeFeed(kafka, stop)))
    while kafka.commits < 1:
        await asyncio.sleep(0)
    kafka.epoch += 1  # another process ran InitProducerId for the partition's transactional.id
    fence.set()
    assert await asyncio.wait_for(term, timeout=30) is ProcessorExit.FENCED
    assert proc.store is None and proc.fold is None and kafka.counts() == EXPECTED[:3]
    assert kafka.committed == 3 and proc.committed_offset == 3


async def test_an_outage_at_the_start_is_ridden_out_by_starting_the_term_over(kafka: FakeKafka) -> None:
    seven(kafka)
    kafka.outages_at_init = 2
    proc = processor()
    exit_, _ = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.STOPPED and kafka.counts() == EXPECTED
    assert proc.metrics.ownerships == 3 and kafka.restores == 1
    assert kafka.closed_producers == 1  # the two terms that found no broker had no producer to close
    kafka.append("a")
    kafka.outages_at_init = 1  # the next term's first start finds none either: the old producer is gone
    await run_term(proc, kafka)
    assert kafka.closed_producers == 2 and kafka.counts() == [*EXPECTED, "a:5"]


async def test_an_outage_longer_than_max_outage_is_raised(kafka: FakeKafka) -> None:
    seven(kafka)
    kafka.outages_at_init = 1
    proc = processor(config(outage=Backoff(initial_s=0.001, max_s=0.001, jitter=0, max_outage_s=0)))
    with pytest.raises(KafkaUnavailableError, match="initialise the producer of partition 0"):
        await run_term(proc, kafka)
    assert kafka.commits == 0 and proc.metrics.ownerships == 1


async def test_a_kafka_error_inside_a_term_is_an_outage_and_any_other_error_ends_it(kafka: FakeKafka) -> None:
    kafka.append("a", "b")
    proc = processor()
    await run_term(proc, kafka)
    kafka.append("a")
    kafka.position_errors.extend([KafkaConnectionError("leader moved"), OSError("reset")])
    _, feed = await run_term(proc, kafka)
    assert proc.metrics.ownerships == 4 and feed.seeks == [2] and kafka.counts() == ["a:1", "b:1", "a:2"]
    kafka.position_errors.append(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        await run_term(proc, kafka)
    assert proc.metrics.ownerships == 5 and kafka.closed_producers == 5


CHANGELOG = TopicPartition(TOPICS.changelog, 0)
NO_WAIT = Backoff(initial_s=0.001, max_s=0.001, jitter=0, max_outage_s=0)


async def test_no_committed_offset_although_the_changelog_holds_state_is_never_a_start_from_the_log_start(
    kafka: FakeKafka,
) -> None:
    seven(kafka)
    kafka.state = {"a": b"2", "b": b"1"}  # the offsets were lost (or not loaded yet); the state was not
    proc = processor(config(outage=NO_WAIT))
    with pytest.raises(KafkaUnavailableError) as raised:
        await run_term(proc, kafka)
    assert str(raised.value).startswith(
        f"Kafka is not reachable at {BOOTSTRAP!r} while trying to read the committed offset of partition 0 "
        "(ProcessorError: the group 'turnledger' has no committed offset for partition 0, although its "
        "changelog holds 2 state records)"
    )
    assert kafka.commits == 0


async def test_no_committed_offset_after_this_process_committed_is_never_a_start_from_the_log_start(
    kafka: FakeKafka,
) -> None:
    kafka.append("a", "b")
    proc = processor(config(outage=NO_WAIT))
    await run_term(proc, kafka)
    kafka.committed = kafka.position = None
    kafka.state = {}
    with pytest.raises(KafkaUnavailableError, match="an earlier term of this process committed offset 2"):
        await run_term(proc, kafka)


async def test_offsets_that_come_back_after_an_outage_are_resumed_from(kafka: FakeKafka) -> None:
    seven(kafka)
    kafka.commit_elsewhere(CounterFold(), upto=3)
    kafka.committed = kafka.position = None  # the coordinator does not know the offsets yet

    real_init = kafka.init_producer
    inits = 0

    def init_then_recover() -> int:
        nonlocal inits
        inits += 1
        if inits == 3:
            kafka.committed = kafka.position = 3
        return real_init()

    kafka.init_producer = init_then_recover  # type: ignore[method-assign]
    proc = processor()
    exit_, feed = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.STOPPED and feed.seeks == [3] and kafka.counts() == EXPECTED
    assert proc.metrics.ownerships == 3


@pytest.mark.parametrize("written", [True, False], ids=["commit-written", "commit-lost"])
async def test_a_broken_producer_starts_the_term_over_and_the_committed_offset_says_what_happened(
    kafka: FakeKafka, written: bool
) -> None:
    seven(kafka)

    def broken() -> None:
        raise ProducerBroken("the abort failed too")

    kafka.then(None, broken if written else ProducerBroken("the abort failed too"))
    proc = processor(config(pipelined_commits=False))
    exit_, feed = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.STOPPED and kafka.counts() == EXPECTED
    assert proc.metrics.ownerships == 2
    # a commit written but not acknowledged leaves the store behind the changelog: restored, not kept
    assert kafka.restores == (2 if written else 1)
    assert feed.seeks == [None, 6 if written else 3]


async def test_a_term_stopped_during_a_commit_commits_what_it_folded_then_returns(kafka: FakeKafka) -> None:
    seven(kafka)
    gate = asyncio.Event()
    kafka.then(gate)
    proc = processor(config(pipelined_commits=True))
    stop = proc.begin_term()
    feed = FakeFeed(kafka, stop, stop_when_done=False)
    term = asyncio.ensure_future(proc.run(feed))
    while kafka.script or feed.position < 6:  # the first commit waits; the second batch is folded
        await asyncio.sleep(0)
    proc.stop()
    gate.set()
    assert await asyncio.wait_for(term, timeout=30) is ProcessorExit.STOPPED
    assert kafka.committed == proc.committed_offset == 6 and kafka.counts() == EXPECTED[:6]


async def test_a_term_cancelled_with_a_commit_in_flight_does_not_trust_its_store(kafka: FakeKafka) -> None:
    kafka.append("a", "b", "a", "x", "y", "z", "c", "d")
    gate = asyncio.Event()
    kafka.then(None, gate)
    proc = processor(config(batch_max_ms=60_000))
    stop = proc.begin_term()
    feed = FakeFeed(kafka, stop, stop_when_done=False)
    term = asyncio.ensure_future(proc.run(feed))
    while kafka.script or feed.position < 8:  # [x, y, z] waits to commit while [c, d] is gathered
        await asyncio.sleep(0)
    term.cancel()
    with pytest.raises(asyncio.CancelledError):
        await term
    assert kafka.commits == 1 and proc.committed_offset == kafka.position == 3
    proc.config = config()
    await run_term(proc, kafka)  # the cancelled commit's outcome was unknown here: restored, not kept
    assert kafka.restores == 2 and kafka.counts() == ["a:1", "b:1", "a:2", "x:1", "y:1", "z:1", "c:1", "d:1"]


async def test_on_ready_runs_once_a_term_positioned_before_its_first_batch(kafka: FakeKafka) -> None:
    seven(kafka)
    kafka.commit_elsewhere(CounterFold(), upto=2)
    seen: list[tuple[int | None, int, bool]] = []

    def ready(p: object) -> None:
        seen.append((proc.committed_offset, kafka.commits, proc.ready.is_set()))

    proc = processor(on_ready=ready)
    await run_term(proc, kafka)
    assert seen == [(2, 1, False)]


async def test_a_record_the_fold_cannot_take_becomes_a_rejection_and_the_partition_moves_on(
    kafka: FakeKafka,
) -> None:
    kafka.append("a")
    kafka.append("b", value=b"boom")
    kafka.append("a")
    proc = processor()
    await run_term(proc, kafka)
    assert kafka.counts() == ["a:1", "a:2"] and kafka.committed == 3
    rejections = [out for out in kafka.outputs if out.topic == TOPICS.rejections]
    assert [r.key for r in rejections] == [b"b"] and proc.metrics.poison_records == 1
    assert kafka.state == {"a": b"2"}


async def test_fencing_found_by_a_pipelined_commit_ends_the_term_with_nothing_more_written(
    kafka: FakeKafka,
) -> None:
    seven(kafka)
    proc = processor(config(pipelined_commits=True))
    kafka.then(lambda: setattr(kafka, "epoch", kafka.epoch + 1))  # fenced right after the first commit
    stop = proc.begin_term()
    exit_ = await asyncio.wait_for(proc.run(FakeFeed(kafka, stop)), timeout=30)
    assert exit_ is ProcessorExit.FENCED
    assert kafka.commits == 1 and kafka.counts() == EXPECTED[:3]


def test_the_later_of_two_offsets_none_being_before_any() -> None:
    from turnledger.processors.partition import _later

    assert [_later(None, None), _later(None, 3), _later(3, None), _later(2, 5), _later(5, 2)] == [
        None,
        3,
        3,
        5,
        5,
    ]


async def test_producer_fenced_error_names_the_transactional_id() -> None:
    assert "'turnledger-t.in-0'" in str(ProducerFencedError("turnledger-t.in-0"))


async def test_a_group_commit_batch_is_what_arrived_during_the_commit_before_it(kafka: FakeKafka) -> None:
    seven(kafka)
    gate = asyncio.Event()
    kafka.then(gate)
    proc = processor(config(group_commit=True, batch_max_records=100, batch_max_ms=60_000))
    stop = proc.begin_term()
    feed = FakeFeed(kafka, stop, per_fetch=1)
    term = asyncio.ensure_future(proc.run(feed))
    while feed.position < 7:  # the first batch closed at its first record; the rest arrive during its commit
        await asyncio.sleep(0)
    gate.set()
    assert await asyncio.wait_for(term, timeout=30) is ProcessorExit.STOPPED
    assert (kafka.commits, proc.metrics.batches, kafka.counts()) == (2, 2, EXPECTED)
    assert isinstance(proc.fold, CounterFold) and proc.fold.calls == [1] * 7  # folded as each fetch arrived


async def test_a_window_batch_is_folded_whole_when_it_closes(kafka: FakeKafka) -> None:
    seven(kafka)
    kafka.append("c")  # two full batches: neither waits out its window
    proc = processor(config(batch_max_records=4, batch_max_ms=60_000))
    await run_term(proc, kafka, per_fetch=1)
    assert isinstance(proc.fold, CounterFold) and proc.fold.calls == [4, 4]
    assert kafka.counts() == [*EXPECTED, "c:2"]


class SteppedClock:
    """`time.monotonic` for the partition module: every reading is `step` seconds after the last."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize(("outages", "ends"), [(2, "processed"), (3, "raised")])
async def test_an_outage_is_bounded_by_max_outage_from_its_first_failure(
    kafka: FakeKafka,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    outages: int,
    ends: str,
) -> None:
    from turnledger.processors import partition

    monkeypatch.setattr(partition, "time", SteppedClock(10.0))
    seven(kafka)
    kafka.outages_at_init = outages
    proc = processor(config(outage=Backoff(initial_s=0.001, max_s=0.001, jitter=0, max_outage_s=30)))
    caplog.set_level(logging.WARNING, "turnledger.processors.partition")
    if ends == "raised":  # began at 10; failures seen at 20, 30 and 40: 30 s into it, the limit
        with pytest.raises(KafkaUnavailableError, match="initialise the producer of partition 0"):
            await run_term(proc, kafka)
        assert kafka.commits == 0
    else:
        await run_term(proc, kafka)
        assert kafka.counts() == EXPECTED
    waits = [r.getMessage() for r in caplog.records if "starting the partition over" in r.getMessage()]
    assert len(waits) == 2
    assert waits[0].startswith(
        f"partition 0: Kafka is not reachable at {BOOTSTRAP!r} while trying to initialise the producer of "
        "partition 0 (OSError: connection refused)"
    )
    assert waits[0].endswith("; starting the partition over in 0.0s (10.0s into the outage)")
    assert waits[1].endswith("(20.0s into the outage)")


async def test_an_outage_after_a_term_began_is_timed_from_its_own_start(
    kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnledger.processors import partition

    clock = SteppedClock(10.0)
    monkeypatch.setattr(partition, "time", clock)
    kafka.append("a", "b")
    proc = processor(config(outage=Backoff(initial_s=0.001, max_s=0.001, jitter=0, max_outage_s=25)))
    kafka.outages_at_init = 2  # 20 s of outage, then the term runs
    await run_term(proc, kafka)
    kafka.append("a")
    kafka.position_errors.extend([KafkaConnectionError("gone"), KafkaConnectionError("gone")])
    await run_term(proc, kafka)  # a new term: its outage starts at zero again
    assert kafka.counts() == ["a:1", "b:1", "a:2"] and proc.metrics.ownerships == 6


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> RecordedAsyncio:
    """The backoffs between attempts: each wait of the partition module runs out at once."""
    from turnledger.processors import partition

    return record_asyncio(monkeypatch, partition)


async def test_aborts_back_off_doubling_up_to_five_seconds_and_a_commit_resets_it(
    kafka: FakeKafka, waits: RecordedAsyncio
) -> None:
    seven(kafka)
    no = ValueError("no")
    kafka.then(aborted(no), aborted(no), aborted(no), aborted(no), None, aborted(no))
    proc = processor(config(pipelined_commits=False, retry_backoff_ms=1_500, max_consecutive_aborts=9))
    await run_term(proc, kafka)
    assert waits.timeouts == [1.5, 3.0, 5.0, 5.0, 1.5]
    assert kafka.counts() == EXPECTED and proc.metrics.aborted_batches == 5


async def test_a_state_dir_it_cannot_use_ends_the_term_at_once_and_is_no_outage(
    kafka: FakeKafka, waits: RecordedAsyncio, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`kafka_outage` counts every OSError as an outage; the store's own fault is typed so that it
    is not ridden out for `max_outage_s` (or for ever) under a message that blames Kafka."""
    seven(kafka)
    taken = tmp_path / "state"
    taken.write_text("a file")
    proc = processor(config(state_dir=taken))
    caplog.set_level(logging.WARNING, "turnledger.processors.partition")
    with pytest.raises(StateStoreError, match=r"^cannot open the state store of partition 0 at "):
        await run_term(proc, kafka)
    assert (waits.timeouts, caplog.records, kafka.counts(), proc.ready.is_set()) == ([], [], [], False)
    assert proc.metrics.ownerships == 1 and kafka.closed_producers == 1


async def test_outages_back_off_as_the_outage_backoff_says(kafka: FakeKafka, waits: RecordedAsyncio) -> None:
    seven(kafka)
    kafka.outages_at_init = 3
    proc = processor(config(outage=Backoff(initial_s=2, max_s=5, multiplier=2, jitter=0)))
    await run_term(proc, kafka)
    assert waits.timeouts == [2.0, 4.0, 5.0] and kafka.counts() == EXPECTED


async def test_a_commit_in_flight_aborted_with_nothing_folded_on_top_is_rolled_back_alone(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    kafka.append("a", "b", "a", "c", "a", "b")
    gate = asyncio.Event()
    kafka.then(None, Wait(gate, aborted(ValueError("no"))))
    proc = processor()
    stop = proc.begin_term()
    feed = FakeFeed(kafka, stop, stop_when_done=False)
    caplog.set_level(logging.WARNING, "turnledger.processors.partition")
    term = asyncio.ensure_future(proc.run(feed))
    while kafka.script or feed.position < 6:  # [3, 4, 5] waits to commit; nothing more arrives
        await asyncio.sleep(0)
    proc.stop()
    gate.set()
    assert await asyncio.wait_for(term, timeout=30) is ProcessorExit.STOPPED
    assert kafka.committed == proc.committed_offset == 3 and feed.seeks[-1] == 3
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "partition 0: offsets 3..5 rolled back (transaction aborted: ValueError('no')); folding them again"
    ]
    await run_term(proc, kafka)
    assert kafka.counts() == EXPECTED[:6] and kafka.restores == 1


async def test_a_stop_while_the_term_starts_returns_stopped_before_any_fetch(
    kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnledger.processors import partition

    seven(kafka)
    proc = processor()
    stop = proc.begin_term()
    feed = FakeFeed(kafka, stop)
    read = partition.read_position

    async def stopped_meanwhile(*args: object) -> int | None:
        proc.stop()
        return await read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(partition, "settle", lambda *a, **k: stopped_meanwhile(BOOTSTRAP, CHANGELOG))
    assert await asyncio.wait_for(proc.run(feed), timeout=30) is ProcessorExit.STOPPED
    assert feed.timeouts == [] and kafka.commits == 0 and not proc.ready.is_set()


async def test_a_stop_requested_while_waiting_for_kafka_returns_stopped(
    kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnledger.processors import partition

    async def stop_requested(*args: object, **kwargs: object) -> None:
        raise StopRequested("stopped while waiting for Kafka")

    monkeypatch.setattr(partition, "start_client", stop_requested)
    seven(kafka)
    exit_, feed = await run_term(processor(), kafka)
    assert exit_ is ProcessorExit.STOPPED and feed.timeouts == [] and feed.closed


async def test_the_ready_hook_gets_the_processor_and_fencing_is_logged(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    seven(kafka)
    got: list[object] = []
    proc = processor(config(pipelined_commits=False), on_ready=got.append)
    kafka.then(lambda: setattr(kafka, "epoch", kafka.epoch + 1))
    caplog.set_level(logging.ERROR, "turnledger.processors.partition")
    exit_, _ = await run_term(proc, kafka)
    assert exit_ is ProcessorExit.FENCED and got == [proc]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        f"partition 0: {ProducerFencedError(TRANSACTIONAL_ID)}"
    ]


async def test_an_outage_inside_a_term_names_the_partition_when_it_is_given_up_on(kafka: FakeKafka) -> None:
    kafka.append("a")
    proc = processor(config(outage=NO_WAIT))
    await run_term(proc, kafka)
    kafka.position_errors.append(KafkaConnectionError("gone"))
    with pytest.raises(KafkaUnavailableError) as raised:
        await run_term(proc, kafka)
    assert str(raised.value).startswith(
        f"Kafka is not reachable at {BOOTSTRAP!r} while trying to process partition 0 (KafkaConnectionError: "
    )


async def test_a_restore_opens_the_partition_s_store_file_and_counts_what_it_read(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnledger.processors import partition

    tuned: list[int] = []
    monkeypatch.setattr(partition, "tune_gc", tuned.append)
    seven(kafka)
    kafka.commit_elsewhere(CounterFold(), upto=4)
    proc = processor(config(state_dir=tmp_path, gc_gen0_threshold=7_000))
    await run_term(proc, kafka)
    assert [f.name for f in tmp_path.iterdir() if f.suffix == ".sqlite"] == [
        f"t.turnledger.changelog-0.{os.getpid()}.sqlite"
    ]
    m = proc.metrics
    assert (m.restored_records, m.restore_seconds_last, m.restores, tuned) == (3, RESTORE_SECONDS, 1, [7_000])
    assert kafka.counts() == EXPECTED and proc.store is not None
    store = proc.store
    proc.close()
    with pytest.raises(sqlite3.ProgrammingError):
        len(store)  # type: ignore[arg-type]  # its connection is closed
    processor().close()  # a processor that never restored has nothing to close


async def test_the_store_keeps_as_many_values_in_its_read_cache_as_the_fold_asks(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold is made before its store, which it sizes (`store_read_cache`); a restore after a lost
    store sizes the new one the same."""
    from turnledger.processors import partition
    from turnledger.processors.store import SqliteStateStore

    class AsksTwo(CounterFold):
        store_read_cache = 2

    folds: list[AsksTwo] = []

    def fold_for(number: int) -> AsksTwo:
        folds.append(AsksTwo())
        return folds[-1]

    seven(kafka)
    kafka.commit_elsewhere(CounterFold(), upto=4)
    proc = partition.PartitionProcessor(
        config(state_dir=tmp_path), 0, fold_for, lambda fold: json_poison_hook(TOPICS)
    )
    await run_term(proc, kafka)
    assert kafka.counts() == EXPECTED and proc.fold is folds[0]
    store = proc.store
    assert isinstance(store, SqliteStateStore) and store._cache_entries == 2
    assert sorted(store._cache) == ["a", "b"]  # the last two keys written: b:2 then a:4
    proc.drop_state()
    await run_term(proc, kafka)
    assert isinstance(proc.store, SqliteStateStore) and proc.store._cache_entries == 2
    assert len(folds) == 2 and proc.fold is folds[1] and kafka.restores == 2
    proc.close()


def test_a_processor_stopped_before_its_first_term_says_so() -> None:
    proc = processor()
    proc.stop()
    assert proc.stopping and not processor().stopping


async def test_each_term_logs_its_producer_and_where_it_resumes_with_which_state(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    kafka.append("a", "b", "a")
    proc = processor()
    caplog.set_level(logging.INFO, "turnledger.processors.partition")
    await run_term(proc, kafka)
    await run_term(proc, kafka)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    initialised = f"partition 0: producer {TRANSACTIONAL_ID!r} initialised (predecessors fenced)"
    assert lines == [
        initialised,
        f"partition 0: resuming {INGRESS} at offset beginning; restored 0 state records",
        initialised,
        f"partition 0: resuming {INGRESS} at offset 3; kept the state of its previous term (2 keys)",
    ]


async def test_a_restored_store_is_kept_by_the_next_term_even_if_its_term_committed_nothing(
    kafka: FakeKafka,
) -> None:
    seven(kafka)
    kafka.commit_elsewhere(CounterFold(), upto=7)
    proc = processor()
    await run_term(proc, kafka)
    await run_term(proc, kafka)
    assert kafka.restores == 1 and kafka.commits == 1


async def test_a_store_that_failed_to_take_a_committed_batch_is_restored_by_the_next_term(
    kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnledger.processors import partition

    class FailsOnce(MemoryStateStore):
        failed = False

        def apply(self, writes: Mapping[str, bytes | None]) -> None:
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise sqlite3.OperationalError("database or disk is full")
            super().apply(writes)

    monkeypatch.setattr(partition, "open_partition_store", lambda *args, **kwargs: FailsOnce())
    seven(kafka)
    proc = processor(config(outage=NO_WAIT))
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        await run_term(proc, kafka)
    assert kafka.committed == 3
    await run_term(proc, kafka)
    assert kafka.restores == 2 and kafka.counts() == EXPECTED


async def test_an_empty_fetch_keeps_the_term_and_waits_idle_poll_ms(kafka: FakeKafka) -> None:
    seven(kafka)
    proc = processor(config(idle_poll_ms=7))
    stop = proc.begin_term()
    feed = FakeFeed(kafka, stop)
    feed.idle_fetches = 3
    assert await asyncio.wait_for(proc.run(feed), timeout=30) is ProcessorExit.STOPPED
    assert feed.timeouts[:4] == [7, 7, 7, 7] and proc.metrics.ownerships == 1 and kafka.counts() == EXPECTED


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def test_the_live_counters_count_what_committed_transactions_wrote_once(kafka: FakeKafka) -> None:
    names = {
        "records": ("turnledger_processor_input_records_total", {"partition": "0"}),
        "outputs": ("turnledger_processor_output_records_total", {"stream": "t.out"}),
        "rejections": ("turnledger_processor_output_records_total", {"stream": "rejections"}),
        "changelog": ("turnledger_processor_changelog_records_total", None),
        "poison": ("turnledger_processor_poison_records_total", None),
        "aborts": ("turnledger_processor_aborted_transactions_total", None),
    }
    before = {key: _sample(*name) for key, name in names.items()}
    kafka.append("a", "b")
    kafka.append("x", value=b"boom")
    kafka.append("a", "c")
    kafka.append("y", value=b"boom")
    kafka.then(None, aborted(ValueError("no")))
    proc = processor(config(pipelined_commits=False))
    await run_term(proc, kafka)
    counted = {key: _sample(*name) - before[key] for key, name in names.items()}
    assert counted == {"records": 6, "outputs": 4, "rejections": 2, "changelog": 4, "poison": 2, "aborts": 1}
    assert proc.metrics.poison_records == 2
