"""Our own hanging transactions, found and aborted at the start of every term.

A hanging transaction is data of a transactional producer on a partition that its coordinator no
longer tracks: no marker will ever end it, and the partition's last stable offset stays before it
for ever. Every read_committed reader of the partition waits: the projector, the workers, and our
own restore (`changelog.settle`). Kafka's produce verification (KIP-890 part 1) makes this rare, but
a retried or delayed produce can still land after its transaction has ended, and the only remedy is
an abort marker written by someone else (`kafka-transactions.sh abort`).

The term's producer can tell its own for certain. Once its InitProducerId has returned, the
coordinator has ended every earlier transaction of our transactional.id and written all of their
markers; our producer id then carries a newer epoch, and the term has not begun a transaction yet.
So an open transaction of our producer id with an older epoch, on any partition we write, is
hanging, and aborting it is what the coordinator would have done:

| open transaction on a partition we write         | verdict                                  |
|--------------------------------------------------|------------------------------------------|
| our producer id, an epoch before ours            | hanging: abort it                        |
| our producer id, our epoch                       | ours, begun this term: never at the start |
| another producer id                              | not ours to judge: left to its coordinator |

A transaction begun by a producer id we no longer have (its epochs exhausted, or the transactional.id
expired) is not recognised; `settle` then reports the producer that holds the changelog.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from enum import StrEnum

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IncompatibleBrokerVersion, UnsupportedVersionError

from turnledger.kafka.producer_states import (
    ProducerState,
    ProducerStatesError,
    abort_transaction,
    describe_producers,
)
from turnledger.observability import runtime_metrics as live

log = logging.getLogger(__name__)


class Verdict(StrEnum):
    NO_TRANSACTION = "no open transaction"
    HANGING = "hanging: our producer id with an older epoch"
    OURS = "our current epoch"
    FOREIGN = "another producer id"


def verdict(state: ProducerState, producer_id: int, producer_epoch: int) -> Verdict:
    """The table of the module docstring, for one partition's producer."""
    if state.open_transaction_start is None:
        return Verdict.NO_TRANSACTION
    if state.producer_id != producer_id:
        return Verdict.FOREIGN
    return Verdict.HANGING if state.producer_epoch < producer_epoch else Verdict.OURS


def producer_identity(producer: AIOKafkaProducer) -> tuple[int, int]:
    """(producer id, epoch) of an initialised transactional producer. aiokafka has no public
    accessor; its transaction manager holds both."""
    txn_manager = producer._txn_manager
    assert txn_manager is not None and txn_manager.has_pid(), "the producer is not initialised"
    return int(txn_manager.producer_id), int(txn_manager.producer_epoch)


async def written_partitions(producer: AIOKafkaProducer, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of `topics` (the outputs: any of our batches may write any of them)."""
    tps: list[TopicPartition] = []
    for topic in topics:
        tps += [TopicPartition(topic, p) for p in sorted(await producer.partitions_for(topic))]
    return tps


async def abort_own_hanging(
    producer: AIOKafkaProducer, states: Iterable[ProducerState]
) -> list[ProducerState]:
    """Abort every open transaction of `producer`'s id with an older epoch among `states`; returns the
    ones aborted. One the leader refuses is logged and left (`settle` then times out and the term
    starts over, which tries again)."""
    producer_id, producer_epoch = producer_identity(producer)
    hanging = [s for s in states if verdict(s, producer_id, producer_epoch) is Verdict.HANGING]
    aborted: list[ProducerState] = []
    for state in hanging:
        try:
            await abort_transaction(producer.client, state)
        except (
            ProducerStatesError,
            IncompatibleBrokerVersion,
            UnsupportedVersionError,
            NotImplementedError,
        ) as exc:
            log.error(
                "%s-%d: could not abort the hanging transaction of our producer id %d (epoch %d) open since "
                "offset %d: %s",
                state.tp.topic,
                state.tp.partition,
                state.producer_id,
                state.producer_epoch,
                state.open_transaction_start,
                exc,
            )
            continue
        aborted.append(state)
        live.PROCESSOR_HANGING_ABORTED.inc()
        log.warning(
            "%s-%d: aborted a hanging transaction of our producer id %d (epoch %d, ours is %d) open "
            "since offset %d: its coordinator had already ended it, so no marker would ever have",
            state.tp.topic,
            state.tp.partition,
            state.producer_id,
            state.producer_epoch,
            producer_epoch,
            state.open_transaction_start,
        )
    return aborted


class HangingSweep:
    """The sweeps of one term: once over every partition it writes before it restores, then over its
    changelog partition whenever `settle` has waited a while, reporting (once) an open transaction
    there that is not ours to abort. Connection errors propagate (the term starts over); a broker
    that cannot describe producers (before Kafka 2.8) or a partition error only skip the sweep."""

    def __init__(self, producer: AIOKafkaProducer, changelog: TopicPartition, outputs: Sequence[str]) -> None:
        self._producer = producer
        self._changelog = changelog
        self._outputs = outputs
        self._reported: set[tuple[int, int, int | None]] = set()

    async def sweep_written(self) -> list[ProducerState]:
        tps = [self._changelog, *await written_partitions(self._producer, self._outputs)]
        return await abort_own_hanging(self._producer, await self._describe(tps))

    async def sweep_changelog(self) -> list[ProducerState]:
        states = await self._describe([self._changelog])
        aborted = await abort_own_hanging(self._producer, states)
        producer_id, producer_epoch = producer_identity(self._producer)
        for state in states:
            key = (state.producer_id, state.producer_epoch, state.open_transaction_start)
            if verdict(state, producer_id, producer_epoch) is Verdict.FOREIGN and key not in self._reported:
                self._reported.add(key)
                log.error(
                    "%s-%d is held by an open transaction of producer id %d (epoch %d) since offset %s, "
                    "not this partition's producer (id %d): only this partition's transactional.id should "
                    "write here. If no such producer is alive, abort it with kafka-transactions.sh abort "
                    "--topic %s --partition %d --start-offset %s",
                    state.tp.topic,
                    state.tp.partition,
                    state.producer_id,
                    state.producer_epoch,
                    state.open_transaction_start,
                    producer_id,
                    state.tp.topic,
                    state.tp.partition,
                    state.open_transaction_start,
                )
        return aborted

    async def _describe(self, tps: list[TopicPartition]) -> list[ProducerState]:
        try:
            described = await describe_producers(self._producer.client, tps)
        except (
            ProducerStatesError,
            IncompatibleBrokerVersion,
            UnsupportedVersionError,
            NotImplementedError,
        ) as exc:
            log.warning("could not look for hanging transactions on %d partitions: %s", len(tps), exc)
            return []
        for tp, error in described.errors.items():
            log.info("could not look for hanging transactions on %s-%d: %s", tp.topic, tp.partition, error)
        return described.states
