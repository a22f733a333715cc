"""A processor's transactions pass the broker's produce verification (KIP-890) at the first try.

A partition leader verifies with the transaction coordinator that a transactional batch's partition
is in the producer's transaction, and the group coordinator verifies a TxnOffsetCommit the same way.
The leader keeps one pending verification per transactional id: a second one answers the first with
NETWORK_EXCEPTION, which aiokafka's produce version receives as NOT_ENOUGH_REPLICAS and retries after
its backoff, logging a warning. `PartitionTransactions.commit` therefore puts the consumed offset into
the transaction before any record; sent alongside the records (as it was until session 20), 20-35% of
the transactions below retried a produce.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from turnledger.devstack.kafka_admin import create_topic
from turnledger.kafka.clients import close_client, transactional_producer
from turnledger.processors.transaction import PartitionTransactions
from turnledger.records import OutputRecord

from .test_kafka_features import committed_eventually, read_all

pytestmark = pytest.mark.integration

TRANSACTIONS = 60
"""With the offsets sent alongside the records, at least one retry in 60 transactions is all but
certain (each retried with a probability of 0.2-0.35 on the machines measured)."""


class _Refusals(logging.Handler):
    """aiokafka's sender logs each produce it retries, naming the error; these are the refusals."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "retrying" in message and "NotEnoughReplicas" in message:
            self.messages.append(message)


async def test_transactions_write_every_record_without_a_refused_produce(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    source, previews, manifests, changelog = (topic_name(n) for n in ("in", "previews", "manifests", "chg"))
    for topic in (source, previews, manifests, changelog):
        await create_topic(kafka_bootstrap, topic, partitions=2)
    refusals = _Refusals()
    sender = logging.getLogger("aiokafka.producer.sender")
    level = sender.level
    sender.setLevel(logging.WARNING)  # heard whatever level another test left on "aiokafka"
    sender.addHandler(refusals)
    producer = transactional_producer(
        kafka_bootstrap, topic_name("txn"), transaction_timeout_ms=60_000, retry_backoff_ms=20
    )
    await producer.start()
    try:
        transactions = PartitionTransactions(
            producer,
            transactional_id=topic_name("txn"),
            source=TopicPartition(source, 0),
            changelog_topic=changelog,
            offsets_group=topic_name("group"),
        )
        outputs = [OutputRecord(previews, f"c{i}".encode(), b"p" * 200) for i in range(8)]
        outputs += [OutputRecord(manifests, f"c{i}".encode(), b"m" * 400) for i in range(4)]
        for n in range(TRANSACTIONS):
            await transactions.commit(outputs, {f"c{n % 4}": b"s" * 100}, n + 1)
    finally:
        sender.removeHandler(refusals)
        sender.setLevel(level)
        await close_client(producer)
    assert refusals.messages == []
    written = {
        topic: sum([len(await read_all(kafka_bootstrap, topic, "read_committed", p)) for p in (0, 1)])
        for topic in (previews, manifests, changelog)
    }
    assert written == {previews: 8 * TRANSACTIONS, manifests: 4 * TRANSACTIONS, changelog: 2 * TRANSACTIONS}
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=topic_name("group"))
    await consumer.start()
    try:
        source_tp = TopicPartition(source, 0)
        assert await committed_eventually(consumer, source_tp, TRANSACTIONS) == TRANSACTIONS
    finally:
        await consumer.stop()
