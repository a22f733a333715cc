"""Hanging transactions: the verdict table of processors/hanging.py, and the two admin requests of
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

from turnledger.kafka import producer_states
from turnledger.kafka.producer_states import (
    ProducerState,
    abort_transaction,
    describe_producers,
    write_marker,
)
from turnledger.observability import runtime_metrics as live
from turnledger.processors.hanging import Verdict, report_own_hanging, verdict

TP = TopicPartition("t", 3)
OURS = (7, 5)  # producer id, epoch


def state(producer_id: int, epoch: int, open_at: int | None) -> ProducerState:
    return ProducerState(
        TP, producer_id, epoch, coordinator_epoch=2, last_timestamp_ms=0, open_transaction_start=open_at
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
    assert described.states == [ProducerState(TP, 7, 4, 2, 1_700_000_000_000, 120)]
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


def test_only_our_older_epochs_are_reported_never_ended(caplog: pytest.LogCaptureFixture) -> None:
    """Reported, with the command; nothing is sent (whether to commit or abort is not known here)."""
    states = [state(7, 4, 120), state(7, 5, 130), state(8, 1, 90), state(7, 3, None)]
    producer = FakeProducer(FakeClient(Cluster({TP: 1}), b""), FakeTxnManager(*OURS))
    before = live.PROCESSOR_HANGING_FOUND._value.get()
    with caplog.at_level(logging.ERROR, logger="turnledger.processors.hanging"):
        assert report_own_hanging(producer, states) == [states[0]]  # type: ignore[arg-type]
    assert producer.client.sent == []
    assert live.PROCESSOR_HANGING_FOUND._value.get() - before == 1
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith(
        "t-3: a hanging transaction of our producer id 7 (epoch 4, ours is 5) is open since offset 120"
    )
    assert message.endswith(
        "kafka-transactions.sh abort --topic t --partition 3 --start-offset 120, or with a commit marker"
    )
