"""`kafka/transaction_log.py` against the real broker: the coordinator's records of a transactional
id are found and read as the broker wrote them. (The devstack's `__transaction_state` has one
partition, so which one Kafka chooses is pinned by the unit tests' Java hash vectors instead.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from turnledger.kafka.transaction_log import TxnStatus, read_transaction_log, recorded
from turnledger.processors.txn_tag import producer_identity

pytestmark = pytest.mark.integration


async def test_a_committed_then_an_aborted_transaction_are_read_back(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topic, txn_id = topic_name("t"), topic_name("txn")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=txn_id)
    await producer.start()
    try:
        producer_id, epoch = producer_identity(producer)
        async with producer.transaction():
            await producer.send_and_wait(topic, b"kept", partition=0)
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"dropped", partition=0)
        await producer.abort_transaction()
    finally:
        await producer.stop()

    # the abort returns once PREPARE_ABORT is logged; COMPLETE_ABORT follows its markers
    deadline = asyncio.get_running_loop().time() + 30
    entries = await read_transaction_log(kafka_bootstrap, txn_id)
    while entries[-1].status is not TxnStatus.COMPLETE_ABORT and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
        entries = await read_transaction_log(kafka_bootstrap, txn_id)
    statuses = [e.status for e in entries if (e.producer_id, e.producer_epoch) == (producer_id, epoch)]
    assert statuses[0] is TxnStatus.EMPTY  # InitProducerId
    assert TxnStatus.PREPARE_COMMIT in statuses and TxnStatus.COMPLETE_COMMIT in statuses
    assert statuses[-2:] == [TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_ABORT]
    last = recorded(entries, producer_id, epoch)
    assert last.aborted and last.partitions == {(topic, 0)}
    assert recorded(entries, producer_id, epoch + 1).status is None
    assert await read_transaction_log(kafka_bootstrap, topic_name("never-used")) == []
