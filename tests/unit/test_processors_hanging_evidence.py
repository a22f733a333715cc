"""The evidence reader of processors/hanging_evidence.py over a scripted log: which finding each
shape of the changelog and of the hanging partition gives, including the bounds (the time window,
the record budget) that turn "not seen" into "not found" or "unchecked", never into a verdict.
The real broker answers the same reads in tests/integration/test_hanging_transactions.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from turnledger.kafka.producer_states import ProducerState
from turnledger.processors.hanging_evidence import ChangelogEvidence, Evidence, Finding
from turnledger.processors.txn_tag import TxnTag

CHANGELOG = TopicPartition("log", 0)
X = TopicPartition("out", 1)
TAG = TxnTag(7, 4, 9)
OTHER = TxnTag(7, 4, 8)
MARGIN = 1_000
T = 50_000


@dataclass
class Entry:
    offset: int
    timestamp: int
    tag: TxnTag | None
    kind: str  # committed, aborted, open (never ended), marker (a control record)


@dataclass
class Log:
    entries: dict[TopicPartition, list[Entry]] = field(default_factory=dict)

    def add(self, tp: TopicPartition, kind: str, tag: TxnTag | None = None, timestamp: int = T) -> int:
        entries = self.entries.setdefault(tp, [])
        offset = entries[-1].offset + 1 if entries else 0
        entries.append(Entry(offset, timestamp, tag, kind))
        return offset


class FakeConsumer:
    """A consumer of `log`: read_uncommitted returns every data record, read_committed only
    committed ones before the last stable offset (the first open record)."""

    per_fetch = 1_000
    """Records one fetch returns at most (a broker may return fewer than asked)."""

    def __init__(self, log: Log, *, committed: bool) -> None:
        self.log, self.committed = log, committed
        self.positions: dict[TopicPartition, int] = {}

    def assign(self, tps: list[TopicPartition]) -> None:
        self.positions = {tp: 0 for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def _end(self, tp: TopicPartition) -> int:
        entries = self.log.entries.get(tp, [])
        high = entries[-1].offset + 1 if entries else 0
        if not self.committed:
            return high
        return next((e.offset for e in entries if e.kind == "open"), high)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._end(tp) for tp in tps}

    async def offsets_for_times(self, query: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        out = {}
        for tp, ts in query.items():
            first = next((e for e in self.log.entries.get(tp, []) if e.timestamp >= ts), None)
            out[tp] = (
                None if first is None else SimpleNamespace(offset=first.offset, timestamp=first.timestamp)
            )
        return out

    async def getmany(
        self, tp: TopicPartition, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, Any]:
        assert (timeout_ms, max_records) == (200, 1_000)  # one fetch: at most 200 ms, 1,000 records
        end, position, records = self._end(tp), self.positions[tp], []
        for entry in self.log.entries.get(tp, []):
            if (
                entry.offset < position
                or entry.offset >= end
                or len(records) == min(max_records, self.per_fetch)
            ):
                continue
            self.positions[tp] = entry.offset + 1
            visible = entry.kind != "marker" and (not self.committed or entry.kind == "committed")
            if visible:
                headers = [] if entry.tag is None else entry.tag.header()
                records.append(
                    SimpleNamespace(offset=entry.offset, timestamp=entry.timestamp, headers=headers)
                )
        return {tp: records} if records else {}


def hanging_at(offset: int, epoch: int = 4) -> ProducerState:
    return ProducerState(X, 7, epoch, 0, 0, offset)


async def evidence_of(log: Log, state: ProducerState, budget: int = 1_000) -> Evidence:
    reader = ChangelogEvidence("unused:9092", CHANGELOG, margin_ms=MARGIN, budget=budget, timeout_s=0.2)
    uncommitted, committed = FakeConsumer(log, committed=False), FakeConsumer(log, committed=True)
    return await reader.read(uncommitted, committed, state)  # type: ignore[arg-type]


def history(log: Log, tp: TopicPartition, n: int) -> None:
    """`n` committed transactions of other tags, each a record and its marker."""
    for i in range(n):
        log.add(tp, "committed", TxnTag(7, 3, i), timestamp=T - 5 * MARGIN)
        log.add(tp, "marker", timestamp=T - 5 * MARGIN)


async def test_committed_on_the_changelog_and_new_on_x_is_committed() -> None:
    log = Log()
    history(log, CHANGELOG, 3)
    proof = log.add(CHANGELOG, "committed", TAG, timestamp=T + 2)
    log.add(CHANGELOG, "committed")  # the transaction's next changelog records carry no tag
    log.add(CHANGELOG, "marker")
    history(log, X, 2)
    log.add(X, "committed", OTHER)
    log.add(X, "marker")
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.COMMITTED, TAG, proof)


async def test_committed_but_already_on_x_before_is_a_late_copy() -> None:
    log = Log()
    proof = log.add(CHANGELOG, "committed", TAG)
    log.add(CHANGELOG, "marker")
    log.add(X, "committed", TAG)
    log.add(X, "marker")
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.COMMITTED_LATE, TAG, proof)


async def test_aborted_on_the_changelog_is_aborted() -> None:
    log = Log()
    proof = log.add(CHANGELOG, "aborted", TAG)
    log.add(CHANGELOG, "marker")
    log.add(CHANGELOG, "committed", TxnTag(7, 5, 0))
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.ABORTED, TAG, proof)


async def test_aborted_just_before_the_end_of_the_stable_log_is_aborted() -> None:
    """read_committed returns nothing at all (an aborted record, its marker, then the end)."""
    log = Log()
    proof = log.add(CHANGELOG, "aborted", TAG)
    log.add(CHANGELOG, "marker")
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.ABORTED, TAG, proof)


async def test_the_changelog_hanging_with_the_same_transaction_is_undecided() -> None:
    log = Log()
    history(log, CHANGELOG, 2)
    proof = log.add(CHANGELOG, "open", TAG)
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.UNDECIDED, TAG, proof)


async def test_a_late_copy_on_the_changelog_itself_is_judged_by_the_earlier_record() -> None:
    log = Log()
    proof = log.add(CHANGELOG, "aborted", TAG)
    log.add(CHANGELOG, "marker")
    at = log.add(CHANGELOG, "open", TAG)
    state = ProducerState(CHANGELOG, 7, 4, 0, 0, at)
    assert await evidence_of(log, state) == Evidence(Finding.ABORTED, TAG, proof)


@pytest.mark.parametrize(
    "stamped", [T - MARGIN - 1, T + MARGIN + 1], ids=["before the window", "after the window"]
)
async def test_a_tagged_record_outside_the_window_is_not_found(stamped: int) -> None:
    log = Log()
    log.add(CHANGELOG, "committed", timestamp=T - MARGIN)  # where the scan starts
    log.add(CHANGELOG, "committed", timestamp=T + MARGIN + 1)  # past the window: the scan stops
    log.add(CHANGELOG, "committed", TAG, timestamp=stamped)  # compacted away, for the reader
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.NOT_FOUND, TAG)


async def test_no_record_with_the_tag_is_not_found_never_aborted() -> None:
    log = Log()
    history(log, CHANGELOG, 4)
    log.add(CHANGELOG, "committed", OTHER)
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.NOT_FOUND, TAG)


async def test_a_scan_past_its_budget_is_not_found() -> None:
    log = Log()
    for _ in range(6):
        log.add(CHANGELOG, "committed", OTHER)
    log.add(CHANGELOG, "committed", TAG)
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at), budget=3) == Evidence(Finding.NOT_FOUND, TAG)
    assert (await evidence_of(log, hanging_at(at), budget=10)).finding is Finding.COMMITTED


async def test_x_before_the_hanging_batch_past_the_budget_is_unchecked() -> None:
    log = Log()
    proof = log.add(CHANGELOG, "committed", TAG)
    for _ in range(6):
        log.add(X, "committed", OTHER)
    at = log.add(X, "open", TAG)
    state = hanging_at(at)
    assert await evidence_of(log, state, budget=3) == Evidence(Finding.COMMITTED_UNCHECKED, TAG, proof)
    assert await evidence_of(log, state, budget=10) == Evidence(Finding.COMMITTED, TAG, proof)


async def test_untagged_foreign_tagged_and_unreadable_hanging_batches() -> None:
    log = Log()
    log.add(CHANGELOG, "committed", TAG)
    untagged = log.add(X, "open")
    assert await evidence_of(log, hanging_at(untagged)) == Evidence(Finding.UNTAGGED)
    assert await evidence_of(log, hanging_at(untagged, epoch=3)) == Evidence(Finding.UNTAGGED)
    log = Log()
    log.add(CHANGELOG, "committed", TAG)
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at, epoch=3)) == Evidence(Finding.NOT_ITS_TAG, TAG)
    assert await evidence_of(log, hanging_at(at + 1)) == Evidence(Finding.UNREADABLE)  # nothing there
    log.add(X, "marker")
    log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at + 1)) == Evidence(Finding.UNREADABLE)  # not a record


class StalledConsumer(FakeConsumer):
    """A consumer whose fetches return nothing and never move (a broker that does not answer)."""

    async def getmany(
        self, tp: TopicPartition, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, Any]:
        return {}


class GrowingConsumer(FakeConsumer):
    """A read_uncommitted consumer of a log that grows right after its end offsets are read: a
    record written past the end the reader saw."""

    def __init__(self, log: Log, late: tuple[TopicPartition, TxnTag]) -> None:
        super().__init__(log, committed=False)
        self.late: tuple[TopicPartition, TxnTag] | None = late

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        ends = await super().end_offsets(tps)
        if self.late is not None and self.late[0] in tps:
            self.log.add(self.late[0], "open", self.late[1])
            self.late = None
        return ends


def on_changelog(at: int) -> ProducerState:
    return ProducerState(CHANGELOG, 7, 4, 0, 0, at)


async def test_the_changelog_hanging_alone_with_its_transaction_is_the_coordinators_to_prove() -> None:
    """Step 5: the changelog's own hanging batch is the tagged record, the tag is on no record before
    it, and the open span holds no other transaction of the producer id and epoch (an untagged
    record, another epoch's or another producer's tag are not one): HANGS_WITH_IT."""
    log = Log()
    history(log, CHANGELOG, 2)
    at = log.add(CHANGELOG, "open", TAG)
    log.add(CHANGELOG, "open")
    log.add(CHANGELOG, "open", TxnTag(7, 5, 0))
    log.add(CHANGELOG, "open", TxnTag(8, 4, 1))
    assert await evidence_of(log, on_changelog(at)) == Evidence(Finding.HANGS_WITH_IT, TAG, at)


async def test_another_transaction_of_the_same_epoch_in_the_open_span_is_unchecked() -> None:
    log = Log()
    at = log.add(CHANGELOG, "open", TAG)
    log.add(CHANGELOG, "open")
    log.add(CHANGELOG, "open", OTHER)
    assert await evidence_of(log, on_changelog(at)) == Evidence(Finding.SPAN_UNCHECKED, TAG, at)


class TwoAtATime(FakeConsumer):
    per_fetch = 2


async def test_the_open_span_is_read_up_to_the_end_seen_and_within_the_budget() -> None:
    """A record written after the span's end was read is not in the span; a span still unread when the
    budget of records is spent (checked before each fetch) is unchecked."""
    log = Log()
    at = log.add(CHANGELOG, "open", TAG)
    log.add(CHANGELOG, "open", TAG)
    reader = ChangelogEvidence("unused:9092", CHANGELOG, margin_ms=MARGIN, budget=1_000, timeout_s=0.2)
    uncommitted = GrowingConsumer(log, (CHANGELOG, OTHER))
    alone = await reader._alone_in_span(uncommitted, CHANGELOG, TAG, at)
    assert alone is True and len(log.entries[CHANGELOG]) == 3
    log = Log()
    at = log.add(CHANGELOG, "open", TAG)
    for _ in range(5):
        log.add(CHANGELOG, "open")
    for budget, alone in [(4, False), (5, True)]:
        reader = ChangelogEvidence("unused:9092", CHANGELOG, margin_ms=MARGIN, budget=budget, timeout_s=0.2)
        assert await reader._alone_in_span(TwoAtATime(log, committed=False), CHANGELOG, TAG, at) is alone


async def test_a_changelog_hanging_after_an_earlier_open_copy_of_its_tag_stays_undecided() -> None:
    """Step 5 only for the tagged record at the hanging batch itself: the tag found open before it
    (another batch of the same transaction) cannot be proved alone, so the verdict waits."""
    log = Log()
    proof = log.add(CHANGELOG, "open", TAG)
    at = log.add(CHANGELOG, "open", TAG)
    assert await evidence_of(log, on_changelog(at)) == Evidence(Finding.UNDECIDED, TAG, proof)


async def test_a_broker_that_does_not_answer_decides_nothing() -> None:
    """Reads that return nothing until their deadline: the hanging batch is unreadable, a committed
    record's outcome undecided (never aborted), and the partition before the batch unchecked."""
    reader = ChangelogEvidence("unused:9092", CHANGELOG, margin_ms=MARGIN, budget=1_000, timeout_s=0.05)
    log = Log()
    proof = log.add(CHANGELOG, "committed", TAG)
    log.add(X, "committed", OTHER)
    at = log.add(X, "open", TAG)
    stalled = StalledConsumer(log, committed=False)
    committed = FakeConsumer(log, committed=True)
    assert await reader.read(stalled, committed, hanging_at(at)) == Evidence(Finding.UNREADABLE)
    uncommitted = FakeConsumer(log, committed=False)
    undecided = await reader.read(uncommitted, StalledConsumer(log, committed=True), hanging_at(at))
    assert undecided == Evidence(Finding.UNDECIDED, TAG, proof)
    scan = await reader._scan(StalledConsumer(log, committed=False), X, TAG, T, before=at)
    assert (scan.offset, scan.complete) == (None, False)
    span = await reader._alone_in_span(StalledConsumer(log, committed=False), CHANGELOG, TAG, 0)
    assert span is False


async def test_the_window_is_margin_ms_either_side_and_its_edges_are_in_it() -> None:
    """A tagged record stamped exactly `margin_ms` after the hanging batch's is found; the scan starts
    at the first record stamped `margin_ms` before it (never below timestamp 0)."""
    log = Log()
    log.add(CHANGELOG, "committed", timestamp=T + MARGIN)
    proof = log.add(CHANGELOG, "committed", TAG, timestamp=T + MARGIN)
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.COMMITTED, TAG, proof)
    log = Log()
    proof = log.add(CHANGELOG, "committed", TAG, timestamp=0)
    at = log.add(X, "open", TAG, timestamp=0)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.COMMITTED, TAG, proof)
    log = Log()
    proof = log.add(CHANGELOG, "committed", TAG, timestamp=T - MARGIN)
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.COMMITTED, TAG, proof)


async def test_a_changelog_with_nothing_in_the_window_is_not_found() -> None:
    log = Log()
    history(log, CHANGELOG, 3)  # every record older than the window
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.NOT_FOUND, TAG)


async def test_the_budget_is_the_number_of_records_a_scan_reads() -> None:
    """With 3 other records before the tag, a budget of 3 stops before it, 4 reaches it."""
    log = Log()
    for _ in range(3):
        log.add(CHANGELOG, "committed", OTHER)
    proof = log.add(CHANGELOG, "committed", TAG)
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at), budget=3) == Evidence(Finding.NOT_FOUND, TAG)
    assert await evidence_of(log, hanging_at(at), budget=4) == Evidence(Finding.COMMITTED, TAG, proof)


async def test_the_partition_before_the_batch_is_read_whatever_its_timestamps() -> None:
    """X before the hanging batch is bounded by the batch's offset, not the window: a record stamped
    later than the window there does not stop the scan, and the tag behind it is a late copy."""
    log = Log()
    proof = log.add(CHANGELOG, "committed", TAG)
    log.add(X, "committed", OTHER, timestamp=T + 5 * MARGIN)
    log.add(X, "committed", TAG)
    log.add(X, "marker")
    at = log.add(X, "open", TAG)
    assert await evidence_of(log, hanging_at(at)) == Evidence(Finding.COMMITTED_LATE, TAG, proof)


async def test_no_state_asks_nothing_of_the_broker() -> None:
    reader = ChangelogEvidence("unused:9092", CHANGELOG, margin_ms=MARGIN)
    assert await reader.evidence([]) == []


async def test_a_scan_that_reads_up_to_the_hanging_batch_is_complete() -> None:
    """Fetches that end exactly at the hanging batch (the partition before it read whole, the batch
    itself never fetched) make a complete scan: COMMITTED, not unchecked."""
    log = Log()
    proof = log.add(CHANGELOG, "committed", TAG)
    log.add(X, "committed", OTHER)
    log.add(X, "committed")
    at = log.add(X, "open", TAG)
    reader = ChangelogEvidence("unused:9092", CHANGELOG, margin_ms=MARGIN, budget=1_000, timeout_s=0.2)
    uncommitted, committed = TwoAtATime(log, committed=False), FakeConsumer(log, committed=True)
    assert await reader.read(uncommitted, committed, hanging_at(at)) == Evidence(
        Finding.COMMITTED, TAG, proof
    )
    scan = await reader._scan(TwoAtATime(log, committed=False), X, TAG, T, before=at)
    assert (scan.offset, scan.complete) == (None, True)
