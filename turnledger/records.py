"""The two records that cross the Kafka boundary, in every layer: one read from a topic, one to write.

Plain data (no Kafka types), so the pure engine, the runtime, the projector and the
replay tools pass the same records around.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """A record as read from a topic, with its coordinates."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """A record to write: the physical topic, the key (the partitioner's input) and the bytes."""

    topic: str
    key: bytes | None
    value: bytes
