"""A partition processor's terms over an in-memory Kafka (`partition_fakes`): every input offset is
committed once with its outputs and state, across aborts, outages, fencing and terms that keep or
restore their store. The same runs against the real broker are in tests/integration (test_processor_eos,
test_ownership); these pin each branch of `partition.py` exactly, in milliseconds."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import KafkaConnectionError

from tests.unit.partition_fakes import (
    TOPICS,
    CounterFold,
    FakeFeed,
    FakeKafka,
    config,
    install,
    processor,
    run_term,
)
from turnledger.errors import KafkaUnavailableError
from turnledger.processors.config import ProcessorExit
from turnledger.processors.errors import ProducerFencedError, TooManyAbortsError
from turnledger.processors.transaction import BatchAborted, ProducerBroken
from turnledger.retry import Backoff


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
    assert kafka.restores == 1 and kafka.closed_producers == 1


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


async def test_the_same_batch_failing_max_consecutive_aborts_times_gives_up(kafka: FakeKafka) -> None:
    seven(kafka)
    kafka.then(None, *[aborted(ValueError("no")) for _ in range(3)])
    proc = processor(config(max_consecutive_aborts=3))
    with pytest.raises(TooManyAbortsError, match="the batch at offset 3 failed to commit 3 times in a row"):
        await run_term(proc, kafka)
    assert kafka.committed == 3 and kafka.counts() == EXPECTED[:3]
    assert proc.metrics.aborted_batches == 3


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


NO_WAIT = Backoff(initial_s=0.001, max_s=0.001, jitter=0, max_outage_s=0)


async def test_no_committed_offset_although_the_changelog_holds_state_is_never_a_start_from_the_log_start(
    kafka: FakeKafka,
) -> None:
    seven(kafka)
    kafka.state = {"a": b"2", "b": b"1"}  # the offsets were lost (or not loaded yet); the state was not
    proc = processor(config(outage=NO_WAIT))
    with pytest.raises(KafkaUnavailableError) as raised:
        await run_term(proc, kafka)
    assert "has no committed offset for partition 0, although its changelog holds 2 state records" in str(
        raised.value
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
