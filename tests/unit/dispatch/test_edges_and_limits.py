"""Typed rejections at the edges: text with no UTF-8 form, and the size limits (`model/limits.py`).

Each limit is tested at the limit (accepted) and one past it (refused with its exact code), in the
validator (submitted turns), in the assembler through the fold (streamed responses) and in the
engine (record bytes).
"""

from __future__ import annotations

import pytest

from turnledger.codec import decode, encode
from turnledger.dispatch.engine import BatchEngine
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    PreviewRetracted,
    Quarantined,
    Rejected,
    SubmittedBlock,
    ToolCallReady,
    TurnSubmitted,
)
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.reasons import ReasonCode
from turnledger.records import SourceRecord
from turnledger.streaming.assembler import BlockAssembler
from turnledger.streaming.outcomes import FeedStatus, Incomplete

from .scenario import WEATHER, Conversation, text_stream, tool_stream

S = DispatchState
R = ReasonCode


def _block(i: int, text: str = "hi", **fields: object) -> SubmittedBlock:
    return SubmittedBlock(
        **{"id": f"b{i}", "role": "user", "kind": "text", "trust_label": "user", "text": text, **fields}
    )


def _turn(c: Conversation, *blocks: SubmittedBlock, turn_id: str = "u1") -> TurnSubmitted:
    return TurnSubmitted(**c._common(), turn_id=turn_id, blocks=blocks)


def _rejections(outputs: list[object]) -> list[tuple[ReasonCode, str]]:
    assert all(isinstance(o, Rejected) for o in outputs), outputs
    return [(o.reason, o.detail) for o in outputs]  # type: ignore[attr-defined]


def test_the_defaults_are_the_documented_ones() -> None:
    assert (
        Limits(
            max_block_bytes=262_144,
            max_deltas_per_block=65_536,
            max_blocks_per_turn=256,
            max_record_bytes=1_048_576,
            max_turn_bytes=1_048_576,
            max_held_deltas=4_096,
        )
        == DEFAULT_LIMITS
    )


# -- text with no UTF-8 form ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "field"),
    [
        (_block(0, "hi \ud800 there"), "text"),
        (_block(0, "\udfff"), "text"),
        (_block(0, id="b\ud800"), "id"),
        (_block(0, kind="retrieved_snippet", trust_label="retrieved", text="doc \udc00"), "text"),
    ],
)
def test_a_lone_surrogate_is_a_typed_rejection_not_a_crash(block: SubmittedBlock, field: str) -> None:
    c = Conversation()
    out = c.apply(_turn(c, block))
    assert [r.reason for r in out] == [R.UNENCODABLE_TEXT]  # type: ignore[attr-defined]
    [rejected] = out
    assert isinstance(rejected, Rejected)
    assert rejected.detail.startswith(f"{field} holds a lone surrogate (text with no UTF-8 form) (block=b")
    assert decode(encode(rejected)) == rejected  # the rejection itself can be written to the topic
    assert c.state.graph.revision == 0 and c.state.turn_ids == ()
    assert [type(o) for o in c.user("fine")] == [CommittedTurn]  # and the conversation goes on
    assert c.state.graph.revision == 1


def test_a_lone_surrogate_in_a_tool_result_is_rejected() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": "Paris"}'])]))
    [ready] = c.of(ToolCallReady)
    result = SubmittedBlock(
        id="r1",
        role="tool",
        kind="tool_result",
        trust_label="tool",
        call_id="call-1",
        tool_name="get_weather",
        argument_digest=ready.argument_digest,
        generation=1,
        result_status="success",
        text="sunny \ud83d",
    )
    out = c.apply(_turn(c, result, turn_id="t1"))
    assert [(r.reason, r.detail) for r in out] == [  # type: ignore[attr-defined]
        (R.UNENCODABLE_TEXT, "text holds a lone surrogate (text with no UTF-8 form) (block=r1 call=call-1)")
    ]
    assert c.state.graph.revision == 2 and c.state.graph.pending_call_ids == ("call-1",)


# -- the validator: blocks per turn, block bytes -------------------------------------------------


def test_blocks_per_turn_at_the_limit_and_one_past() -> None:
    limits = Limits(max_blocks_per_turn=3)
    at = Conversation(limits=limits)
    assert [type(o) for o in at.apply(_turn(at, *(_block(i) for i in range(3))))] == [CommittedTurn]
    past = Conversation(limits=limits)
    out = past.apply(_turn(past, *(_block(i) for i in range(4))))
    assert _rejections(out) == [(R.TOO_MANY_BLOCKS, "the turn has 4 blocks, at most 3 (block=b3)")]
    assert past.state.graph.revision == 0


def test_block_bytes_at_the_limit_and_one_past_count_utf8_bytes() -> None:
    limits = Limits(max_block_bytes=8)
    at = Conversation(limits=limits)
    assert [type(o) for o in at.apply(_turn(at, _block(0, "éééé")))] == [CommittedTurn]  # 8 bytes, 4 chars
    past = Conversation(limits=limits)
    out = past.apply(_turn(past, _block(0, "éééé!")))
    assert _rejections(out) == [(R.BLOCK_TOO_LARGE, "content is 9 bytes, at most 8 (block=b0)")]


# -- the assembler, through the fold: deltas per block, block bytes, blocks per response ---------


def _stream_text(limits: Limits, parts: list[str]) -> Conversation:
    c = Conversation(limits=limits)
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(parts))
    return c


def _last_decision(c: Conversation) -> tuple[DispatchState, ReasonCode | None, str]:
    decision = c.of(DispatchDecision)[-1]
    return decision.state, decision.reason, decision.detail


def test_deltas_per_block_at_the_limit_and_one_past() -> None:
    at = _stream_text(Limits(max_deltas_per_block=3), ["a", "b", "c"])
    assert at.state.operations["op-1"].state == S.COMMITTED
    assert [b.text for b in at.of(CommittedTurn)[-1].blocks] == ["abc"]
    past = _stream_text(Limits(max_deltas_per_block=3), ["a", "b", "c", "d"])
    assert _last_decision(past) == (S.UNKNOWN, R.TOO_MANY_DELTAS, "block 0 received 4 deltas, at most 3")
    assert [t.revision for t in past.of(CommittedTurn)] == [1]
    assert len(past.of(PreviewRetracted)) == 1


def test_streamed_block_bytes_at_the_limit_and_one_past() -> None:
    at = _stream_text(Limits(max_block_bytes=6), ["abc", "dé"])  # 6 bytes, 5 characters
    assert at.state.operations["op-1"].state == S.COMMITTED
    past = _stream_text(Limits(max_block_bytes=6), ["abc", "dé!"])
    assert _last_decision(past) == (S.UNKNOWN, R.BLOCK_TOO_LARGE, "block 0 reached 7 bytes, at most 6")
    assert [t.revision for t in past.of(CommittedTurn)] == [1]


def test_an_answer_streamed_under_higher_limits_is_refused_at_commit_under_the_folds_own() -> None:
    """A processor restarted with a lower `max_block_bytes` mid-answer: the restored assembler does not
    re-measure what it holds, so the commit's validation, under the fold's limits, refuses the block."""
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["abcdefgh"])
    c.deltas(stream[:-1])
    c.limits = Limits(max_block_bytes=4)
    c.deltas(stream[-1:])
    assert _last_decision(c) == (
        S.UNKNOWN,
        R.BLOCK_TOO_LARGE,
        "content is 8 bytes, at most 4 (block=op-1#1/b0)",
    )
    assert [t.revision for t in c.of(CommittedTurn)] == [1]


def _stream_calls(limits: Limits, count: int, arguments: str = '{"city": "Paris"}') -> Conversation:
    c = Conversation(limits=limits)
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([(f"call-{i}", "get_weather", [arguments]) for i in range(count)]))
    return c


def test_blocks_per_response_at_the_limit_and_one_past() -> None:
    at = _stream_calls(Limits(max_blocks_per_turn=2), 2)
    assert [r.call_id for r in at.of(ToolCallReady)] == ["call-0", "call-1"]
    past = _stream_calls(Limits(max_blocks_per_turn=2), 3)
    assert _last_decision(past) == (S.UNKNOWN, R.TOO_MANY_BLOCKS, "block 2 is block 3, at most 2")
    assert past.of(ToolCallReady) == []


def test_streamed_argument_bytes_at_the_limit_and_one_past() -> None:
    arguments = '{"city": "Paris"}'
    at = _stream_calls(Limits(max_block_bytes=len(arguments)), 1, arguments)
    assert [r.arguments for r in at.of(ToolCallReady)] == [arguments]
    past = _stream_calls(Limits(max_block_bytes=len(arguments) - 1), 1, arguments)
    assert _last_decision(past) == (S.UNKNOWN, R.BLOCK_TOO_LARGE, "block 0 reached 17 bytes, at most 16")
    assert past.of(ToolCallReady) == []


def test_a_restored_assembler_keeps_counting_deltas() -> None:
    limits = Limits(max_deltas_per_block=3)
    stream = text_stream(["a", "b", "c", "d"])
    live = BlockAssembler({"get_weather": WEATHER}, limits=limits)
    for delta in stream[:4]:  # start, block start, "a", "b"
        live.feed(delta)
    restored = BlockAssembler.restore(live.snapshot(), {"get_weather": WEATHER}, limits)
    assert restored == live
    for assembler in (live, restored):
        for delta in stream[4:]:
            assembler.feed(delta)
    assert live.finish() == restored.finish()
    assert live.snapshot()["violation"] == [R.TOO_MANY_DELTAS, "block 0 received 4 deltas, at most 3"]


# -- the engine: record bytes ---------------------------------------------------------------------


class _Store(dict[str, bytes]):
    def put(self, key: str, value: bytes) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        del self[key]


def test_record_bytes_at_the_limit_and_one_past() -> None:
    c = Conversation()
    value = encode(_turn(c, _block(0, "hello")))
    record = SourceRecord("turnledger.ingress", 0, 7, b"conv-1", value)
    at = BatchEngine(limits=Limits(max_record_bytes=len(value))).process_batch([record], _Store())
    assert [type(o.record) for o in at] == [CommittedTurn]
    store = _Store()
    past = BatchEngine(limits=Limits(max_record_bytes=len(value) - 1)).process_batch([record], store)
    [rejected] = [o.record for o in past]
    assert isinstance(rejected, Rejected)
    assert (rejected.reason, rejected.detail) == (
        R.RECORD_TOO_LARGE,
        f"record of {len(value)} bytes, at most {len(value) - 1}",
    )
    assert (rejected.conversation_id, rejected.source_partition, rejected.source_offset) == ("conv-1", 0, 7)
    assert store == {}


# -- the committed-turn record: its encoded bytes, before it is written --------------------------


def _committed_size(*blocks: SubmittedBlock) -> int:
    c = Conversation()
    [turn] = c.apply(_turn(c, *blocks))
    assert isinstance(turn, CommittedTurn)
    return len(encode(turn))


def test_a_submitted_turn_record_at_the_limit_and_one_past() -> None:
    blocks = (_block(0, "hello"), _block(1, "world"))
    size = _committed_size(*blocks)
    at = Conversation(limits=Limits(max_turn_bytes=size))
    [turn] = at.apply(_turn(at, *blocks))
    assert isinstance(turn, CommittedTurn) and len(encode(turn)) == size
    past = Conversation(limits=Limits(max_turn_bytes=size - 1))
    out = past.apply(_turn(past, *blocks))
    assert _rejections(out) == [
        (R.TURN_TOO_LARGE, f"committed turn record of {size} bytes, at most {size - 1}")
    ]
    assert past.state.graph.revision == 0 and past.state.turn_ids == ()
    assert [type(o) for o in past.user("short")] == [CommittedTurn]  # and the conversation goes on


def test_the_default_limits_refuse_a_turn_whose_blocks_fit_but_whose_record_does_not() -> None:
    """Five blocks of 256 KiB each pass the block limits, but their record would be 1.25 MiB."""
    c = Conversation()
    blocks = [_block(i, "x" * DEFAULT_LIMITS.max_block_bytes) for i in range(5)]
    [rejected] = c.apply(_turn(c, *blocks))
    assert isinstance(rejected, Rejected) and rejected.reason is R.TURN_TOO_LARGE
    assert rejected.detail.endswith(f"bytes, at most {DEFAULT_LIMITS.max_turn_bytes}")
    assert c.state.graph.revision == 0


def _streamed_turn_size(parts: list[str]) -> int:
    c = _stream_text(DEFAULT_LIMITS, parts)
    return len(encode(c.of(CommittedTurn)[-1]))


def test_an_assistant_turn_record_at_the_limit_and_one_past() -> None:
    parts = ["Hello", " there"]
    size = _streamed_turn_size(parts)
    at = _stream_text(Limits(max_turn_bytes=size), parts)
    assert at.state.operations["op-1"].state == S.COMMITTED
    assert len(encode(at.of(CommittedTurn)[-1])) == size
    # the user's turn (revision 1) is smaller than the answer, so only the answer is refused
    past = _stream_text(Limits(max_turn_bytes=size - 1), parts)
    detail = f"committed turn record of {size} bytes, at most {size - 1}"
    assert _last_decision(past) == (S.UNKNOWN, R.TURN_TOO_LARGE, detail)
    assert [t.revision for t in past.of(CommittedTurn)] == [1]
    assert [(q.reason, q.detail) for q in past.of(Quarantined)] == [(R.TURN_TOO_LARGE, detail)]
    assert past.of(ToolCallReady) == [] and past.state.graph.revision == 1


# -- the assembler's out-of-order buffer ---------------------------------------------------------


def _held_order(stream: list[object]) -> list[object]:
    """The deltas of a text stream of three parts with 1 (the block start) delayed after the text."""
    return [stream[0], stream[2], stream[3], stream[4], stream[1], stream[5], stream[6]]


def test_held_deltas_at_the_limit_and_one_past() -> None:
    stream = text_stream(["a", "b", "c"])  # 0 start, 1 block start, 2-4 text, 5 block stop, 6 stop
    tools = {"get_weather": WEATHER}
    at = BlockAssembler(tools, limits=Limits(max_held_deltas=3))
    statuses = [at.feed(d).status for d in _held_order(stream)]  # type: ignore[arg-type]
    assert statuses == [FeedStatus.ACCEPTED, *[FeedStatus.HELD] * 3, *[FeedStatus.ACCEPTED] * 3]
    assert [b.text for b in at.finish().blocks] == ["abc"]  # type: ignore[union-attr]

    past = BlockAssembler(tools, limits=Limits(max_held_deltas=2))
    statuses = [past.feed(d).status for d in _held_order(stream)]  # type: ignore[arg-type]
    assert statuses == [
        FeedStatus.ACCEPTED, FeedStatus.HELD, FeedStatus.HELD, FeedStatus.REFUSED,  # the 3rd held: refused
        FeedStatus.ACCEPTED,  # the block start fills the gap, but what was held is gone
        FeedStatus.REFUSED, FeedStatus.REFUSED,  # and every later delta ahead of the gap is refused
    ]  # fmt: skip
    assert past.snapshot()["held"] == []
    assert past.finish() == Incomplete(
        R.TOO_MANY_HELD_DELTAS,
        "delta 4 would be held delta 3 ahead of the gap at 1, at most 2",
        retract_previews=False,
    )


def test_a_restored_assembler_keeps_refusing_past_the_held_limit() -> None:
    stream = text_stream(["a", "b", "c"])
    tools = {"get_weather": WEATHER}
    live = BlockAssembler(tools, limits=Limits(max_held_deltas=2))
    for delta in _held_order(stream)[:4]:
        live.feed(delta)  # type: ignore[arg-type]
    restored = BlockAssembler.restore(live.snapshot(), tools, Limits(max_held_deltas=2))
    assert restored == live
    assert restored.feed(stream[6]).status is FeedStatus.REFUSED
    assert restored.snapshot()["held"] == []


def test_held_deltas_through_the_fold_at_the_limit_and_one_past() -> None:
    for limit, state in ((3, S.COMMITTED), (2, S.UNKNOWN)):
        c = Conversation(limits=Limits(max_held_deltas=limit))
        c.user("hello")
        c.dispatch_to_streaming()
        c.deltas(_held_order(text_stream(["a", "b", "c"])))  # type: ignore[arg-type]
        if state is S.UNKNOWN:  # the attempt can no longer complete: settled at once
            detail = "delta 4 would be held delta 3 ahead of the gap at 1, at most 2"
            assert _last_decision(c) == (S.UNKNOWN, R.TOO_MANY_HELD_DELTAS, detail)
            assert [t.revision for t in c.of(CommittedTurn)] == [1]
        else:
            assert c.state.operations["op-1"].state == state
            assert [b.text for b in c.of(CommittedTurn)[-1].blocks] == ["abc"]
