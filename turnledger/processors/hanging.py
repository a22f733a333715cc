"""Our own hanging transactions, found and reported at the start of every term (never ended here).

A hanging transaction is data of a transactional producer on a partition whose transaction the
coordinator no longer tracks: no marker will ever end it, and the partition's last stable offset
stays before it for ever. Every read_committed reader of the partition waits: the projector, the
workers, and our own restore (`changelog.settle`).

The term's producer can tell its own for certain. Once its InitProducerId has returned, the
coordinator has ended every earlier transaction of our transactional.id; our producer id then
carries a newer epoch, and the term has not begun a transaction yet. So an open transaction of our
producer id with an older epoch, on any partition we write, is hanging:

| open transaction on a partition we write         | verdict                                    |
|--------------------------------------------------|--------------------------------------------|
| our producer id, an epoch before ours            | hanging: reported (ERROR, metric, alert)   |
| our producer id, our epoch                       | ours, begun this term: never at the start  |
| another producer id                              | not ours to judge: left to its coordinator |

**Why it is not aborted.** Whether the right marker is an abort or a commit is not known here. A
chaos run showed both kinds are real: the hanging data there belonged to a transaction its
coordinator had *committed* (CompleteCommit in `__transaction_state`), whose commit markers were
missing on three output partitions after a broker restart, while the changelog's marker was there.
An automatic abort (this module's first version) discarded those committed outputs, and three
operations never became final. A late produce after its transaction ended would need the abort
instead. Until the outcome can be read from the changelog (every transaction writes to it, and its
marker there says how the transaction ended), an operator decides, with
`kafka-transactions.sh abort` or a commit marker (`kafka/producer_states.write_marker`).

A transaction begun by a producer id we no longer have (its epochs exhausted, or the transactional.id
expired) is not recognised; `settle` then reports the producer that holds the changelog.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from enum import StrEnum

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IncompatibleBrokerVersion, UnsupportedVersionError

from turnledger.kafka.producer_states import ProducerState, ProducerStatesError, describe_producers
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


def report_own_hanging(producer: AIOKafkaProducer, states: Iterable[ProducerState]) -> list[ProducerState]:
    """Log (ERROR, once per term and transaction) and count every open transaction of `producer`'s id
    with an older epoch among `states`; returns them."""
    producer_id, producer_epoch = producer_identity(producer)
    hanging = [s for s in states if verdict(s, producer_id, producer_epoch) is Verdict.HANGING]
    for state in hanging:
        live.PROCESSOR_HANGING_FOUND.inc()
        log.error(
            "%s-%d: a hanging transaction of our producer id %d (epoch %d, ours is %d) is open since offset "
            "%d: its coordinator has ended it, so no marker will end it here, and read_committed readers of "
            "this partition wait until one does. Whether it committed or aborted is not known here; check "
            "the transaction's marker on the changelog, then end it with kafka-transactions.sh abort "
            "--topic %s --partition %d --start-offset %d, or with a commit marker",
            state.tp.topic,
            state.tp.partition,
            state.producer_id,
            state.producer_epoch,
            producer_epoch,
            state.open_transaction_start,
            state.tp.topic,
            state.tp.partition,
            state.open_transaction_start,
        )
    return hanging


class HangingSweep:
    """The sweeps of one term: once over every partition it writes before it restores, then over its
    changelog partition whenever `settle` has waited a while, reporting each open transaction once:
    ours (hanging), and on the changelog another producer's. Connection errors propagate (the term
    starts over); a broker that cannot describe producers (before Kafka 2.8) or a partition error
    only skip the sweep."""

    def __init__(self, producer: AIOKafkaProducer, changelog: TopicPartition, outputs: Sequence[str]) -> None:
        self._producer = producer
        self._changelog = changelog
        self._outputs = outputs
        self._reported: set[tuple[str, int, int, int, int]] = set()

    async def sweep_written(self) -> list[ProducerState]:
        tps = [self._changelog, *await written_partitions(self._producer, self._outputs)]
        return self._report(await self._describe(tps))

    async def sweep_changelog(self) -> list[ProducerState]:
        return self._report(await self._describe([self._changelog]), foreign=True)

    def _report(self, states: list[ProducerState], *, foreign: bool = False) -> list[ProducerState]:
        """Our hanging transactions among `states`, each reported once per term; with `foreign`, also
        (once) an open transaction of another producer id."""
        fresh = [s for s in states if self._first_time(s)]
        hanging = report_own_hanging(self._producer, fresh)
        producer_id, producer_epoch = producer_identity(self._producer)
        for state in fresh if foreign else ():
            if verdict(state, producer_id, producer_epoch) is Verdict.FOREIGN:
                log.error(
                    "%s-%d is held by an open transaction of producer id %d (epoch %d) since offset %s, "
                    "not this partition's producer (id %d): only this partition's transactional.id should "
                    "write here. If no such producer is alive, end it with kafka-transactions.sh abort "
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
        return hanging

    def _first_time(self, state: ProducerState) -> bool:
        if state.open_transaction_start is None:
            return False
        key = (
            state.tp.topic,
            state.tp.partition,
            state.producer_id,
            state.producer_epoch,
            state.open_transaction_start,
        )
        if key in self._reported:
            return False
        self._reported.add(key)
        return True

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
