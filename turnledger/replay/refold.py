"""Folding the ingress topic again with the processor's pure engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from turnledger.kafka.reading import ReadProgress, partitions_of, read_to_end, start_reader
from turnledger.records import SourceRecord
from turnledger.replay.memory_store import MemoryStore
from turnledger.topology import Topics


@dataclass(frozen=True, slots=True)
class FoldedOutput:
    """One output record the engine emits, with the ingress record batch that caused it."""

    stream: str
    key: bytes | None
    value: bytes
    record: object
    source: SourceRecord
    """The last ingress record of the batch that produced it (outputs do not depend on batching)."""


@dataclass(frozen=True, slots=True)
class FoldedBatch:
    ingress: list[SourceRecord]
    outputs: list[FoldedOutput]


async def refold(
    bootstrap: str, topics: Topics, batch: int = 1000, progress: ReadProgress | None = None
) -> AsyncIterator[FoldedBatch]:
    """Every output the engine emits for the ingress topic from its beginning to its current end,
    batch by batch, in emission order per ingress partition; `progress`: the ingress offsets folded
    (`read_to_end`'s, told once the caller handled the fetch's folded batches)."""
    from turnledger.dispatch.engine import BatchEngine  # the dispatch layer, loaded on use
    from turnledger.processors.limits_config import load_limits  # as the processor: TURNLEDGER_MAX_*
    from turnledger.processors.model_registry import load_model_registry  # as the processor admits

    engine, store = BatchEngine(models=load_model_registry(), limits=load_limits()), MemoryStore()
    consumer = await start_reader(bootstrap)
    try:
        partitions = await partitions_of(consumer, bootstrap, [topics.ingress])
        async for records in read_to_end(consumer, partitions, None, batch, progress):
            outputs = engine.process_batch(records, store)
            yield FoldedBatch(
                records, [FoldedOutput(str(o.stream), o.key, o.value, o.record, records[-1]) for o in outputs]
            )
    finally:
        await consumer.stop()
