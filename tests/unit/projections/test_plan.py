from __future__ import annotations

from typing import Any

import orjson

from tests.unit.gateway.decisions import decision, manifest_issued
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
    ToolCallReady,
)
from turnledger.model.graph import Block
from turnledger.model.reasons import ReasonCode
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import BatchPlan, DecodedRecord, Planner, plan_batch

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
    assert plan.keys == ["p:offsets", "p:stats"]


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


def _groups(plan: BatchPlan) -> list[list[Any]]:
    groups: list[list[Any]] = orjson.loads(plan.argv)
    return groups


def _named(plan: BatchPlan, ops: list[list[Any]]) -> list[list[Any]]:
    """The ops with each key index replaced by the key's name, so a test reads what is touched."""
    return [[op[0], plan.keys[op[1] - 1], *op[2:]] for op in ops]


def _sorted_json(value: object) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def test_every_key_name_of_the_projection() -> None:
    keys = ProjectionKeys("q/")
    assert [keys.offsets, keys.stats, keys.rejections, keys.conversations] == [
        "q/offsets", "q/stats", "q/rejections", "q/conversations",
    ]  # fmt: skip
    assert [
        keys.events("c"), keys.conversation("c"), keys.history("c"), keys.history_order("c"),
        keys.operations("c"), keys.operation("c", "o"), keys.operation_conversations("o"),
        keys.quarantine("c"), keys.previews("c", "o"),
    ] == [
        "q/events:c", "q/conversation:c", "q/history:c", "q/history-order:c", "q/ops:c", "q/op:c:o",
        "q/op-conversations:o", "q/quarantine:c", "q/preview:c:o",
    ]  # fmt: skip
    assert ProjectionKeys().offsets == "tl:offsets"


def test_a_committed_turn_writes_its_blocks_revision_listing_and_one_event() -> None:
    turn = CommittedTurn(
        conversation_id="c", revision=4, turn_id="t4", source_event_id="e", operation_id="op1",
        attempt_generation=2, blocks=(block(0), block(1)), occurred_at_ms=70,
    )  # fmt: skip
    plan = Planner(KEYS).plan([rec(turn)])
    [group] = _groups(plan)
    b0, b1 = (_sorted_json(b.to_json_dict()) for b in turn.blocks)
    committed = {
        "revision": 4, "turnId": "t4", "operationId": "op1", "attemptGeneration": 2,
        "blocks": [b.to_json_dict() for b in turn.blocks], "occurredAtMs": 70,
    }  # fmt: skip
    assert _named(plan, group[2]) == [
        ["hset", "p:history:c", "b0", b0],
        ["zadd", "p:history-order:c", "0", "b0"],
        ["hset", "p:history:c", "b1", b1],
        ["zadd", "p:history-order:c", "1", "b1"],
        ["hset", "p:conversation:c", "revision", "4", "updated_at_ms", "70"],
        ["hincr", "p:conversation:c", "turns", "1"],
        ["pcommit", "p:preview:c:op1"],
        ["zmax", "p:conversations", "70", "c"],
        ["xadd", "p:events:c", "5000", "0", "type", "committed", "data", _sorted_json(committed)],
    ]


def test_a_turn_without_an_operation_touches_no_previews() -> None:
    turn = CommittedTurn(
        conversation_id="c", revision=1, turn_id="t1", source_event_id="e", blocks=(block(0),),
        occurred_at_ms=7,
    )  # fmt: skip
    plan = Planner(KEYS).plan([rec(turn)])
    ops = _named(plan, _groups(plan)[0][2])
    assert [op[0] for op in ops] == ["hset", "zadd", "hset", "hincr", "zmax", "xadd"]
    assert not any(name.startswith("p:preview") for name in plan.keys)


def test_a_manifest_mirrors_its_bindings_onto_the_operation() -> None:
    issued = manifest_issued("op9")
    plan = Planner(KEYS).plan([rec(issued, 8, "manifests")])
    [group] = _groups(plan)
    assert group[:2] == ["x.manifests:0", "8"]
    assert _named(plan, group[2]) == [
        [
            "hset", "p:op:c1:op9",
            "conversation", "c1",
            "manifest_digest", issued.manifest.manifest_digest,
            "manifest_revision", "1",
            "request_digest", "sha256:" + "4" * 64,
            "adapter", "anthropic-messages@2",
            "provider", "anthropic",
            "model_revision", "claude",
        ],
        ["sadd", "p:ops:c1", "op9"],
        ["sadd", "p:op-conversations:op9", "c1"],
    ]  # fmt: skip


def test_an_accepted_decision_sets_every_field_it_carries_and_deletes_none() -> None:
    d = decision(
        "op1", DispatchState.STREAMING, previous_state=DispatchState.SENT, reason=ReasonCode.LEASE_EXPIRED,
        detail="why", idempotency_key="idem", manifest_digest="sha256:m", response_handle="h-1",
        attempt_generation=3, conversation_revision=5, cancel_generation=2,
    )  # fmt: skip
    plan = Planner(KEYS).plan([rec(d, 3, "manifests")])
    status = {
        "operationId": "op1", "state": "STREAMING", "previousState": "SENT", "accepted": True,
        "reason": "LEASE_EXPIRED", "detail": "why", "attemptGeneration": 3, "occurredAtMs": 1_000,
    }  # fmt: skip
    assert _named(plan, _groups(plan)[0][2]) == [
        [
            "hset", "p:op:c1:op1",
            "conversation", "c1", "state", "STREAMING", "generation", "3", "conversation_revision", "5",
            "cancel_generation", "2", "last_accepted", "1", "updated_at_ms", "1000",
            "last_event_id", "src-op1-STREAMING", "previous_state", "SENT", "reason", "LEASE_EXPIRED",
            "detail", "why", "idempotency_key", "idem", "manifest_digest", "sha256:m",
            "response_handle", "h-1",
        ],
        ["hsetnx", "p:op:c1:op1", "created_at_ms", "1000"],
        ["hincr", "p:op:c1:op1", "decisions", "1"],
        ["sadd", "p:ops:c1", "op1"],
        ["sadd", "p:op-conversations:op1", "c1"],
        ["zmax", "p:conversations", "1000", "c1"],
        ["xadd", "p:events:c1", "5000", "0", "type", "status", "data", _sorted_json(status)],
    ]  # fmt: skip


def test_a_refused_decision_deletes_what_it_lacks_and_counts_a_conflict_by_reason() -> None:
    d = decision(
        "op1", DispatchState.PREPARED, accepted=False, reason=ReasonCode.CAS_STATE_MISMATCH, detail=""
    )
    plan = Planner(KEYS).plan([rec(d, 3, "manifests")])
    ops = _named(plan, _groups(plan)[0][2])
    assert ops[0][-4:] == ["last_event_id", "src-op1-PREPARED", "reason", "CAS_STATE_MISMATCH"]
    assert ops[5:9] == [
        [
            "hdel",
            "p:op:c1:op1",
            "previous_state",
            "detail",
            "idempotency_key",
            "manifest_digest",
            "response_handle",
        ],
        ["hincr", "p:op:c1:op1", "conflicts", "1"],
        ["hincr", "p:stats", "conflicts:CAS_STATE_MISMATCH", "1"],
        ["zmax", "p:conversations", "1000", "c1"],
    ]
    assert orjson.loads(ops[9][7]) == {
        "operationId": "op1", "state": "PREPARED", "previousState": None, "accepted": False,
        "reason": "CAS_STATE_MISMATCH", "detail": "", "attemptGeneration": 1, "occurredAtMs": 1_000,
    }  # fmt: skip
    assert len(ops) == 10


def test_a_retraction_drops_its_generation_counts_and_announces() -> None:
    ret = PreviewRetracted(
        conversation_id="c", operation_id="op1", attempt_generation=2, reason=ReasonCode.STREAM_DISCONNECTED,
        occurred_at_ms=2,
    )  # fmt: skip
    plan = Planner(KEYS, events_cap=9).plan([rec(ret, 2, "previews")])
    retracted = {
        "operationId": "op1", "attemptGeneration": 2, "reason": "STREAM_DISCONNECTED", "occurredAtMs": 2,
    }  # fmt: skip
    assert _named(plan, _groups(plan)[0][2]) == [
        ["pretract", "p:preview:c:op1", "2"],
        ["hincr", "p:stats", "preview_retractions", "1"],
        ["xadd", "p:events:c", "9", "0", "type", "retracted", "data", _sorted_json(retracted)],
    ]


def test_a_preview_registers_its_operation_after_its_conditional_event() -> None:
    upd = PreviewUpdated(
        conversation_id="c", operation_id="op1", attempt_generation=1, block_index=0, text="He",
        through_sequence=3, occurred_at_ms=1,
    )  # fmt: skip
    plan = Planner(KEYS).plan([rec(upd, 1, "previews")])
    ops = _named(plan, _groups(plan)[0][2])
    assert [op[:4] for op in ops] == [
        ["pappend", "p:preview:c:op1", "1:0", "0"],
        ["xadd", "p:events:c", "5000", "1"],
        ["sadd", "p:ops:c", "op1"],
    ]
    meta = {"attemptGeneration": 1, "blockIndex": 0, "length": 2, "throughSequence": 3, "occurredAtMs": 1}
    assert ops[0][4:] == ["2", "He", _sorted_json(meta), plan.keys.index("p:stats") + 1]


def test_a_quarantined_block_is_kept_counted_by_reason_and_announced() -> None:
    q = Quarantined(
        conversation_id="c", operation_id="op1", attempt_generation=1, reason=ReasonCode.STALE_GENERATION,
        event_type="StreamDeltas", event_id="e5", occurred_at_ms=4,
    )  # fmt: skip
    plan = Planner(KEYS).plan([rec(q, 6, "quarantine")])
    body = _sorted_json(q.to_json_dict())
    assert _named(plan, _groups(plan)[0][2]) == [
        ["rpush", "p:quarantine:c", body],
        ["hincr", "p:stats", "quarantined:STALE_GENERATION", "1"],
        ["xadd", "p:events:c", "5000", "0", "type", "quarantined", "data", body],
    ]


def test_a_rejection_of_a_conversation_is_announced_to_it_and_one_without_is_not() -> None:
    of_conversation = Rejected(conversation_id="c", reason=ReasonCode.INVALID_EVENT, occurred_at_ms=99)
    unowned = Rejected(reason=ReasonCode.INVALID_EVENT, occurred_at_ms=98)
    plan = Planner(KEYS).plan([rec(of_conversation, 1, "rejections"), rec(unowned, 2, "rejections")])
    first, second = (_named(plan, group[2]) for group in _groups(plan))
    body = _sorted_json(of_conversation.to_json_dict())
    assert first == [
        ["zadd", "p:rejections", "99", body],
        ["ztrim", "p:rejections", "10000"],
        ["hincr", "p:stats", "rejected:INVALID_EVENT", "1"],
        ["xadd", "p:events:c", "5000", "0", "type", "rejected", "data", body],
    ]
    assert [op[0] for op in second] == ["zadd", "ztrim", "hincr"]


def test_a_record_type_the_projection_does_not_know_is_counted_by_its_class() -> None:
    ready = ToolCallReady(
        conversation_id="c", revision=1, operation_id="op1", attempt_generation=1, block_id="b", call_id="k",
        tool_name="t", arguments="{}", argument_digest="sha256:a", occurred_at_ms=1,
    )  # fmt: skip
    plan = plan_batch(KEYS, [rec(ready, 4, "ready")])
    assert _groups(plan) == [["x.ready:0", "4", [["hincr", 2, "ignored:ToolCallReady", "1"]]]]
    assert plan.keys == ["p:offsets", "p:stats"] and len(plan) == 1


def test_the_default_caps() -> None:
    planner = Planner(KEYS)
    assert (planner.rejections_cap, planner.events_cap) == (10_000, 5_000)
