"""The contract between the Kafka runtime and the pure fold it drives.

The runtime knows nothing about conversations, Avro or dispatch: it hands the fold a
batch of raw input records and a per-partition state store, and writes back whatever
output records the fold returns, together with the state changes and the consumed
offsets, in one Kafka transaction. Anything that honours these types can be run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class InputRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OutputRecord:
    topic: str  # the physical output topic name
    key: bytes | None
    value: bytes


class StateStore(Protocol):  # per partition; keys are conversation ids (str), values opaque bytes
    def get(self, key: str) -> bytes | None: ...
    def put(self, key: str, value: bytes) -> None: ...
    def delete(self, key: str) -> None: ...


class PartitionFold(Protocol):
    def process_batch(self, records: Sequence[InputRecord], store: StateStore) -> list[OutputRecord]: ...


PoisonHook = Callable[[InputRecord, Exception], list[OutputRecord]]
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
