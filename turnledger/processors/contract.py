"""The contract between the Kafka runtime and the partition fold it drives.

The runtime knows nothing about conversations, Avro or dispatch: it hands the fold a
batch of raw input records and a per-partition state store, and writes back whatever
output records the fold returns, together with the state changes and the consumed
offsets, in one Kafka transaction. Anything that honours these types can be run. A fold
that is also an `IncrementalFold` is handed the batch piece by piece while it is gathered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from turnledger.records import OutputRecord, SourceRecord


class StateStore(Protocol):  # per partition; keys are str (the fold's), values opaque bytes
    def get(self, key: str) -> bytes | None: ...
    def put(self, key: str, value: bytes) -> None: ...
    def delete(self, key: str) -> None: ...


class PartitionFold(Protocol):
    """Folds a batch against its partition's store. A fold may also have a `store_read_cache` int: how
    many values the runtime's SQLite store keeps in its LRU read cache for it (10,000 when absent;
    processors/store.py, `read_cache_of`). A fold that keeps its own decoded states asks 0."""

    def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]: ...


class OpenBatch(Protocol):
    """A batch an `IncrementalFold` takes in pieces: `fold` each piece of records as it arrives, then
    `close` once, which writes the batch's state changes to the store it was opened on and returns
    every output of the batch, in record order. Folding all the pieces then closing must give
    exactly the outputs and writes of `process_batch` over the whole batch."""

    def fold(self, records: Sequence[SourceRecord]) -> None: ...
    def close(self) -> list[OutputRecord]: ...


@runtime_checkable
class IncrementalFold(PartitionFold, Protocol):
    """A fold that can take a batch while it is still being gathered. The runtime then folds each
    fetch's records as they come, so that when the batch closes only the close's work is left
    (processors/folding.py, `FoldingBatch`); a plain `PartitionFold` is run over the whole batch
    then."""

    def open_batch(self, store: StateStore) -> OpenBatch: ...


PoisonHook = Callable[[SourceRecord, Exception], list[OutputRecord]]
"""Last-resort handler for a record on which `process_batch` raised.

The fold is expected to turn bad input into typed rejection outputs itself. When it
raises anyway, the runtime re-runs the batch one record at a time and, for each
record that still raises, writes the hook's records (normally one Rejected record to
`turnledger.rejections` carrying the source coordinates) instead of the fold's; the
state changes of that record are discarded and its offset is committed, so the
partition keeps moving. A hook that raises stops the partition: nothing is committed
for that batch, so no input is silently dropped.
"""

FoldFactory = Callable[[int], PartitionFold]
"""Builds the fold for one input partition (called once per partition processor)."""
