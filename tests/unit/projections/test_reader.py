"""`ProjectionReader`: what the CLI and the services read from the projection, over an in-memory Redis
that answers the handful of commands the reader sends as redis-py does (bytes, scores as floats).

The projector's integration tests read a real Redis; these pin the reader's own rules: history in its
order, an operation's fields, which preview fields are previews, rejections merged over slot groups
newest first, the counters summed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from redis.asyncio.cluster import RedisCluster

from turnledger.model.events import Quarantined, Rejected
from turnledger.model.graph import Block
from turnledger.model.reasons import ReasonCode
from turnledger.projections.errors import AmbiguousOperationError
from turnledger.projections.keys import EPOCH_FIELD, ProjectionKeys
from turnledger.projections.plan import COMMITTED_MARKER
from turnledger.projections.reader import OperationStatus, Preview, ProjectionReader


def _b(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


class MemoryRedis:
    """Hashes, sorted sets, sets and lists, with the replies' shapes redis-py gives; `calls` records
    each command's name."""

    def __init__(self) -> None:
        self.hashes: dict[str, dict[bytes, bytes]] = {}
        self.zsets: dict[str, dict[bytes, float]] = {}
        self.sets: dict[str, set[bytes]] = {}
        self.lists: dict[str, list[bytes]] = {}
        self.strings: dict[str, bytes] = {}
        self.streams: dict[str, list[dict[bytes, bytes]]] = {}
        self.calls: list[str] = []
        self.closed = 0

    def hset(self, key: str, field: str | bytes, value: str | bytes) -> None:
        self.hashes.setdefault(key, {})[_b(field)] = _b(value)

    def zadd(self, key: str, member: str, score: float) -> None:
        self.zsets.setdefault(key, {})[_b(member)] = score

    def sadd(self, key: str, *members: str) -> None:
        self.sets.setdefault(key, set()).update(_b(m) for m in members)

    def rpush(self, key: str, value: str | bytes) -> None:
        self.lists.setdefault(key, []).append(_b(value))

    def xadd(self, key: str, fields: dict[str, str]) -> None:
        self.streams.setdefault(key, []).append({_b(k): _b(v) for k, v in fields.items()})

    async def exists(self, *keys: str) -> int:
        self.calls.append("exists")
        stores = (self.hashes, self.zsets, self.sets, self.lists, self.strings, self.streams)
        return sum(1 for key in keys for store in stores if key in store)

    async def aclose(self) -> None:
        self.closed += 1

    def _ordered(self, key: str) -> list[tuple[bytes, float]]:
        return sorted(self.zsets.get(key, {}).items(), key=lambda item: (item[1], item[0]))

    async def zrange(self, key: str, start: int, end: int) -> list[bytes]:
        self.calls.append("zrange")
        assert (start, end) == (0, -1)
        return [member for member, _ in self._ordered(key)]

    async def zrevrange(self, key: str, start: int, end: int, withscores: bool = False) -> list[Any]:
        self.calls.append("zrevrange")
        assert (start, end, withscores) == (0, -1, True)
        return list(reversed(self._ordered(key)))

    async def hmget(self, key: str, fields: Sequence[bytes]) -> list[bytes | None]:
        self.calls.append("hmget")
        held = self.hashes.get(key, {})
        return [held.get(field) for field in fields]

    async def hget(self, key: str, field: str) -> bytes | None:
        self.calls.append("hget")
        return self.hashes.get(key, {}).get(_b(field))

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        self.calls.append("hgetall")
        return dict(self.hashes.get(key, {}))

    async def smembers(self, key: str) -> set[bytes]:
        self.calls.append("smembers")
        return set(self.sets.get(key, set()))

    async def get(self, key: str) -> bytes | None:
        self.calls.append("get")
        return self.strings.get(key)

    async def lrange(self, key: str, start: int, end: int) -> list[bytes]:
        self.calls.append("lrange")
        assert (start, end) == (0, -1)
        return list(self.lists.get(key, []))


KEYS = ProjectionKeys("tl:")
SPLIT = ProjectionKeys("tl:", one_slot=True, shards=3)


def reader(redis: MemoryRedis, keys: ProjectionKeys = KEYS) -> ProjectionReader:
    return ProjectionReader(redis, keys=keys)  # type: ignore[arg-type]


def block(block_id: str, ordering: int, text: str) -> Block:
    return Block(
        id=block_id, role="user", kind="text", turn_id=f"turn-{ordering}", revision=ordering,
        ordering=ordering, trust_label="user", text=text,
    )  # fmt: skip


# ------------------------------------------------------------------------------------- the projection


def test_a_reader_reads_the_projection_under_its_prefix_as_one_group_unless_told() -> None:
    redis = MemoryRedis()
    assert ProjectionReader(redis).keys == ProjectionKeys("tl:")  # type: ignore[arg-type]
    assert ProjectionReader(redis, "other:").keys == ProjectionKeys("other:")  # type: ignore[arg-type]
    assert ProjectionReader(redis, "other:", SPLIT).keys is SPLIT  # type: ignore[arg-type]


def test_on_a_cluster_the_readers_keys_share_one_slot() -> None:
    cluster = RedisCluster(host="127.0.0.1", port=1)  # never connected: nothing is sent
    assert ProjectionReader(cluster, "other:").keys == ProjectionKeys("other:", one_slot=True)


async def test_open_asks_redis_how_the_projection_under_the_prefix_is_split() -> None:
    redis = MemoryRedis()
    opened = await ProjectionReader.open(redis, "other:")  # type: ignore[arg-type]
    assert opened.keys == ProjectionKeys("other:") and opened.redis is redis  # type: ignore[comparison-overlap]
    assert redis.calls == ["get"]
    assert (await ProjectionReader.open(redis)).keys == ProjectionKeys("tl:")  # type: ignore[arg-type]


async def test_the_applied_offsets_are_the_offsets_hash_without_its_epoch() -> None:
    redis = MemoryRedis()
    redis.hset(KEYS.offsets, "turnledger.committed:0", "41")
    redis.hset(KEYS.offsets, "turnledger.previews:3", "7")
    redis.hset(KEYS.offsets, EPOCH_FIELD, "a1b2")
    assert await reader(redis).applied_offsets() == {"turnledger.committed:0": 41, "turnledger.previews:3": 7}


# ------------------------------------------------------------------------------------------ history


async def test_history_is_every_committed_block_in_its_order_not_its_ids() -> None:
    redis = MemoryRedis()
    for ordering, (block_id, text) in enumerate([("z", "first"), ("a", "second"), ("m", "third")]):
        redis.hset(KEYS.history("c1"), block_id, block(block_id, ordering, text).model_dump_json())
        redis.zadd(KEYS.history_order("c1"), block_id, ordering)
    history = await reader(redis).history("c1")
    assert [(b.id, b.text) for b in history] == [("z", "first"), ("a", "second"), ("m", "third")]
    assert history[1] == block("a", 1, "second")


async def test_an_ordered_id_whose_block_is_not_held_is_left_out() -> None:
    redis = MemoryRedis()
    redis.hset(KEYS.history("c1"), "b", block("b", 1, "kept").model_dump_json())
    redis.zadd(KEYS.history_order("c1"), "a", 0)
    redis.zadd(KEYS.history_order("c1"), "b", 1)
    assert [b.id for b in await reader(redis).history("c1")] == ["b"]


async def test_a_conversation_without_history_is_empty_and_asks_for_no_block() -> None:
    redis = MemoryRedis()
    assert await reader(redis).history("nobody") == []
    assert redis.calls == ["zrange"]


async def test_a_conversation_is_known_by_its_events_or_its_operations_not_by_its_id() -> None:
    redis = MemoryRedis()
    redis.xadd(KEYS.events("rejected-only"), {"type": "rejected", "data": "{}"})
    redis.sadd(KEYS.operations("manifest-only"), "op-1")
    read = reader(redis)
    assert [await read.knows(c) for c in ("rejected-only", "manifest-only", "nobody")] == [True, True, False]
    assert redis.calls == ["exists"] * 3


async def test_a_split_projection_knows_a_conversation_in_its_own_group() -> None:
    redis = MemoryRedis()
    one, other = apart_in_two_groups()
    redis.xadd(SPLIT.events(one), {"type": "status", "data": "{}"})
    assert SPLIT.events(one).startswith(SPLIT.group_of(one).base)
    assert [await reader(redis, SPLIT).knows(c) for c in (one, other)] == [True, False]


async def test_the_revision_is_an_int_or_none_when_the_conversation_is_unknown() -> None:
    redis = MemoryRedis()
    redis.hset(KEYS.conversation("c1"), "revision", "17")
    assert await reader(redis).revision("c1") == 17
    assert await reader(redis).revision("c2") is None


# --------------------------------------------------------------------------------------- operations


def held_operation(redis: MemoryRedis, in_conversation: str, op_id: str, **fields: str) -> None:
    redis.sadd(KEYS.operations(in_conversation), op_id)
    redis.sadd(KEYS.operation_conversations(op_id), in_conversation)
    for name, value in fields.items():
        redis.hset(KEYS.operation(in_conversation, op_id), name, value)


async def test_an_operation_reads_every_field_with_its_type_and_keeps_them_all_sorted() -> None:
    redis = MemoryRedis()
    held_operation(
        redis, "c1", "op-1", state="COMMITTED", previous_state="STREAMING", generation="3",
        manifest_digest="sha256:m", reason="", detail="done", created_at_ms="100", updated_at_ms="250",
        conversation="c1", adapter="openai-chat@1",
    )  # fmt: skip
    status = await reader(redis).operation("c1", "op-1")
    assert status == OperationStatus(
        operation_id="op-1", conversation="c1", state="COMMITTED", previous_state="STREAMING",
        generation=3, manifest_digest="sha256:m", reason="", detail="done", created_at_ms=100,
        updated_at_ms=250,
        fields={
            "adapter": "openai-chat@1", "conversation": "c1", "created_at_ms": "100", "detail": "done",
            "generation": "3", "manifest_digest": "sha256:m", "previous_state": "STREAMING",
            "reason": "", "state": "COMMITTED", "updated_at_ms": "250",
        },
    )  # fmt: skip
    assert list(status.fields) == sorted(status.fields)
    assert status.to_json() == {"operationId": "op-1", **status.fields}


async def test_an_operation_with_only_a_state_has_generation_0_and_no_times() -> None:
    redis = MemoryRedis()
    held_operation(redis, "c1", "op-1", state="PREPARED")
    status = await reader(redis).operation("c1", "op-1")
    assert status is not None
    assert (status.generation, status.created_at_ms, status.updated_at_ms, status.conversation) == (
        0, None, None, None,
    )  # fmt: skip


async def test_an_unknown_operation_is_none() -> None:
    assert await reader(MemoryRedis()).operation("c1", "op-x") is None


async def test_operations_are_listed_by_id_and_one_whose_hash_is_gone_is_left_out() -> None:
    redis = MemoryRedis()
    held_operation(redis, "c1", "op-b", state="COMMITTED")
    held_operation(redis, "c1", "op-a", state="CANCELLED")
    redis.sadd(KEYS.operations("c1"), "op-gone")
    listed = await reader(redis).operations("c1")
    assert [(op.operation_id, op.state) for op in listed] == [("op-a", "CANCELLED"), ("op-b", "COMMITTED")]


async def test_an_operation_is_found_by_its_id_alone_in_the_one_conversation_that_has_it() -> None:
    redis = MemoryRedis()
    held_operation(redis, "c2", "op-1", state="STREAMING")
    found = await reader(redis).find_operation("op-1")
    assert found is not None and (found.operation_id, found.state) == ("op-1", "STREAMING")
    assert await reader(redis).find_operation("op-none") is None


async def test_an_id_in_two_conversations_is_ambiguous_and_names_both_in_order() -> None:
    redis = MemoryRedis()
    held_operation(redis, "c2", "op-1", state="COMMITTED")
    held_operation(redis, "c1", "op-1", state="PREPARED")
    with pytest.raises(AmbiguousOperationError) as raised:
        await reader(redis).find_operation("op-1")
    assert (raised.value.operation_id, raised.value.conversations) == ("op-1", ["c1", "c2"])
    named = await reader(redis).find_operation("op-1", conversation="c2")
    assert named is not None and named.state == "COMMITTED"


async def test_a_split_projection_finds_the_conversations_of_an_operation_in_every_group() -> None:
    redis = MemoryRedis()
    conversations = ["alpha", "beta", "gamma", "delta", "epsilon"]
    groups = {SPLIT.group_of(c).prefix for c in conversations}
    assert len(groups) > 1, "the conversations must fall in more than one group"
    for conversation in conversations:
        redis.sadd(SPLIT.group_of(conversation).operation_conversations("op-1"), conversation)
    assert await reader(redis, SPLIT).conversations_of_operation("op-1") == sorted(conversations)


# ----------------------------------------------------------------------------------------- previews


def preview_json(generation: int, index: int, through: int, text: str | None = None) -> bytes:
    held: dict[str, Any] = {
        "attemptGeneration": generation, "blockIndex": index, "throughSequence": through,
        "occurredAtMs": 1000 + through,
    }  # fmt: skip
    if text is not None:
        held["text"] = text
    return orjson.dumps(held)


async def test_previews_take_their_text_from_its_own_field_else_from_the_value_else_none() -> None:
    redis = MemoryRedis()
    redis.sadd(KEYS.operations("c1"), "op-1")
    key = KEYS.previews("c1", "op-1")
    redis.hset(key, "2:0", preview_json(2, 0, 7))
    redis.hset(key, "2:0:text", "appended héllo")
    redis.hset(key, "1:1", preview_json(1, 1, 3, text="whole text"))
    redis.hset(key, "1:0", preview_json(1, 0, 2))
    redis.hset(key, "~retracted:0", "1")
    assert await reader(redis).previews("c1") == [
        Preview("c1", "op-1", 1, 0, "", 2, 1002),
        Preview("c1", "op-1", 1, 1, "whole text", 3, 1003),
        Preview("c1", "op-1", 2, 0, "appended héllo", 7, 1007),
    ]


async def test_a_committed_operation_shows_no_preview_and_the_rest_are_ordered_by_operation() -> None:
    redis = MemoryRedis()
    redis.sadd(KEYS.operations("c1"), "op-b", "op-a", "op-0-done")
    redis.hset(KEYS.previews("c1", "op-0-done"), "1:0", preview_json(1, 0, 1, text="late"))
    redis.hset(KEYS.previews("c1", "op-0-done"), COMMITTED_MARKER, "1")
    redis.hset(KEYS.previews("c1", "op-b"), "1:0", preview_json(1, 0, 4, text="b"))
    redis.hset(KEYS.previews("c1", "op-a"), "3:2", preview_json(3, 2, 9, text="a"))
    shown = await reader(redis).previews("c1")
    assert [(p.operation_id, p.attempt_generation, p.block_index, p.text) for p in shown] == [
        ("op-a", 3, 2, "a"),
        ("op-b", 1, 0, "b"),
    ]
    assert all(not p.committed for p in shown)


def test_a_previews_length_counts_code_points_where_the_next_record_appends() -> None:
    assert Preview("c", "op", 1, 0, "héllo 🙂", 1, 1).length == 7


# ------------------------------------------------------------------------------ rejections and the rest


def rejected(conversation: str, at_ms: int, reason: ReasonCode = ReasonCode.ORPHANED_RESULT) -> Rejected:
    return Rejected(
        conversation_id=conversation, reason=reason, event_id=f"{conversation}@{at_ms}", occurred_at_ms=at_ms
    )


def apart_in_two_groups() -> tuple[str, str]:
    """Two conversations that fall in different slot groups of `SPLIT`."""
    first = "alpha"
    other = next(
        c for c in ("beta", "gamma", "delta", "epsilon") if SPLIT.group_of(c) != SPLIT.group_of(first)
    )
    return first, other


def held_rejection(redis: MemoryRedis, keys: ProjectionKeys, rejection: Rejected) -> None:
    group = keys.group_of(rejection.conversation_id)
    redis.zadd(group.rejections, rejection.model_dump_json(), rejection.occurred_at_ms)


async def test_rejections_are_newest_first_filtered_by_conversation_and_capped() -> None:
    redis = MemoryRedis()
    for rejection in [rejected("c1", 10), rejected("c2", 30), rejected("c1", 20), rejected("c1", 40)]:
        held_rejection(redis, KEYS, rejection)
    read = reader(redis)
    assert [r.event_id for r in await read.rejections()] == ["c1@40", "c2@30", "c1@20", "c1@10"]
    assert [r.event_id for r in await read.rejections("c1")] == ["c1@40", "c1@20", "c1@10"]
    assert [r.event_id for r in await read.rejections("c1", limit=2)] == ["c1@40", "c1@20"]
    assert [r.event_id for r in await read.rejections(limit=1)] == ["c1@40"]
    assert await read.rejections("c3") == []


async def test_rejections_of_a_split_projection_are_merged_over_its_groups_by_time() -> None:
    redis = MemoryRedis()
    conversations = ["alpha", "beta", "gamma", "delta", "epsilon"]
    for at_ms, conversation in enumerate(conversations * 2):
        held_rejection(redis, SPLIT, rejected(conversation, 100 + at_ms))
    merged = await reader(redis, SPLIT).rejections()
    assert [r.occurred_at_ms for r in merged] == list(range(109, 99, -1))
    one = await reader(redis, SPLIT).rejections("gamma")
    assert [r.event_id for r in one] == ["gamma@107", "gamma@102"]
    assert redis.calls.count("zrevrange") == 3 + 1, "every group for all, only its own for one"


async def test_rejections_at_one_time_in_two_groups_are_ordered_as_zrevrange_orders_one() -> None:
    redis = MemoryRedis()
    one, other = apart_in_two_groups()
    first, second = rejected(one, 500), rejected(other, 500)
    held_rejection(redis, SPLIT, first)
    held_rejection(redis, SPLIT, second)
    members = sorted([first.model_dump_json().encode(), second.model_dump_json().encode()], reverse=True)
    merged = await reader(redis, SPLIT).rejections()
    assert [r.model_dump_json().encode() for r in merged] == members


def quarantined(generation: int) -> Quarantined:
    return Quarantined(
        conversation_id="c1", operation_id="op-1", attempt_generation=generation,
        reason=ReasonCode.STALE_GENERATION, event_type="StreamDeltas", event_id=f"e{generation}",
        occurred_at_ms=generation,
    )  # fmt: skip


async def test_rejections_of_two_groups_are_merged_too_and_at_most_100_are_read_by_default() -> None:
    redis = MemoryRedis()
    two = ProjectionKeys("tl:", one_slot=True, shards=2)
    conversations = ["alpha", "beta", "gamma", "delta"]
    assert len({two.group_of(c) for c in conversations}) == 2
    for at_ms in range(101):
        held_rejection(redis, two, rejected(conversations[at_ms % 4], 1000 + at_ms))
    merged = await reader(redis, two).rejections()
    assert [r.occurred_at_ms for r in merged] == list(range(1100, 1000, -1))


async def test_the_quarantine_is_read_in_topic_order() -> None:
    redis = MemoryRedis()
    late = [quarantined(generation) for generation in (3, 1, 2)]
    for record in late:
        redis.rpush(KEYS.quarantine("c1"), record.model_dump_json())
    assert await reader(redis).quarantine("c1") == late
    assert await reader(redis).quarantine("c2") == []


async def test_the_counters_are_summed_over_the_groups_and_sorted_by_name() -> None:
    redis = MemoryRedis()
    for index, group in enumerate(SPLIT.groups):
        redis.hset(group.stats, "undecodable", str(index + 1))
        redis.hset(group.stats, f"only_in_{index}", "5")
    redis.hset(SPLIT.groups[2].stats, "conflicts", "4")
    assert await reader(redis, SPLIT).stats() == {
        "conflicts": 4, "only_in_0": 5, "only_in_1": 5, "only_in_2": 5, "undecodable": 6,
    }  # fmt: skip
    assert await reader(MemoryRedis()).stats() == {}
