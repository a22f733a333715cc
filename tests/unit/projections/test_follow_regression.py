"""How a following projector finds applied offsets that went back in Redis (`follow.Follower`): the
offsets it saw applied per owned partition (`known`), read at positioning, raised by every batch,
forgotten on revocation, and compared with Redis's by `regressed` while it is idle. No Kafka, no
Redis: a consumer that only has an assignment and a Redis that only answers HGETALL."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition

from turnledger.projections.follow import Follower, _Rebalances
from turnledger.projections.keys import EPOCH_FIELD, ProjectionKeys
from turnledger.projections.settings import FollowSettings
from turnledger.records import SourceRecord

KEYS = ProjectionKeys("tl:")


class OffsetsOnly:
    """A Redis that holds only the projection's offsets hash."""

    def __init__(self, applied: dict[str, int]) -> None:
        self.applied = applied

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        assert key == KEYS.offsets
        return {EPOCH_FIELD.encode(): b"e1", **{k.encode(): str(v).encode() for k, v in self.applied.items()}}


class Assigned:
    def __init__(self, *tps: TopicPartition) -> None:
        self.tps = set(tps)
        self.paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return set(self.tps)

    def pause(self, tp: TopicPartition) -> None:
        self.paused.add(tp)


class Projection:
    def __init__(self, redis: OffsetsOnly) -> None:
        self.redis = redis
        self.keys = KEYS

    async def keep_layout(self) -> None:
        return None


def _follower(applied: dict[str, int], *tps: TopicPartition) -> Follower:
    follower = Follower(Projection(OffsetsOnly(applied)), FollowSettings())  # type: ignore[arg-type]
    follower.consumer = Assigned(*tps)  # type: ignore[assignment]
    return follower


def _records(*coordinates: tuple[str, int, int]) -> list[SourceRecord]:
    return [SourceRecord(topic, partition, offset, b"k", b"v") for topic, partition, offset in coordinates]


A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_a_batch_raises_what_is_known_to_its_highest_offset_per_partition() -> None:
    follower = _follower({}, A0, A1)
    follower.known = {"a:0": 7}
    follower.saw_applied(_records(("a", 0, 9), ("a", 0, 8), ("a", 1, 3), ("a", 0, 5)))
    assert follower.known == {"a:0": 9, "a:1": 3}
    follower.saw_applied(_records(("a", 0, 2)))
    assert follower.known == {"a:0": 9, "a:1": 3}, "an older record (a re-read) never lowers it"


async def test_offsets_in_redis_below_those_applied_are_reported_for_owned_partitions_only() -> None:
    follower = _follower({"a:0": 9, "a:1": 2, "b:0": 4}, A0, A1)
    follower.known = {"a:0": 9, "a:1": 3, "b:0": 5}
    assert await follower.regressed() == ["a:1"], "b:0 is not owned: another projector's"


async def test_a_partition_redis_has_no_offset_for_has_gone_back_too() -> None:
    """An emptied Redis (a restart without persistence while the projector was idle)."""
    follower = _follower({}, A0, B0)
    follower.known = {"a:0": 0, "b:0": 12}
    assert await follower.regressed() == ["a:0", "b:0"]


async def test_offsets_equal_or_ahead_are_not_a_regression() -> None:
    """Ahead: another projector shared the partition for a while and applied more."""
    follower = _follower({"a:0": 9, "a:1": 40}, A0, A1)
    follower.known = {"a:0": 9, "a:1": 3}
    assert await follower.regressed() == []


async def test_a_revoked_partition_is_forgotten() -> None:
    follower = _follower({}, A0, A1)
    follower.known = {"a:0": 9, "a:1": 3}
    follower.unpositioned = {A1}
    await _Rebalances(follower).on_partitions_revoked({A1})
    assert (follower.known, follower.unpositioned) == ({"a:0": 9}, set())


@pytest.mark.parametrize(
    ("applied", "known"),
    [({"a:0": 9, "a:1": 3}, {"a:0": 9, "a:1": 3}), ({"a:0": 9}, {"a:0": 9})],
)
async def test_positioning_knows_what_redis_holds_and_nothing_else(
    applied: dict[str, int], known: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition Redis has no offset for starts from the beginning and is known from its first batch."""
    follower = _follower(applied, A0, A1)
    follower.known = {"a:0": 50, "a:1": 50}
    follower.unpositioned = {A0, A1}
    sought: list[Any] = []

    async def start_positions(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {
            tp: applied[f"{tp.topic}:{tp.partition}"] + 1
            for tp in tps
            if f"{tp.topic}:{tp.partition}" in applied
        }

    async def ensure_epoch(redis: object, key: str) -> str:
        return "e1"

    async def seek_all(consumer: object, tps: list[TopicPartition], start: dict[TopicPartition, int]) -> None:
        sought.append((sorted(tps), start))

    follower.projector.start_positions = start_positions  # type: ignore[attr-defined]
    follower.consumer.resume = lambda tp: None  # type: ignore[union-attr]
    monkeypatch.setattr("turnledger.projections.follow.ensure_epoch", ensure_epoch)
    monkeypatch.setattr("turnledger.projections.follow.seek_all", seek_all)
    await follower._position()
    assert follower.known == known and follower.unpositioned == set()
    assert sought == [([A0, A1], _starts(applied))]


def _starts(applied: dict[str, int]) -> dict[TopicPartition, int]:
    """applied + 1 for every partition Redis holds an offset for."""
    starts = {}
    for field, offset in applied.items():
        topic, partition = field.split(":")
        starts[TopicPartition(topic, int(partition))] = offset + 1
    return starts


def test_a_partitions_first_record_at_offset_0_is_known_as_0() -> None:
    """Nothing known yet is below every offset, 0 included."""
    follower = _follower({}, A0)
    follower.saw_applied(_records(("a", 0, 0)))
    assert follower.known == {"a:0": 0}
