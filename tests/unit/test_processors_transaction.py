"""How a failed transaction is sorted (transaction.py's table), with a scripted stand-in for the producer."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from turnledger.processors.changelog import POSITION_KEY
from turnledger.processors.errors import ProcessorError, ProducerFencedError
from turnledger.processors.transaction import (
    BatchAborted,
    PartitionTransactions,
    ProducerBroken,
    _retrieve_exception,
)
from turnledger.processors.txn_tag import TxnTag, tag_of
from turnledger.processors.writer import key_partition
from turnledger.records import OutputRecord


class _Batch:
    def __init__(self) -> None:
        self.headers: list[Any] = []
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def append(self, **fields: Any) -> object:
        self.headers.append(fields.get("headers", []))
        self.records.append((fields["key"], fields["value"]))
        return object()


class _TxnManager:
    producer_id, producer_epoch = 7, 3

    def __init__(self, fatal: asyncio.Future[None] | None = None) -> None:
        self.fatal = fatal
        """The transaction waiter of a producer that failed fatally, else None."""

    def has_pid(self) -> bool:
        return True

    def is_fatal_error(self) -> bool:
        return self.fatal is not None

    def wait_for_transaction_end(self) -> asyncio.Future[None]:
        assert self.fatal is not None
        return self.fatal


class FakeProducer:
    def __init__(
        self, fail_at: str | None = None, error: Exception | None = None, abort_error: Exception | None = None
    ):
        self.fail_at, self.error, self.abort_error = fail_at, error, abort_error
        self.calls: list[str] = []
        self.sent: list[tuple[str, int, _Batch]] = []
        self.offsets: list[tuple[dict[TopicPartition, int], str]] = []
        self.send_error: Exception | None = None
        """Every send's delivery future fails with it (a produce that failed for good)."""
        self._txn_manager: _TxnManager | None = _TxnManager()

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
        if self.send_error is None:
            future.set_result(None)
        else:
            future.set_exception(self.send_error)
        return future

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group: str) -> None:
        self._step("offsets")
        self.offsets.append((offsets, group))

    async def commit_transaction(self) -> None:
        self._step("commit")

    async def abort_transaction(self) -> None:
        self.calls.append("abort")
        if self.abort_error is not None:
            raise self.abort_error


def _transactions(producer: FakeProducer, partition: int = 0) -> PartitionTransactions:
    return PartitionTransactions(
        producer,  # type: ignore[arg-type]
        transactional_id="app-in-0",
        source=TopicPartition("in", partition),
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
    await transactions.commit([], {}, 7)
    tags = [(topic, [tag_of(h) for h in batch.headers]) for topic, _p, batch in producer.sent]
    first, second, third = TxnTag(7, 3, 0), TxnTag(7, 3, 1), TxnTag(7, 3, 2)
    assert tags == [
        ("out", [first]),
        ("changelog", [first, None, None]),  # two state records, then the position record
        ("out", [second]),
        ("changelog", [second]),
        ("changelog", [third]),
    ]


async def test_one_transaction_holds_the_outputs_each_state_write_and_the_position_last() -> None:
    """What a batch writes: the outputs by key to their topic, one changelog record per changed key
    (a deletion a tombstone) on the changelog partition of the source's number, then the position
    record (the next offset), and the next offset committed for the source in the offsets group."""
    producer = FakeProducer()
    outputs = [OutputRecord("out", b"k", b"v"), OutputRecord("out", b"k", b"w")]
    await _transactions(producer, partition=1).commit(outputs, {"conv-a": b"1", "conv-b": None}, 42)
    assert producer.offsets == [({TopicPartition("in", 1): 42}, "app")]
    written = [(topic, partition, batch.records) for topic, partition, batch in producer.sent]
    assert written == [
        ("out", key_partition(b"k", 2), [(b"k", b"v"), (b"k", b"w")]),
        ("changelog", 1, [(b"conv-a", b"1"), (b"conv-b", None), (POSITION_KEY, b"42")]),
    ]


async def test_a_begin_that_fails_is_aborted_without_an_abort() -> None:
    """Nothing was begun, so nothing is aborted; the batch is folded again, the error named."""
    producer = FakeProducer("begin", KafkaConnectionError("gone"))
    with pytest.raises(BatchAborted) as info:
        await _transactions(producer).commit(OUT, {}, 5)
    assert producer.calls == ["begin"]
    assert str(info.value) == "transaction aborted: KafkaConnectionError('gone')"
    assert isinstance(info.value.__cause__, KafkaConnectionError)


async def test_a_failure_aborted_cleanly_names_its_error() -> None:
    producer = FakeProducer("commit", KafkaConnectionError("gone"))
    with pytest.raises(BatchAborted) as info:
        await _transactions(producer).commit(OUT, {}, 5)
    assert producer.calls == ["begin", "offsets", "send", "send", "commit", "abort"]
    assert str(info.value) == "transaction aborted: KafkaConnectionError('gone')"


async def test_a_failed_produce_aborts_the_batch_and_its_errors_are_not_logged_again() -> None:
    """A delivery future that failed for good aborts the batch (never committed around); every send
    of the failed transaction fails with the same error, retrieved here so that asyncio does not log
    each one as "exception was never retrieved"."""
    loop = asyncio.get_running_loop()
    unretrieved: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        producer = FakeProducer()
        producer.send_error = KafkaConnectionError("lost")
        with pytest.raises(BatchAborted) as info:
            await _transactions(producer).commit(OUT, {"k": b"1"}, 5)
        assert producer.calls == ["begin", "offsets", "send", "send", "abort"]
        assert isinstance(info.value.__cause__, KafkaConnectionError)
        producer.sent.clear()
        del info
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unretrieved == []


async def test_a_fenced_error_is_the_cause_of_producer_fenced() -> None:
    fenced = ProducerFenced()
    with pytest.raises(ProducerFencedError) as info:
        await _transactions(FakeProducer("send", fenced)).commit(OUT, {}, 5)
    assert info.value.__cause__ is fenced
    aborting = ProducerFenced()
    with pytest.raises(ProducerFencedError) as info:
        await _transactions(FakeProducer("commit", KafkaConnectionError("gone"), aborting)).commit(OUT, {}, 5)
    assert info.value.__cause__ is aborting
    assert info.value.transactional_id == "app-in-0"


async def test_an_abort_that_fails_names_both_errors() -> None:
    producer = FakeProducer("commit", KafkaConnectionError("gone"), abort_error=RuntimeError("stuck"))
    with pytest.raises(ProducerBroken) as info:
        await _transactions(producer).commit(OUT, {}, 5)
    assert str(info.value) == (
        "the transaction failed (KafkaConnectionError('gone')) and aborting it failed too "
        "(RuntimeError('stuck')); its outcome is settled by the next InitProducerId"
    )
    assert isinstance(info.value.__cause__, KafkaConnectionError)


def _fatal(
    error: BaseException | None = None, *, done: bool = True, cancelled: bool = False
) -> asyncio.Future[None]:
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if cancelled:
        waiter.cancel()
    elif error is not None:
        waiter.set_exception(error)
    elif done:
        waiter.set_result(None)
    return waiter


@pytest.mark.parametrize(
    ("shape", "named"),
    [
        ("with its error", "KafkaConnectionError('dead')"),
        ("ended without one", "ProcessorError('fatal producer error')"),
        ("still waiting", "ProcessorError('fatal producer error')"),
        ("cancelled", "ProcessorError('fatal producer error')"),
    ],
)
async def test_a_producer_failed_fatally_is_broken_and_never_aborts(shape: str, named: str) -> None:
    """A producer that can neither commit nor abort is not asked to abort: the partition starts its
    ownership over, told the producer's own error when its transaction waiter holds one."""
    waiter = {
        "with its error": lambda: _fatal(KafkaConnectionError("dead")),
        "ended without one": lambda: _fatal(),
        "still waiting": lambda: _fatal(done=False),
        "cancelled": lambda: _fatal(cancelled=True),
    }[shape]()
    producer = FakeProducer("commit", KafkaConnectionError("gone"))
    producer._txn_manager = _TxnManager(waiter)
    with pytest.raises(ProducerBroken) as info:
        await _transactions(producer).commit(OUT, {}, 5)
    assert str(info.value) == f"producer 'app-in-0' failed fatally: {named}"
    assert "abort" not in producer.calls
    assert isinstance(info.value.__cause__, KafkaConnectionError)
    assert not isinstance(info.value, ProducerFencedError) and isinstance(info.value, ProcessorError)


async def test_a_producer_fenced_fatally_is_fenced_whatever_failed_first() -> None:
    producer = FakeProducer("commit", KafkaConnectionError("gone"))
    producer._txn_manager = _TxnManager(_fatal(ProducerFenced()))
    with pytest.raises(ProducerFencedError) as info:
        await _transactions(producer).commit(OUT, {}, 5)
    assert "abort" not in producer.calls
    assert isinstance(info.value.__cause__, KafkaConnectionError)


async def test_a_producer_without_a_transaction_manager_has_no_fatal_error() -> None:
    """Without aiokafka's transaction manager to ask, no failure is taken for a fatal one."""
    producer = FakeProducer("begin", KafkaConnectionError("gone"))
    producer._txn_manager = None
    with pytest.raises(BatchAborted):
        await _transactions(producer).commit(OUT, {}, 5)
    del producer._txn_manager  # not even the attribute (another client's producer)
    with pytest.raises(BatchAborted):
        await _transactions(producer).commit(OUT, {}, 5)
    assert producer.calls == ["begin", "begin"]  # nothing begun, nothing aborted


async def test_a_send_future_s_error_is_retrieved_once_and_a_cancelled_one_is_left_alone() -> None:
    """The callback each delivery future gets: a failed future's error counts as retrieved (asyncio
    does not log it when the future goes), a cancelled future has none to retrieve and is no error."""
    loop = asyncio.get_running_loop()
    unretrieved: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        failed: asyncio.Future[object] = loop.create_future()
        failed.set_exception(KafkaConnectionError("lost"))
        _retrieve_exception(failed)
        cancelled: asyncio.Future[object] = loop.create_future()
        cancelled.cancel()
        _retrieve_exception(cancelled)
        del failed, cancelled
        gc.collect()
        unlogged: asyncio.Future[object] = loop.create_future()
        unlogged.set_exception(KafkaConnectionError("lost"))
        del unlogged
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert [str(context["exception"]) for context in unretrieved] == ["KafkaConnectionError: lost"]
