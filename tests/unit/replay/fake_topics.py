"""Topics in memory for the replay readers' unit tests: the three reading calls they make
(`start_reader`, `partitions_of`, `read_to_end`), answered from lists of batches, no Kafka. A record
takes one offset here (no transaction markers), so `read_to_end`'s progress is the records read."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from turnledger.kafka.reading import ReadProgress
from turnledger.records import SourceRecord


@dataclass
class FakeConsumer:
    stopped: int = 0

    async def stop(self) -> None:
        self.stopped += 1


@dataclass
class FakeTopics:
    """`batches[topic]`: what `read_to_end` yields for that topic's partitions, in order."""

    batches: dict[str, list[list[SourceRecord]]] = field(default_factory=dict)
    consumers: list[FakeConsumer] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    """The bootstrap of every reader started."""
    asked: list[tuple[str, list[str]]] = field(default_factory=list)
    """(bootstrap, topics) of every `partitions_of` call."""
    batch_sizes: list[int | None] = field(default_factory=list)

    async def start_reader(self, bootstrap: str) -> FakeConsumer:
        self.started.append(bootstrap)
        self.consumers.append(FakeConsumer())
        return self.consumers[-1]

    def _live(self, consumer: FakeConsumer) -> None:
        """Only the reader last started, and not stopped yet, may be asked."""
        assert consumer is self.consumers[-1] and consumer.stopped == 0

    async def partitions_of(self, consumer: FakeConsumer, bootstrap: str, topics: Iterable[str]) -> list[str]:
        self._live(consumer)
        self.asked.append((bootstrap, list(topics)))
        missing = [t for t in self.asked[-1][1] if t not in self.batches]
        if missing:
            raise LookupError(f"no topic {missing[0]}")
        return self.asked[-1][1]

    async def read_to_end(
        self,
        consumer: FakeConsumer,
        partitions: list[str],
        start: Mapping[Any, int] | None = None,
        batch: int | None = None,
        progress: ReadProgress | None = None,
    ) -> AsyncIterator[list[SourceRecord]]:
        """`progress` as the real one tells it: the total first, then the offsets read after each batch."""
        self._live(consumer)
        assert start is None
        self.batch_sizes.append(batch)
        read = [records for topic in partitions for records in self.batches[topic]]
        total, done = sum(len(records) for records in read), 0
        if progress is not None:
            progress(0, total)
        for records in read:
            yield records
            done += len(records)
            if progress is not None:
                progress(done, total)

    def install(self, monkeypatch: pytest.MonkeyPatch, module: str) -> None:
        for name in ("start_reader", "partitions_of", "read_to_end"):
            monkeypatch.setattr(f"{module}.{name}", getattr(self, name))
