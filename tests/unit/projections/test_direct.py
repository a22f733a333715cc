"""Projecting records that came from a fresh fold (`projections/direct.py`): the streams the projector
reads, their synthetic positions (`fold:<stream>:0`, offsets from 0 per stream), the batches and the
script call of each slot group, the records counted only when the script applied them. No Redis:
`projector_fakes.ScriptRedis` keeps the script's offsets rule and records every call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

import orjson
import pytest

from tests.unit.projections.projector_fakes import ScriptRedis, offsets_of
from turnledger.errors import ProjectionError
from turnledger.model.base import Frozen
from turnledger.model.events import PreviewRetracted, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.projections.direct import PROJECTED, DirectProjector, project_records
from turnledger.projections.keys import ProjectionKeys, shard_of
from turnledger.projections.plan import DecodedRecord, Planner
from turnledger.topology import Stream

T = TypeVar("T")

KEYS = ProjectionKeys("tl:")
SPLIT = ProjectionKeys("tl:", one_slot=True, shards=3)
IN_GROUP = {0: "c-2", 1: "c-8", 2: "c-1"}
"""A conversation of each of `SPLIT`'s slot groups."""


async def bounded(call: Awaitable[T]) -> T:
    return await asyncio.wait_for(call, 10)


def rejected(conversation_id: str | None = "c-2", at: int = 1) -> Rejected:
    return Rejected(conversation_id=conversation_id, reason=ReasonCode.ORPHANED_RESULT, occurred_at_ms=at)


def retracted(conversation_id: str = "c-2") -> PreviewRetracted:
    return PreviewRetracted(
        conversation_id=conversation_id, operation_id="op-1", attempt_generation=1,
        reason=ReasonCode.STREAM_DISCONNECTED, occurred_at_ms=5,
    )  # fmt: skip


def rejections(n: int, start: int = 0) -> list[tuple[str, Frozen]]:
    return [(Stream.REJECTIONS, rejected(at=start + i)) for i in range(n)]


def sizes(redis: ScriptRedis) -> list[int]:
    return [len(groups) for _, _, groups, _ in redis.calls]


async def apply(projector: DirectProjector, records: Iterable[tuple[str, Any]]) -> int:
    return await bounded(projector.apply(records))


def direct(redis: ScriptRedis, keys: ProjectionKeys = KEYS, **kw: Any) -> DirectProjector:
    return DirectProjector(redis, keys, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ streams


def test_the_projected_streams_are_the_processors_outputs_but_tool_calls() -> None:
    assert sorted(PROJECTED) == ["committed", "manifests", "previews", "quarantine", "rejections"]


async def test_streams_the_projector_does_not_read_are_skipped_and_take_no_offset() -> None:
    redis = ScriptRedis()
    projector = direct(redis)
    records = [
        (Stream.INGRESS, rejected()),
        ("rejections", rejected()),
        (Stream.TOOL_CALLS, rejected()),
        (Stream.CHANGELOG, rejected()),
        ("no-such-stream", rejected()),
        (Stream.REJECTIONS, rejected()),
        ("ingress", rejected()),
    ]
    assert await apply(projector, records) == 2
    assert offsets_of(redis.calls) == [["fold:rejections:0@0", "fold:rejections:0@1"]]
    assert projector.offsets == {"rejections": 1}


async def test_only_skipped_streams_call_nothing() -> None:
    redis = ScriptRedis()
    projector = direct(redis)
    assert await apply(projector, [(Stream.INGRESS, rejected()), (Stream.CHANGELOG, rejected())]) == 0
    assert redis.calls == [] and redis.loads == 0 and projector.offsets == {}


async def test_every_projected_stream_is_applied_under_its_own_position() -> None:
    redis = ScriptRedis()
    streams = ["committed", "manifests", "quarantine", "previews", "rejections"]
    assert await apply(direct(redis), [(s, rejected()) for s in streams]) == 5
    assert offsets_of(redis.calls) == [[f"fold:{s}:0@0" for s in streams]]


# ---------------------------------------------------------------------------------------- positions


async def test_each_stream_numbers_its_records_from_zero_in_order() -> None:
    redis = ScriptRedis()
    projector = direct(redis)
    records = [
        (Stream.REJECTIONS, rejected()),
        (Stream.PREVIEWS, retracted()),
        (Stream.REJECTIONS, rejected()),
        (Stream.REJECTIONS, rejected()),
        (Stream.PREVIEWS, retracted()),
    ]
    assert await apply(projector, records) == 5
    assert offsets_of(redis.calls) == [
        [
            "fold:rejections:0@0",
            "fold:previews:0@0",
            "fold:rejections:0@1",
            "fold:rejections:0@2",
            "fold:previews:0@1",
        ]
    ]
    assert projector.offsets == {"rejections": 2, "previews": 1}
    assert redis.applied("tl:offsets") == {"fold:rejections:0": 2, "fold:previews:0": 1}


async def test_the_plan_is_the_planners_for_the_synthetic_positions() -> None:
    redis = ScriptRedis()
    records = [(Stream.REJECTIONS, rejected(at=3)), (Stream.COMMITTED, None)]
    assert await apply(direct(redis), records) == 2
    expected = Planner(KEYS).plan(
        [
            DecodedRecord(Stream.REJECTIONS, "fold:rejections", 0, 0, rejected(at=3)),
            DecodedRecord(Stream.COMMITTED, "fold:committed", 0, 0, None),
        ]
    )
    [(offsets_key, others, groups, epoch)] = redis.calls
    assert [offsets_key, *others] == expected.keys
    assert groups == orjson.loads(expected.argv) and epoch == ()
    assert groups[1][2] == [["hincr", expected.keys.index("tl:stats") + 1, "undecodable:committed", "1"]]


async def test_offsets_go_on_across_apply_calls_of_one_projector() -> None:
    redis = ScriptRedis()
    projector = direct(redis)
    assert await apply(projector, rejections(3)) == 3
    assert await apply(projector, [*rejections(2), (Stream.PREVIEWS, retracted())]) == 3
    assert offsets_of(redis.calls) == [
        ["fold:rejections:0@0", "fold:rejections:0@1", "fold:rejections:0@2"],
        ["fold:rejections:0@3", "fold:rejections:0@4", "fold:previews:0@0"],
    ]
    assert projector.offsets == {"rejections": 4, "previews": 0}


async def test_project_records_numbers_each_sequence_from_zero_again() -> None:
    redis = ScriptRedis()
    assert await bounded(project_records(redis, KEYS, rejections(2))) == 2  # type: ignore[arg-type]
    assert await bounded(project_records(redis, KEYS, rejections(3))) == 1  # type: ignore[arg-type]
    assert offsets_of(redis.calls) == [
        ["fold:rejections:0@0", "fold:rejections:0@1"],
        ["fold:rejections:0@0", "fold:rejections:0@1", "fold:rejections:0@2"],
    ]


# ------------------------------------------------------------------------------------------- counts


async def test_records_already_applied_are_not_counted() -> None:
    redis = ScriptRedis()
    redis.hold("tl:offsets", fold_rejections_0=1)
    assert await apply(direct(redis), rejections(4)) == 2
    assert sizes(redis) == [4] and redis.applied("tl:offsets") == {"fold:rejections:0": 3}


async def test_a_fresh_projector_over_the_same_records_applies_none_again() -> None:
    redis = ScriptRedis()
    assert await apply(direct(redis, batch=2), rejections(5)) == 5
    assert await apply(direct(redis, batch=2), rejections(5)) == 0
    assert sizes(redis) == [2, 2, 1, 2, 2, 1]


# ------------------------------------------------------------------------------------------ batches


async def test_records_are_sent_batch_by_batch_and_the_rest_at_the_end() -> None:
    redis = ScriptRedis()
    assert await apply(direct(redis, batch=2), rejections(5)) == 5
    assert offsets_of(redis.calls) == [
        ["fold:rejections:0@0", "fold:rejections:0@1"],
        ["fold:rejections:0@2", "fold:rejections:0@3"],
        ["fold:rejections:0@4"],
    ]


async def test_project_records_sends_the_batches_it_is_given() -> None:
    redis = ScriptRedis()
    assert await bounded(project_records(redis, KEYS, rejections(5), batch=2)) == 5  # type: ignore[arg-type]
    assert sizes(redis) == [2, 2, 1]


async def test_a_full_last_batch_is_sent_once() -> None:
    redis = ScriptRedis()
    assert await apply(direct(redis, batch=3), rejections(6)) == 6
    assert sizes(redis) == [3, 3]


async def test_skipped_streams_do_not_fill_a_batch() -> None:
    redis = ScriptRedis()
    records = [*rejections(1), (Stream.INGRESS, rejected()), (Stream.TOOL_CALLS, rejected()), *rejections(1)]
    assert await apply(direct(redis, batch=2), records) == 2
    assert sizes(redis) == [2]


async def test_the_default_batch_is_500_records() -> None:
    redis = ScriptRedis()
    assert await apply(direct(redis), rejections(501)) == 501
    assert await bounded(project_records(redis, KEYS, rejections(502))) == 1  # type: ignore[arg-type]
    assert sizes(redis) == [500, 1, 500, 2]


@pytest.mark.parametrize("batch", [0, -1])
def test_a_batch_of_no_records_is_refused_when_the_projector_is_made(batch: int) -> None:
    redis = ScriptRedis()
    with pytest.raises(ProjectionError) as caught:
        direct(redis, batch=batch)
    assert str(caught.value) == f"DirectProjector batch: at least 1 record per script call, not {batch}"
    assert redis.calls == []


async def test_a_batch_of_one_record_sends_each_record_alone() -> None:
    redis = ScriptRedis()
    assert await apply(direct(redis, batch=1), rejections(3)) == 3
    assert sizes(redis) == [1, 1, 1]


# -------------------------------------------------------------------------------------- slot groups


async def test_a_split_projection_gets_one_call_per_slot_group_and_its_marks_are_not_counted() -> None:
    assert {g: shard_of(c, 3) for g, c in IN_GROUP.items()} == {0: 0, 1: 1, 2: 2}
    redis = ScriptRedis()
    records = [
        (Stream.REJECTIONS, rejected(IN_GROUP[0])),
        (Stream.REJECTIONS, rejected(IN_GROUP[1])),
        (Stream.PREVIEWS, retracted(IN_GROUP[2])),
        (Stream.REJECTIONS, rejected(None)),
    ]
    assert await apply(direct(redis, SPLIT), records) == 4
    assert [key for key, _, _, _ in redis.calls] == ["{tl:#0}offsets", "{tl:#1}offsets", "{tl:#2}offsets"]
    assert offsets_of(redis.calls) == [
        ["fold:rejections:0@0", "fold:rejections:0@2", "fold:previews:0@0", "fold:rejections:0@2"],
        ["fold:rejections:0@1", "fold:previews:0@0", "fold:rejections:0@2"],
        ["fold:previews:0@0", "fold:previews:0@0", "fold:rejections:0@2"],
    ]
    assert "{tl:#1}rejections" in redis.calls[1][1] and "{tl:#2}events:c-1" in redis.calls[2][1]


async def test_a_split_projection_is_sent_batch_by_batch_to_every_group() -> None:
    redis = ScriptRedis()
    records = [(Stream.REJECTIONS, rejected(IN_GROUP[i % 3])) for i in range(5)]
    assert await apply(direct(redis, SPLIT, batch=2), records) == 5
    assert [key[:7] for key, _, _, _ in redis.calls] == ["{tl:#0}", "{tl:#1}", "{tl:#2}"] * 3
    assert sizes(redis) == [2, 2, 1, 2, 1, 2, 1, 2, 1]


async def test_a_split_projection_counts_only_what_each_group_applied() -> None:
    redis = ScriptRedis()
    records = [(Stream.REJECTIONS, rejected(IN_GROUP[i % 3])) for i in range(3)]
    assert await bounded(project_records(redis, SPLIT, records)) == 3  # type: ignore[arg-type]
    redis.hold("{tl:#1}offsets", fold_rejections_0=4)
    records += [(Stream.REJECTIONS, rejected(IN_GROUP[1])), (Stream.REJECTIONS, rejected(IN_GROUP[0]))]
    assert await bounded(project_records(redis, SPLIT, records)) == 1  # type: ignore[arg-type]
    assert redis.applied("{tl:#0}offsets") == {"fold:rejections:0": 4}


# ------------------------------------------------------------------------------------------ failures


async def test_records_given_again_after_a_failed_call_are_applied_once_each() -> None:
    redis = ScriptRedis()
    projector = direct(redis, SPLIT)
    records = [(Stream.REJECTIONS, rejected(IN_GROUP[group], at=group)) for group in (0, 1, 2)]
    lost = ConnectionError("connection lost")
    redis.failures[SPLIT.groups[1].offsets] = lost
    with pytest.raises(ConnectionError) as raised:
        await apply(projector, records)

    assert raised.value is lost and projector.offsets == {}
    assert await apply(projector, records) == 2
    assert projector.offsets == {"rejections": 2}
    assert [redis.applied(group.offsets) for group in SPLIT.groups] == [{"fold:rejections:0": 2}] * 3
