"""Reading every topic to its end, in memory: the evidence of the metrics and the demo's invariants."""

from __future__ import annotations

from dataclasses import dataclass, field

from turnledger.codec import CodecError
from turnledger.kafka.reading import NamedProgress, partitions_of, read_to_end, start_reader, told_as
from turnledger.kafka.tail import decode_record
from turnledger.model.base import Frozen
from turnledger.records import SourceRecord
from turnledger.topology import OUTPUT_STREAMS, Stream, Topics

STREAMS: tuple[Stream, ...] = (Stream.INGRESS, *OUTPUT_STREAMS)


@dataclass(frozen=True, slots=True)
class Raw:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    record: Frozen | None


@dataclass
class Evidence:
    raw: dict[str, list[Raw]] = field(default_factory=dict)

    def records(self, stream: str) -> list[Frozen]:
        return [r.record for r in self.raw.get(stream, []) if r.record is not None]

    def of(self, stream: str, cls: type) -> list:  # type: ignore[type-arg]
        return [r for r in self.records(stream) if isinstance(r, cls)]


async def read_all(
    bootstrap: str,
    prefix: str,
    streams: tuple[Stream, ...] = STREAMS,
    progress: NamedProgress | None = None,
) -> Evidence:
    """Every committed record of every stream, partition by partition in offset order; the streams'
    topics are read one after the other, `progress` told the offsets read of each under its name.

    Kafka unreachable or a topic missing: the projections' typed errors (`ProjectionError`)."""
    evidence = Evidence()
    topics = Topics(prefix)
    consumer = await start_reader(bootstrap)
    try:
        for stream in streams:
            topic = topics.name(stream)
            parts = await partitions_of(consumer, bootstrap, [topic])
            out: list[Raw] = []
            async for batch in read_to_end(consumer, parts, progress=told_as(progress, topic)):
                out.extend(_raw(r) for r in batch if r.value is not None)
            out.sort(key=lambda r: (r.partition, r.offset))
            evidence.raw[stream] = out
    finally:
        await consumer.stop()
    return evidence


def _raw(record: SourceRecord) -> Raw:
    assert record.value is not None
    try:
        decoded: Frozen | None = decode_record(record.value)
    except CodecError:
        decoded = None
    return Raw(record.partition, record.offset, record.key, record.value, decoded)
