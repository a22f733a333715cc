"""The Kafka guarantees turnledger is built on, proven against the real broker.

Each test asserts the observable effect of the feature (not just "no exception"), so a broker or client
without it fails here: aborted records are checked to exist at read_uncommitted before being checked absent
at read_committed, and committed group offsets are read back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import ProducerFenced

from turnledger.devstack.kafka_admin import create_topic

from .projections.workload import settled

pytestmark = pytest.mark.integration


async def read_all(bootstrap: str, topic: str, isolation_level: str, partition: int = 0) -> list[bytes]:
    """Every record value visible at `isolation_level`, from the start up to the end offset (LSO when
    read_committed, once it has reached the high watermark: a commit returns before its markers are
    written), so the call returns instead of waiting for more data."""
    if isolation_level == "read_committed":
        await settled(bootstrap, [topic])
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


async def committed_eventually(consumer: AIOKafkaConsumer, tp: TopicPartition, expected: int) -> int | None:
    """The group offset once the commit markers have landed (OffsetFetch below v7 cannot wait for them)."""
    committed = None
    for _ in range(100):
        committed = await consumer.committed(tp)
        if committed == expected:
            break
        await asyncio.sleep(0.1)
    return committed


async def test_idempotent_producer_gets_a_producer_id_and_writes_each_record_once(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topic = topic_name("idem")
    await create_topic(kafka_bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        # InitProducerId succeeded: the broker assigned a producer id (private API, no public accessor).
        assert producer._txn_manager is not None
        assert producer._txn_manager.producer_id >= 0
        futures = [await producer.send(topic, f"m{i}".encode()) for i in range(50)]
        offsets = [(await f).offset for f in futures]
    finally:
        await producer.stop()
    assert offsets == list(range(50))
    assert await read_all(kafka_bootstrap, topic, "read_uncommitted") == [f"m{i}".encode() for i in range(50)]


async def test_transaction_commits_output_and_consumer_offsets_atomically(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    source, sink, group = topic_name("in"), topic_name("out"), topic_name("group")
    await create_topic(kafka_bootstrap, source)
    await create_topic(kafka_bootstrap, sink)
    plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await plain.start()
    try:
        for i in range(3):
            await plain.send_and_wait(source, f"in{i}".encode())
    finally:
        await plain.stop()

    tp = TopicPartition(source, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    txn = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic_name("txn"))
    await txn.start()
    try:
        consumer.assign([tp])
        records = []
        while len(records) < 3:
            records.extend((await consumer.getmany(tp, timeout_ms=2000)).get(tp, []))
        async with txn.transaction():
            for record in records[:2]:
                await txn.send_and_wait(sink, record.value.upper())
            await txn.send_offsets_to_transaction({tp: records[1].offset + 1}, group)
        assert await committed_eventually(consumer, tp, 2) == 2

        with pytest.raises(RuntimeError, match="simulated crash"):
            async with txn.transaction():
                await txn.send_and_wait(sink, records[2].value.upper())
                await txn.send_offsets_to_transaction({tp: records[2].offset + 1}, group)
                raise RuntimeError("simulated crash")
        # The coordinator refuses a new transaction until the aborted one's markers are written,
        # so once this one commits the abort is complete and its offset must not have landed.
        async with txn.transaction():
            await txn.send_and_wait(sink, b"AFTER")
        assert await consumer.committed(tp) == 2, "an aborted transaction must not move the group offset"
    finally:
        await txn.stop()
        await consumer.stop()

    assert await read_all(kafka_bootstrap, sink, "read_committed") == [b"IN0", b"IN1", b"AFTER"]
    assert await read_all(kafka_bootstrap, sink, "read_uncommitted") == [b"IN0", b"IN1", b"IN2", b"AFTER"]


async def test_read_committed_sees_committed_records_and_never_aborted_ones(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topic = topic_name("rc")
    await create_topic(kafka_bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic_name("txn"))
    await producer.start()
    try:
        for value, commit in ((b"a1", True), (b"b-aborted", False), (b"c2", True), (b"d-aborted", False)):
            await producer.begin_transaction()
            await producer.send_and_wait(topic, value)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()
    assert await read_all(kafka_bootstrap, topic, "read_uncommitted") == [
        b"a1",
        b"b-aborted",
        b"c2",
        b"d-aborted",
    ]
    assert await read_all(kafka_bootstrap, topic, "read_committed") == [b"a1", b"c2"]


async def test_second_producer_with_same_transactional_id_fences_the_first_and_aborts_its_transaction(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topic, txn_id = topic_name("fence"), topic_name("txn")
    await create_topic(kafka_bootstrap, topic)
    zombie = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=txn_id)
    successor = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=txn_id)
    await zombie.start()
    try:
        await zombie.begin_transaction()
        await zombie.send_and_wait(topic, b"zombie-write")

        await successor.start()  # InitProducerId bumps the epoch and aborts the zombie's open transaction
        async with successor.transaction():
            await successor.send_and_wait(topic, b"successor-write")

        with pytest.raises(ProducerFenced):
            await zombie.send_and_wait(topic, b"zombie-after-fence")
            await zombie.commit_transaction()
    finally:
        await successor.stop()
        await zombie.stop()

    assert b"zombie-write" in await read_all(kafka_bootstrap, topic, "read_uncommitted")
    assert await read_all(kafka_bootstrap, topic, "read_committed") == [b"successor-write"]


async def test_compacted_topic_can_be_created(kafka_bootstrap: str, topic_name: Callable[[str], str]) -> None:
    topic = topic_name("compact")
    await create_topic(kafka_bootstrap, topic, configs={"cleanup.policy": "compact"})
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    entries = {
        entry[0]: entry[1]
        for response in responses
        for resource in response.resources
        if resource[3] == topic
        for entry in resource[4]
    }
    assert entries.get("cleanup.policy") == "compact"
