"""Hanging transactions: the verdict and resolution tables of processors/hanging.py, the transaction
tag's bytes (processors/txn_tag.py), and the two admin requests of
kafka/producer_states.py byte for byte against Kafka's message specs (flexible versions: compact
arrays and strings are length + 1 as an unsigned varint, and every struct ends with its tagged
fields, here none: one 0 byte). The broker itself answers them in
tests/integration/test_hanging_transactions.py."""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import UnsupportedVersionError

from turnledger.kafka import producer_states
from turnledger.kafka.producer_states import (
    ProducerState,
    abort_transaction,
    describe_producers,
    write_marker,
)
from turnledger.kafka.transaction_log import Recorded, TxnStatus
from turnledger.observability import runtime_metrics as live
from turnledger.processors import hanging
from turnledger.processors.hanging import RESOLUTION, Action, HangingSweep, Verdict, verdict
from turnledger.processors.hanging_evidence import Evidence, Finding
from turnledger.processors.txn_tag import HEADER, TxnTag, decode, tag_of

TP = TopicPartition("t", 3)
OURS = (7, 5)  # producer id, epoch


def state(producer_id: int, epoch: int, open_at: int | None, tp: TopicPartition = TP) -> ProducerState:
    return ProducerState(
        tp, producer_id, epoch, coordinator_epoch=2, last_timestamp_ms=0, open_transaction_start=open_at
    )


@pytest.mark.parametrize(
    ("described", "expected"),
    [
        (state(7, 4, 120), Verdict.HANGING),
        (state(7, 0, 0), Verdict.HANGING),
        (state(7, 5, 120), Verdict.OURS),
        (state(8, 4, 120), Verdict.FOREIGN),
        (state(8, 9, 120), Verdict.FOREIGN),
        (state(7, 4, None), Verdict.NO_TRANSACTION),
        (state(8, 4, None), Verdict.NO_TRANSACTION),
    ],
)
def test_only_our_producer_id_with_an_older_epoch_is_hanging(
    described: ProducerState, expected: Verdict
) -> None:
    assert verdict(described, *OURS) is expected


def compact_string(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()


def compact_len(n: int) -> bytes:
    return bytes([n + 1])


NO_TAGS = b"\x00"


@dataclass
class Cluster:
    leaders: dict[TopicPartition, int]

    def leader_for_partition(self, tp: TopicPartition) -> int | None:
        return self.leaders.get(tp)


@dataclass
class FakeClient:
    """Encodes each request as aiokafka would put it on the wire and answers with `answer`'s bytes."""

    cluster: Cluster
    answer: bytes
    sent: list[tuple[int, bytes]] = field(default_factory=list)

    async def send(self, node_id: int, request: Any) -> Any:
        built = request.prepare({request.API_KEY: (0, 2)})
        self.sent.append((node_id, built.encode()))
        return built.RESPONSE_TYPE.decode(self.answer)

    async def add_topic(self, topic: str) -> None:
        raise AssertionError("every leader is known")

    async def force_metadata_update(self) -> None:
        raise AssertionError("every leader is known")


async def test_describe_producers_request_and_response_bytes() -> None:
    other = TopicPartition("t", 4)
    response = (
        struct.pack(">i", 0)  # throttle
        + compact_len(1)
        + compact_string("t")
        + compact_len(2)
        # partition 3: one producer with an open transaction at offset 120
        + struct.pack(">ih", 3, 0)
        + b"\x00"  # error message: null
        + compact_len(1)
        + struct.pack(">qiiqiq", 7, 4, 11, 1_700_000_000_000, 2, 120)
        + NO_TAGS
        + NO_TAGS
        # partition 4: NOT_LEADER_OR_FOLLOWER (6)
        + struct.pack(">ih", 4, 6)
        + compact_string("not here")
        + compact_len(0)
        + NO_TAGS
        + NO_TAGS
        + NO_TAGS
    )
    client = FakeClient(Cluster({TP: 1, other: 1}), response)
    described = await describe_producers(client, [TP, other])  # type: ignore[arg-type]

    assert client.sent == [
        (
            1,
            compact_len(1)
            + compact_string("t")
            + compact_len(2)
            + struct.pack(">ii", 3, 4)
            + NO_TAGS
            + NO_TAGS,
        )
    ]
    assert described.states == [ProducerState(TP, 7, 4, 2, 1_700_000_000_000, 120, last_sequence=11)]
    assert described.errors == {other: "NotLeaderForPartitionError not here"}


async def test_write_txn_markers_request_bytes_and_a_partition_error() -> None:
    ok = (
        struct.pack(">q", 7)
        + compact_len(1)
        + compact_string("t")
        + compact_len(1)
        + struct.pack(">ih", 3, 0)
    )
    ok += NO_TAGS + NO_TAGS + NO_TAGS
    client = FakeClient(Cluster({TP: 2}), compact_len(1) + ok + NO_TAGS)
    await abort_transaction(client, state(7, 4, 120))  # type: ignore[arg-type]

    marker = struct.pack(">qh?", 7, 4, False) + compact_len(1) + compact_string("t") + compact_len(1)
    marker += struct.pack(">i", 3) + NO_TAGS + struct.pack(">i", 2) + NO_TAGS
    assert client.sent == [(2, compact_len(1) + marker + NO_TAGS)]

    failed = ok.replace(struct.pack(">ih", 3, 0), struct.pack(">ih", 3, 47))  # INVALID_PRODUCER_EPOCH
    client = FakeClient(Cluster({TP: 2}), compact_len(1) + failed + NO_TAGS)
    with pytest.raises(
        producer_states.ProducerStatesError, match="t-3 \\(producer 7\\): InvalidProducerEpoch"
    ):
        await abort_transaction(client, state(7, 4, 120))  # type: ignore[arg-type]


@dataclass
class LearningCluster:
    """A metadata cache that knows `leaders` only once asked for each topic of `later` and updated."""

    leaders: dict[TopicPartition, int | None]
    later: dict[TopicPartition, int | None] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    updates: int = 0

    def leader_for_partition(self, tp: TopicPartition) -> int | None:
        return self.leaders.get(tp)


@dataclass
class LearningClient:
    cluster: LearningCluster
    answer: bytes = b""
    requests: list[Any] = field(default_factory=list)

    async def add_topic(self, topic: str) -> None:
        self.cluster.added.append(topic)

    async def force_metadata_update(self) -> None:
        self.cluster.updates += 1
        self.cluster.leaders.update(
            {tp: self.cluster.later[tp] for tp in self.cluster.later if tp.topic in self.cluster.added}
        )

    async def send(self, node_id: int, request: Any) -> Any:
        self.requests.append((node_id, request))
        built = request.prepare({request.API_KEY: (0, 2)})
        return built.RESPONSE_TYPE.decode(self.answer)


async def test_leaders_not_known_are_asked_for_by_topic_and_broker_0_is_a_leader() -> None:
    """A partition without a known leader (-1 or none) makes its topic be added and the metadata
    updated once; broker id 0 is a leader like any other; one still without a leader is refused."""
    u0, u1, known = TopicPartition("u", 0), TopicPartition("v", 1), TopicPartition("k", 0)
    cluster = LearningCluster({u0: -1, known: 0}, later={u0: 0, u1: 2})
    by_leader = await producer_states._leaders(LearningClient(cluster), [u0, u1, known])  # type: ignore[arg-type]
    assert (sorted(cluster.added), cluster.updates) == (["u", "v"], 1)
    assert by_leader == {0: [u0, known], 2: [u1]}

    settled = LearningCluster({known: 0})
    assert await producer_states._leaders(LearningClient(settled), [known]) == {0: [known]}  # type: ignore[arg-type]
    assert (settled.added, settled.updates) == ([], 0)

    for still in (-1, None):
        lost = LearningCluster({TP: -1}, later={TP: still})
        with pytest.raises(producer_states.ProducerStatesError) as refused:
            await producer_states._leaders(LearningClient(lost), [TP])  # type: ignore[arg-type]
        assert str(refused.value) == "t-3 has no leader"


async def test_a_partition_s_error_leaves_the_next_partitions_described() -> None:
    """An error first (no message), then a partition with a transaction open at offset 0 and a
    producer with none (-1)."""
    first, second = TopicPartition("t", 1), TopicPartition("t", 2)
    response = (
        struct.pack(">i", 0)
        + compact_len(1)
        + compact_string("t")
        + compact_len(2)
        + struct.pack(">ih", 1, 6)
        + b"\x00"  # error message: null
        + compact_len(0)
        + NO_TAGS
        + struct.pack(">ih", 2, 0)
        + b"\x00"
        + compact_len(2)
        + struct.pack(">qiiqiq", 7, 4, 11, 5, 2, 0)
        + NO_TAGS
        + struct.pack(">qiiqiq", 8, 1, 3, 6, 2, -1)
        + NO_TAGS
        + NO_TAGS
        + NO_TAGS
        + NO_TAGS
    )
    client = LearningClient(LearningCluster({first: 1, second: 1}), response)
    described = await describe_producers(client, [first, second])  # type: ignore[arg-type]
    assert described.errors == {first: "NotLeaderForPartitionError"}
    assert described.states == [
        ProducerState(second, 7, 4, 2, 5, 0, last_sequence=11),
        ProducerState(second, 8, 1, 2, 6, None, last_sequence=3),
    ]


async def test_an_abort_sends_a_marker_that_is_not_a_commit() -> None:
    ok = (
        struct.pack(">q", 7)
        + compact_len(1)
        + compact_string("t")
        + compact_len(1)
        + struct.pack(">ih", 3, 0)
    )
    client = LearningClient(LearningCluster({TP: 2}), compact_len(1) + ok + NO_TAGS * 3 + NO_TAGS)
    await abort_transaction(client, state(7, 4, 120))  # type: ignore[arg-type]
    [(node, request)] = client.requests
    [(producer, epoch, commit, *_)] = request._markers
    assert (node, producer, epoch, commit) == (2, 7, 4, False) and commit is False


@dataclass
class FakeTxnManager:
    producer_id: int
    producer_epoch: int

    def has_pid(self) -> bool:
        return True


@dataclass
class FakeProducer:
    client: FakeClient
    _txn_manager: FakeTxnManager


async def test_a_commit_marker_carries_the_commit_flag() -> None:
    client = FakeClient(Cluster({TP: 2}), markers_answer(0))
    await write_marker(client, state(7, 4, 120), commit=True)  # type: ignore[arg-type]
    marker = struct.pack(">qh?", 7, 4, True) + compact_len(1) + compact_string("t") + compact_len(1)
    marker += struct.pack(">i", 3) + NO_TAGS + struct.pack(">i", 2) + NO_TAGS
    assert client.sent == [(2, compact_len(1) + marker + NO_TAGS)]


def markers_answer(error_code: int) -> bytes:
    body = struct.pack(">q", 7) + compact_len(1) + compact_string("t") + compact_len(1)
    return compact_len(1) + body + struct.pack(">ih", 3, error_code) + NO_TAGS + NO_TAGS + NO_TAGS + NO_TAGS


def test_a_tag_is_19_bytes_version_producer_epoch_n() -> None:
    tag = TxnTag(producer_id=7, producer_epoch=4, n=258)
    encoded = tag.encode()
    assert encoded == b"\x01" + struct.pack(">q", 7) + struct.pack(">h", 4) + struct.pack(">Q", 258)
    assert encoded.hex() == "01000000000000000700040000000000000102"
    assert decode(encoded) == tag
    assert tag.header() == [("turnledger-txn", encoded)] and HEADER == "turnledger-txn"
    assert str(tag) == "7/4/258"


@pytest.mark.parametrize(
    "value",
    [None, b"", b"\x02" + bytes(18), bytes(18), bytes(20), b"\x01" + bytes(17)],
)
def test_anything_but_a_version_1_tag_decodes_to_none(value: bytes | None) -> None:
    assert decode(value) is None


def test_the_tag_among_headers() -> None:
    tag = TxnTag(1, 2, 3)
    assert tag_of([("x", b"1"), *tag.header()]) == tag
    assert tag_of([("x", b"1")]) is None
    assert tag_of([]) is None and tag_of(None) is None
    assert tag_of([(HEADER, b"garbage")]) is None


@pytest.mark.parametrize(
    ("finding", "action"),
    [
        (Finding.COMMITTED, Action.COMMIT),
        (Finding.COMMITTED_LATE, Action.ABORT),
        (Finding.ABORTED, Action.ABORT),
        (Finding.COMMITTED_UNCHECKED, Action.REPORT),
        (Finding.UNDECIDED, Action.REPORT),
        (Finding.NOT_FOUND, Action.REPORT),
        (Finding.UNTAGGED, Action.REPORT),
        (Finding.NOT_ITS_TAG, Action.REPORT),
        (Finding.UNREADABLE, Action.REPORT),
        (Finding.HANGS_WITH_IT, Action.ASK_COORDINATOR),
        (Finding.SPAN_UNCHECKED, Action.REPORT),
    ],
)
def test_the_resolution_table_row_by_row(finding: Finding, action: Action) -> None:
    assert RESOLUTION[finding] is action


def test_every_finding_has_a_row_and_only_a_proven_outcome_writes_a_marker() -> None:
    assert set(RESOLUTION) == set(Finding)
    writes = {f for f, a in RESOLUTION.items() if a in (Action.COMMIT, Action.ABORT)}
    assert writes == {Finding.COMMITTED, Finding.COMMITTED_LATE, Finding.ABORTED}
    assert {f for f, a in RESOLUTION.items() if a is Action.ASK_COORDINATOR} == {Finding.HANGS_WITH_IT}


CHANGELOG = TopicPartition("log", 3)
OUTPUT = TopicPartition("t", 3)


@dataclass
class FakeEvidence:
    """Answers each state's evidence from `by_tp`, and records the order it was asked in."""

    by_tp: dict[TopicPartition, Evidence]
    asked: list[TopicPartition] = field(default_factory=list)

    async def evidence(self, states: Any) -> list[Evidence]:
        self.asked += [s.tp for s in states]
        return [self.by_tp[s.tp] for s in states]


@dataclass
class SweepProducer:
    client: FakeClient
    _txn_manager: FakeTxnManager

    async def partitions_for(self, topic: str) -> set[int]:
        return {3}


@dataclass
class FakeCoordinator:
    """A `CoordinatorLog` whose last entry of producer 7, epoch 4 is `status` (right after its Prepare
    listing the changelog, when `proven`), on a leader that verifies produces when `verifying`."""

    status: TxnStatus
    proven: bool = True
    verifying: bool | Exception = True

    async def recorded(self, producer_id: int, producer_epoch: int) -> Recorded:
        assert (producer_id, producer_epoch) == (7, 4)
        return Recorded(self.status, frozenset({("log", 3)}), 812)

    async def completed(self, state: ProducerState) -> TxnStatus | None:
        assert state.tp == CHANGELOG
        return self.status if self.proven else None

    async def verifies(self, tp: TopicPartition) -> bool:
        assert tp == CHANGELOG
        if isinstance(self.verifying, Exception):
            raise self.verifying
        return self.verifying


def marker_of(sent: bytes) -> tuple[int, int, bool, str, int]:
    """(producer id, epoch, commit, topic, partition) of a WriteTxnMarkers v1 request's one marker."""
    producer_id, epoch, commit = struct.unpack_from(">qh?", sent, 1)
    name_len = sent[1 + 11 + 1] - 1
    topic = sent[14 : 14 + name_len].decode()
    (partition,) = struct.unpack_from(">i", sent, 14 + name_len + 1)
    return producer_id, epoch, commit, topic, partition


async def sweep_with(
    monkeypatch: pytest.MonkeyPatch,
    states: list[ProducerState],
    evidence: FakeEvidence,
    coordinator: FakeCoordinator | None = None,
) -> tuple[SweepProducer, list[ProducerState]]:
    async def described(_client: Any, tps: Any) -> producer_states.Described:
        return producer_states.Described([s for s in states if s.tp in tps], {})

    monkeypatch.setattr(hanging, "describe_producers", described)
    producer = SweepProducer(
        FakeClient(Cluster({OUTPUT: 2, CHANGELOG: 2}), markers_answer(0)), FakeTxnManager(*OURS)
    )
    sweep = HangingSweep(producer, CHANGELOG, ["t"], evidence, coordinator)  # type: ignore[arg-type]
    left = await sweep.sweep_written()
    assert await sweep.sweep_written() == []  # each state once per term
    return producer, left


def counts() -> tuple[float, float, float]:
    return (
        live.PROCESSOR_HANGING_FOUND._value.get(),
        live.PROCESSOR_HANGING_RESOLVED.labels("commit")._value.get(),
        live.PROCESSOR_HANGING_RESOLVED.labels("abort")._value.get(),
    )


async def test_the_sweep_writes_the_proven_marker_changelog_first(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tag = TxnTag(7, 4, 9)
    states = [state(7, 4, 120, OUTPUT), state(7, 4, 40, CHANGELOG), state(7, 5, 130), state(8, 1, 90)]
    evidence = FakeEvidence(
        {OUTPUT: Evidence(Finding.COMMITTED, tag, 38), CHANGELOG: Evidence(Finding.COMMITTED_LATE, tag, 38)}
    )
    before = counts()
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        producer, left = await sweep_with(monkeypatch, states, evidence)

    assert left == []
    assert evidence.asked == [CHANGELOG, OUTPUT]  # the changelog's first
    assert [marker_of(sent) for _node, sent in producer.client.sent] == [
        (7, 4, False, "log", 3),
        (7, 4, True, "t", 3),
    ]
    after = counts()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (0, 1, 1)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            "log-3: ended the hanging transaction of our producer id 7 (epoch 4, ours is 5) open since "
            "offset 40 with an abort marker: its tag 7/4/9 is on log-3 at offset 38, and "
            + Finding.COMMITTED_LATE.value,
        ),
        (
            "WARNING",
            "t-3: ended the hanging transaction of our producer id 7 (epoch 4, ours is 5) open since "
            "offset 120 with a commit marker: its tag 7/4/9 is on log-3 at offset 38, and "
            + Finding.COMMITTED.value,
        ),
    ]


@pytest.mark.parametrize(
    "finding", [f for f, action in RESOLUTION.items() if action is Action.REPORT], ids=lambda f: f.name
)
async def test_an_unproven_outcome_is_reported_and_nothing_is_written(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, finding: Finding
) -> None:
    states = [state(7, 4, 120, OUTPUT), state(7, 5, 130), state(8, 1, 90), state(7, 3, None)]
    before = counts()
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        producer, left = await sweep_with(monkeypatch, states, FakeEvidence({OUTPUT: Evidence(finding)}))

    assert left == [states[0]]
    assert producer.client.sent == []
    after = counts()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 0, 0)
    [(level, message)] = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert level == "ERROR"
    assert message.startswith(
        "t-3: a hanging transaction of our producer id 7 (epoch 4, ours is 5) is open since offset 120"
    )
    assert f"could not be proved from the changelog ({finding.value})" in message
    assert message.endswith(
        "kafka-transactions.sh abort --topic t --partition 3 --start-offset 120, or with a commit marker"
    )


async def test_a_refused_marker_is_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each refused marker is reported with why, and the sweep goes on to the next state."""
    states = [state(7, 4, 120, OUTPUT), state(7, 4, 90, OUTPUT)]

    async def described(_client: Any, tps: Any) -> producer_states.Described:
        return producer_states.Described([s for s in states if s.tp in tps], {})

    monkeypatch.setattr(hanging, "describe_producers", described)
    producer = SweepProducer(FakeClient(Cluster({OUTPUT: 2}), markers_answer(47)), FakeTxnManager(*OURS))
    evidence = FakeEvidence({OUTPUT: Evidence(Finding.ABORTED, TxnTag(7, 4, 1), 5)})
    before = counts()
    coordinator = FakeCoordinator(TxnStatus.COMPLETE_ABORT)
    sweep = HangingSweep(producer, CHANGELOG, ["t"], evidence, coordinator)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="turnledger.processors.hanging"):
        assert await sweep.sweep_written() == states
    after = counts()
    assert (after[0] - before[0], after[2] - before[2]) == (2, 0)
    reports = [r.getMessage() for r in caplog.records]
    assert len(reports) == 2
    assert all(
        f"could not be proved from the changelog ({Finding.ABORTED.value}; its abort marker: " in m
        and "); the coordinator's log (offset 812) records COMPLETE_ABORT for that producer id and epoch, "
        "and its transaction does not list t-3; check the transaction's marker on the changelog"
        in m
        for m in reports
    )


async def test_a_report_does_not_stop_the_sweep_and_quotes_the_coordinator(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The changelog's state reported (its outcome undecided), the output's still ended after it; the
    report says what the coordinator recorded."""
    states = [state(7, 4, 120, OUTPUT), state(7, 4, 40, CHANGELOG)]
    evidence = FakeEvidence(
        {
            CHANGELOG: Evidence(Finding.UNDECIDED, TxnTag(7, 4, 9), 40),
            OUTPUT: Evidence(Finding.COMMITTED, TxnTag(7, 4, 9), 38),
        }
    )
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        producer, left = await sweep_with(
            monkeypatch, states, evidence, FakeCoordinator(TxnStatus.COMPLETE_COMMIT)
        )
    assert left == [states[1]]
    assert [marker_of(sent) for _node, sent in producer.client.sent] == [(7, 4, True, "t", 3)]
    [(level, report), (resolved_level, _)] = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert (level, resolved_level) == ("ERROR", "WARNING")
    assert f"({Finding.UNDECIDED.value}); {SAID.format('COMPLETE_COMMIT')}; check the transaction's" in report


SAID = (
    "the coordinator's log (offset 812) records {} for that producer id and epoch, and its transaction "
    "lists log-3"
)


@pytest.mark.parametrize(
    ("status", "commit"), [(TxnStatus.COMPLETE_COMMIT, True), (TxnStatus.COMPLETE_ABORT, False)]
)
async def test_a_changelog_that_hangs_with_its_own_transaction_gets_the_coordinators_marker(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, status: TxnStatus, commit: bool
) -> None:
    tag = TxnTag(7, 4, 9)
    states = [state(7, 4, 40, CHANGELOG)]
    evidence = FakeEvidence({CHANGELOG: Evidence(Finding.HANGS_WITH_IT, tag, 40)})
    before = counts()
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        producer, left = await sweep_with(monkeypatch, states, evidence, FakeCoordinator(status))

    assert left == []
    assert [marker_of(sent) for _node, sent in producer.client.sent] == [(7, 4, commit, "log", 3)]
    after = counts()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (0, commit, not commit)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            "log-3: ended the hanging transaction of our producer id 7 (epoch 4, ours is 5) open since "
            f"offset 40 with {'a commit' if commit else 'an abort'} marker: its tag 7/4/9 is on log-3 at "
            f"offset 40, and {Finding.HANGS_WITH_IT.value}; {SAID.format(status.name)}, {status.name} right "
            "after its Prepare",
        )
    ]


@pytest.mark.parametrize(
    ("coordinator", "why"),
    [
        (None, ""),
        (
            FakeCoordinator(TxnStatus.COMPLETE_COMMIT, proven=False),
            SAID.format("COMPLETE_COMMIT")
            + ": no Complete entry right after its Prepare proves how it ended",
        ),
        (
            FakeCoordinator(TxnStatus.COMPLETE_COMMIT, verifying=False),
            SAID.format("COMPLETE_COMMIT")
            + ", but the leader of log-3 does not verify transactional produces "
            "(transaction.partition.verification.enable is not true), so a batch may have landed after that "
            "transaction ended",
        ),
        (
            FakeCoordinator(TxnStatus.COMPLETE_ABORT, verifying=OSError("down")),
            SAID.format("COMPLETE_ABORT") + "; the coordinator's proof could not be read (OSError('down'))",
        ),
    ],
    ids=["no coordinator", "not proven", "not verifying", "unreadable"],
)
async def test_a_coordinator_that_proves_nothing_leaves_it_reported(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    coordinator: FakeCoordinator | None,
    why: str,
) -> None:
    states = [state(7, 4, 40, CHANGELOG)]
    evidence = FakeEvidence({CHANGELOG: Evidence(Finding.HANGS_WITH_IT, TxnTag(7, 4, 9), 40)})
    before = counts()
    with caplog.at_level(logging.WARNING, logger="turnledger.processors.hanging"):
        producer, left = await sweep_with(monkeypatch, states, evidence, coordinator)

    assert left == states and producer.client.sent == []
    after = counts()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 0, 0)
    [(level, message)] = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert level == "ERROR"
    assert (
        f"could not be proved from the changelog ({Finding.HANGS_WITH_IT.value}){'; ' + why if why else ''}; "
        in (message)
    )


async def test_the_changelog_sweep_reports_another_producers_open_transaction_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On the changelog, an open transaction of another producer id is reported once per term, word
    for word; the sweep of every written partition does not report it."""
    states = [state(8, 2, 90, CHANGELOG), state(7, 5, 130, CHANGELOG), state(8, 2, None, OUTPUT)]

    async def described(_client: Any, tps: Any) -> producer_states.Described:
        return producer_states.Described([s for s in states if s.tp in tps], {})

    monkeypatch.setattr(hanging, "describe_producers", described)
    producer = SweepProducer(FakeClient(Cluster({CHANGELOG: 2}), markers_answer(0)), FakeTxnManager(*OURS))
    sweep = HangingSweep(producer, CHANGELOG, ["t"], FakeEvidence({}))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="turnledger.processors.hanging"):
        assert await sweep.sweep_written() == []
        assert caplog.records == []
        assert await sweep.sweep_changelog() == []
        assert await sweep.sweep_changelog() == []
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "ERROR",
            "log-3 is held by an open transaction of producer id 8 (epoch 2) since offset 90, not this "
            "partition's producer (id 7): only this partition's transactional.id should write here. If no "
            "such producer is alive, end it with kafka-transactions.sh abort --topic log --partition 3 "
            "--start-offset 90",
        )
    ]
    assert producer.client.sent == []


@pytest.mark.parametrize(
    "error",
    [
        producer_states.ProducerStatesError("no leader"),
        UnsupportedVersionError("old"),
        NotImplementedError("x"),
    ],
    ids=["states", "version", "not implemented"],
)
async def test_a_broker_that_cannot_describe_producers_skips_the_sweep_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    async def described(_client: Any, tps: Any) -> producer_states.Described:
        raise error

    monkeypatch.setattr(hanging, "describe_producers", described)
    producer = SweepProducer(FakeClient(Cluster({}), markers_answer(0)), FakeTxnManager(*OURS))
    sweep = HangingSweep(producer, CHANGELOG, ["t"], FakeEvidence({}))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="turnledger.processors.hanging"):
        assert await sweep.sweep_written() == []
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"could not look for hanging transactions on 2 partitions: {error}")
    ]


@dataclass
class TopicsProducer(SweepProducer):
    """A sweep's producer whose topics have partitions of their own."""

    async def partitions_for(self, topic: str) -> set[int]:
        return {"t": {3}, "u": {1, 0}}[topic]


async def test_a_partition_the_broker_cannot_describe_is_logged_and_the_rest_swept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    hanging_state = state(7, 4, 120, OUTPUT)

    other = [TopicPartition("u", 0), TopicPartition("u", 1)]

    async def described(client: Any, tps: Any) -> producer_states.Described:
        assert client is producer.client
        assert tps == [CHANGELOG, OUTPUT, *other]  # the changelog, then every partition of the outputs
        return producer_states.Described([hanging_state], {CHANGELOG: "NOT_LEADER_OR_FOLLOWER"})

    monkeypatch.setattr(hanging, "describe_producers", described)
    producer = TopicsProducer(FakeClient(Cluster({OUTPUT: 2}), markers_answer(0)), FakeTxnManager(*OURS))
    evidence = FakeEvidence({OUTPUT: Evidence(Finding.UNTAGGED)})
    sweep = HangingSweep(producer, CHANGELOG, ["t", "u"], evidence)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="turnledger.processors.hanging"):
        assert await sweep.sweep_written() == [hanging_state]
    info, error = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert info == ("INFO", "could not look for hanging transactions on log-3: NOT_LEADER_OR_FOLLOWER")
    assert error == (
        "ERROR",
        "t-3: a hanging transaction of our producer id 7 (epoch 4, ours is 5) is open since offset 120: "
        "its coordinator has ended it, so no marker will end it here, and read_committed readers of this "
        "partition wait until one does. Its outcome could not be proved from the changelog "
        f"({Finding.UNTAGGED.value}); check the transaction's marker on the changelog, then end it with "
        "kafka-transactions.sh abort --topic t --partition 3 --start-offset 120, or with a commit marker",
    )
