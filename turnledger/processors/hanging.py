"""Our own hanging transactions, found at the start of every term and ended with the right marker.

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
| our producer id, an epoch before ours            | hanging: ended or reported, as below       |
| our producer id, our epoch                       | ours, begun this term: never at the start  |
| another producer id                              | not ours to judge: left to its coordinator |

**The marker is the one the changelog proves, never a guess.** Both kinds are real: a chaos run
showed a transaction its coordinator had *committed* (CompleteCommit in `__transaction_state`)
whose commit markers were missing on three output partitions after a broker restart, while the
changelog's marker was there; aborting it (this module's first version) discarded committed
outputs. A produce landing after its transaction ended needs the abort instead. Every transaction
is tagged (`txn_tag.py`) on the first record of each of its batches, the changelog's included, and
cannot commit before its changelog record landed; so the hanging batch's tag leads to the
changelog record that says how the transaction ended (`hanging_evidence.py` reads it). For a
hanging batch on partition X:

| what the records say (`Finding`)                                    | action                |
|---------------------------------------------------------------------|-----------------------|
| the tag's changelog record was committed, none of it earlier on X   | commit marker         |
| committed, but the tag is already on X before the hanging batch     | abort marker (late)   |
| the tag's changelog record was aborted                              | abort marker          |
| committed, X before the hanging batch unreadable within bounds      | report                |
| the changelog's last stable offset is not past the tagged record    | report                |
| (the changelog hangs with that very transaction)                    |                       |
| the changelog hangs with this very transaction (below)              | the coordinator's     |
| no changelog record carries the tag (compacted, or never written)   | report                |
| no tag, a tag of another producer or epoch, the record unreadable   | report                |

"Not found" never means abort: compaction can remove a committed changelog record later. The tag
earlier on X means the transaction's batch there was already ended by a marker (an open
transaction starts at its first batch), so the hanging one is a copy that came after: committing
it would show its records twice. An ended
transaction is logged at WARNING (partition, producer, epoch, offset, tag, marker, and the changelog
offset that proved it) and counted in `turnledger_processor_hanging_transactions_resolved_total`;
what stays is reported as before (ERROR with the operator's command,
`turnledger_processor_hanging_transactions_total`, the paging alert), for an operator to end with
`kafka-transactions.sh abort` or a commit marker (`kafka/producer_states.write_marker`). Writing
the marker the coordinator would have written is safe even if it raced one: a second marker of
the same outcome ends nothing more.

The changelog's own hanging states are settled first: ending one there moves the changelog's last
stable offset, which can decide the outputs' states.

A transaction begun by a producer id we no longer have (its epochs exhausted, or the transactional.id
expired) is not recognised; `settle` then reports the producer that holds the changelog.

A report also says what the coordinator recorded of that producer id and epoch
(`kafka/transaction_log.py`: the last status in `__transaction_state`, and whether that transaction
lists the partition).

**When the changelog hangs with the transaction itself**, nothing on the changelog can say how it
ended: Kafka 4.4.0's clean shutdown can lose the markers of a transaction that commits during it,
the changelog's among them (docs/architecture.md, Outages). The coordinator's log is then the one
place its outcome is kept, and the term ends it on that word only when all of these hold:
1. the changelog's records (`Finding.HANGS_WITH_IT`): the hanging batch's tag is on no changelog
   record before it, and the open span holds no batch of the producer id and epoch with another tag;
   every transaction writes the changelog, so the open span is the last transaction of that epoch;
2. the coordinator's log (`transaction_log.completed_outcome`): the last entry of that producer id
   and epoch is CompleteCommit or CompleteAbort, right after its Prepare listing the changelog
   partition (a Prepare compacted away proves nothing);
3. the changelog leader verifies transactional produces (`transaction.partition.verification.enable`,
   on by default): a batch of that producer id and epoch cannot have landed after the coordinator
   ended its last transaction, so the open span is that transaction's. This is read when the term
   runs; a batch appended while someone had switched it off earlier is not detected.
The term writes the coordinator's marker on the changelog, and the outputs then follow the table
above against the changelog record it ended. Anything less is reported, with the coordinator's word.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Protocol

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IncompatibleBrokerVersion, UnsupportedVersionError

from turnledger.kafka.broker_config import PARTITION_VERIFICATION, leader_setting
from turnledger.kafka.producer_states import (
    ProducerState,
    ProducerStatesError,
    describe_producers,
    write_marker,
)
from turnledger.kafka.transaction_log import (
    Recorded,
    TxnLogEntry,
    TxnStatus,
    completed_outcome,
    read_transaction_log,
    recorded,
)
from turnledger.observability import runtime_metrics as live
from turnledger.processors.hanging_evidence import Evidence, EvidenceSource, Finding
from turnledger.processors.txn_tag import producer_identity

log = logging.getLogger(__name__)


class Verdict(StrEnum):
    NO_TRANSACTION = "no open transaction"
    HANGING = "hanging: our producer id with an older epoch"
    OURS = "our current epoch"
    FOREIGN = "another producer id"


def verdict(state: ProducerState, producer_id: int, producer_epoch: int) -> Verdict:
    """The first table of the module docstring, for one partition's producer."""
    if state.open_transaction_start is None:
        return Verdict.NO_TRANSACTION
    if state.producer_id != producer_id:
        return Verdict.FOREIGN
    return Verdict.HANGING if state.producer_epoch < producer_epoch else Verdict.OURS


class Action(StrEnum):
    COMMIT = "commit"
    ABORT = "abort"
    REPORT = "report"
    ASK_COORDINATOR = "ask the coordinator's log"


RESOLUTION: Mapping[Finding, Action] = {
    Finding.COMMITTED: Action.COMMIT,
    Finding.COMMITTED_LATE: Action.ABORT,
    Finding.ABORTED: Action.ABORT,
    Finding.COMMITTED_UNCHECKED: Action.REPORT,
    Finding.HANGS_WITH_IT: Action.ASK_COORDINATOR,
    Finding.SPAN_UNCHECKED: Action.REPORT,
    Finding.UNDECIDED: Action.REPORT,
    Finding.NOT_FOUND: Action.REPORT,
    Finding.UNTAGGED: Action.REPORT,
    Finding.NOT_ITS_TAG: Action.REPORT,
    Finding.UNREADABLE: Action.REPORT,
}
"""The second table of the module docstring: every finding has exactly one action."""


async def written_partitions(producer: AIOKafkaProducer, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of `topics` (the outputs: any of our batches may write any of them)."""
    tps: list[TopicPartition] = []
    for topic in topics:
        tps += [TopicPartition(topic, p) for p in sorted(await producer.partitions_for(topic))]
    return tps


def own_hanging(producer: AIOKafkaProducer, states: Iterable[ProducerState]) -> list[ProducerState]:
    """The open transactions of `producer`'s id with an older epoch among `states`."""
    producer_id, producer_epoch = producer_identity(producer)
    return [s for s in states if verdict(s, producer_id, producer_epoch) is Verdict.HANGING]


def report_unresolved(producer_epoch: int, state: ProducerState, why: str, coordinator: str) -> None:
    """The ERROR and the metric (and so the alert) of a hanging transaction the term leaves open;
    `coordinator`: what the coordinator's log says of it (`CoordinatorLog`)."""
    live.PROCESSOR_HANGING_FOUND.inc()
    log.error(
        "%s-%d: a hanging transaction of our producer id %d (epoch %d, ours is %d) is open since offset "
        "%d: its coordinator has ended it, so no marker will end it here, and read_committed readers of "
        "this partition wait until one does. Its outcome could not be proved from the changelog (%s)%s; "
        "check the transaction's marker on the changelog, then end it with kafka-transactions.sh abort "
        "--topic %s --partition %d --start-offset %d, or with a commit marker",
        state.tp.topic,
        state.tp.partition,
        state.producer_id,
        state.producer_epoch,
        producer_epoch,
        state.open_transaction_start,
        why,
        f"; {coordinator}" if coordinator else "",
        state.tp.topic,
        state.tp.partition,
        state.open_transaction_start,
    )


def report_resolved(
    producer_epoch: int,
    state: ProducerState,
    evidence: Evidence,
    action: Action,
    changelog: TopicPartition,
    proof: str,
) -> None:
    """The WARNING and the metric of a hanging transaction the term ended; `proof`: the coordinator's
    word, when it decided."""
    live.PROCESSOR_HANGING_RESOLVED.labels(action.value).inc()
    log.warning(
        "%s-%d: ended the hanging transaction of our producer id %d (epoch %d, ours is %d) open since "
        "offset %d with %s marker: its tag %s is on %s-%d at offset %s, and %s%s",
        state.tp.topic,
        state.tp.partition,
        state.producer_id,
        state.producer_epoch,
        producer_epoch,
        state.open_transaction_start,
        "a commit" if action is Action.COMMIT else "an abort",
        evidence.tag,
        changelog.topic,
        changelog.partition,
        evidence.changelog_offset,
        evidence.finding.value,
        f"; {proof}" if proof else "",
    )


class CoordinatorLog(Protocol):
    async def recorded(self, producer_id: int, producer_epoch: int) -> Recorded: ...

    async def completed(self, state: ProducerState) -> TxnStatus | None:
        """`completed_outcome` of the state's producer id, epoch and partition."""
        ...

    async def verifies(self, tp: TopicPartition) -> bool:
        """Whether `tp`'s leader verifies transactional produces (module docstring, rule 3)."""
        ...


class TransactionLogReader:
    """`CoordinatorLog` of one transactional id, read from `__transaction_state` once per term."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self._bootstrap = bootstrap
        self._transactional_id = transactional_id
        self._entries: list[TxnLogEntry] | None = None

    async def _read(self) -> list[TxnLogEntry]:
        if self._entries is None:
            self._entries = await read_transaction_log(self._bootstrap, self._transactional_id)
        return self._entries

    async def recorded(self, producer_id: int, producer_epoch: int) -> Recorded:
        return recorded(await self._read(), producer_id, producer_epoch)

    async def completed(self, state: ProducerState) -> TxnStatus | None:
        return completed_outcome(await self._read(), state.producer_id, state.producer_epoch, state.tp)

    async def verifies(self, tp: TopicPartition) -> bool:
        return await leader_setting(self._bootstrap, tp, PARTITION_VERIFICATION) == "true"


COORDINATOR_ACTIONS: Mapping[TxnStatus, Action] = {
    TxnStatus.COMPLETE_COMMIT: Action.COMMIT,
    TxnStatus.COMPLETE_ABORT: Action.ABORT,
}


async def coordinator_decides(coordinator: CoordinatorLog | None, state: ProducerState) -> tuple[Action, str]:
    """The marker the coordinator's log proves for a changelog that hangs with its own transaction
    (module docstring, rules 2 and 3), and the words that say why; REPORT when it proves none."""
    said = await coordinator_says(coordinator, state)
    if coordinator is None:
        return Action.REPORT, said
    try:
        status = await coordinator.completed(state)
        if status is None:
            return Action.REPORT, f"{said}: no Complete entry right after its Prepare proves how it ended"
        if not await coordinator.verifies(state.tp):
            return Action.REPORT, (
                f"{said}, but the leader of {state.tp.topic}-{state.tp.partition} does not verify "
                f"transactional produces ({PARTITION_VERIFICATION} is not true), so a batch may have "
                "landed after that transaction ended"
            )
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a report is written whatever this read meets
        return Action.REPORT, f"{said}; the coordinator's proof could not be read ({exc!r})"
    return COORDINATOR_ACTIONS[status], f"{said}, {status.name} right after its Prepare"


async def coordinator_says(coordinator: CoordinatorLog | None, state: ProducerState) -> str:
    """A report's words on what the coordinator recorded (empty without a log to ask); a log that
    cannot be read says so, and never stops the sweep."""
    if coordinator is None:
        return ""
    try:
        return (await coordinator.recorded(state.producer_id, state.producer_epoch)).describe(state.tp)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a report is written whatever this read meets
        return f"the coordinator's log could not be read ({exc!r})"


class HangingSweep:
    """The sweeps of one term: once over every partition it writes before it restores, then over its
    changelog partition whenever `settle` has waited a while. Each open transaction is handled once
    per term: ours (hanging) ended by the module's table or reported, and on the changelog another
    producer's reported. Connection errors propagate (the term starts over); a broker that cannot
    describe producers (before Kafka 2.8) or a partition error only skip the sweep."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        changelog: TopicPartition,
        outputs: Sequence[str],
        evidence: EvidenceSource,
        coordinator: CoordinatorLog | None = None,
    ) -> None:
        self._producer = producer
        self._changelog = changelog
        self._outputs = outputs
        self._evidence = evidence
        self._coordinator = coordinator
        self._seen: set[tuple[str, int, int, int, int | None]] = set()

    async def sweep_written(self) -> list[ProducerState]:
        """Our hanging transactions on the changelog and every output partition; returns those
        left open (reported)."""
        tps = [self._changelog, *await written_partitions(self._producer, self._outputs)]
        return await self._handle(await self._describe(tps))

    async def sweep_changelog(self) -> list[ProducerState]:
        return await self._handle(await self._describe([self._changelog]), foreign=True)

    async def _handle(self, states: list[ProducerState], *, foreign: bool = False) -> list[ProducerState]:
        """End or report our hanging transactions among `states`, each once per term (the changelog's
        first); with `foreign`, also report (once) an open transaction of another producer id. A state
        counts as handled only by the sweep that handles it: another producer's open transaction seen
        by the first sweep (which does not report those) is still reported by the changelog's."""
        hanging = [s for s in own_hanging(self._producer, states) if self._first_time(s)]
        left = await self._end(sorted(hanging, key=lambda s: s.tp != self._changelog))
        producer_id, producer_epoch = producer_identity(self._producer)
        for state in states if foreign else ():
            if verdict(state, producer_id, producer_epoch) is Verdict.FOREIGN and self._first_time(state):
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
        return left

    async def _end(self, hanging: list[ProducerState]) -> list[ProducerState]:
        """Each state's evidence, then its action (the module's table); returns those reported.
        One at a time, so that ending the changelog's can decide the outputs'."""
        _producer_id, producer_epoch = producer_identity(self._producer)
        left: list[ProducerState] = []
        for state in hanging:
            [evidence] = await self._evidence.evidence([state])
            action, proof = RESOLUTION[evidence.finding], ""
            if action is Action.ASK_COORDINATOR:
                action, proof = await coordinator_decides(self._coordinator, state)
            if action is Action.REPORT:
                said = proof or await coordinator_says(self._coordinator, state)
                report_unresolved(producer_epoch, state, evidence.finding.value, said)
                left.append(state)
                continue
            try:
                await write_marker(self._producer.client, state, commit=action is Action.COMMIT)
            except ProducerStatesError as exc:  # the leader refused it; a lost connection propagates
                why = f"{evidence.finding.value}; its {action} marker: {exc}"
                report_unresolved(
                    producer_epoch, state, why, await coordinator_says(self._coordinator, state)
                )
                left.append(state)
                continue
            report_resolved(producer_epoch, state, evidence, action, self._changelog, proof)
        return left

    def _first_time(self, state: ProducerState) -> bool:
        """True the first time this term meets this open transaction (callers pass open ones only)."""
        key = (
            state.tp.topic,
            state.tp.partition,
            state.producer_id,
            state.producer_epoch,
            state.open_transaction_start,
        )
        if key in self._seen:
            return False
        self._seen.add(key)
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
