"""A StreamDeltas event with runs (`streaming/runs.py`) folds to exactly what the same event with
its runs expanded folds to: the same outputs, byte for byte once encoded, and the same state,
over answers cut into events anywhere, with deltas repeated, held behind a gap, or of a tool
call. Only a run of another stream differs, by design: it is quarantined as the one record it
arrived as."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.codec import encode
from turnledger.model.deltas import NormalizedDelta
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.runs import expand, merge_runs

from .scenario import Conversation, Quarantined, text_stream, tool_stream

PROPERTY = settings(max_examples=60, derandomize=True, deadline=None)


def _streaming() -> Conversation:
    conv = Conversation()
    conv.user("hi")
    conv.dispatch_to_streaming("op-1", "msg_1")
    return conv


@st.composite
def _events(draw: st.DrawFn) -> list[list[NormalizedDelta]]:
    """An answer (text or a tool call) cut into events, with repeats and gaps, each event's deltas
    in the order a worker could append them."""
    tools = draw(st.booleans())
    parts = draw(st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=12))
    if tools:
        deltas = tool_stream([("call_1", "get_weather", ['{"city": ', '"Paris"}'])])
    else:
        deltas = text_stream(parts)
    deltas += draw(st.lists(st.sampled_from(deltas), max_size=3))  # repeats
    if draw(st.booleans()) and len(deltas) > 3:
        i = draw(st.integers(2, len(deltas) - 2))
        deltas[i], deltas[i + 1] = deltas[i + 1], deltas[i]  # a gap, filled one delta later
    events: list[list[NormalizedDelta]] = []
    start = 0
    while start < len(deltas):
        end = start + draw(st.integers(1, 7))
        events.append(deltas[start:end])
        start = end
    return events


@PROPERTY
@given(_events())
def test_runs_fold_to_the_outputs_and_state_of_the_deltas_they_stand_for(
    events: list[list[NormalizedDelta]],
) -> None:
    with_runs, expanded = _streaming(), _streaming()
    for deltas in events:
        runs = list(merge_runs(deltas))
        with_runs.deltas(runs)
        expanded.deltas([p for d in runs for p in expand(d)])
    assert [encode(o) for o in with_runs.outputs] == [encode(o) for o in expanded.outputs]
    assert with_runs.state == expanded.state


def test_a_run_of_another_stream_is_one_quarantined_record() -> None:
    conv = _streaming()
    [run] = merge_runs(text_stream(["a", "b", "c"], handle="msg_other")[2:5])
    assert run.following_texts == ["b", "c"]
    conv.deltas([run])
    [quarantined] = conv.of(Quarantined)
    assert quarantined.reason is ReasonCode.FOREIGN_HANDLE


def test_a_late_or_stale_run_is_quarantined_with_the_count_of_the_deltas_it_stands_for() -> None:
    """A quarantine's detail counts the deltas a run merged, as it would count them expanded (the
    property above found a late run of two argument fragments reported as one delta)."""
    stale = "2 deltas of generation 2, active is 1"
    for late, before, generation, detail in (
        (text_stream(["x", "y", "z"])[2:5], text_stream(["a", "b"]), 1, "3 deltas while COMMITTED"),
        (text_stream(["x", "y"])[2:4], text_stream(["a"], stop=False), 2, stale),
    ):
        reports = []
        for deltas in (list(merge_runs(late)), late):
            conv = _streaming()
            conv.deltas(before)
            conv.deltas(deltas, gen=generation)
            [quarantined] = conv.of(Quarantined)
            reports.append((len(deltas), quarantined.detail))
        assert reports == [(1, detail), (len(late), detail)]
