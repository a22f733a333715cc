"""Whole-projection operations by key prefix (`projections/snapshot.py`) against an in-memory keyspace
that answers SCAN with Redis's glob rules: what is dropped (and in how many DELs), what a snapshot holds
and how each Redis type reads, the snapshot of a split projection, and the differences listed. Only the
keys a projection names are dropped or dumped (`keys.is_key_under`, tested on its own in
test_key_names.py): a projection under `tl:v2:` is not part of the one under `tl:`."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import pytest

from turnledger.errors import ProjectionError
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.snapshot import (
    POSITION_KEYS,
    _glob_escape,
    compare_projections,
    diff_snapshots,
    drop_prefix,
    drop_projection,
    snapshot,
    snapshot_projection,
)

T = TypeVar("T")

SPLIT = ProjectionKeys("tl:", one_slot=True, shards=2)
TL = ProjectionKeys("tl:")
ODD = "a*b?[c]\\"
"""A prefix made of every character a SCAN pattern gives a meaning to."""


async def bounded(call: Awaitable[T]) -> T:
    return await asyncio.wait_for(call, 10)


def glob(pattern: str) -> re.Pattern[str]:
    """Redis's SCAN MATCH: `*`, `?`, `[...]`, and a backslash taking the next character as it is."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        end = pattern.find("]", i + 1) if c == "[" else -1
        if end > 0:
            out.append("[" + "".join(re.escape(m) for m in pattern[i + 1 : end]) + "]")
            i = end + 1
            continue
        out.append({"*": ".*", "?": "."}.get(c) or re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _range(items: list[T], start: int, stop: int) -> list[T]:
    """LRANGE/ZRANGE indexes: both ends included, negative ones from the end."""
    n = len(items)
    start, stop = start + n if start < 0 else start, stop + n if stop < 0 else stop
    return items[max(start, 0) : stop + 1]


class Keyspace:
    """What the snapshot functions ask of redis-py (`decode_responses=False`: bytes back), recorded."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[str, Any]] = {}
        self.ghosts: list[str] = []
        """Keys SCAN still reports though they are gone (deleted between two SCAN calls)."""
        self.scans: list[tuple[str, int]] = []
        self.deletes: list[int] = []

    def put(self, key: str, kind: str = "string", value: Any = "v") -> Keyspace:
        self.data[key] = (kind, value)
        return self

    async def scan_iter(self, match: str, count: int) -> AsyncIterator[bytes]:
        self.scans.append((match, count))
        pattern = glob(match)
        for key in [*self.data, *self.ghosts]:
            if pattern.fullmatch(key):
                yield key.encode()

    async def delete(self, *keys: bytes) -> int:
        self.deletes.append(len(keys))
        return sum(self.data.pop(key.decode(), None) is not None for key in keys)

    def _held(self, key: str, kind: str) -> Any:
        held_kind, value = self.data[key]
        assert held_kind == kind, f"{kind} command on a {held_kind}"
        return value

    async def type(self, key: str) -> bytes:
        return self.data.get(key, ("none", None))[0].encode()

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        return {k.encode(): v.encode() for k, v in self._held(key, "hash").items()}

    async def zrange(self, key: str, start: int, end: int, withscores: bool = False) -> list[Any]:
        ordered = sorted(self._held(key, "zset").items(), key=lambda item: (item[1], item[0]))
        chosen = _range(ordered, start, end)
        if withscores:
            return [(m.encode(), float(s)) for m, s in chosen]
        return [m.encode() for m, _ in chosen]

    async def lrange(self, key: str, start: int, end: int) -> list[bytes]:
        return [v.encode() for v in _range(self._held(key, "list"), start, end)]

    async def smembers(self, key: str) -> set[bytes]:
        return {m.encode() for m in self._held(key, "set")}

    async def get(self, key: str) -> bytes | None:
        value: str = self._held(key, "string")
        return value.encode()


def fill(redis: Keyspace, base: str, *names: str) -> None:
    for name in names:
        redis.put(base + name, value=name)


def every_key(keys: ProjectionKeys) -> list[str]:
    """One key of each name a projection (not split) makes."""
    return [
        keys.offsets,
        keys.layout,
        keys.stats,
        keys.rejections,
        keys.conversations,
        keys.events("c-1"),
        keys.conversation("c-1"),
        keys.history("c-1"),
        keys.history_order("c-1"),
        keys.operations("c-1"),
        keys.operation("c-1", "o-1"),
        keys.operation_conversations("o-1"),
        keys.quarantine("c-1"),
        keys.previews("c-1", "o-1"),
    ]


FIVE = [TL.history("c-1"), TL.operations("c-2"), TL.stats, TL.conversation("c-3"), TL.offsets]
STRANGERS = ["tl:", "tl:other-app:x", "tl:historyX", "tl:offsetsX", "tl:history", "tl:Stats", "tl:v2:stats"]
"""Keys under `tl:` that are no projection's."""


# --------------------------------------------------------------------------------------- drop_prefix


async def test_an_empty_prefix_is_refused_before_anything_is_asked() -> None:
    redis = Keyspace().put("k")
    with pytest.raises(ProjectionError) as refused:
        await bounded(drop_prefix(redis, ""))  # type: ignore[arg-type]
    assert str(refused.value) == "refusing to drop an empty key prefix (that would be the whole database)"
    assert (redis.scans, redis.deletes, list(redis.data)) == ([], [], ["k"])


async def test_keys_are_deleted_in_chunks_and_the_deleted_count_returned() -> None:
    redis = Keyspace()
    fill(redis, "", *FIVE)
    assert await bounded(drop_prefix(redis, "tl:", chunk=2)) == 5  # type: ignore[arg-type]
    assert redis.deletes == [2, 2, 1] and redis.scans == [("tl:*", 2)] and redis.data == {}


async def test_the_count_deleted_so_far_is_told_after_each_del() -> None:
    """Told as DEL answered: a key SCAN reported though gone counts for nothing."""
    redis = Keyspace()
    fill(redis, "", *FIVE)
    redis.ghosts = [TL.history("gone")]
    told: list[int] = []
    assert await bounded(drop_prefix(redis, "tl:", chunk=2, deleted=told.append)) == 5  # type: ignore[arg-type]
    assert (redis.deletes, told) == ([2, 2, 2], [2, 4, 5])


async def test_a_last_chunk_that_is_full_is_deleted_once() -> None:
    redis = Keyspace()
    fill(redis, "", *FIVE[:4])
    assert await bounded(drop_prefix(redis, "tl:", chunk=2)) == 4  # type: ignore[arg-type]
    assert redis.deletes == [2, 2] and redis.data == {}


async def test_a_chunk_of_one_deletes_key_by_key() -> None:
    redis = Keyspace()
    fill(redis, "", *FIVE[:3])
    assert await bounded(drop_prefix(redis, "tl:", chunk=1)) == 3  # type: ignore[arg-type]
    assert redis.deletes == [1, 1, 1] and redis.data == {}


async def test_the_default_chunk_is_500_keys() -> None:
    redis = Keyspace()
    fill(redis, "", *(TL.history(f"c-{i}") for i in range(1001)))
    assert await bounded(drop_prefix(redis, "tl:")) == 1001  # type: ignore[arg-type]
    assert redis.deletes == [500, 500, 1] and redis.scans == [("tl:*", 500)] and redis.data == {}


async def test_the_count_is_what_del_removed_not_what_scan_reported() -> None:
    redis = Keyspace()
    fill(redis, "", *FIVE[:3])
    redis.ghosts = [TL.history("gone"), TL.operations("left")]
    assert await bounded(drop_prefix(redis, "tl:", chunk=2)) == 3  # type: ignore[arg-type]
    assert redis.deletes == [2, 2, 1]


async def test_nothing_under_the_prefix_deletes_nothing() -> None:
    redis = Keyspace().put("other:a")
    assert await bounded(drop_prefix(redis, "tl:")) == 0  # type: ignore[arg-type]
    assert redis.deletes == [] and list(redis.data) == ["other:a"]


async def test_keys_of_other_prefixes_are_left_alone() -> None:
    redis = Keyspace()
    fill(redis, "", "tl:stats", "tm:stats", "t:stats", "xtl:stats", "TL:stats", "tl", "verify:tl:stats")
    fill(redis, "", "tl:history:c-1")
    assert await bounded(drop_prefix(redis, "tl:")) == 2  # type: ignore[arg-type]
    assert list(redis.data) == ["tm:stats", "t:stats", "xtl:stats", "TL:stats", "tl", "verify:tl:stats"]


async def test_scan_matches_the_prefix_as_it_is_written() -> None:
    redis = Keyspace()
    fill(redis, "", ODD + "stats", "aXXb?[c]\\stats", "a*bZ[c]\\stats", "a*b?c\\stats", "a*b?[c]stats")
    fill(redis, "", ODD + "history:c-1", ODD)
    assert await bounded(drop_prefix(redis, ODD)) == 2  # type: ignore[arg-type]
    assert redis.scans == [("a\\*b\\?\\[c\\]\\\\*", 500)]
    assert list(redis.data) == ["aXXb?[c]\\stats", "a*bZ[c]\\stats", "a*b?c\\stats", "a*b?[c]stats", ODD]


def test_each_glob_character_is_escaped_with_a_backslash() -> None:
    assert [_glob_escape(c) for c in "*?[]\\"] == ["\\*", "\\?", "\\[", "\\]", "\\\\"]
    assert _glob_escape("x*y?") == "x\\*y\\?"


def test_ordinary_characters_are_kept_as_they_are() -> None:
    plain = "tl:{tl:#3}-_./ X^!é"
    assert _glob_escape(plain) == plain and _glob_escape("") == ""


# ------------------------------------------------------------------------------------------ snapshot


async def test_a_snapshot_names_its_keys_relative_to_the_prefix_in_sorted_order() -> None:
    redis = Keyspace()
    fill(redis, "", "tl:stats", "other:stats", "tl:conversations", TL.history("c-2"), TL.history("c-1"))
    fill(redis, "", "xtl:stats", TL.operations("c-0"))
    taken = await bounded(snapshot(redis, "tl:"))  # type: ignore[arg-type]
    assert list(taken.items()) == [
        ("conversations", "tl:conversations"),
        ("history:c-1", "tl:history:c-1"),
        ("history:c-2", "tl:history:c-2"),
        ("ops:c-0", "tl:ops:c-0"),
        ("stats", "tl:stats"),
    ]
    assert redis.scans == [("tl:*", 500)]


async def test_a_snapshot_leaves_out_the_positions_and_keeps_what_only_resembles_them() -> None:
    assert POSITION_KEYS == ("offsets", "layout")
    redis = Keyspace()
    fill(redis, "tl:", "offsets", "layout", "conversations", "history:offsets", "conversation:layout")
    fill(redis, "tl:", "op-conversations:offsets", "ops:layout")
    taken = await bounded(snapshot(redis, "tl:"))  # type: ignore[arg-type]
    assert list(taken) == [
        "conversation:layout",
        "conversations",
        "history:offsets",
        "op-conversations:offsets",
        "ops:layout",
    ]


async def test_a_snapshot_under_a_hash_tag_leaves_out_its_positions() -> None:
    redis = Keyspace()
    fill(redis, "{tl:}", "offsets", "layout", "stats")
    assert await bounded(snapshot(redis, "{tl:}")) == {"stats": "stats"}  # type: ignore[arg-type]


async def test_a_snapshot_matches_the_prefix_as_it_is_written() -> None:
    redis = Keyspace()
    fill(redis, "", ODD + "stats", "aXXb?[c]\\stats", ODD + "offsets")
    assert await bounded(snapshot(redis, ODD)) == {"stats": ODD + "stats"}  # type: ignore[arg-type]
    assert redis.scans == [("a\\*b\\?\\[c\\]\\\\*", 500)]


async def test_each_redis_type_reads_as_plain_values() -> None:
    redis = Keyspace()
    redis.put(TL.history("c-1"), "hash", {"b": "2", "a": "1", "c": "3"})
    redis.put(TL.history_order("c-1"), "zset", {"late": 9.0, "b-tie": 2.0, "early": 1.5, "a-tie": 2.0})
    redis.put(TL.quarantine("c-1"), "list", ["third", "first", "second"])
    redis.put(TL.operations("c-1"), "set", {"m3", "m1", "m2", "m0"})
    redis.put(TL.conversation("c-1"), "string", "text é")  # what a key holds is read by its type, not name
    redis.put(TL.events("c-1"), "stream", None)
    taken = await bounded(snapshot(redis, "tl:"))  # type: ignore[arg-type]
    assert taken == {
        "conversation:c-1": "text é",
        "events:c-1": "<stream>",
        "history-order:c-1": [("early", 1.5), ("a-tie", 2.0), ("b-tie", 2.0), ("late", 9.0)],
        "history:c-1": {"a": "1", "b": "2", "c": "3"},
        "ops:c-1": ["m0", "m1", "m2", "m3"],
        "quarantine:c-1": ["third", "first", "second"],
    }
    assert list(taken["history:c-1"]) == ["a", "b", "c"]


async def test_a_key_gone_between_scan_and_read_shows_as_none() -> None:
    redis = Keyspace()
    redis.ghosts = [TL.history("gone"), "tl:gone"]
    assert await bounded(snapshot(redis, "tl:")) == {"history:gone": "<none>"}  # type: ignore[arg-type]


async def test_an_empty_keyspace_snapshots_empty() -> None:
    assert await bounded(snapshot(Keyspace(), "tl:")) == {}  # type: ignore[arg-type]


# ------------------------------------------------------------------------- only a projection's keys


async def test_a_projection_under_a_longer_prefix_is_neither_dropped_nor_dumped_with_the_shorter() -> None:
    v2 = every_key(ProjectionKeys("tl:v2:"))
    mine = every_key(TL)
    redis = Keyspace()
    fill(redis, "", *v2, *mine)
    taken = await bounded(snapshot(redis, "tl:"))  # type: ignore[arg-type]
    assert taken == {key[3:]: key for key in mine if key not in (TL.offsets, TL.layout)}
    assert len(taken) == 12
    assert await bounded(drop_prefix(redis, "tl:")) == 14  # type: ignore[arg-type]
    assert list(redis.data) == v2 and redis.deletes == [14]


async def test_a_projection_under_a_longer_prefix_keeps_its_own_keys() -> None:
    v2 = ProjectionKeys("tl:v2:")
    redis = Keyspace()
    fill(redis, "", *every_key(TL), *every_key(v2))
    taken = await bounded(snapshot(redis, "tl:v2:"))  # type: ignore[arg-type]
    assert len(taken) == 12 and all(value == "tl:v2:" + name for name, value in taken.items())
    assert await bounded(drop_prefix(redis, "tl:v2:")) == 14  # type: ignore[arg-type]
    assert list(redis.data) == every_key(TL)


async def test_keys_under_the_prefix_that_are_no_projection_s_are_neither_dropped_nor_dumped() -> None:
    redis = Keyspace()
    fill(redis, "", *STRANGERS, TL.stats, TL.history("c-1"))
    assert await bounded(snapshot(redis, "tl:")) == {  # type: ignore[arg-type]
        "history:c-1": "tl:history:c-1",
        "stats": "tl:stats",
    }
    assert await bounded(drop_prefix(redis, "tl:")) == 2  # type: ignore[arg-type]
    assert list(redis.data) == STRANGERS and redis.deletes == [2]


async def test_keys_that_are_no_projection_s_fill_no_chunk() -> None:
    redis = Keyspace()
    for stranger, key in zip(STRANGERS, FIVE, strict=False):
        fill(redis, "", stranger, key)
    fill(redis, "", *STRANGERS[len(FIVE) :])
    assert await bounded(drop_prefix(redis, "tl:", chunk=2)) == 5  # type: ignore[arg-type]
    assert redis.deletes == [2, 2, 1] and list(redis.data) == STRANGERS


async def test_only_strangers_under_the_prefix_deletes_nothing() -> None:
    redis = Keyspace()
    fill(redis, "", *STRANGERS)
    redis.ghosts = ["tl:gone"]
    assert await bounded(drop_prefix(redis, "tl:")) == 0  # type: ignore[arg-type]
    assert await bounded(snapshot(redis, "tl:")) == {}  # type: ignore[arg-type]
    assert redis.deletes == [] and list(redis.data) == STRANGERS


# ------------------------------------------------------------------------------- whole projections


async def test_a_split_projection_snapshots_each_group_led_by_its_number() -> None:
    assert [g.base for g in SPLIT.groups] == ["{tl:#0}", "{tl:#1}"]
    redis = Keyspace()
    fill(redis, "{tl:}", "layout", "stray")
    fill(redis, "{tl:#1}", "offsets", "history:c-2", "stats")
    fill(redis, "{tl:#0}", "stats", "offsets", "history:c-1", "layout")
    fill(redis, "tl:", "history:c-9")
    taken = await bounded(snapshot_projection(redis, SPLIT))  # type: ignore[arg-type]
    assert list(taken.items()) == [
        ("#0/history:c-1", "history:c-1"),
        ("#0/stats", "stats"),
        ("#1/history:c-2", "history:c-2"),
        ("#1/stats", "stats"),
    ]
    assert redis.scans == [("{tl:#0}*", 500), ("{tl:#1}*", 500)]


async def test_a_projection_not_split_snapshots_as_its_base() -> None:
    redis = Keyspace()
    fill(redis, "{tl:}", "stats", "offsets", "history:c-1")
    fill(redis, "tl:", "history:c-9")
    keys = ProjectionKeys("tl:", one_slot=True)
    taken = await bounded(snapshot_projection(redis, keys))  # type: ignore[arg-type]
    assert taken == await bounded(snapshot(redis, "{tl:}"))  # type: ignore[arg-type]
    assert list(taken) == ["history:c-1", "stats"]
    assert redis.scans == [("{tl:}*", 500)] * 2


async def test_dropping_a_split_projection_drops_its_base_and_every_group() -> None:
    redis = Keyspace()
    fill(redis, "{tl:}", "layout")
    fill(redis, "{tl:#0}", "offsets", "stats")
    fill(redis, "{tl:#1}", "stats")
    fill(redis, "", "{tl:#2}stats", "tl:stats", "{verify:tl:}layout")
    assert await bounded(drop_projection(redis, SPLIT)) == 4  # type: ignore[arg-type]
    assert [m for m, _ in redis.scans] == ["{tl:}*", "{tl:#0}*", "{tl:#1}*"]
    assert list(redis.data) == ["{tl:#2}stats", "tl:stats", "{verify:tl:}layout"]


async def test_dropping_under_layouts_that_share_bases_drops_each_base_once() -> None:
    redis = Keyspace()
    fill(redis, "{tl:}", "layout", "offsets")
    fill(redis, "{tl:#0}", "stats")
    fill(redis, "{tl:#1}", "stats")
    fill(redis, "{tl:#2}", "stats")
    three = ProjectionKeys("tl:", one_slot=True, shards=3)
    one = ProjectionKeys("tl:", one_slot=True)
    dropped = await bounded(drop_projection(redis, SPLIT, three, one))  # type: ignore[arg-type]
    assert dropped == 5 and redis.data == {}
    assert [m for m, _ in redis.scans] == ["{tl:}*", "{tl:#0}*", "{tl:#1}*", "{tl:#2}*"]


async def test_dropping_a_projection_not_split_drops_its_base() -> None:
    redis = Keyspace()
    fill(redis, "tl:", "offsets", "stats", "history:c-1")
    fill(redis, "", "tm:stats")
    assert await bounded(drop_projection(redis, ProjectionKeys("tl:"))) == 3  # type: ignore[arg-type]
    assert redis.scans == [("tl:*", 500)] and list(redis.data) == ["tm:stats"]


async def test_dropping_no_layout_drops_nothing() -> None:
    redis = Keyspace().put("tl:stats")
    told: list[tuple[int, int | None]] = []
    assert await bounded(drop_projection(redis, progress=lambda *t: told.append(t))) == 0  # type: ignore[arg-type]
    assert redis.scans == [] and told == [(0, 0)]


async def test_a_drop_tells_the_keys_deleted_over_every_base_then_their_count_as_the_total() -> None:
    """After each DEL the keys deleted so far under all the bases, with no total (SCAN learns how many
    there are only at its end); the drop over, the count deleted as the total."""
    redis = Keyspace()
    fill(redis, "{tl:}", "layout")
    fill(redis, "{tl:#0}", *(f"history:c-{i}" for i in range(501)))
    fill(redis, "{tl:#1}", "stats")
    told: list[tuple[int, int | None]] = []
    dropped = await bounded(drop_projection(redis, SPLIT, progress=lambda *t: told.append(t)))  # type: ignore[arg-type]
    assert dropped == 503 and redis.data == {}
    assert told == [(1, None), (501, None), (502, None), (503, None), (503, 503)]


async def test_a_snapshot_tells_the_keys_read_after_each_and_not_the_positions_it_leaves_out() -> None:
    redis = Keyspace()
    fill(redis, "tl:", "offsets", "history:c-1", "layout", "stats", "history")
    told: list[int] = []
    taken = await bounded(snapshot(redis, "tl:", told.append))  # type: ignore[arg-type]
    assert (list(taken), told) == (["history:c-1", "stats"], [1, 2])


async def test_a_split_projection_s_snapshot_tells_the_keys_read_over_every_group() -> None:
    redis = Keyspace()
    fill(redis, "{tl:}", "layout", "stray")
    fill(redis, "{tl:#0}", "stats", "offsets", "history:c-1")
    fill(redis, "{tl:#1}", "history:c-2", "stats", "history:c-3")
    told: list[int] = []
    taken = await bounded(snapshot_projection(redis, SPLIT, told.append))  # type: ignore[arg-type]
    assert (len(taken), told) == (5, [1, 2, 3, 4, 5])


async def test_a_projection_not_split_tells_the_keys_read_of_its_base() -> None:
    redis = Keyspace()
    fill(redis, "tl:", "stats", "offsets", "history:c-1")
    told: list[int] = []
    taken = await bounded(snapshot_projection(redis, TL, told.append))  # type: ignore[arg-type]
    assert (list(taken), told) == (["history:c-1", "stats"], [1, 2])


async def test_a_comparison_tells_the_keys_read_of_both_projections_then_their_count_as_the_total() -> None:
    """The first's, then the second's after them, with no total (SCAN learns how many there are only at
    its end); both read, the count read as the total."""
    redis = Keyspace()
    fill(redis, "{tl:#0}", "stats", "offsets")
    fill(redis, "{tl:#1}", "history:c-1", "history:c-2")
    check = SPLIT.beside("verify:tl:")
    fill(redis, "{verify:tl:#0}", "stats", "layout")
    fill(redis, "{verify:tl:#1}", "history:c-1", "history:c-3")
    told: list[tuple[int, int | None]] = []
    differences = await bounded(compare_projections(redis, SPLIT, check, lambda *t: told.append(t)))  # type: ignore[arg-type]
    assert differences == ["only in the first: #1/history:c-2", "only in the second: #1/history:c-3"]
    assert told == [(1, None), (2, None), (3, None), (4, None), (5, None), (6, None), (6, 6)]
    assert [m for m, _ in redis.scans] == ["{tl:#0}*", "{tl:#1}*", "{verify:tl:#0}*", "{verify:tl:#1}*"]


async def test_a_comparison_without_a_progress_lists_the_differences_alone() -> None:
    redis = Keyspace()
    fill(redis, "tl:", "stats", "history:c-1")
    fill(redis, "verify:tl:", "stats")
    assert await bounded(compare_projections(redis, TL, TL.beside("verify:tl:"))) == [  # type: ignore[arg-type]
        "only in the first: history:c-1"
    ]


async def test_comparing_empty_projections_tells_0_keys_of_0() -> None:
    told: list[tuple[int, int | None]] = []
    assert await bounded(compare_projections(Keyspace(), TL, TL, lambda *t: told.append(t))) == []  # type: ignore[arg-type]
    assert told == [(0, 0)]


# ------------------------------------------------------------------------------------- differences


def test_differences_are_listed_by_key_in_sorted_order() -> None:
    left = {"d": 1, "a": [1, 2], "c": {"x": "1"}, "same": "v", "b": "only left"}
    right = {"a": [2, 1], "e": "only right", "c": {"x": "1"}, "d": 2, "same": "v", "0": None}
    assert diff_snapshots(left, right) == [
        "only in the second: 0",
        "differs: a",
        "only in the first: b",
        "differs: d",
        "only in the second: e",
    ]


def test_equal_snapshots_have_no_differences() -> None:
    taken = {"a": [("m", 1.0)], "b": {"f": "v"}, "c": None}
    assert diff_snapshots(taken, dict(taken)) == [] and diff_snapshots({}, {}) == []


def test_a_key_held_as_none_on_one_side_is_not_taken_for_missing() -> None:
    assert diff_snapshots({"k": None}, {}) == ["only in the first: k"]
    assert diff_snapshots({}, {"k": None}) == ["only in the second: k"]
    assert diff_snapshots({"k": None}, {"k": ""}) == ["differs: k"]
