"""The dispatch engine as a `PartitionFold`: logical output streams mapped onto topics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from turnledger.adapters.admission import preload_counters
from turnledger.codec import encode
from turnledger.dispatch.engine import BatchEngine, OutputStream, SourceRecord
from turnledger.model.events import Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.processors.fold import InputRecord, OutputRecord, StateStore
from turnledger.processors.topics import Topics


def stream_topics(topics: Topics) -> Mapping[OutputStream, str]:
    return {
        OutputStream.COMMITTED: topics.committed,
        OutputStream.MANIFESTS: topics.manifests,
        OutputStream.TOOL_CALLS: topics.tool_calls,
        OutputStream.PREVIEWS: topics.previews,
        OutputStream.QUARANTINE: topics.quarantine,
        OutputStream.REJECTIONS: topics.rejections,
    }


class DispatchFold:
    """One per input partition; the engine's decoded-state cache lives as long as the task."""

    def __init__(self, topics: Topics, partition: int, engine: BatchEngine | None = None) -> None:
        self.partition = partition
        self._topics = topics
        self._topic_of = stream_topics(topics)
        self._engine = engine or BatchEngine()
        preload_counters()

    def process_batch(self, records: Sequence[InputRecord], store: StateStore) -> list[OutputRecord]:
        sources = [SourceRecord(r.topic, r.partition, r.offset, r.key, r.value) for r in records]
        return [
            OutputRecord(topic=self._topic_of[out.stream], key=out.key, value=out.value)
            for out in self._engine.process_batch(sources, store)
        ]

    def on_poison(self, record: InputRecord, exc: Exception) -> list[OutputRecord]:
        """Last resort of the runtime: an Avro Rejected with the source coordinates."""
        rejected = Rejected(
            conversation_id=record.key.decode("utf-8", errors="replace") if record.key else None,
            reason=ReasonCode.FOLD_FAILED,
            detail=f"{type(exc).__name__}: {exc}"[:2000],
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            occurred_at_ms=record.timestamp_ms,
        )
        return [OutputRecord(topic=self._topics.rejections, key=record.key, value=encode(rejected))]
