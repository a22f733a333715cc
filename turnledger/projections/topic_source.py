"""Moved to `turnledger.kafka.reading` (the one Kafka I/O seam); kept as a re-export so that branches
written against the old path still import. New code imports from `turnledger.kafka`."""

from aiokafka import AIOKafkaConsumer

from turnledger.kafka.positions import seek_all
from turnledger.kafka.reading import DEFAULT_BATCH, end_offsets, partitions_of, read_to_end, start_reader


async def start_consumer(bootstrap: str, *, fetch_max_wait_ms: int = 100) -> AIOKafkaConsumer:
    return await start_reader(bootstrap, fetch_max_wait_ms=fetch_max_wait_ms)


__all__ = ["DEFAULT_BATCH", "end_offsets", "partitions_of", "read_to_end", "seek_all", "start_consumer"]
