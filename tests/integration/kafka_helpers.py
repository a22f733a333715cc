"""Read-side helpers for the Kafka integration tests."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition


async def read_all(bootstrap: str, topic: str, isolation_level: str, partition: int = 0) -> list[bytes]:
    """Every record value visible at `isolation_level`, from the start up to the end offset (LSO when
    read_committed), so the call returns instead of waiting for more data."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation_level, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        values: list[bytes] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            values.extend(record.value for record in batch.get(tp, []) if record.value is not None)
        return values
    finally:
        await consumer.stop()
