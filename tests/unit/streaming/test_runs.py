"""Runs (`streaming/runs.py`): consecutive content deltas of a block carried as one delta.

The oracle is the same deltas fed one by one: over any delivery of the recorded provider
streams (cut into runs anywhere, reordered, repeated, mixed with deltas of another stream,
finished early), feeding the runs gives the same status and preview updates per piece, the same
snapshot after each delivered delta, and the same outcome, as feeding what each run stands for.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import BlockAssembler
from turnledger.streaming.outcomes import Complete, FeedResult, FeedStatus, Incomplete
from turnledger.streaming.runs import expand, is_run_head, merge_runs

from .support import TOOLS, api_of, delivery, fixture, fixture_names, parse

PROPERTY = settings(max_examples=25, derandomize=True, deadline=None)


_START = NormalizedDelta(
    response_handle="h",
    generation=1,
    block_index=0,
    delta_sequence=0,
    type=DeltaType.BLOCK_START,
    block_kind="text",
)


def _text(sequence: int, text: str = "w", block: int = 0, **update: object) -> NormalizedDelta:
    delta = NormalizedDelta(
        response_handle="h",
        generation=1,
        block_index=block,
        delta_sequence=sequence,
        type=DeltaType.TEXT_DELTA,
        text=text,
    )
    return delta.model_copy(update=update) if update else delta


def test_a_flush_of_text_deltas_is_one_run_that_expands_to_them() -> None:
    deltas = parse(api_of("anthropic_text.sse"), [fixture("anthropic_text.sse")])
    runs = merge_runs(deltas)
    others = [d for d in deltas if d.type is not DeltaType.TEXT_DELTA]
    assert [d for d in runs if d.type is not DeltaType.TEXT_DELTA] == others
    [run] = [d for d in runs if d.type is DeltaType.TEXT_DELTA]
    texts = [d.text for d in deltas if d.type is DeltaType.TEXT_DELTA]
    assert len(texts) > 2
    assert [run.text, *(run.following_texts or ())] == texts
    assert run.last_sequence == run.delta_sequence + len(texts) - 1
    assert [p for d in runs for p in expand(d)] == deltas


def test_only_deltas_that_differ_in_sequence_and_text_join() -> None:
    first = _text(0, "a")
    breaks = [
        _text(2, "b"),  # a gap
        _text(1, "b", block=1),
        _text(1, "b", generation=2),
        _text(1, "b", response_handle="other"),
        _text(1, "b", type=DeltaType.THINKING_DELTA),
        _text(1, None),
        _text(1, "b", model="m"),
        _text(1, "b", type=DeltaType.SIGNATURE),
    ]
    for other in breaks:
        assert merge_runs([first, other]) == (first, other), other
    assert merge_runs([first, _text(1, "b"), _text(2, "c")]) == (
        first.model_copy(update={"following_texts": ["b", "c"]}),
    )
    assert not is_run_head(_text(0, "a", type=DeltaType.USAGE))


@st.composite
def _cut_into_runs(draw: st.DrawFn, deltas: list[NormalizedDelta]) -> list[NormalizedDelta]:
    """The deltas with arbitrary stretches of consecutive joining ones made runs."""
    out: list[NormalizedDelta] = []
    start = 0
    while start < len(deltas):
        end = start + draw(st.integers(1, 6))
        out.extend(merge_runs(deltas[start:end]))
        start = end
    return out


@pytest.mark.parametrize("name", fixture_names())
@PROPERTY
@given(data=st.data())
def test_feeding_runs_equals_feeding_what_they_stand_for(name: str, data: st.DataObject) -> None:
    deltas = parse(api_of(name), [fixture(name)])
    runs_of = data.draw(_cut_into_runs(deltas))
    delivered = delivery(runs_of, data, runs_of + [p for r in runs_of for p in expand(r)])
    binding = data.draw(st.sampled_from([{}, {"generation": 1}]))
    limits = data.draw(
        st.sampled_from([DEFAULT_LIMITS, Limits(max_deltas_per_block=5), Limits(max_block_bytes=40)])
    )
    oracle, runs = (
        BlockAssembler(TOOLS, **binding, limits=limits),
        BlockAssembler(TOOLS, **binding, limits=limits),
    )
    finish_at = data.draw(st.integers(0, len(delivered) + 1))
    got: dict[int, str] = {}
    for position, delta in enumerate(delivered):
        if position == finish_at:
            assert runs.finish() == oracle.finish()
        expected = [(p.delta_sequence, oracle.feed(p)) for p in expand(delta)]
        if delta.following_texts:
            yields = []
            for sequence, status in runs.feed_pieces(delta, got):
                yields.append((sequence, status, dict(got)))
                got.clear()
            assert yields == _grouped(expected, [sequence for sequence, _, _ in yields])
        else:
            assert (runs.feed_into(delta, got), got) == (
                expected[0][1].status,
                expected[0][1].preview_updates,
            )
            got.clear()
        assert runs.snapshot() == oracle.snapshot()
    assert runs.finish() == oracle.finish()
    assert runs.snapshot() == oracle.snapshot()


def _grouped(
    expected: list[tuple[int, FeedResult]], ends: list[int]
) -> list[tuple[int, FeedStatus, dict[int, str]]]:
    """The oracle's per-piece results as `feed_pieces` may yield them, after the pieces ending at
    `ends`: one status for every piece of a yield (else that yield is wrong), their updates merged."""
    grouped: list[tuple[int, FeedStatus, dict[int, str]]] = []
    pieces = iter(expected)
    for end in ends:
        statuses, updates = set(), {}
        for sequence, result in pieces:
            statuses.add(result.status)
            updates.update(result.preview_updates)
            if sequence == end:
                break
        grouped.append((end, statuses.pop() if len(statuses) == 1 else FeedStatus.REFUSED, updates))
    assert next(pieces, None) is None, "every piece is fed"
    return grouped


def test_a_usual_run_is_applied_at_once_and_one_off_the_usual_piece_by_piece() -> None:
    whole = BlockAssembler(TOOLS, response_handle="h", generation=1)
    whole.feed(_START)
    updates: dict[int, str] = {}
    assert list(whole.feed_pieces(_text(1, "a", following_texts=["b", "c"]), updates)) == [
        (3, FeedStatus.ACCEPTED)
    ]
    assert updates == {0: "abc"}
    tight = BlockAssembler(TOOLS, response_handle="h", generation=1, limits=Limits(max_deltas_per_block=2))
    tight.feed(_START)
    yields = list(tight.feed_pieces(_text(1, "a", following_texts=["b", "c"]), updates))
    assert yields == [(1, FeedStatus.ACCEPTED), (2, FeedStatus.ACCEPTED), (3, FeedStatus.ACCEPTED)]
    assert tight.previews() == {0: "ab"}
    outcome = tight.finish()
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.TOO_MANY_DELTAS
    small = BlockAssembler(TOOLS, response_handle="h", generation=1, limits=Limits(max_block_bytes=5))
    small.feed(_START)
    yields = list(small.feed_pieces(_text(1, "ab", following_texts=["cd", "ef"]), updates))
    assert [status for _, status in yields] == [FeedStatus.ACCEPTED] * 3 and small.previews() == {0: "abcd"}
    outcome = small.finish()
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.BLOCK_TOO_LARGE


def test_feed_into_of_a_run_answers_for_the_run() -> None:
    assembler = BlockAssembler(TOOLS, response_handle="h", generation=1)
    updates: dict[int, str] = {}
    assert assembler.feed_into(_START, updates) is FeedStatus.ACCEPTED
    run = _text(1, "a", following_texts=["b", "c"])
    assert assembler.feed_into(run, updates) is FeedStatus.ACCEPTED and updates == {0: "abc"}
    assert assembler.feed_into(run, updates) is FeedStatus.DUPLICATE
    assert assembler.duplicates_dropped == 3
    assert assembler.feed_into(_text(5, "e", following_texts=["f"]), updates) is FeedStatus.HELD
    assert assembler.feed_into(_text(3, "x", following_texts=["d"]), updates) is FeedStatus.ACCEPTED
    assert assembler.previews() == {0: "abcdef"}


@pytest.mark.parametrize(
    "bad",
    [
        _text(1, "a", type=DeltaType.MESSAGE_STOP, following_texts=["b"]),
        _text(1, None, following_texts=["b"]),
        _text(1, "a", model="m", following_texts=["b"]),
    ],
    ids=["not content", "no text", "another field"],
)
def test_a_run_that_is_no_run_head_fails_the_attempt(bad: NormalizedDelta) -> None:
    assembler = BlockAssembler(TOOLS, response_handle="h", generation=1)
    for delta in (
        NormalizedDelta(
            response_handle="h", generation=1, block_index=-1, delta_sequence=0, type=DeltaType.MESSAGE_START
        ),
        bad,
    ):
        assembler.feed(delta)
    outcome = assembler.finish()
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.MALFORMED_BLOCK
    assert f"a run of 2 {bad.type} deltas from 1" in outcome.detail


def test_a_foreign_bad_run_is_not_this_streams_violation() -> None:
    deltas = parse(api_of("anthropic_text.sse"), [fixture("anthropic_text.sse")])
    assembler = BlockAssembler(TOOLS)
    for delta in merge_runs(deltas)[:-1]:
        assembler.feed(delta)
    foreign = _text(0, None, response_handle="other", following_texts=["b"])
    assert assembler.feed(foreign).status is FeedStatus.FOREIGN
    assembler.feed(deltas[-1])
    assert isinstance(assembler.finish(), Complete)


def test_a_delta_s_dedup_key_is_its_handle_generation_block_and_sequence() -> None:
    """The key the spec dedups a delta by: a retried attempt (another generation) or another block at
    the same sequence is another delta."""
    delta = _text(7, block=3, response_handle="msg_1", generation=2)
    assert delta.dedup_key == ("msg_1", 2, 3, 7)
    assert len({delta.dedup_key, delta.model_copy(update={"generation": 3}).dedup_key}) == 2


def test_a_feed_result_says_accepted_duplicate_or_foreign_by_its_status() -> None:
    """Accepted: applied now or held for a gap; the other two, exactly their status."""
    S = FeedStatus
    assert {s for s in S if FeedResult(s).accepted} == {S.ACCEPTED, S.HELD}
    assert {s for s in S if FeedResult(s).duplicate} == {S.DUPLICATE}
    assert {s for s in S if FeedResult(s).foreign} == {S.FOREIGN}


def test_a_complete_response_s_tool_calls_are_its_tool_call_blocks_in_order() -> None:
    from turnledger.model.deltas import StopReason
    from turnledger.streaming.outcomes import CandidateBlock

    blocks = (
        CandidateBlock(0, "text", text="checking"),
        CandidateBlock(1, "tool_call", call_id="c1", tool_name="a", arguments="{}"),
        CandidateBlock(2, "thinking", text="hm"),
        CandidateBlock(3, "tool_call", call_id="c2", tool_name="b", arguments="{}"),
    )
    complete = Complete(blocks, StopReason.TOOL_USE, "msg_1", 1)
    assert complete.tool_calls == (blocks[1], blocks[3])
    assert Complete(blocks[:1], StopReason.END_TURN, "msg_1", 1).tool_calls == ()
