"""A hanging transaction of a partition's own producer, on its changelog and on an output partition,
is reported by the next term (processors/hanging.py: ERROR log and metric, never ended by the term,
since whether it should commit or abort is not known there); once the operator ends it, the
partition resumes exactly where it was.

The broker's produce verification (KIP-890) is what normally keeps such data out, so the test
switches it off for the moment it writes the hanging batches, then restores it: a transactional
batch with the producer's id and epoch, sent straight to the leader after its transaction ended.
Until it is ended, partition 0 cannot settle (`settle` waits, starts the term over, waits again),
and read_committed readers of both partitions stay behind it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from tests.integration.test_processor_eos import (
    assert_exactly_once,
    changelog_state,
    counter_fold,
    produce,
    wait_all_committed,
    wait_for,
    workload,
)
from turnledger.kafka.producer_states import abort_transaction, describe_producers
from turnledger.observability import runtime_metrics as live
from turnledger.processors.app import ProcessorApp
from turnledger.processors.config import ProcessorConfig, ProcessorExit, transactional_id
from turnledger.processors.topics import ensure_topics
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

VERIFICATION = "transaction.partition.verification.enable"


@pytest.fixture
async def topics(kafka_bootstrap: str, topic_name: Callable[[str], str]) -> Topics:
    return Topics(prefix=topic_name("") + ".")


async def stable_and_high(bootstrap: str, tp: TopicPartition) -> tuple[int, int]:
    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await committed.start()
    await uncommitted.start()
    try:
        return (await committed.end_offsets([tp]))[tp], (await uncommitted.end_offsets([tp]))[tp]
    finally:
        await committed.stop()
        await uncommitted.stop()


async def broker_verification(admin: AIOKafkaAdminClient) -> str:
    [response] = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "1", {VERIFICATION: None})]
    )
    [(_code, _message, _type, _name, entries)] = response.resources
    return next(str(entry[1]) for entry in entries if entry[0] == VERIFICATION)


async def hang(bootstrap: str, txn_id: str, tps: list[TopicPartition]) -> tuple[int, int]:
    """Leave a hanging transaction of `txn_id`'s producer on each of `tps`; returns (id, epoch)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {VERIFICATION: "false"})])
        await wait_for(verification_is(admin, "false"), 30, "verification off")
        await producer.start()
        txn = producer._txn_manager
        for tp in tps:
            await producer.partitions_for(tp.topic)  # the leader's metadata
            batch = DefaultRecordBatchBuilder(
                2, 0, is_transactional=1, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                base_sequence=0, batch_size=16_384,
            )  # fmt: skip
            batch.append(0, timestamp=None, key=b"conv-0", value=b"HANGING", headers=[])
            leader = producer.client.cluster.leader_for_partition(tp)
            request = ProduceRequest(txn_id, -1, 10_000, [(tp.topic, [(tp.partition, bytes(batch.build()))])])
            response = await producer.client.send(leader, request)
            [(_topic, [(_p, error_code, *_rest)])] = response.topics
            assert error_code == 0, response
        return int(txn.producer_id), int(txn.producer_epoch)
    finally:
        await producer.stop()
        await admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {})])
        await wait_for(verification_is(admin, "true"), 30, "verification back on")
        await admin.close()


def verification_is(admin: AIOKafkaAdminClient, expected: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await broker_verification(admin) == expected

    return check


async def run_until_committed(
    config: ProcessorConfig, topics: Topics, inputs: list, timeout_s: float
) -> None:
    app = ProcessorApp(config, lambda p: counter_fold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_all_committed(config.bootstrap, config.app_id, topics, inputs, timeout_s=timeout_s)
    finally:
        app.stop()
    assert await asyncio.wait_for(task, 30) == dict.fromkeys((0, 1), ProcessorExit.STOPPED)


async def test_a_hanging_transaction_of_our_producer_is_reported_and_once_ended_the_partition_resumes(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    app_id = f"{topics.prefix}app"
    config = ProcessorConfig(
        bootstrap=kafka_bootstrap, app_id=app_id, topics=topics, state_dir=tmp_path / "s"
    )
    first = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="a"))
    await run_until_committed(config, topics, first, timeout_s=60)

    changelog_0 = TopicPartition(topics.changelog, 0)
    committed_1 = TopicPartition(topics.committed, 1)
    txn_id = transactional_id(app_id, topics.ingress, 0)
    producer_id, _epoch = await hang(kafka_bootstrap, txn_id, [changelog_0, committed_1])
    for tp in (changelog_0, committed_1):
        stable, high = await stable_and_high(kafka_bootstrap, tp)
        assert stable == high - 1, f"{tp}: the hanging batch must hold the stable offset ({stable} vs {high})"

    found_before = live.PROCESSOR_HANGING_FOUND._value.get()
    second = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="b"))
    app = ProcessorApp(config, lambda p: counter_fold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))
    probe = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await probe.start()
    try:

        async def both_reported() -> bool:
            return live.PROCESSOR_HANGING_FOUND._value.get() - found_before >= 2

        await wait_for(both_reported, 60, "the term to report both hanging transactions")
        described = await describe_producers(probe.client, [changelog_0, committed_1])
        hanging = [s for s in described.states if s.producer_id == producer_id and s.open_transaction_start]
        assert {s.tp for s in hanging} == {changelog_0, committed_1}  # reported, never ended by the term
        # the operator's decision: this data is a produce that landed after its transaction ended
        for state in hanging:
            await abort_transaction(probe.client, state)
        await wait_all_committed(kafka_bootstrap, app_id, topics, first + second, timeout_s=90)
        described = await describe_producers(probe.client, [changelog_0, committed_1])
    finally:
        app.stop()
        await probe.stop()
    assert await asyncio.wait_for(task, 30) == dict.fromkeys((0, 1), ProcessorExit.STOPPED)

    assert live.PROCESSOR_HANGING_FOUND._value.get() - found_before == 2  # once per transaction
    for tp in (changelog_0, committed_1):
        stable, high = await stable_and_high(kafka_bootstrap, tp)
        assert stable == high, f"{tp} still has an open transaction"
    assert described.errors == {}
    ours = {s.tp: s.open_transaction_start for s in described.states if s.producer_id == producer_id}
    assert ours == {changelog_0: None, committed_1: None}
    await assert_exactly_once(kafka_bootstrap, topics, first + second)
    assert await changelog_state(kafka_bootstrap, topics) == {
        k: str(n) for k, n in Counter(s.key for s in first + second).items()
    }
