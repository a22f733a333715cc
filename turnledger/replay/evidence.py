"""Reading every topic to its end, in memory: the evidence of the metrics and the demo's invariants."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError

from turnledger.codec import CodecError
from turnledger.gateway.client import BrokerUnavailable
from turnledger.gateway.tail import decode_record, topic_partitions
from turnledger.model.base import Frozen

STREAMS = ("ingress", "committed", "manifests", "tool-calls", "previews", "quarantine", "rejections")


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


async def read_all(bootstrap: str, prefix: str, streams: tuple[str, ...] = STREAMS) -> Evidence:
    """Every committed record of every stream, partition by partition in offset order."""
    evidence = Evidence()
    for stream in streams:
        topic = f"{prefix}turnledger.{stream}"
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
        )
        try:
            await consumer.start()
        except (KafkaConnectionError, OSError) as exc:
            await consumer.stop()
            raise BrokerUnavailable(bootstrap, f"read {topic!r}", exc) from exc
        try:
            parts = list(await topic_partitions(consumer, topic))
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            out: list[Raw] = []
            remaining = {tp for tp, end in ends.items() if end > 0}
            while remaining:
                batches = await consumer.getmany(timeout_ms=500, max_records=5000)
                for tp, messages in batches.items():
                    for m in messages:
                        if m.value is None:
                            continue
                        try:
                            record: Frozen | None = decode_record(m.value)
                        except CodecError:
                            record = None
                        out.append(Raw(tp.partition, m.offset, m.key, m.value, record))
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
            out.sort(key=lambda r: (r.partition, r.offset))
            evidence.raw[stream] = out
        finally:
            await consumer.stop()
    return evidence
