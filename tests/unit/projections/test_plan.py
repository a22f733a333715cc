from __future__ import annotations

import orjson

from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    PreviewRetracted,
    PreviewUpdated,
    Rejected,
)
from turnledger.model.graph import Block
from turnledger.model.reasons import ReasonCode
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import DecodedRecord, Planner

KEYS = ProjectionKeys("p:")


def block(i: int) -> Block:
    return Block(
        id=f"b{i}",
        role="user",
        kind="text",
        turn_id="t1",
        revision=1,
        ordering=i,
        trust_label="user",
        text="hi",
    ).with_digest()


def rec(record: object, offset: int = 5, stream: str = "committed") -> DecodedRecord:
    return DecodedRecord(stream, f"x.{stream}", 0, offset, record)  # type: ignore[arg-type]


def test_keys_index_is_one_based_offsets_first_and_deduplicated() -> None:
    turn = CommittedTurn(
        conversation_id="c",
        revision=1,
        turn_id="t1",
        source_event_id="e",
        blocks=(block(0), block(1)),
        occurred_at_ms=7,
    )
    plan = Planner(KEYS).plan([rec(turn, 5), rec(turn, 6)])
    assert plan.keys[0] == "p:offsets"
    assert plan.keys == [
        "p:offsets",
        "p:history:c",
        "p:history-order:c",
        "p:conversation:c",
        "p:conversations",
        "p:events:c",
    ]
    groups = orjson.loads(plan.argv)
    assert [g[:2] for g in groups] == [["x.committed:0", "5"], ["x.committed:0", "6"]]
    ops = groups[0][2]
    assert ops[0][:3] == ["hset", 2, "b0"] and ops[1] == ["zadd", 3, "0", "b0"]


def test_committed_turn_of_an_operation_drops_its_previews() -> None:
    turn = CommittedTurn(
        conversation_id="c",
        revision=2,
        turn_id="t2",
        source_event_id="e",
        operation_id="op1",
        attempt_generation=1,
        blocks=(block(3),),
        occurred_at_ms=7,
    )
    plan = Planner(KEYS).plan([rec(turn)])
    ops = orjson.loads(plan.argv)[0][2]
    assert ["pcommit", plan.keys.index("p:preview:c:op1") + 1] in ops


def test_previews_are_guarded_by_generation() -> None:
    upd = PreviewUpdated(
        conversation_id="c",
        operation_id="op1",
        attempt_generation=2,
        block_index=0,
        text="He",
        through_sequence=3,
        occurred_at_ms=1,
    )
    ret = PreviewRetracted(
        conversation_id="c",
        operation_id="op1",
        attempt_generation=2,
        reason=ReasonCode.STREAM_DISCONNECTED,
        occurred_at_ms=2,
    )
    plan = Planner(KEYS).plan([rec(upd, 1, "previews"), rec(ret, 2, "previews")])
    (g1, g2) = orjson.loads(plan.argv)
    assert g1[2][0][0] == "pappend" and g1[2][0][2] == "2:0"
    assert g2[2][0] == ["pretract", plan.keys.index("p:preview:c:op1") + 1, "2"]


def test_a_preview_appends_its_text_at_its_offset_and_announces_only_the_appended_text() -> None:
    """The op carries the offset and the end in code points (the emoji is one), the appended text,
    the preview's JSON without its text (`length`: the end), and the stats key for a gap."""
    upd = PreviewUpdated(
        conversation_id="c", operation_id="op1", attempt_generation=2, block_index=1, text="lo 🎉",
        through_sequence=7, occurred_at_ms=9, text_offset=3,
    )  # fmt: skip
    plan = Planner(KEYS).plan([rec(upd, 1, "previews")])
    [group] = orjson.loads(plan.argv)
    index = plan.keys.index
    meta = {"attemptGeneration": 2, "blockIndex": 1, "length": 7, "throughSequence": 7, "occurredAtMs": 9}
    assert group[2][0] == [
        "pappend",
        index("p:preview:c:op1") + 1,
        "2:1",
        "3",
        "7",
        "lo 🎉",
        orjson.dumps(meta, option=orjson.OPT_SORT_KEYS).decode(),
        index("p:stats") + 1,
    ]
    xadd = group[2][1]
    assert xadd[:6] == ["xadd", index("p:events:c") + 1, "5000", "1", "type", "preview"]
    assert orjson.loads(xadd[7]) == {
        **meta, "operationId": "op1", "revocable": True, "text": "lo 🎉", "textOffset": 3,
    }  # fmt: skip


def test_decision_mirrors_present_fields_and_deletes_absent_ones() -> None:
    d = DispatchDecision(
        conversation_id="c",
        operation_id="op1",
        state=DispatchState.PREPARED,
        accepted=False,
        reason=ReasonCode.CAS_STATE_MISMATCH,
        conversation_revision=3,
        cancel_generation=0,
        source_event_id="e9",
        occurred_at_ms=11,
    )
    plan = Planner(KEYS).plan([rec(d, 3, "manifests")])
    ops = orjson.loads(plan.argv)[0][2]
    hset = ops[0]
    fields = dict(zip(hset[2::2], hset[3::2], strict=True))
    assert fields["state"] == "PREPARED" and fields["reason"] == "CAS_STATE_MISMATCH"
    assert fields["last_accepted"] == "0"
    assert ["hsetnx", 2, "created_at_ms", "11"] in ops
    hdel = next(op for op in ops if op[0] == "hdel")
    assert "manifest_digest" in hdel and "previous_state" in hdel
    assert any(op[0] == "hincr" and op[2] == "conflicts" for op in ops)


def test_undecodable_record_still_advances_with_a_counter() -> None:
    plan = Planner(KEYS).plan([DecodedRecord("committed", "x.committed", 3, 41, None, "bad magic")])
    groups = orjson.loads(plan.argv)
    assert groups == [["x.committed:3", "41", [["hincr", 2, "undecodable:committed", "1"]]]]


def test_rejections_are_capped_and_scored_by_time() -> None:
    r = Rejected(reason=ReasonCode.INVALID_EVENT, occurred_at_ms=99, source_topic="in", source_offset=4)
    ops = orjson.loads(Planner(KEYS, rejections_cap=10).plan([rec(r, 1, "rejections")]).argv)[0][2]
    assert ops[0][:3] == ["zadd", 2, "99"] and ops[1] == ["ztrim", 2, "10"]


def test_large_offsets_travel_as_exact_strings() -> None:
    plan = Planner(KEYS).plan([DecodedRecord("committed", "t", 0, 2**52 + 1, None)])
    assert orjson.loads(plan.argv)[0][1] == str(2**52 + 1)


def test_per_operation_keys_name_the_conversation_unambiguously() -> None:
    keys = ProjectionKeys("p:")
    assert keys.operation("conv-1", "op-1") == "p:op:conv-1:op-1"
    assert keys.previews("conv-1", "op-1") == "p:preview:conv-1:op-1"
    pairs = [("a:b", "c"), ("a", "b:c"), ("a%3Ab", "c"), ("a%", "3Ab:c"), ("", "a:b:c")]
    assert len({keys.operation(c, o) for c, o in pairs}) == len(pairs)
    assert keys.operation("a:b", "c") == "p:op:a%3Ab:c" and keys.operation("a%3Ab", "c") == "p:op:a%253Ab:c"


def test_every_projected_record_of_a_conversation_appends_one_live_event() -> None:
    turn = CommittedTurn(
        conversation_id="c",
        revision=1,
        turn_id="t1",
        source_event_id="e",
        blocks=(block(0),),
        occurred_at_ms=7,
    )
    plan = Planner(KEYS, events_cap=50).plan([rec(turn, 5)])
    xadds = [op for op in orjson.loads(plan.argv)[0][2] if op[0] == "xadd"]
    assert len(xadds) == 1
    _, key, cap, conditional, _, kind, _, data = xadds[0]
    assert (plan.keys[key - 1], cap, conditional, kind) == ("p:events:c", "50", "0", "committed")
    assert orjson.loads(data)["blocks"][0]["id"] == "b0"
