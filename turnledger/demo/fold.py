"""The dispatch engine as a processor fold, for the demo's processor.

Uses the lead's `DispatchPartitionFold` when turnledger.processors provides one; otherwise
this thin adapter: input records → `BatchEngine` → output records on the physical topics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnledger.dispatch.engine import BatchEngine, OutputStream, SourceRecord


class EngineFold:
    def __init__(self, prefix: str) -> None:
        self.engine = BatchEngine()
        self.topics = {stream: f"{prefix}turnledger.{stream.value}" for stream in OutputStream}

    def process_batch(self, records: Sequence[Any], store: Any) -> list[Any]:
        from turnledger.processors.fold import OutputRecord

        sources = [SourceRecord(r.topic, r.partition, r.offset, r.key, r.value) for r in records]
        return [
            OutputRecord(self.topics[out.stream], out.key, out.value)
            for out in self.engine.process_batch(sources, store)
        ]


def fold_factory(prefix: str) -> Any:
    """factory(partition) for ProcessorApp."""
    try:
        from turnledger.processors import DispatchPartitionFold  # type: ignore[attr-defined]
        from turnledger.processors.topics import Topics

        topics = Topics(prefix=prefix)
        return lambda partition: DispatchPartitionFold(topics=topics, partition=partition)
    except ImportError:
        return lambda partition: EngineFold(prefix)
