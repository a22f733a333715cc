"""A partition's changelog: its state, and the position that state belongs to, in one place.

Every transaction of partition p writes, besides one record per changed state key, a *position
record* to changelog partition p: key `POSITION_KEY` (not UTF-8, so no conversation id can ever
equal it), value the input offset the transaction commits (ASCII digits), as the transaction's
last changelog record. Position and state therefore commit or abort together, in one partition,
and a new owner reads both from the same place — instead of pairing a state read from the
changelog with an offset read from the group coordinator, which can disagree: a transaction's
markers reach its partitions one by one, and the coordinator applies committed offsets on its own
schedule (aiokafka's OffsetFetch v1-v3 cannot ask for stable offsets). A broker restart in the
middle of a commit showed exactly that: a new owner restored the state and the offset from
before a transaction whose outputs were already visible, and folded its input a second time.

Before reading, a new owner waits until changelog partition p is *settled* (last stable offset
= high watermark): only p's own transactional.id writes there, and it has just been initialised,
so an open transaction there is the fenced predecessor's, whose markers are still being written
-- or a hanging transaction, which no marker will ever end (see `hanging.py`): while it waits,
`settle` calls its `sweep` every few seconds, which ends our own (with the marker the changelog
proves, else reports it) and reports anyone else's.

Local stores are caches of the changelog: rebuilt from it whenever a partition's processor starts
owning the partition and cannot prove that the store it holds is current.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnledger.errors import KafkaUnavailableError
from turnledger.kafka.clients import close_client
from turnledger.kafka.connection import kafka_options
from turnledger.kafka.reading import read_to_end, start_reader
from turnledger.processors.errors import ProcessorError
from turnledger.processors.store import PartitionStore

log = logging.getLogger(__name__)

POSITION_KEY = b"\xffturnledger.position"
"""Key of the position record: a leading 0xFF byte is never valid UTF-8, state keys always are."""

POSITION_TAIL = 64
"""How far back from its end `read_position` looks for the last position record (it is the last
record of the last committed transaction, unless aborted ones follow it)."""


def position_record(next_offset: int) -> tuple[bytes, bytes]:
    return POSITION_KEY, str(next_offset).encode("ascii")


def _position_of(value: bytes | None) -> int | None:
    return None if value is None else int(value.decode("ascii"))


@dataclass(frozen=True, slots=True)
class RestoreResult:
    records: int
    position: int | None
    """The input offset the restored state belongs to (None: no position record, e.g. a changelog
    written before position records existed, or no transaction yet)."""
    seconds: float


SWEEP_EVERY_S = 5.0


async def settle(
    bootstrap: str,
    tp: TopicPartition,
    *,
    timeout_s: float = 120.0,
    sweep: Callable[[], Awaitable[object]] | None = None,
    sweep_every_s: float = SWEEP_EVERY_S,
) -> None:
    """Wait until `tp` has no open transaction (LSO = high watermark), calling `sweep()` every
    `sweep_every_s` while it waits; raise `KafkaUnavailableError` after `timeout_s`, so that the
    caller starts over."""
    committed = await start_reader(bootstrap, action=f"settle {tp.topic}-{tp.partition}")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **kafka_options())
    try:
        await uncommitted.start()
        began = time.monotonic()
        deadline = began + timeout_s
        next_sweep = began + sweep_every_s
        waited = False
        while True:
            stable = (await committed.end_offsets([tp]))[tp]
            high = (await uncommitted.end_offsets([tp]))[tp]
            if stable >= high:
                if waited:
                    log.info("%s-%d settled at %d", tp.topic, tp.partition, stable)
                return
            if not waited:
                log.info(
                    "%s-%d has an open transaction (stable offset %d < high watermark %d): the fenced "
                    "predecessor's markers are still being written; waiting",
                    tp.topic,
                    tp.partition,
                    stable,
                    high,
                )
                waited = True
            if time.monotonic() > deadline:
                raise KafkaUnavailableError(
                    bootstrap,
                    ProcessorError(
                        f"{tp.topic}-{tp.partition} kept an open transaction for {timeout_s:.0f}s"
                    ),
                    action=f"settle {tp.topic}-{tp.partition}",
                )
            if sweep is not None and time.monotonic() >= next_sweep:
                await sweep()
                next_sweep = time.monotonic() + sweep_every_s
            await asyncio.sleep(0.02)
    finally:
        await close_client(committed)
        await close_client(uncommitted)


async def read_position(bootstrap: str, tp: TopicPartition, *, tail: int = POSITION_TAIL) -> int | None:
    """The last position record of a settled changelog partition, looked for among its last `tail`
    offsets; None when it is not there (then only a full restore can tell)."""
    consumer = await start_reader(bootstrap, action=f"read the position in {tp.topic}-{tp.partition}")
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        begin = (await consumer.beginning_offsets([tp]))[tp]
        start = {tp: max(begin, end - tail)}
        position = None
        async for chunk in read_to_end(consumer, [tp], start):
            for record in chunk:
                if record.key == POSITION_KEY:
                    position = _position_of(record.value)
        return position
    finally:
        await close_client(consumer)


async def restore_from_changelog(
    bootstrap: str, changelog_topic: str, partition: int, store: PartitionStore, *, batch: int = 10_000
) -> RestoreResult:
    """Replay one settled changelog partition from its beginning into `store`, up to its last stable
    offset, and return the position of the state restored.

    The reader is `read_committed` (aborted batches' state never restores) and has no group id.
    Kafka outages while restoring raise; the caller starts the partition over.
    """
    started = time.monotonic()
    records = 0
    position: int | None = None
    consumer = await start_reader(bootstrap, action=f"restore {changelog_topic}-{partition}")
    try:
        async for chunk in read_to_end(consumer, [TopicPartition(changelog_topic, partition)], batch=batch):
            writes: dict[str, bytes | None] = {}
            for record in chunk:
                if record.key == POSITION_KEY:
                    position = _position_of(record.value)
                    continue
                if record.key is None:
                    log.warning(
                        "changelog %s-%d offset %d has no key; skipped",
                        changelog_topic,
                        partition,
                        record.offset,
                    )
                    continue
                writes[record.key.decode("utf-8")] = record.value
                records += 1
            if writes:
                store.apply(writes)
    finally:
        await close_client(consumer)
    result = RestoreResult(records=records, position=position, seconds=time.monotonic() - started)
    log.info(
        "restored %s-%d: %d changelog records, position %s, in %.2fs",
        changelog_topic,
        partition,
        result.records,
        result.position,
        result.seconds,
    )
    return result
