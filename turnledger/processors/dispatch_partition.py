"""The dispatch engine as the runtime's `PartitionFold`: its logical output streams written to topics."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnledger.adapters.admission import preload_counters
from turnledger.codec import encode
from turnledger.dispatch.engine import BatchEngine, BatchInProgress, EncodedOutput
from turnledger.model.events import Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.processors.contract import StateStore
from turnledger.processors.limits_config import load_limits
from turnledger.processors.model_registry import load_model_registry
from turnledger.processors.state_cache_config import (  # noqa: F401  (re-exported)
    STATE_CACHE_ENV,
    StateCacheConfigError,
    load_state_cache_size,
)
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Stream, Topics


class DispatchPartitionFold:
    """One per input partition; the engine's caches live as long as the partition's task."""

    store_read_cache = 0
    """The store keeps no values in a read cache (`processors/store.py`, `read_cache_of`): the engine
    keeps the decoded states of the conversations it folds, so cached values would hold them a second
    time. With the store's default 10,000 values, 100k conversations peaked 8 MB higher (380 vs 372
    MB) at the same throughput (`bench_dispatch --phases rss --rss 100000:sqlite`, issue 20 goal 4)."""

    def __init__(self, topics: Topics, partition: int, engine: BatchEngine | None = None) -> None:
        self.partition = partition
        self._topics = topics
        self._topic_of = {stream: topics.name(stream) for stream in Stream}
        models = load_model_registry()
        self._engine = engine or BatchEngine(
            cache_size=load_state_cache_size(), models=models, limits=load_limits()
        )
        preload_counters(models)

    def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
        return self._records(self._engine.process_batch(records, store))

    def open_batch(self, store: StateStore) -> DispatchBatch:
        """The contract's `IncrementalFold`: a batch folded as its records arrive (`DispatchBatch`)."""
        return DispatchBatch(self._engine.open_batch(store), self._records)

    def _records(self, outputs: list[EncodedOutput]) -> list[OutputRecord]:
        topic_of = self._topic_of
        return [OutputRecord(topic=topic_of[out.stream], key=out.key, value=out.value) for out in outputs]

    def on_poison(self, record: SourceRecord, exc: Exception) -> list[OutputRecord]:
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


class DispatchBatch:
    """The engine's `BatchInProgress` as the contract's `OpenBatch`: each piece's outputs kept as
    topic records, all of them returned by the close."""

    __slots__ = ("_batch", "_outputs", "_records")

    def __init__(
        self, batch: BatchInProgress, records: Callable[[list[EncodedOutput]], list[OutputRecord]]
    ) -> None:
        self._batch = batch
        self._records = records
        self._outputs: list[OutputRecord] = []

    def fold(self, records: Sequence[SourceRecord]) -> None:
        self._outputs += self._records(self._batch.fold(records))

    def close(self) -> list[OutputRecord]:
        self._batch.close()
        return self._outputs
