"""A projection split in slot groups (`projections/shards.py`, `ProjectionKeys.shards`), without Redis:
which group a conversation's keys live in, how a batch becomes one plan per group with its marks, where
a split projection stands, and what cannot be split. On a real cluster:
tests/integration/test_redis_cluster_shards.py."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from tests.unit.gateway.decisions import manifest_issued
from tests.unit.projections.test_plan import rec
from turnledger.errors import ProjectionError, RedisSettingsError
from turnledger.model.events import Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.projections.keys import ProjectionKeys, shard_base, shard_of
from turnledger.projections.plan import DecodedRecord, Planner
from turnledger.projections.shards import (
    ProjectionLayoutError,
    conversation_of,
    discover,
    ensure_layout,
    group_epochs,
    lowest_applied,
    plan_groups,
)

SPLIT = ProjectionKeys("tl:", one_slot=True, shards=4)
"""c1 and c-d are in group 1, c-a and c-c in 2, c-b in 0, c-e in 3 (CRC-32 of the id, modulo 4)."""


def rejected(conversation: str | None, at: int = 7) -> Rejected:
    return Rejected(conversation_id=conversation, reason=ReasonCode.INVALID_EVENT, occurred_at_ms=at)


def test_a_conversation_s_group_is_the_crc32_of_its_id_modulo_the_group_count() -> None:
    assert [shard_of(c, 4) for c in ("c1", "c-a", "c-b", "c-c", "c-d", "c-e")] == [1, 2, 0, 2, 1, 3]
    assert shard_of("c-e", 4) == zlib.crc32(b"c-e") % 4 == 2820825939 % 4
    assert shard_of("c-e", 1) == 0 and shard_of(None, 4) == 0
    assert [shard_of(c, 2) for c in ("c1", "c-a", "c-d", "c-e")] == [1, 0, 1, 1]
    assert shard_of("é", 7) == zlib.crc32("é".encode()) % 7  # UTF-8, as any other language computes it


def test_a_split_projection_keeps_each_conversation_in_its_group_s_hash_tag() -> None:
    assert SPLIT.base == "{tl:}" and SPLIT.layout == "{tl:}layout"
    assert [g.base for g in SPLIT.groups] == ["{tl:#0}", "{tl:#1}", "{tl:#2}", "{tl:#3}"]
    assert shard_base("tl:", 3) == "{tl:#3}"
    assert (SPLIT.history("c-e"), SPLIT.events("c-b"), SPLIT.operation("c-a", "op")) == (
        "{tl:#3}history:c-e",
        "{tl:#0}events:c-b",
        "{tl:#2}op:c-a:op",
    )
    for conversation in ("c1", "c-a", "c-b", "c-e"):
        group = SPLIT.group_of(conversation)
        assert group is SPLIT.groups[shard_of(conversation, 4)]
        names = [
            "conversation",
            "history",
            "history_order",
            "operations",
            "quarantine",
            "events",
        ]  # every per-conversation key, asked of the whole projection or of its group
        for name in names:
            assert getattr(SPLIT, name)(conversation) == getattr(group, name)(conversation)
        assert SPLIT.previews(conversation, "op") == group.previews(conversation, "op")
    assert SPLIT.groups[3].offsets == "{tl:#3}offsets" and SPLIT.groups[0].stats == "{tl:#0}stats"


def test_up_to_1024_groups_and_a_projection_beside_split_alike() -> None:
    widest = ProjectionKeys("tl:", one_slot=True, shards=1024)
    assert len(widest.groups) == 1024 and widest.groups[-1].base == "{tl:#1023}"
    beside = SPLIT.beside("verify:tl:")
    assert (beside.shards, beside.groups[2].base) == (4, "{verify:tl:#2}")


def test_what_each_group_holds_for_all_its_conversations_is_asked_of_the_groups() -> None:
    for name in ("offsets", "stats", "rejections", "conversations"):
        with pytest.raises(ProjectionError, match=f"split in 4 slot groups, each with its own {name}"):
            getattr(SPLIT, name)
    with pytest.raises(ProjectionError, match="its own op-conversations:op-1"):
        SPLIT.operation_conversations("op-1")


def test_one_group_is_the_projection_as_it_always_was() -> None:
    for keys in (ProjectionKeys("tl:"), ProjectionKeys("tl:", one_slot=True)):
        assert keys.groups == (keys,) and not keys.split
        assert keys.group_of("c-e") is keys
    assert ProjectionKeys("tl:", one_slot=True).history("c-e") == "{tl:}history:c-e"
    assert ProjectionKeys("tl:").offsets == "tl:offsets"


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        (
            {"one_slot": False, "shards": 4},
            "--shards 4: slot groups spread a projection over the shards of a Redis Cluster",
        ),
        ({"one_slot": True, "shards": 0}, "--shards: from 1 to 1024 slot groups, not 0"),
        ({"one_slot": True, "shards": 1025}, "--shards: from 1 to 1024 slot groups, not 1025"),
    ],
)
def test_what_cannot_be_split_says_why(keys: dict[str, Any], said: str) -> None:
    with pytest.raises(RedisSettingsError, match=said):
        ProjectionKeys("tl:", **keys)


@pytest.mark.parametrize("prefix", ["tl:#3", "{a#1}:", "#"])
def test_a_cluster_prefix_cannot_hold_the_group_mark(prefix: str) -> None:
    """`{tl:#3}` is group 3 of the projection under `tl:`: a projection under `tl:#3` would share its keys."""
    with pytest.raises(RedisSettingsError) as refused:
        ProjectionKeys(prefix, one_slot=True)
    assert str(refused.value) == (
        f"key prefix {prefix!r}: on a Redis Cluster '#' marks a slot group's number in a projection's keys "
        "({tl:#3}), so a prefix holding it could name another projection's group; use a prefix without it"
    )
    assert ProjectionKeys(prefix).history("c") == f"{prefix}history:c"  # a single Redis has no groups


def test_a_prefix_with_its_own_hash_tag_cannot_be_split() -> None:
    with pytest.raises(RedisSettingsError) as refused:
        ProjectionKeys("{tl}:", one_slot=True, shards=2)
    assert str(refused.value) == (
        "key prefix '{tl}:' fixes its own hash tag, which would put every slot group in one slot: use a "
        "prefix without braces (such as 'tl:') with --shards"
    )
    assert ProjectionKeys("{tl}:", one_slot=True).history("c") == "{tl}:history:c"


def test_a_projection_of_one_group_is_planned_as_it_always_was() -> None:
    keys = ProjectionKeys("p:")
    batch = [rec(rejected("c-a"), 3, "rejections"), rec(rejected("c-e"), 4, "rejections"), rec(None, 9)]
    (only,) = plan_groups(keys, [Planner(keys)], batch)
    plain = Planner(keys).plan(batch)
    assert (only.plan.keys, only.plan.argv, only.records) == (plain.keys, plain.argv, [0, 1, 2])


def test_a_batch_is_planned_per_group_with_a_mark_per_partition_in_every_group() -> None:
    batch = [
        rec(rejected("c-a"), 10, "rejections"),  # group 2
        rec(rejected("c-e"), 11, "rejections"),  # group 3
        DecodedRecord("manifests", "x.manifests", 1, 4, manifest_issued("op1")),  # c1: group 1
        rec(rejected(None), 12, "rejections"),  # of no conversation: group 0
        rec(rejected("c-c"), 13, "rejections"),  # group 2
        DecodedRecord("committed", "x.committed", 0, 20, None),  # undecodable: group 0
    ]
    plans = plan_groups(SPLIT, [Planner(g) for g in SPLIT.groups], batch)
    assert [p.keys for p in plans] == list(SPLIT.groups)
    assert [p.records for p in plans] == [[3, 5], [2], [0, 4], [1]]
    marks = [["x.committed:0", "20", []], ["x.manifests:1", "4", []], ["x.rejections:0", "13", []]]
    for group, plan in zip(SPLIT.groups, plans, strict=True):
        groups = plan.plan.groups
        assert groups[len(plan.records) :] == marks  # after its records, in every group
        assert plan.plan.keys[0] == group.offsets
        assert all(name.startswith(group.base) for name in plan.plan.keys)
    c_a = plans[2].plan.groups[0]
    assert c_a[:2] == ["x.rejections:0", "10"]
    assert c_a[2] == Planner(SPLIT.groups[2]).plan([batch[0]]).groups[0][2]


def test_a_mark_is_the_highest_offset_of_its_partition_in_the_batch() -> None:
    """Whatever order the batch lists a partition's records in; a partition whose only record is at
    offset 0 is marked at 0."""
    batch = [
        rec(rejected("c-a"), 13, "rejections"),
        rec(rejected("c-e"), 10, "rejections"),
        DecodedRecord("committed", "x.committed", 0, 0, None),
    ]
    plans = plan_groups(SPLIT, [Planner(g) for g in SPLIT.groups], batch)
    assert plans[1].plan.groups == [["x.committed:0", "0", []], ["x.rejections:0", "13", []]]


def test_a_record_s_conversation_is_its_manifest_s_for_a_manifest() -> None:
    assert conversation_of(DecodedRecord("manifests", "t", 0, 1, manifest_issued("op1"))) == "c1"
    assert conversation_of(rec(rejected("c-e"))) == "c-e"
    assert conversation_of(rec(rejected(None))) is None and conversation_of(rec(None)) is None


def test_a_split_projection_stands_where_its_slowest_group_stands() -> None:
    held = [{"a:0": 9, "a:1": 4, "b:0": 2}, {"a:0": 7, "a:1": 5, "b:0": 2}, {"a:0": 8, "a:1": 6}]
    assert lowest_applied(held) == {"a:0": 7, "a:1": 4}  # b:0: a group never applied it
    assert lowest_applied([held[0], held[2], held[1]]) == {"a:0": 7, "a:1": 4}  # whichever group lacks it
    assert lowest_applied([{"a:0": 3}]) == {"a:0": 3} and lowest_applied([]) == {}


def test_each_group_is_guarded_by_its_own_epoch() -> None:
    assert group_epochs("e0,e1,e2,e3", SPLIT) == ["e0", "e1", "e2", "e3"]
    assert group_epochs(None, SPLIT) == [None] * 4
    assert group_epochs("e0", ProjectionKeys("tl:")) == ["e0"]
    with pytest.raises(ProjectionError, match="epoch 'e0,e1' names 2 groups, the projection has 4"):
        group_epochs("e0,e1", SPLIT)


def test_a_layout_refusal_says_how_to_start_or_rebuild() -> None:
    assert str(ProjectionLayoutError("tl:", 8, 4)) == (
        "the projection under key prefix 'tl:' is split in 8 slot group(s), and this projector was "
        "started with --shards 4: start it with --shards 8 (or without --shards), or rebuild the "
        "projection in 4 with `turnledger replay rebuild --shards 4`"
    )


class LayoutRedis:
    """What `discover` and `ensure_layout` ask of Redis: GET, SET NX and EXISTS, as a cluster's client
    (`cluster_client`: so the keys are one-slot ones)."""

    def __init__(self, **held: str) -> None:
        self.held = {k: v.encode() for k, v in held.items()}
        self.sets: list[tuple[str, str]] = []

    async def get(self, key: str) -> bytes | None:
        return self.held.get(key)

    async def set(self, key: str, value: str, nx: bool = False) -> bool:
        assert nx
        self.sets.append((key, value))
        self.held.setdefault(key, value.encode())
        return True

    async def exists(self, key: str) -> int:
        return int(key in self.held)


@pytest.fixture
def cluster_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `LayoutRedis` counts as a cluster's client, nothing else does."""
    monkeypatch.setattr(
        "turnledger.projections.keys.is_cluster", lambda client: isinstance(client, LayoutRedis)
    )


@pytest.mark.usefixtures("cluster_client")
async def test_the_group_count_is_recorded_once_and_found_by_every_reader() -> None:
    redis = LayoutRedis()
    await ensure_layout(redis, SPLIT)  # type: ignore[arg-type]
    assert redis.sets == [("{tl:}layout", "4")]
    found = await discover("tl:", redis)  # type: ignore[arg-type]
    assert (found, found.groups) == (SPLIT, SPLIT.groups)
    await ensure_layout(redis, SPLIT)  # type: ignore[arg-type]
    assert len(redis.sets) == 1  # held already: checked, not written

    plain = LayoutRedis()
    await ensure_layout(plain, ProjectionKeys("tl:", one_slot=True))  # type: ignore[arg-type]
    assert plain.sets == []  # one group has no layout, as before slot groups
    one = ProjectionKeys("tl:", one_slot=True)
    assert await discover("tl:", plain) == one  # type: ignore[arg-type]
    assert await discover("tl:", LayoutRedis(**{"{tl:}layout": "1"})) == one  # type: ignore[arg-type]
    for count in (2, 1024):
        found = await discover("gw:", LayoutRedis(**{"{gw:}layout": str(count)}))  # type: ignore[arg-type]
        assert found == ProjectionKeys("gw:", one_slot=True, shards=count)
        assert found.groups[-1].base == f"{{gw:#{count - 1}}}"


@pytest.mark.usefixtures("cluster_client")
@pytest.mark.parametrize(
    ("held", "keys", "counts"),
    [
        ({"{gw:}layout": "8"}, ProjectionKeys("gw:", one_slot=True, shards=4), (8, 4)),
        ({"{gw:}layout": "4"}, ProjectionKeys("gw:", one_slot=True), (4, 1)),
        (
            {"{gw:}offsets": "~"},
            ProjectionKeys("gw:", one_slot=True, shards=4),
            (1, 4),
        ),  # from before layouts
    ],
)
async def test_a_projector_split_otherwise_than_the_projection_is_refused(
    held: dict[str, str], keys: ProjectionKeys, counts: tuple[int, int]
) -> None:
    redis = LayoutRedis(**held)
    with pytest.raises(ProjectionLayoutError) as refused:
        await ensure_layout(redis, keys)  # type: ignore[arg-type]
    assert str(refused.value) == str(ProjectionLayoutError("gw:", *counts))
    assert "under key prefix 'gw:'" in str(refused.value)
    assert (refused.value.held, refused.value.asked) == counts
    assert redis.sets == []


@pytest.mark.usefixtures("cluster_client")
@pytest.mark.parametrize("held", ["", "x", "0", "-3", "1025", "4.0", "²"])
async def test_a_layout_that_is_no_group_count_is_refused_by_readers_and_projectors(held: str) -> None:
    redis = LayoutRedis(**{"{tl:}layout": held})
    said = (
        f"{{tl:}}layout holds {held!r}, not a slot group count: rebuild the projection "
        "(`turnledger replay rebuild --shards N`)"
    )
    for asked in (discover("tl:", redis), ensure_layout(redis, SPLIT)):  # type: ignore[arg-type]
        with pytest.raises(ProjectionError) as refused:
            await asked
        assert str(refused.value) == said
