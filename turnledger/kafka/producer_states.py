"""Two admin requests aiokafka lacks: DescribeProducers (KIP-664) and WriteTxnMarkers, to find and
abort a *hanging transaction*: data of a transactional producer on a partition that its transaction
coordinator no longer tracks, so no marker will ever end it and read_committed readers of the
partition (the last stable offset) never pass it. Kafka's own tooling is `kafka-transactions.sh
find-hanging` / `abort`; these are the same two requests, sent to the partition's leader.

Wire formats (flexible versions: compact strings and arrays, tagged fields on every struct), as in
Kafka's `clients/src/main/resources/common/message/*.json`: DescribeProducers v0 (API key 61) and
WriteTxnMarkers v1 (API key 27; v0 was removed in Kafka 4.0, v1 is valid since 2.4).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from turnledger.errors import TurnledgerError

NO_TAGS: dict[int, bytes] = {}


class _DescribeProducersResponse_v0(Response):  # type: ignore[misc]
    API_KEY = 61
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("error_message", CompactString("utf-8")),
                        (
                            "active_producers",
                            CompactArray(
                                ("producer_id", Int64),
                                ("producer_epoch", Int32),
                                ("last_sequence", Int32),
                                ("last_timestamp", Int64),
                                ("coordinator_epoch", Int32),
                                ("current_txn_start_offset", Int64),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _DescribeProducersRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 61
    API_VERSION = 0
    RESPONSE_TYPE = _DescribeProducersResponse_v0
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


_DescribeProducersStruct: TypeAlias = _DescribeProducersRequest_v0


class _DescribeProducersRequest(Request[_DescribeProducersStruct]):  # type: ignore[misc]
    API_KEY = 61

    def __init__(self, topics: list[tuple[str, list[int], dict[int, bytes]]]) -> None:
        self._topics = topics

    def build(self, request_struct_class: type[_DescribeProducersStruct]) -> _DescribeProducersStruct:
        return request_struct_class(self._topics, NO_TAGS)


class _WriteTxnMarkersResponse_v1(Response):  # type: ignore[misc]
    API_KEY = 27
    API_VERSION = 1
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
                (
                    "topics",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        (
                            "partitions",
                            CompactArray(
                                ("partition_index", Int32), ("error_code", Int16), ("tags", TaggedFields)
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _WriteTxnMarkersRequest_v1(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 27
    API_VERSION = 1
    RESPONSE_TYPE = _WriteTxnMarkersResponse_v1
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                ("transaction_result", Boolean),
                (
                    "topics",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        ("partition_indexes", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("coordinator_epoch", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


_WriteTxnMarkersStruct: TypeAlias = _WriteTxnMarkersRequest_v1


class _WriteTxnMarkersRequest(Request[_WriteTxnMarkersStruct]):  # type: ignore[misc]
    API_KEY = 27

    def __init__(self, markers: list[tuple[Any, ...]]) -> None:
        self._markers = markers

    def build(self, request_struct_class: type[_WriteTxnMarkersStruct]) -> _WriteTxnMarkersStruct:
        return request_struct_class(self._markers, NO_TAGS)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition, as its leader keeps it."""

    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_timestamp_ms: int
    open_transaction_start: int | None
    """The offset of this producer's open transaction's first record on the partition, else None."""
    last_sequence: int = -1
    """The sequence number of this producer's last record on the partition (-1: none)."""


class ProducerStatesError(TurnledgerError):
    """A partition has no leader, or answered WriteTxnMarkers with an error."""


async def _leaders(client: AIOKafkaClient, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
    tps = list(tps)
    unknown = {tp.topic for tp in tps if client.cluster.leader_for_partition(tp) in (None, -1)}
    for topic in unknown:
        await client.add_topic(topic)
    if unknown:
        await client.force_metadata_update()
    by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
    for tp in tps:
        leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader < 0:
            raise ProducerStatesError(f"{tp.topic}-{tp.partition} has no leader")
        by_leader[leader].append(tp)
    return by_leader


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = defaultdict(list)
    for tp in tps:
        topics[tp.topic].append(tp.partition)
    return topics


@dataclass(frozen=True, slots=True)
class Described:
    """What the leaders said: the active producers of each partition they could describe, and the
    error of each partition they could not (e.g. NOT_LEADER_OR_FOLLOWER just after a topic's creation)."""

    states: list[ProducerState]
    errors: dict[TopicPartition, str]


async def describe_producers(client: AIOKafkaClient, tps: Iterable[TopicPartition]) -> Described:
    """The active producers of every partition in `tps` (one request per leader)."""
    described = Described([], {})
    for leader, leader_tps in (await _leaders(client, tps)).items():
        topics = [(name, parts, NO_TAGS) for name, parts in _by_topic(leader_tps).items()]
        response = await client.send(leader, _DescribeProducersRequest(topics))
        for name, partitions, _tags in response.topics:
            for index, error_code, error_message, producers, _ptags in partitions:
                tp = TopicPartition(name, index)
                if error_code:
                    described.errors[tp] = f"{for_code(error_code).__name__} {error_message or ''}".strip()
                    continue
                for pid, epoch, last_seq, last_ts, coordinator_epoch, txn_start, _t in producers:
                    open_at = None if txn_start < 0 else txn_start
                    described.states.append(
                        ProducerState(tp, pid, epoch, coordinator_epoch, last_ts, open_at, last_seq)
                    )
    return described


async def write_marker(client: AIOKafkaClient, state: ProducerState, *, commit: bool) -> None:
    """End `state`'s open transaction on its partition with a commit or an abort marker (what the
    coordinator would have written, had it still known the transaction). Which one is right is the
    caller's to know: see `processors/hanging.py`."""
    [(node, _)] = (await _leaders(client, [state.tp])).items()
    marker = (
        state.producer_id,
        state.producer_epoch,
        commit,
        [(state.tp.topic, [state.tp.partition], NO_TAGS)],
        state.coordinator_epoch,
        NO_TAGS,
    )
    response = await client.send(node, _WriteTxnMarkersRequest([marker]))
    for _pid, topics, _tags in response.markers:
        for name, partitions, _ttags in topics:
            for index, error_code, _ptags in partitions:
                if error_code:
                    raise ProducerStatesError(
                        f"WriteTxnMarkers {name}-{index} (producer {state.producer_id}): "
                        f"{for_code(error_code).__name__}"
                    )


async def abort_transaction(client: AIOKafkaClient, state: ProducerState) -> None:
    """`write_marker(..., commit=False)`: what `kafka-transactions.sh abort` does."""
    await write_marker(client, state, commit=False)
