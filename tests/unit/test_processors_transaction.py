"""How a failed transaction is sorted (transaction.py's table), with a scripted stand-in for the producer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from turnledger.processors.errors import ProducerFencedError
from turnledger.processors.transaction import BatchAborted, PartitionTransactions, ProducerBroken
from turnledger.processors.txn_tag import TxnTag, tag_of
from turnledger.records import OutputRecord


class _Batch:
    def __init__(self) -> None:
        self.headers: list[Any] = []

    def append(self, **fields: Any) -> object:
        self.headers.append(fields.get("headers", []))
        return object()


class _TxnManager:
    producer_id, producer_epoch = 7, 3

    def has_pid(self) -> bool:
        return True

    def is_fatal_error(self) -> bool:
        return False


class FakeProducer:
    def __init__(
        self, fail_at: str | None = None, error: Exception | None = None, abort_error: Exception | None = None
    ):
        self.fail_at, self.error, self.abort_error = fail_at, error, abort_error
        self.calls: list[str] = []
        self.sent: list[tuple[str, int, _Batch]] = []
        self._txn_manager = _TxnManager()

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_at:
            assert self.error is not None
            raise self.error

    async def begin_transaction(self) -> None:
        self._step("begin")

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1}

    def create_batch(self) -> _Batch:
        return _Batch()

    async def send_batch(self, batch: _Batch, topic: str, partition: int) -> asyncio.Future[object]:
        self._step("send")
        self.sent.append((topic, partition, batch))
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group: str) -> None:
        self._step("offsets")

    async def commit_transaction(self) -> None:
        self._step("commit")

    async def abort_transaction(self) -> None:
        self.calls.append("abort")
        if self.abort_error is not None:
            raise self.abort_error


def _transactions(producer: FakeProducer) -> PartitionTransactions:
    return PartitionTransactions(
        producer,  # type: ignore[arg-type]
        transactional_id="app-in-0",
        source=TopicPartition("in", 0),
        changelog_topic="changelog",
        offsets_group="app",
    )


OUT = [OutputRecord("out", b"k", b"v")]


async def test_a_clean_commit_writes_outputs_changelog_and_offsets() -> None:
    producer = FakeProducer()
    await _transactions(producer).commit(OUT, {"k": b"1"}, 5)
    assert producer.calls == ["begin", "offsets", "send", "send", "commit"]  # the offset first: KIP-890


async def test_a_failure_aborted_cleanly_is_a_batch_to_fold_again() -> None:
    producer = FakeProducer("commit", KafkaConnectionError("gone"))
    with pytest.raises(BatchAborted) as info:
        await _transactions(producer).commit(OUT, {}, 5)
    assert producer.calls[-1] == "abort" and isinstance(info.value.__cause__, KafkaConnectionError)


@pytest.mark.parametrize("step", ["begin", "send", "offsets", "commit"])
async def test_fenced_anywhere_is_fenced(step: str) -> None:
    producer = FakeProducer(step, ProducerFenced())
    with pytest.raises(ProducerFencedError, match="app-in-0"):
        await _transactions(producer).commit(OUT, {"k": b"1"}, 5)
    assert "abort" not in producer.calls


async def test_fenced_while_aborting_is_fenced() -> None:
    producer = FakeProducer("commit", KafkaConnectionError("gone"), abort_error=ProducerFenced())
    with pytest.raises(ProducerFencedError):
        await _transactions(producer).commit(OUT, {}, 5)


async def test_an_abort_that_fails_leaves_the_outcome_to_the_next_init() -> None:
    producer = FakeProducer("commit", KafkaConnectionError("gone"), abort_error=RuntimeError("stuck"))
    with pytest.raises(ProducerBroken, match="settled by the next InitProducerId"):
        await _transactions(producer).commit(OUT, {}, 5)


async def test_every_transaction_is_tagged_on_each_partition_batch_with_its_own_n() -> None:
    producer = FakeProducer()
    transactions = _transactions(producer)
    await transactions.commit(OUT, {"k": b"1", "j": b"2"}, 5)
    await transactions.commit(OUT, {}, 6)
    tags = [(topic, [tag_of(h) for h in batch.headers]) for topic, _p, batch in producer.sent]
    first, second = TxnTag(7, 3, 0), TxnTag(7, 3, 1)
    assert tags == [
        ("out", [first]),
        ("changelog", [first, None, None]),  # two state records, then the position record
        ("out", [second]),
        ("changelog", [second]),
    ]
