"""What the records say about a hanging transaction of our producer: its tag, and the changelog's word.

For a hanging state (partition X, our producer id P, an older epoch E, open since offset O):

1. the record at O on X, read_uncommitted, is the first record of the transaction's first batch
   there, so it carries the transaction's tag (`txn_tag.py`); the tag names P and E, which also
   proves the batch is P/E's (aiokafka's records do not expose their batch's producer);
2. the changelog partition holds the same tag on the first record of the transaction's changelog
   batch: every transaction writes there (at least its position record), and it cannot commit
   before that record landed (`commit_transaction` follows the gather of every send);
3. that record's outcome is what a read_committed reader does with it: returned, committed;
   skipped while the last stable offset is past it, aborted; before the last stable offset,
   not known yet;
4. for a commit, X itself before O: a record with the same tag there means the transaction already
   reached X and was ended there by a marker, so the batch at O came after its end (a late copy);
5. when X is the changelog and its tagged record is the one at O, the changelog hangs with that
   very transaction and step 3 can never decide (its last stable offset waits at O). Its outcome
   is then the coordinator's to prove (`hanging.py`), if the records allow nothing else: the tag is
   on no changelog record before O (the scan that found it at O read the window before it), and
   the open span, O to the high watermark read_uncommitted, holds no batch of the producer id and
   epoch with another tag (a second transaction there would be data the coordinator never saw).

Where to look is bounded by time, not by guesses: every record of a transaction is stamped by our
producer (CreateTime) between its begin and its end, and the coordinator aborts a transaction
older than `transaction.timeout.ms`. So the tagged changelog record lies within `margin_ms` (that
timeout plus a slack) of X's record's timestamp, and `offsets_for_times(ts - margin)` is an offset
before which every record is older than that. A bounded scan that finds nothing says "not found",
never "aborted": compaction may have removed a committed record since.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnledger.kafka.clients import close_client, read_committed_consumer, start_client
from turnledger.kafka.connection import kafka_options
from turnledger.kafka.positions import seek_settled
from turnledger.kafka.producer_states import ProducerState
from turnledger.processors.txn_tag import TxnTag, tag_of

SCAN_BUDGET = 200_000
"""Records read at most per scan; a scan that stops here found nothing (never a verdict)."""
SCAN_TIMEOUT_S = 30.0
"""Seconds per read at most; a read that stops here decided nothing."""
CLOCK_SLACK_MS = 5_000


class Finding(StrEnum):
    UNREADABLE = "its first record could not be read"
    UNTAGGED = "its first record carries no transaction tag"
    NOT_ITS_TAG = "its tag names another producer id or epoch"
    NOT_FOUND = "no changelog record in the window carries its tag (never written, or compacted away)"
    UNDECIDED = (
        "the tag's changelog record is not stable yet (the changelog's last stable offset is before it)"
    )
    ABORTED = "the tag's changelog record was aborted"
    COMMITTED = "the tag's changelog record was committed, and the partition holds none of it before"
    COMMITTED_LATE = (
        "the tag's changelog record was committed, but the partition holds the tag before the hanging "
        "batch: the transaction was ended there, this batch came after its end"
    )
    COMMITTED_UNCHECKED = (
        "the tag's changelog record was committed, but the partition before the hanging batch could "
        "not be read within bounds"
    )
    HANGS_WITH_IT = (
        "the changelog hangs with this very transaction: its tag is on no changelog record before the "
        "hanging batch, and no other transaction of its producer id and epoch is in the open span"
    )
    SPAN_UNCHECKED = (
        "the changelog hangs with this very transaction, but its open span holds another transaction of "
        "its producer id and epoch, or could not be read within bounds"
    )


@dataclass(frozen=True, slots=True)
class Evidence:
    finding: Finding
    tag: TxnTag | None = None
    changelog_offset: int | None = None
    """The changelog offset of the tagged record whose outcome proved the finding."""


class EvidenceSource(Protocol):
    async def evidence(self, states: Sequence[ProducerState]) -> list[Evidence]: ...


@dataclass(frozen=True, slots=True)
class _Scan:
    offset: int | None
    """The first offset carrying the tag, else None."""
    complete: bool
    """False: the budget, the deadline or the window's end stopped the scan before its end."""


class ChangelogEvidence:
    """Reads the evidence for hanging states of one partition's producer, against its changelog."""

    def __init__(
        self,
        bootstrap: str,
        changelog: TopicPartition,
        *,
        margin_ms: int,
        budget: int = SCAN_BUDGET,
        timeout_s: float = SCAN_TIMEOUT_S,
    ) -> None:
        self._bootstrap = bootstrap
        self._changelog = changelog
        self._margin_ms = margin_ms
        self._budget = budget
        self._timeout_s = timeout_s

    async def evidence(self, states: Sequence[ProducerState]) -> list[Evidence]:
        """One `Evidence` per state, in order; a connection failure raises (the term starts over)."""
        if not states:
            return []
        # read_uncommitted: the hanging batch (and a record still undecided) is never committed
        uncommitted = await start_client(
            lambda: AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                **kafka_options(),
            ),
            bootstrap=self._bootstrap,
            action="read hanging transactions",
        )
        committed = await start_client(
            lambda: read_committed_consumer(self._bootstrap),
            bootstrap=self._bootstrap,
            action="read the outcome of hanging transactions",
        )
        try:
            return [await self.read(uncommitted, committed, state) for state in states]
        finally:
            await close_client(uncommitted)
            await close_client(committed)

    async def read(
        self, uncommitted: AIOKafkaConsumer, committed: AIOKafkaConsumer, state: ProducerState
    ) -> Evidence:
        """The evidence of one state, steps 1-4 of the module docstring, read with two started
        consumers: `uncommitted` (read_uncommitted) and `committed` (read_committed)."""
        start = state.open_transaction_start
        assert start is not None
        first = await self._record_at(uncommitted, state.tp, start)
        if first is None:
            return Evidence(Finding.UNREADABLE)
        tag = tag_of(first.headers)
        if tag is None:
            return Evidence(Finding.UNTAGGED)
        if (tag.producer_id, tag.producer_epoch) != (state.producer_id, state.producer_epoch):
            return Evidence(Finding.NOT_ITS_TAG, tag)
        found = await self._scan(uncommitted, self._changelog, tag, first.timestamp, before=None)
        if found.offset is None:
            return Evidence(Finding.NOT_FOUND, tag)
        outcome = await self._outcome(committed, self._changelog, found.offset, tag)
        if outcome is Finding.UNDECIDED and state.tp == self._changelog and found.offset == start:
            alone = await self._alone_in_span(uncommitted, state.tp, tag, start)
            return Evidence(Finding.HANGS_WITH_IT if alone else Finding.SPAN_UNCHECKED, tag, found.offset)
        if outcome is not Finding.COMMITTED:
            return Evidence(outcome, tag, found.offset)
        earlier = await self._scan(uncommitted, state.tp, tag, first.timestamp, before=start)
        if earlier.offset is not None:
            return Evidence(Finding.COMMITTED_LATE, tag, found.offset)
        checked = Finding.COMMITTED if earlier.complete else Finding.COMMITTED_UNCHECKED
        return Evidence(checked, tag, found.offset)

    async def _fetch(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> list[Any]:
        return list((await consumer.getmany(tp, timeout_ms=200, max_records=1000)).get(tp, []))

    async def _record_at(self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> Any | None:
        """The record at exactly `offset` (an aiokafka ConsumerRecord), else None."""
        consumer.assign([tp])
        await seek_settled(consumer, tp, offset)
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while asyncio.get_running_loop().time() < deadline:
            records = await self._fetch(consumer, tp)
            if records:
                return records[0] if records[0].offset == offset else None
        return None

    async def _scan(
        self,
        consumer: AIOKafkaConsumer,
        tp: TopicPartition,
        tag: TxnTag,
        timestamp: int,
        *,
        before: int | None,
    ) -> _Scan:
        """The first record of `tp` carrying `tag` among those stamped within the margin of
        `timestamp`, read_uncommitted, up to `before` (else the high watermark)."""
        consumer.assign([tp])
        since = (await consumer.offsets_for_times({tp: max(0, timestamp - self._margin_ms)}))[tp]
        end = before if before is not None else (await consumer.end_offsets([tp]))[tp]
        if since is None or since.offset >= end:
            return _Scan(None, complete=True)
        await seek_settled(consumer, tp, since.offset)
        latest = timestamp + self._margin_ms
        read = 0
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while await consumer.position(tp) < end:
            if asyncio.get_running_loop().time() > deadline:
                return _Scan(None, complete=False)
            for record in await self._fetch(consumer, tp):
                if record.offset >= end:
                    return _Scan(None, complete=True)
                if read >= self._budget:
                    return _Scan(None, complete=False)
                if tag_of(record.headers) == tag:
                    return _Scan(record.offset, complete=True)
                if before is None and record.timestamp > latest:
                    return _Scan(None, complete=False)  # past the window (timestamps may not be monotonic)
                read += 1
        return _Scan(None, complete=True)

    async def _alone_in_span(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, tag: TxnTag, start: int
    ) -> bool:
        """True if every tagged record of `tag`'s producer id and epoch from `start` to the high
        watermark carries `tag` (step 5); False if one carries another, or the read stops short."""
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await seek_settled(consumer, tp, start)
        read = 0
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while await consumer.position(tp) < end:
            if asyncio.get_running_loop().time() > deadline or read >= self._budget:
                return False
            for record in await self._fetch(consumer, tp):
                other = tag_of(record.headers)
                if record.offset < end and other is not None and other != tag and _same_epoch(other, tag):
                    return False
                read += 1
        return True

    async def _outcome(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int, tag: TxnTag
    ) -> Finding:
        """COMMITTED if read_committed returns the record at `offset` (with `tag`), ABORTED if it
        passes it, UNDECIDED while the last stable offset is not past it (or the read stalls)."""
        consumer.assign([tp])
        stable = (await consumer.end_offsets([tp]))[tp]
        if stable <= offset:
            return Finding.UNDECIDED
        await seek_settled(consumer, tp, offset)
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while asyncio.get_running_loop().time() < deadline:
            records = await self._fetch(consumer, tp)
            if records and records[0].offset == offset:
                return Finding.COMMITTED if tag_of(records[0].headers) == tag else Finding.UNDECIDED
            if records:
                return Finding.ABORTED
            if await consumer.position(tp) > offset:
                return Finding.ABORTED
        return Finding.UNDECIDED


def _same_epoch(one: TxnTag, other: TxnTag) -> bool:
    return (one.producer_id, one.producer_epoch) == (other.producer_id, other.producer_epoch)
