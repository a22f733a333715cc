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
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from tests.integration.test_processor_eos import (
    Sent,
    assert_exactly_once,
    changelog_state,
    counter_fold,
    produce,
    read_committed,
    wait_all_committed,
    wait_for,
    workload,
)
from turnledger.kafka.producer_states import ProducerState, abort_transaction, describe_producers
from turnledger.observability import runtime_metrics as live
from turnledger.processors.app import ProcessorApp
from turnledger.processors.config import ProcessorConfig, ProcessorExit, transactional_id
from turnledger.processors.hanging_evidence import Finding
from turnledger.processors.topics import ensure_topics
from turnledger.processors.txn_tag import TxnTag, producer_identity, tag_of
from turnledger.processors.writer import BatchWriter
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


@dataclass(frozen=True)
class Late:
    """A transactional batch of one record, sent straight to `tp`'s leader as producer id/epoch."""

    tp: TopicPartition
    value: bytes
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    base_sequence: int = 0
    timestamp: int | None = None
    key: bytes = b"conv-0"


async def send_late(bootstrap: str, txn_id: str, producer_id: int, epoch: int, batches: list[Late]) -> None:
    """Send `batches` with produce verification switched off for the moment: the broker appends them
    although no transaction of the coordinator includes their partitions (a late produce, or data
    whose marker was lost); each one leaves a hanging transaction."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    client = AIOKafkaProducer(bootstrap_servers=bootstrap)
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {VERIFICATION: "false"})])
        await wait_for(verification_is(admin, "false"), 30, "verification off")
        await client.start()
        for late in batches:
            tp = late.tp
            await client.partitions_for(tp.topic)  # the leader's metadata
            batch = DefaultRecordBatchBuilder(
                2, 0, is_transactional=1, producer_id=producer_id, producer_epoch=epoch,
                base_sequence=late.base_sequence, batch_size=16_384,
            )  # fmt: skip
            batch.append(0, timestamp=late.timestamp, key=late.key, value=late.value, headers=late.headers)
            leader = client.client.cluster.leader_for_partition(tp)
            request = ProduceRequest(txn_id, -1, 10_000, [(tp.topic, [(tp.partition, bytes(batch.build()))])])
            response = await client.client.send(leader, request)
            [(_topic, [(_p, error_code, *_rest)])] = response.topics
            assert error_code == 0, response
    finally:
        await client.stop()
        await admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {})])
        await wait_for(verification_is(admin, "true"), 30, "verification back on")
        await admin.close()


async def new_epoch(bootstrap: str, txn_id: str) -> AIOKafkaProducer:
    """A started producer of `txn_id` (InitProducerId: a new epoch), as a later term would have."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    await producer.start()
    return producer


async def hang(bootstrap: str, txn_id: str, batches: list[Late]) -> tuple[int, int]:
    """Leave `batches` hanging as `txn_id`'s producer with a new epoch; returns (id, epoch)."""
    producer = await new_epoch(bootstrap, txn_id)
    producer_id, epoch = producer_identity(producer)
    await producer.stop()
    await send_late(bootstrap, txn_id, producer_id, epoch, batches)
    return producer_id, epoch


@dataclass(frozen=True)
class Tagged:
    offset: int
    timestamp: int
    tag: TxnTag
    key: bytes
    value: bytes


async def tagged_records(bootstrap: str, tp: TopicPartition) -> list[Tagged]:
    """Every tagged record of `tp` visible to read_committed."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out = []
        while await consumer.position(tp) < end:
            for r in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                tag = tag_of(r.headers)
                if tag is not None and r.offset < end:
                    out.append(Tagged(r.offset, r.timestamp, tag, r.key, r.value))
        return out
    finally:
        await consumer.stop()


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


async def first_term(bootstrap: str, topics: Topics, tmp_path: Path) -> tuple[ProcessorConfig, list[Sent]]:
    """Two partitions processed to their end once; returns the config and the inputs."""
    await ensure_topics(bootstrap, topics, partitions=2)
    config = ProcessorConfig(
        bootstrap=bootstrap, app_id=f"{topics.prefix}app", topics=topics, state_dir=tmp_path / "s"
    )
    first = await produce(bootstrap, topics.ingress, workload(200, keys=10, tag="a"))
    await run_until_committed(config, topics, first, timeout_s=60)
    return config, first


def counts() -> tuple[float, float, float]:
    """(reported, ended with a commit marker, ended with an abort marker) so far."""
    return (
        live.PROCESSOR_HANGING_FOUND._value.get(),
        live.PROCESSOR_HANGING_RESOLVED.labels("commit")._value.get(),
        live.PROCESSOR_HANGING_RESOLVED.labels("abort")._value.get(),
    )


def since(before: tuple[float, float, float]) -> tuple[float, ...]:
    return tuple(now - then for now, then in zip(counts(), before, strict=True))


async def assert_settled(bootstrap: str, producer_id: int, tps: list[TopicPartition]) -> None:
    """No open transaction of `producer_id` on `tps`, and each partition's LSO at its high watermark."""
    for tp in tps:
        stable, high = await stable_and_high(bootstrap, tp)
        assert stable == high, f"{tp} still has an open transaction"
    probe = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await probe.start()
    try:
        described = await describe_producers(probe.client, tps)
    finally:
        await probe.stop()
    assert described.errors == {}
    ours = {s.tp: s.open_transaction_start for s in described.states if s.producer_id == producer_id}
    assert ours == dict.fromkeys(tps)


def ended(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "turnledger.processors.hanging" and r.levelno == logging.WARNING
    ]


async def reported_then_aborted(
    config: ProcessorConfig,
    topics: Topics,
    inputs: list[Sent],
    tps: list[TopicPartition],
    before: tuple[float, float, float],
) -> list[ProducerState]:
    """Run the processor until it has reported one hanging transaction on each of `tps` (never ended
    by the term), abort them as the operator would, and run until every input is committed; returns
    the hanging states it found."""
    bootstrap = config.bootstrap
    app = ProcessorApp(config, lambda p: counter_fold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))
    probe = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await probe.start()
    try:

        async def reported() -> bool:
            return since(before)[0] >= len(tps)

        await wait_for(reported, 60, "the term to report the hanging transactions")
        described = await describe_producers(probe.client, tps)
        hanging = [s for s in described.states if s.open_transaction_start is not None]
        assert sorted(s.tp for s in hanging) == sorted(tps)  # reported, never ended by the term
        for state in hanging:  # the operator's decision
            await abort_transaction(probe.client, state)
        await wait_all_committed(bootstrap, config.app_id, topics, inputs, timeout_s=90)
    finally:
        app.stop()
        await probe.stop()
    assert await asyncio.wait_for(task, 30) == dict.fromkeys((0, 1), ProcessorExit.STOPPED)
    return hanging


async def test_untagged_or_unknown_tags_are_reported_only_and_once_ended_the_partition_resumes(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="turnledger.processors.hanging")
    config, first = await first_term(kafka_bootstrap, topics, tmp_path)
    changelog_0 = TopicPartition(topics.changelog, 0)
    committed_1 = TopicPartition(topics.committed, 1)
    txn_id = transactional_id(config.app_id, topics.ingress, 0)
    producer = await new_epoch(kafka_bootstrap, txn_id)
    producer_id, epoch = producer_identity(producer)
    await producer.stop()
    unknown = TxnTag(producer_id, epoch, 99)  # no transaction of this epoch ever ran
    await send_late(
        kafka_bootstrap,
        txn_id,
        producer_id,
        epoch,
        [Late(changelog_0, b"HANGING"), Late(committed_1, b"HANGING", unknown.header())],
    )
    for tp in (changelog_0, committed_1):
        stable, high = await stable_and_high(kafka_bootstrap, tp)
        assert stable == high - 1, f"{tp}: the hanging batch must hold the stable offset ({stable} vs {high})"

    before = counts()
    second = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="b"))
    hanging = await reported_then_aborted(config, topics, first + second, [changelog_0, committed_1], before)
    assert {s.producer_id for s in hanging} == {producer_id}

    assert since(before) == (2, 0, 0)  # once per transaction, nothing written by the term
    # each report says what the coordinator recorded of that producer id and epoch, read from
    # __transaction_state: only its InitProducerId (no transaction of that epoch ever ran)
    reports = [r.getMessage() for r in caplog.records if r.name == "turnledger.processors.hanging"]
    for tp in (changelog_0, committed_1):
        [report] = [m for m in reports if m.startswith(f"{tp.topic}-{tp.partition}: a hanging transaction")]
        assert (
            "the coordinator's log (offset " in report
            and f"records EMPTY for that producer id and epoch, and its transaction does not list "
            f"{tp.topic}-{tp.partition}"
            in report
        ), report
    await assert_settled(kafka_bootstrap, producer_id, [changelog_0, committed_1])
    await assert_exactly_once(kafka_bootstrap, topics, first + second)
    assert await changelog_state(kafka_bootstrap, topics) == {
        k: str(n) for k, n in Counter(s.key for s in first + second).items()
    }


async def test_a_late_produce_of_an_aborted_transaction_is_aborted_by_the_term(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The partition's producer (a new epoch) begins a transaction, writes its changelog record and
    aborts; then copies of its batches land after the abort, on the changelog and on an output
    partition. The next term finds the aborted changelog record by the tag and aborts both."""
    config, first = await first_term(kafka_bootstrap, topics, tmp_path)
    changelog_0 = TopicPartition(topics.changelog, 0)
    committed_1 = TopicPartition(topics.committed, 1)
    txn_id = transactional_id(config.app_id, topics.ingress, 0)
    producer = await new_epoch(kafka_bootstrap, txn_id)
    producer_id, epoch = producer_identity(producer)
    tag = TxnTag(producer_id, epoch, 0)
    _stable, aborted_at = await stable_and_high(kafka_bootstrap, changelog_0)
    try:
        await producer.begin_transaction()
        await asyncio.gather(
            *await BatchWriter(producer).write([(topics.changelog, 0, b"conv-0", b"X")], tag)
        )
        await producer.abort_transaction()
    finally:
        await producer.stop()
    late = [
        Late(changelog_0, b"HANGING", tag.header(), base_sequence=1),
        Late(committed_1, b"HANGING", tag.header()),
    ]
    await send_late(kafka_bootstrap, txn_id, producer_id, epoch, late)
    hanging_at = {}
    for tp in (changelog_0, committed_1):
        stable, high = await stable_and_high(kafka_bootstrap, tp)
        assert stable == high - 1, f"{tp}: the hanging batch must hold the stable offset ({stable} vs {high})"
        hanging_at[tp] = stable

    before = counts()
    second = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="b"))
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        await run_until_committed(config, topics, first + second, timeout_s=90)

    await assert_settled(kafka_bootstrap, producer_id, [changelog_0, committed_1])
    await assert_exactly_once(kafka_bootstrap, topics, first + second)  # no HANGING output
    assert await changelog_state(kafka_bootstrap, topics) == {
        k: str(n) for k, n in Counter(s.key for s in first + second).items()
    }
    assert since(before) == (0, 0, 2)
    assert ended(caplog) == [
        f"{tp.topic}-{tp.partition}: ended the hanging transaction of our producer id {producer_id} (epoch "
        f"{epoch}, ours is {epoch + 1}) open since offset {hanging_at[tp]} with an abort marker: its tag "
        f"{tag} is on {topics.changelog}-0 at offset {aborted_at}, and the tag's changelog record was aborted"
        for tp in (changelog_0, committed_1)  # the changelog's first
    ]


async def last_sequence(bootstrap: str, tp: TopicPartition, tag: TxnTag) -> int:
    """The last sequence number of `tag`'s producer id and epoch on `tp`."""
    probe = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await probe.start()
    try:
        described = await describe_producers(probe.client, [tp])
    finally:
        await probe.stop()
    [writer] = described.states
    assert (writer.producer_id, writer.producer_epoch) == (tag.producer_id, tag.producer_epoch)
    return writer.last_sequence


async def test_committed_data_whose_marker_was_lost_is_committed_by_the_term(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The first term's last transaction of partition 0 committed (its changelog record is
    committed). A batch of it whose commit marker never came (as after the chaos run's broker
    restart) is simulated on rejections-0, which the first term never wrote: same producer id,
    epoch, tag and timestamp. The next term proves the commit and commits it: visible once.

    A copy of the same transaction's output batch lands late, after that transaction's marker on
    its output partition: committed on the changelog too, but already ended on that partition, so
    the term aborts the copy (committing it would show that output twice)."""
    config, first = await first_term(kafka_bootstrap, topics, tmp_path)
    changelog_0 = TopicPartition(topics.changelog, 0)
    rejections_0 = TopicPartition(topics.rejections, 0)
    txn_id = transactional_id(config.app_id, topics.ingress, 0)
    *_, proof = await tagged_records(kafka_bootstrap, changelog_0)
    tag = proof.tag
    outputs = {p: await tagged_records(kafka_bootstrap, TopicPartition(topics.committed, p)) for p in (0, 1)}
    # the first record of one of the transaction's output batches
    ours = [(p, r) for p, records in outputs.items() for r in records if r.tag == tag]
    partition, output = min(ours, key=lambda pr: (pr[0], pr[1].offset))
    output_tp = TopicPartition(topics.committed, partition)
    sequence = await last_sequence(kafka_bootstrap, output_tp, tag) + 1
    copy_at = (await stable_and_high(kafka_bootstrap, output_tp))[1]
    late = [
        Late(output_tp, output.value, tag.header(), sequence, output.timestamp, output.key),
        Late(rejections_0, b"LOST-MARKER", tag.header(), timestamp=proof.timestamp),
    ]
    await send_late(kafka_bootstrap, txn_id, tag.producer_id, tag.producer_epoch, late)
    assert await stable_and_high(kafka_bootstrap, rejections_0) == (0, 1)
    assert await stable_and_high(kafka_bootstrap, output_tp) == (copy_at, copy_at + 1)

    before = counts()
    second = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="b"))
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        await run_until_committed(config, topics, first + second, timeout_s=90)

    await assert_settled(kafka_bootstrap, tag.producer_id, [output_tp, rejections_0])
    assert await read_committed(kafka_bootstrap, topics.rejections) == [(b"conv-0", b"LOST-MARKER")]
    await assert_exactly_once(kafka_bootstrap, topics, first + second)  # the copy is not visible
    assert since(before) == (0, 1, 1)
    head = f"ended the hanging transaction of our producer id {tag.producer_id} (epoch {tag.producer_epoch}, "
    head += f"ours is {tag.producer_epoch + 1}) open since offset"
    proven = f"its tag {tag} is on {topics.changelog}-0 at offset {proof.offset}, and"
    late_copy, lost_marker = Finding.COMMITTED_LATE.value, Finding.COMMITTED.value
    copy_tp = f"{output_tp.topic}-{output_tp.partition}"
    assert sorted(ended(caplog)) == [
        f"{copy_tp}: {head} {copy_at} with an abort marker: {proven} {late_copy}",
        f"{topics.rejections}-0: {head} 0 with a commit marker: {proven} {lost_marker}",
    ]  # sorted: the committed topic's name sorts before the rejections'


async def last_committed(bootstrap: str, tp: TopicPartition) -> tuple[bytes, bytes]:
    """The (key, value) of `tp`'s last record visible to read_committed."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.seek(tp, max(0, end - 200))
        last = None
        while await consumer.position(tp) < end:
            for r in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                if r.offset < end:
                    last = (r.key, r.value)
        assert last is not None and last[0] is not None and last[1] is not None
        return last[0], last[1]
    finally:
        await consumer.stop()


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
async def test_a_changelog_that_hangs_with_its_own_transaction_is_ended_on_the_coordinators_word(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path, caplog: pytest.LogCaptureFixture, commit: bool
) -> None:
    """What Kafka 4.4.0's clean shutdown can leave (docs/architecture.md, Outages): the coordinator
    completed the producer's last transaction, and the changelog holds that transaction's batch with
    no marker, so the changelog hangs with it and no changelog record can say how it ended.

    Built so: the partition's producer (a new epoch) runs a transaction that writes the changelog
    and commits (or aborts); then a batch of that producer id and epoch with a tag of its own lands
    on the changelog with verification off for the moment. The coordinator's last entry of the epoch
    is the transaction's Complete right after its Prepare listing the changelog, and the open span
    holds that one tag: the next term ends it with the coordinator's marker and resumes. Each batch
    is a copy of the changelog's last record, so committing it changes no state."""
    config, first = await first_term(kafka_bootstrap, topics, tmp_path)
    changelog_0 = TopicPartition(topics.changelog, 0)
    producer_id, epoch, hanging_at = await hang_with_its_own(kafka_bootstrap, config, topics, commit, 1)
    hanging_tag = TxnTag(producer_id, epoch, 1)

    before = counts()
    second = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="b"))
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        await run_until_committed(config, topics, first + second, timeout_s=90)

    await assert_settled(kafka_bootstrap, producer_id, [changelog_0])
    await assert_exactly_once(kafka_bootstrap, topics, first + second)
    assert await changelog_state(kafka_bootstrap, topics) == {
        k: str(n) for k, n in Counter(s.key for s in first + second).items()
    }
    assert since(before) == (0, 1, 0) if commit else (0, 0, 1)
    status, marker = ("COMPLETE_COMMIT", "a commit") if commit else ("COMPLETE_ABORT", "an abort")
    [message] = ended(caplog)
    assert message.startswith(
        f"{topics.changelog}-0: ended the hanging transaction of our producer id {producer_id} (epoch "
        f"{epoch}, ours is {epoch + 1}) open since offset {hanging_at} with {marker} marker: its tag "
        f"{hanging_tag} is on {topics.changelog}-0 at offset {hanging_at}, and "
        f"{Finding.HANGS_WITH_IT.value}; the coordinator's log (offset "
    ), message
    assert message.endswith(
        f"records {status} for that producer id and epoch, and its transaction lists {topics.changelog}-0, "
        f"{status} right after its Prepare"
    ), message
    visible = await tagged_records(kafka_bootstrap, changelog_0)
    assert [r.tag for r in visible if r.tag.producer_epoch == epoch] == (
        [TxnTag(producer_id, epoch, 0), hanging_tag] if commit else []
    )


async def hang_with_its_own(
    bootstrap: str, config: ProcessorConfig, topics: Topics, commit: bool, tags: int
) -> tuple[int, int, int]:
    """Partition 0's producer (a new epoch) runs a transaction (tag n 0) that writes the changelog and
    commits or aborts; then `tags` batches of that producer id and epoch, tags n 1, 2, ..., land on
    the changelog after it with verification off. Each batch is a copy of the changelog's last
    record, so committing it changes no state. Returns (producer id, epoch, the hanging offset)."""
    changelog_0 = TopicPartition(topics.changelog, 0)
    txn_id = transactional_id(config.app_id, topics.ingress, 0)
    key, value = await last_committed(bootstrap, changelog_0)
    producer = await new_epoch(bootstrap, txn_id)
    producer_id, epoch = producer_identity(producer)
    try:
        await producer.begin_transaction()
        writes = await BatchWriter(producer).write(
            [(topics.changelog, 0, key, value)], TxnTag(producer_id, epoch, 0)
        )
        await asyncio.gather(*writes)
        await (producer.commit_transaction() if commit else producer.abort_transaction())
    finally:
        await producer.stop()
    late = [
        Late(changelog_0, value, TxnTag(producer_id, epoch, n).header(), base_sequence=n, key=key)
        for n in range(1, tags + 1)
    ]
    await send_late(bootstrap, txn_id, producer_id, epoch, late)
    hanging_at, high = await stable_and_high(bootstrap, changelog_0)
    assert hanging_at == high - tags, "the hanging batches must hold the changelog's stable offset"
    return producer_id, epoch, hanging_at


async def test_a_changelog_that_hangs_with_two_transactions_of_its_epoch_is_reported_only(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As above, but the open span holds two tags of the producer id and epoch: data the coordinator
    never saw (its last transaction wrote one), so its word proves nothing of them. Reported, never
    ended by the term; once the operator ends it, the partition resumes."""
    caplog.set_level(logging.ERROR, logger="turnledger.processors.hanging")
    config, first = await first_term(kafka_bootstrap, topics, tmp_path)
    changelog_0 = TopicPartition(topics.changelog, 0)
    producer_id, epoch, hanging_at = await hang_with_its_own(kafka_bootstrap, config, topics, True, 2)
    before = counts()
    second = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="b"))
    [hanging] = await reported_then_aborted(config, topics, first + second, [changelog_0], before)
    assert (hanging.producer_id, hanging.producer_epoch, hanging.open_transaction_start) == (
        producer_id,
        epoch,
        hanging_at,
    )

    assert since(before) == (1, 0, 0)
    [report] = [r.getMessage() for r in caplog.records if r.name == "turnledger.processors.hanging"]
    assert f"could not be proved from the changelog ({Finding.SPAN_UNCHECKED.value}); the coordinator's" in (
        report
    ), report
    await assert_settled(kafka_bootstrap, producer_id, [changelog_0])
    await assert_exactly_once(kafka_bootstrap, topics, first + second)
    assert await changelog_state(kafka_bootstrap, topics) == {
        k: str(n) for k, n in Counter(s.key for s in first + second).items()
    }
