"""Restoring a partition's state store from its changelog partition.

Local stores are caches of the changelog: a partition's store is rebuilt from it whenever its
processor starts owning the partition and cannot prove that the store it holds is current (as
Kafka Streams does after an unclean close under exactly-once).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from aiokafka import TopicPartition

from turnledger.kafka.clients import close_client
from turnledger.kafka.reading import read_to_end, start_reader
from turnledger.processors.store import PartitionStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestoreResult:
    records: int
    seconds: float


async def restore_from_changelog(
    bootstrap: str, changelog_topic: str, partition: int, store: PartitionStore, *, batch: int = 10_000
) -> RestoreResult:
    """Replay one changelog partition from its beginning into `store`, up to the last stable offset.

    Call it only after this partition's transactional producer has initialised: that fences
    any predecessor and completes its open transaction, so the stable end read here includes
    everything that will ever be committed for the old owner. The reader is `read_committed`
    (aborted batches' state never restores) and has no group id. Kafka outages while restoring
    raise; the caller starts the partition over.
    """
    started = time.monotonic()
    records = 0
    consumer = await start_reader(bootstrap, action=f"restore {changelog_topic}-{partition}")
    try:
        async for chunk in read_to_end(consumer, [TopicPartition(changelog_topic, partition)], batch=batch):
            writes: dict[str, bytes | None] = {}
            for record in chunk:
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
    result = RestoreResult(records=records, seconds=time.monotonic() - started)
    log.info(
        "restored %s-%d: %d changelog records in %.2fs",
        changelog_topic,
        partition,
        result.records,
        result.seconds,
    )
    return result
