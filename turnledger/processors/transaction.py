"""One batch as one Kafka transaction: outputs, changelog records and the consumed offset, all or nothing.

How a failed transaction ends decides what the partition does next, so failures are sorted here:

| what happened                                   | raised                 | the partition then            |
|-------------------------------------------------|------------------------|-------------------------------|
| our transactional.id was initialised elsewhere  | `ProducerFencedError`  | stops writing (see ownership) |
| aborted cleanly; the producer is fine           | `BatchAborted`         | seeks back, folds it again    |
| the producer is unusable, or the outcome of the | `ProducerBroken`       | starts its ownership over: a  |
| commit is unknown (abort failed too)            |                        | new producer, offsets, state  |

A broken producer is never patched up: starting over runs InitProducerId, which settles the
unknown transaction (commits it if its EndTxn got through, aborts it otherwise), after which the
committed offset says which of the two happened.

Each transaction is tagged `(producer id, epoch, n)`, n counting this producer's transactions, on
the first record of every batch it writes (`txn_tag.py`): the changelog's copy of the tag is how a
later term learns the outcome of a transaction it finds hanging (`hanging.py`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced

from turnledger.processors.changelog import position_record
from turnledger.processors.errors import ProcessorError, ProducerFencedError
from turnledger.processors.txn_tag import TxnTag, producer_identity
from turnledger.processors.writer import BatchWriter
from turnledger.records import OutputRecord


class BatchAborted(ProcessorError):
    """The batch's transaction failed and was aborted; the producer can run the next one."""


class ProducerBroken(ProcessorError):
    """The producer can neither commit nor abort any more; the partition must start its ownership over."""


def _retrieve_exception(future: asyncio.Future[object]) -> None:
    """A failed transaction fails every pending send with the same error; it is handled once, at the
    commit, and must not be logged again per record as "exception was never retrieved"."""
    if not future.cancelled():
        future.exception()


def _fatal_error(producer: AIOKafkaProducer) -> BaseException | None:
    """The error that made the producer unusable (it can then neither commit nor abort), else None.

    aiokafka has no public accessor; its transaction manager keeps the error on the
    transaction waiter, which nobody awaits once we stop, so it is retrieved here too.
    """
    txn_manager = getattr(producer, "_txn_manager", None)
    if txn_manager is None or not txn_manager.is_fatal_error():
        return None
    waiter = txn_manager.wait_for_transaction_end()
    if waiter.done() and not waiter.cancelled():
        return waiter.exception() or ProcessorError("fatal producer error")
    return ProcessorError("fatal producer error")


class PartitionTransactions:
    """The transactions of one partition's producer (one producer per ownership of the partition)."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        *,
        transactional_id: str,
        source: TopicPartition,
        changelog_topic: str,
        offsets_group: str,
    ) -> None:
        self.producer = producer
        self.transactional_id = transactional_id
        self._writer = BatchWriter(producer)
        self._source = source
        self._changelog = changelog_topic
        self._group = offsets_group
        self._transactions = 0

    def _next_tag(self) -> TxnTag:
        """The tag of the transaction being begun; the identity is read each time, so a tag always
        names the epoch its records are written with."""
        tag = TxnTag(*producer_identity(self.producer), self._transactions)
        self._transactions += 1
        return tag

    async def commit(
        self, outputs: Sequence[OutputRecord], state_writes: Mapping[str, bytes | None], next_offset: int
    ) -> None:
        """Write `outputs`, one changelog record per changed state key, the changelog position record
        and `next_offset` as the source partition's committed offset, in one transaction; raises as
        the module table says.

        The offset goes into the transaction first, before any record. With Kafka's produce
        verification (KIP-890), a partition's leader asks the transaction coordinator whether the
        partition is in the producer's transaction, and the group coordinator asks the same of a
        TxnOffsetCommit; a broker keeps one such question per transactional id at a time and answers
        the older with NETWORK_EXCEPTION (`AddPartitionsToTxnManager`), which a produce of aiokafka's
        version receives as NOT_ENOUGH_REPLICAS, retries after `producer_retry_backoff_ms` and logs as
        a warning. Sent alongside the records, the offset made 20-35% of the transactions retry a
        produce; sent first, none does, for about the same mean commit time and a shorter tail (3 runs
        of 300 commits, session 20). tests/integration/test_transaction_verification.py checks it."""
        producer = self.producer
        partition = self._source.partition
        in_transaction = False
        try:
            await producer.begin_transaction()
            in_transaction = True
            await producer.send_offsets_to_transaction({self._source: next_offset}, self._group)
            position_key, position_value = position_record(next_offset)
            futures = await self._writer.write(
                itertools.chain(
                    ((out.topic, None, out.key, out.value) for out in outputs),
                    ((self._changelog, partition, k.encode("utf-8"), v) for k, v in state_writes.items()),
                    ((self._changelog, partition, position_key, position_value),),  # last: see changelog.py
                ),
                self._next_tag(),
            )
            for future in futures:
                future.add_done_callback(_retrieve_exception)
            # A produce that failed for good must abort the batch, never be committed around.
            await asyncio.gather(*futures)
            await producer.commit_transaction()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._after_failure(exc, in_transaction)

    async def _after_failure(self, exc: Exception, in_transaction: bool) -> None:
        fatal = _fatal_error(self.producer)
        if isinstance(exc, ProducerFenced) or isinstance(fatal, ProducerFenced):
            raise ProducerFencedError(self.transactional_id) from exc
        if fatal is not None:
            raise ProducerBroken(f"producer {self.transactional_id!r} failed fatally: {fatal!r}") from exc
        if in_transaction:
            try:
                await self.producer.abort_transaction()
            except ProducerFenced as fenced:
                raise ProducerFencedError(self.transactional_id) from fenced
            except asyncio.CancelledError:
                raise
            except Exception as abort_exc:
                raise ProducerBroken(
                    f"the transaction failed ({exc!r}) and aborting it failed too ({abort_exc!r}); "
                    "its outcome is settled by the next InitProducerId"
                ) from exc
        raise BatchAborted(f"transaction aborted: {exc!r}") from exc
