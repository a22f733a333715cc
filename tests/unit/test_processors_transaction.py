"""How a failed transaction is sorted (transaction.py's table), with a scripted stand-in for the producer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from turnledger.processors.errors import ProducerFencedError
from turnledger.processors.transaction import BatchAborted, PartitionTransactions, ProducerBroken
from turnledger.records import OutputRecord


class _Batch:
    def append(self, **_: Any) -> object:
        return object()


class FakeProducer:
    def __init__(
        self, fail_at: str | None = None, error: Exception | None = None, abort_error: Exception | None = None
    ):
        self.fail_at, self.error, self.abort_error = fail_at, error, abort_error
        self.calls: list[str] = []

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
    assert producer.calls == ["begin", "send", "send", "offsets", "commit"]


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
