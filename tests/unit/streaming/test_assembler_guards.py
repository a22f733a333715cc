"""Exact outcomes of every assembler guard (mutation survivors of `streaming/assembler.py`).

`test_assembler.py` pins the reason codes; these pin the whole outcome — reason, detail and
whether previews are retracted — and the counters, limits at their boundary, binding, resume,
discard, the final commit guard and the snapshot, so a mutated guard changes an asserted value.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from turnledger.model.canonical import digest_of
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.limits import Limits
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import BlockAssembler
from turnledger.streaming.outcomes import CandidateBlock, Complete, FeedStatus, Incomplete

from .support import TOOLS
from .test_assembler import WEATHER, Stream

R = ReasonCode


def finish(stream: Stream, limits: Limits | None = None) -> tuple[object, BlockAssembler]:
    assembler = BlockAssembler(TOOLS) if limits is None else BlockAssembler(TOOLS, limits=limits)
    for delta in stream.deltas:
        assembler.feed(delta)
    return assembler.finish(), assembler


def incomplete(stream: Stream, limits: Limits | None = None) -> Incomplete:
    outcome, assembler = finish(stream, limits)
    assert isinstance(outcome, Incomplete), outcome
    assert assembler.partial_tool_dispatches == 0
    return outcome


def test_a_complete_response_carries_every_field() -> None:
    stream = Stream().add(DeltaType.MESSAGE_START, model="m-1", input_tokens=11)
    stream.add(DeltaType.BLOCK_START, 0, block_kind="thinking")
    stream.add(DeltaType.THINKING_DELTA, 0, text="hm")
    stream.add(DeltaType.SIGNATURE, 0, text="sig-0")
    stream.add(DeltaType.BLOCK_STOP, 0)
    stream.text(1, "a", "b").call(2, "c1", "get_weather", '{"location":', ' "Rome"}')
    stream.add(DeltaType.USAGE, output_tokens=5)
    stream.add(DeltaType.MESSAGE_STOP, stop_reason=StopReason.TOOL_USE, raw_stop_reason="tool_use")
    outcome, assembler = finish(stream)
    assert outcome == Complete(
        (
            CandidateBlock(0, "thinking", text="hm", signature="sig-0"),
            CandidateBlock(1, "text", text="ab"),
            CandidateBlock(
                2,
                "tool_call",
                call_id="c1",
                tool_name="get_weather",
                arguments='{"location": "Rome"}',
                argument_digest=digest_of({"location": "Rome"}),
                schema_digest=TOOLS["get_weather"].schema_digest,
            ),
        ),
        StopReason.TOOL_USE,
        "h1",
        3,
        raw_stop_reason="tool_use",
        input_tokens=11,
        output_tokens=5,
        model="m-1",
    )
    assert assembler.previews() == {1: "ab"}
    assert (assembler.duplicates_dropped, assembler.previews_retracted, assembler.unknown_events) == (0, 0, 0)


def test_usage_is_overwritten_by_the_latest_total_and_message_stop_carries_it_too() -> None:
    stream = Stream().add(DeltaType.MESSAGE_START, model="m", input_tokens=3, output_tokens=1)
    stream.add(DeltaType.USAGE, input_tokens=4).text(0, "x")
    stream.add(DeltaType.MESSAGE_STOP, stop_reason=StopReason.END_TURN, output_tokens=9)
    outcome, _ = finish(stream)
    assert isinstance(outcome, Complete)
    assert (outcome.input_tokens, outcome.output_tokens, outcome.raw_stop_reason) == (4, 9, None)


@pytest.mark.parametrize(
    ("build", "reason", "detail", "retract"),
    [
        (
            lambda: Stream().start().add(DeltaType.TEXT_DELTA, 4, text="x").stop(),
            R.MALFORMED_BLOCK,
            "text_delta for block 4: never started",
            False,
        ),
        (
            lambda: Stream().start().text(0, "a").add(DeltaType.TEXT_DELTA, 0, text="b").stop(),
            R.MALFORMED_BLOCK,
            "text_delta for block 0: stopped",
            True,
        ),
        (
            lambda: Stream().start().text(0, "a", stop=False).stop().add(DeltaType.TEXT_DELTA, 0, text="b"),
            R.MALFORMED_BLOCK,
            "text_delta for block 0: after message stop",
            True,
        ),
        (
            lambda: Stream().start().add(DeltaType.SIGNATURE, 2, text="s").stop(),
            R.MALFORMED_BLOCK,
            "signature for block 2: never started",
            False,
        ),
        (
            lambda: Stream().start().add(DeltaType.BLOCK_STOP, 2).stop(),
            R.MALFORMED_BLOCK,
            "block stop for block 2: never started",
            False,
        ),
        (
            lambda: Stream().start().text(0, "a").add(DeltaType.BLOCK_STOP, 0).stop(),
            R.MALFORMED_BLOCK,
            "block stop for block 0: stopped",
            True,
        ),
        (
            lambda: Stream().start().start().text(0, "a").stop(),
            R.MALFORMED_BLOCK,
            "second message start",
            True,
        ),
        (
            lambda: Stream().start().text(0, "a").stop().stop(),
            R.MALFORMED_BLOCK,
            "second message stop",
            True,
        ),
        (
            lambda: (
                Stream()
                .start()
                .call(0, "c1", "get_weather", WEATHER, stop=False)
                .call(0, "c1", "get_weather", WEATHER)
                .stop()
            ),
            R.MALFORMED_BLOCK,
            "block 0 started twice (call ids 'c1', 'c1')",
            False,
        ),
        (
            lambda: (
                Stream()
                .start()
                .call(0, "c1", "get_weather", WEATHER)
                .call(0, "c2", "get_weather", WEATHER)
                .stop()
            ),
            R.CALL_ID_INVALID,
            "block 0 started twice (call ids 'c1', 'c2')",
            False,
        ),
        (
            lambda: Stream().start().text(0, "a").stop().text(1, "b"),
            R.MALFORMED_BLOCK,
            "block 1 started after message stop",
            True,
        ),
        (
            lambda: Stream().start().add(DeltaType.BLOCK_START, 0, block_kind="server_tool_use").stop(),
            R.UNKNOWN_KIND,
            "block 0 has kind 'server_tool_use'",
            False,
        ),
        (
            lambda: Stream().start().add(DeltaType.BLOCK_START, 0).stop(),
            R.UNKNOWN_KIND,
            "block 0 has kind ''",
            False,
        ),
        (
            lambda: (
                Stream().start().text(0, stop=False).add(DeltaType.ARGUMENT_FRAGMENT, 0, text="{}").stop()
            ),
            R.MALFORMED_BLOCK,
            "argument_fragment for text block 0",
            False,
        ),
        (
            lambda: (
                Stream()
                .start()
                .call(0, "c1", "get_weather", stop=False)
                .add(DeltaType.TEXT_DELTA, 0, text="x")
                .stop()
            ),
            R.MALFORMED_BLOCK,
            "text_delta for tool_call block 0",
            False,
        ),
        (
            lambda: (
                Stream()
                .start()
                .add(DeltaType.PROVIDER_ERROR, error_type="overloaded", error_message="busy")
                .add(DeltaType.PROVIDER_ERROR, error_type="second", error_message="later")
                .text(0, "a")
                .stop()
            ),
            R.PROVIDER_ERROR,
            "overloaded: busy",
            True,
        ),
        (
            lambda: Stream().start().add(DeltaType.PROVIDER_ERROR).stop(),
            R.PROVIDER_ERROR,
            "error: ",
            False,
        ),
        (lambda: Stream().text(0, "hi").stop(), R.STREAM_INCOMPLETE, "no message start", True),
        (
            lambda: Stream().start().text(0, "hi", stop=False).text(1, "x"),
            R.MISSING_STOP,
            "no message stop; open blocks [0]",
            True,
        ),
        (
            lambda: Stream().start().text(0, "hi").stop(None),
            R.MISSING_STOP,
            "no stop reason; open blocks []",
            True,
        ),
        (
            lambda: Stream().start().text(0, "x").stop(StopReason.ERROR, raw="boom"),
            R.PROVIDER_ERROR,
            "stopped with boom",
            True,
        ),
        (
            lambda: Stream().start().text(0, "x").text(1, "y", stop=False).text(2, "z", stop=False).stop(),
            R.STREAM_INCOMPLETE,
            "message stopped with open blocks [1, 2]",
            True,
        ),
        (
            lambda: Stream().start().call(0, "c1", "rm_rf", "{}").stop(),
            R.UNKNOWN_TOOL,
            "tool block 0: tool 'rm_rf' is not in the toolset",
            False,
        ),
        (
            lambda: Stream().start().call(0, "", "get_weather", WEATHER).stop(),
            R.CALL_ID_INVALID,
            "tool block 0: call id missing",
            False,
        ),
        (
            lambda: (
                Stream()
                .start()
                .text(0, "t")
                .call(1, "c1", "get_weather", WEATHER)
                .call(2, "c1", "get_weather", WEATHER)
                .stop()
            ),
            R.CALL_ID_INVALID,
            "tool block 2: call id 'c1' repeated in the response",
            True,
        ),
        (
            lambda: Stream().start().call(0, "c1", "get_weather", '{"location": 5}').stop(),
            R.ARGUMENTS_SCHEMA_VIOLATION,
            "tool block 0: /location: 5 is not of type 'string'",
            False,
        ),
    ],
)
def test_every_refusal_has_its_exact_outcome(build, reason: ReasonCode, detail: str, retract: bool) -> None:  # type: ignore[no-untyped-def]
    assert incomplete(build()) == Incomplete(reason, detail, retract_previews=retract)


def test_an_unknown_kind_is_counted_once_per_block_and_its_content_is_no_second_violation() -> None:
    stream = Stream().start().add(DeltaType.BLOCK_START, 0, block_kind="server_tool_use")
    stream.add(DeltaType.TEXT_DELTA, 0, text="x").add(DeltaType.BLOCK_STOP, 0)
    stream.add(DeltaType.BLOCK_START, 1, block_kind="image").stop()
    outcome, assembler = finish(stream)
    assert outcome == Incomplete(R.UNKNOWN_KIND, "block 0 has kind 'server_tool_use'", retract_previews=False)
    assert assembler.unknown_events == 2


@pytest.mark.parametrize(
    ("stream", "reason", "detail"),
    [
        (
            Stream()
            .start()
            .call(0, "c1", "get_weather", '{"loc', stop=False)
            .stop(StopReason.MAX_TOKENS, "length"),
            R.OUTPUT_LIMIT_REACHED,
            "tool block 0 open at length",
        ),
        (
            Stream().start().call(0, "c1", "get_weather", '{"loc').stop(StopReason.MAX_TOKENS, "length"),
            R.OUTPUT_LIMIT_REACHED,
            "tool block 0 at length: cut at 5: Unterminated string starting at at 1",
        ),
        (
            Stream()
            .start()
            .call(0, "c1", "get_weather", '{"loc": 1}}')
            .call(1, "c2", "get_weather", WEATHER)
            .stop(StopReason.MAX_TOKENS, "length"),
            R.OUTPUT_LIMIT_REACHED,
            "tool block 0 at length: Extra data at 10 of 11",
        ),
        (
            Stream()
            .start()
            .call(0, "c1", "get_weather", '{"loc', stop=False)
            .stop(StopReason.MAX_TOKENS, "model_context_window_exceeded"),
            R.OUTPUT_LIMIT_REACHED,
            "tool block 0 open at model_context_window_exceeded; "
            "the context window is full: send less history",
        ),
        (
            Stream().start().call(0, "c1", "get_weather", WEATHER).stop(StopReason.MAX_TOKENS, "length"),
            R.OUTPUT_LIMIT_REACHED,
            "last block is a tool call at length",
        ),
        (
            Stream()
            .start()
            .call(0, "c1", "get_weather", WEATHER)
            .call(1, "c2", "get_weather", WEATHER, stop=False)
            .stop(StopReason.MAX_TOKENS, "length"),
            R.OUTPUT_LIMIT_REACHED,
            "tool block 1 open at length",
        ),
    ],
)
def test_output_limit_outcomes(stream: Stream, reason: ReasonCode, detail: str) -> None:
    """Arguments that do not parse at the limit were TRUNCATED_ARGUMENTS, which the fold settled UNKNOWN
    for a new generation to meet the same limit: they are the limit's cut, the parse error kept. The
    detail ends with what the client can do (`LIMIT_ADVICE`)."""
    outcome = incomplete(stream)
    advice = "" if detail.endswith("send less history") else "; raise maxOutputTokens"
    assert outcome == Incomplete(reason, detail + advice, retract_previews=False)


def thinking(
    stream: Stream, block: int, *parts: str, signature: str | None = None, stop: bool = True
) -> Stream:
    """`stream` with a thinking block of `parts` (and a signature) at `block`."""
    stream.add(DeltaType.BLOCK_START, block, block_kind="thinking")
    for part in parts:
        stream.add(DeltaType.THINKING_DELTA, block, text=part)
    if signature is not None:
        stream.add(DeltaType.SIGNATURE, block, text=signature)
    return stream.add(DeltaType.BLOCK_STOP, block) if stop else stream


STILL_REASONING = (
    "limit reached at max_tokens while the model was still reasoning: nothing visible to commit; "
    "raise maxOutputTokens"
)


@pytest.mark.parametrize(
    ("build", "retract"),
    [
        (lambda: thinking(Stream().start(), 0, "Let me", " think"), False),
        (lambda: thinking(Stream().start(), 0, "Let me think", signature="sig-0"), False),
        (lambda: thinking(Stream().start(), 0, "Let me", stop=False), False),
        (lambda: thinking(Stream().start(), 0, "Let me think").text(1), False),
        (lambda: thinking(Stream().start(), 0, "Let me think").text(1, "\n", " \t"), True),
        (lambda: Stream().start(), False),
    ],
    ids=["thinking", "signed", "open", "empty-text", "blank-text", "no-block"],
)
def test_an_answer_with_nothing_visible_at_the_output_limit_is_refused(build, retract: bool) -> None:  # type: ignore[no-untyped-def]
    """Thinking only, beside text that is blank at most (`is_blank`), or no block at all (the reasoning
    hidden): the limit cut the model while it was still reasoning. A blank text was previewed, and is
    retracted."""
    outcome, assembler = finish(build().stop(StopReason.MAX_TOKENS, "max_tokens"))
    assert outcome == Incomplete(R.OUTPUT_LIMIT_REACHED, STILL_REASONING, retract_previews=retract)
    assert (assembler.previews_retracted, assembler.previews()) == (int(retract), {})


@pytest.mark.parametrize(
    ("build", "kinds"),
    [
        (
            lambda: thinking(Stream().start(), 0, "Let me think", signature="s").text(1, "The answ"),
            ["thinking", "text"],
        ),
        (
            lambda: thinking(Stream().start(), 0, "hm").text(1, "\n").text(2, "Rome"),
            ["thinking", "text", "text"],
        ),
        (lambda: Stream().start().call(0, "c1", "get_weather", WEATHER).text(1, "\n"), ["tool_call", "text"]),
        (
            lambda: thinking(Stream().start().call(0, "c1", "get_weather", WEATHER), 1, "hm"),
            ["tool_call", "thinking"],
        ),
    ],
    ids=["thinking-and-text", "blank-then-visible-text", "call-and-blank-text", "call-and-thinking"],
)
def test_an_answer_with_something_visible_at_the_output_limit_commits(build, kinds: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Visible text, or a call the limit did not cut (not open, unparsable or last), commits as before."""
    outcome, _ = finish(build().stop(StopReason.MAX_TOKENS, "max_tokens"))
    assert isinstance(outcome, Complete) and outcome.stop_reason is StopReason.MAX_TOKENS
    assert [b.kind for b in outcome.blocks] == kinds


@pytest.mark.parametrize("stop", [StopReason.END_TURN, StopReason.STOP_SEQUENCE])
def test_a_thinking_only_or_empty_answer_at_a_normal_stop_is_complete(stop: StopReason) -> None:
    """Only the output limit refuses an answer with nothing visible: at a normal stop it is what the model
    said, Complete, and the fold ends it COMMITTED EMPTY_RESPONSE with nothing of it in the history
    (`lifecycle.NOTHING_VISIBLE`, `tests/unit/dispatch/test_nothing_visible.py`)."""
    outcome, _ = finish(thinking(Stream().start(), 0, "hm", signature="s").stop(stop, "end_turn"))
    assert isinstance(outcome, Complete)
    assert [(b.kind, b.text, b.signature) for b in outcome.blocks] == [("thinking", "hm", "s")]
    empty, _ = finish(Stream().start().stop(stop, "end_turn"))
    assert isinstance(empty, Complete) and empty.blocks == ()


def test_an_output_limit_after_a_call_and_text_commits() -> None:
    stream = Stream().start().call(0, "c1", "get_weather", WEATHER).text(1, "done")
    outcome, _ = finish(stream.stop(StopReason.MAX_TOKENS, "length"))
    assert isinstance(outcome, Complete)
    assert [b.kind for b in outcome.blocks] == ["tool_call", "text"]


def test_an_output_limit_on_a_text_block_last_among_calls_commits_even_with_an_invalid_earlier_call() -> None:
    """Only parse failures of calls refuse at the limit; schema checks come after, in `_candidates`."""
    stream = Stream().start().call(0, "c1", "get_weather", '{"location": 5}').text(1, "done")
    outcome = incomplete(stream.stop(StopReason.MAX_TOKENS, "length"))
    assert outcome.reason is R.ARGUMENTS_SCHEMA_VIOLATION


def test_the_block_limit_refuses_the_first_block_past_it_and_never_opens_it() -> None:
    limits = replace(Limits(), max_blocks_per_turn=2)
    at_limit, _ = finish(Stream().start().text(0, "a").text(1, "b").stop(), limits)
    assert isinstance(at_limit, Complete)
    stream = Stream().start().text(0, "a").text(1, "b").text(2, "c").stop()
    outcome, assembler = finish(stream, limits)
    assert outcome == Incomplete(R.TOO_MANY_BLOCKS, "block 2 is block 3, at most 2", retract_previews=True)
    assert [b["index"] for b in assembler.snapshot()["blocks"]] == [0, 1]
    assert assembler.previews_retracted == 2


def test_the_delta_limit_counts_content_deltas_and_drops_the_one_past_it() -> None:
    limits = replace(Limits(), max_deltas_per_block=2)
    at_limit, _ = finish(Stream().start().text(0, "a", "b").stop(), limits)
    assert isinstance(at_limit, Complete) and at_limit.blocks[0].text == "ab"
    assembler = BlockAssembler(TOOLS, limits=limits)
    for delta in Stream().start().text(0, "a", "b", "c").stop().deltas:
        assembler.feed(delta)
    assert assembler.previews() == {0: "ab"}
    assert assembler.finish() == Incomplete(
        R.TOO_MANY_DELTAS, "block 0 received 3 deltas, at most 2", retract_previews=True
    )


def test_the_byte_limit_allows_exactly_the_limit_and_drops_only_the_fragment_past_it() -> None:
    limits = replace(Limits(), max_block_bytes=5)
    at_limit, _ = finish(Stream().start().text(0, "ab", "cde").stop(), limits)
    assert isinstance(at_limit, Complete) and at_limit.blocks[0].text == "abcde"
    assembler = BlockAssembler(TOOLS, limits=limits)
    for delta in Stream().start().text(0, "abc", "déf", "g").stop().deltas:
        assembler.feed(delta)
    assert assembler.previews() == {0: "abcg"}  # the dropped fragment is not counted: "g" fits
    assert assembler.finish() == Incomplete(
        R.BLOCK_TOO_LARGE, "block 0 reached 7 bytes, at most 5", retract_previews=True
    )


def test_a_replaced_signature_is_counted_once() -> None:
    limits = replace(Limits(), max_block_bytes=6)
    stream = Stream().start().add(DeltaType.BLOCK_START, 0, block_kind="thinking")
    stream.add(DeltaType.THINKING_DELTA, 0, text="ab")
    stream.add(DeltaType.SIGNATURE, 0, text="1234").add(DeltaType.SIGNATURE, 0, text="5678")
    outcome, _ = finish(stream.add(DeltaType.BLOCK_STOP, 0).stop(StopReason.END_TURN), limits)
    assert isinstance(outcome, Complete)
    assert outcome.blocks == (CandidateBlock(0, "thinking", text="ab", signature="5678"),)


def test_a_signature_past_the_limit_keeps_the_previous_one_and_its_size() -> None:
    limits = replace(Limits(), max_block_bytes=6)
    stream = Stream().start().add(DeltaType.BLOCK_START, 0, block_kind="thinking")
    stream.add(DeltaType.THINKING_DELTA, 0, text="ab").add(DeltaType.SIGNATURE, 0, text="1234")
    stream.add(DeltaType.SIGNATURE, 0, text="1234567")
    assembler = BlockAssembler(TOOLS, limits=limits)
    for delta in stream.deltas:
        assembler.feed(delta)
    block = assembler._blocks[0]
    assert (block.signature, block.size, block.deltas) == ("1234", 6, 3)
    assert assembler.finish() == Incomplete(
        R.BLOCK_TOO_LARGE, "block 0 reached 9 bytes, at most 6", retract_previews=False
    )


def test_feed_statuses_binding_and_held_duplicates() -> None:
    deltas = Stream().start().text(0, "a", "b").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    assert assembler.feed(deltas[0]).status is FeedStatus.ACCEPTED
    assert (assembler.response_handle, assembler.generation) == ("h1", 3)
    assert assembler.feed(deltas[3]).status is FeedStatus.HELD
    assert assembler.feed(deltas[3]).status is FeedStatus.DUPLICATE
    assert assembler.feed(deltas[0]).status is FeedStatus.DUPLICATE
    assert assembler.duplicates_dropped == 2
    assert assembler.feed(deltas[2]).status is FeedStatus.HELD
    result = assembler.feed(deltas[1])
    assert result.status is FeedStatus.ACCEPTED and result.preview_updates == {0: "ab"}
    for delta in deltas[4:]:
        assert assembler.feed(delta).status is FeedStatus.ACCEPTED
    assert isinstance(assembler.finish(), Complete)


@pytest.mark.parametrize(("handle", "generation"), [("h1", None), (None, 3)])
def test_a_half_given_binding_is_completed_by_the_first_delta(
    handle: str | None, generation: int | None
) -> None:
    assembler = BlockAssembler(TOOLS, response_handle=handle, generation=generation)
    other = Stream(handle="h2", generation=7).start().deltas[0]
    assert assembler.feed(other).status is FeedStatus.ACCEPTED
    assert (assembler.response_handle, assembler.generation) == ("h2", 7)
    assert assembler.feed(Stream().start().deltas[0]).status is FeedStatus.FOREIGN


def test_a_gap_is_stream_incomplete_with_where_it_is() -> None:
    deltas = Stream().start().text(0, "a", "b", "c").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    for delta in [d for d in deltas if d.delta_sequence not in (3, 4)]:
        assembler.feed(delta)
    assert assembler.finish() == Incomplete(
        R.STREAM_INCOMPLETE, "sequence gap: next 3, held from 5", retract_previews=True
    )


def test_resume_at_the_applied_sequence_is_no_violation() -> None:
    deltas = Stream().start().text(0, "ab").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    for delta in deltas[:3]:
        assembler.feed(delta)
    assembler.resume(2)
    for delta in deltas:
        assembler.feed(delta)
    outcome = assembler.finish()
    assert isinstance(outcome, Complete) and outcome.blocks[0].text == "ab"
    assert assembler.duplicates_dropped == 3


def test_resume_past_the_applied_sequence_says_by_how_much_and_drops_held_deltas_up_to_the_ack() -> None:
    deltas = Stream().start().text(0, "a", "b", "c").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    assembler.feed(deltas[0])
    assembler.feed(deltas[3])  # held
    assembler.feed(deltas[5])  # held, past the ack
    assembler.resume(3)
    assert sorted(assembler.snapshot()["held"][i]["delta_sequence"] for i in range(1)) == [5]
    assert assembler.snapshot()["next_sequence"] == 4
    for delta in deltas[4:]:
        assembler.feed(delta)
    assert assembler.finish() == Incomplete(
        R.STREAM_INCOMPLETE, "acknowledged sequence 3 beyond applied 0", retract_previews=False
    )


def test_resume_applies_held_deltas_that_follow_the_ack() -> None:
    deltas = Stream().start().text(0, "a", "b").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    for delta in deltas[:2]:
        assembler.feed(delta)
    assembler.feed(deltas[3])
    assembler.feed(deltas[4])
    assembler.resume(1)  # nothing new acknowledged; the held run stays held (2 is missing)
    assert assembler.snapshot()["next_sequence"] == 2
    assembler.feed(deltas[2])
    assert assembler.previews() == {0: "ab"}
    assembler.resume(4)
    assert assembler.snapshot()["next_sequence"] == 5


def test_discard_names_its_reason_and_is_final() -> None:
    assembler = BlockAssembler(TOOLS)
    for delta in Stream().start().text(0, "a").deltas:
        assembler.feed(delta)
    first = assembler.discard(R.PROVIDER_ERROR, "connection reset")
    assert first == Incomplete(R.PROVIDER_ERROR, "connection reset", retract_previews=True)
    assert assembler.discard(R.STREAM_DISCONNECTED, "again") == first
    assert assembler.finish() == first
    assert assembler.previews_retracted == 1


def test_discard_after_finish_keeps_the_outcome_unrecorded() -> None:
    assembler = BlockAssembler(TOOLS)
    for delta in Stream().start().text(0, "a").stop(StopReason.END_TURN).deltas:
        assembler.feed(delta)
    assert isinstance(assembler.finish(), Complete)
    assert assembler.discard() == Incomplete(R.STREAM_DISCONNECTED, "", retract_previews=True)
    assert assembler.snapshot()["closed"] is None
    assert assembler.previews_retracted == 1
    assert assembler.discard() == Incomplete(R.STREAM_DISCONNECTED, "", retract_previews=True)
    assert assembler.previews_retracted == 1


def test_previews_list_only_text_blocks_with_text_in_index_order() -> None:
    stream = Stream().start().text(2, "two").text(0, "zero").text(1)
    stream.add(DeltaType.BLOCK_START, 3, block_kind="thinking").add(DeltaType.THINKING_DELTA, 3, text="t")
    assembler = BlockAssembler(TOOLS)
    for delta in stream.deltas:
        assembler.feed(delta)
    assert list(assembler.previews().items()) == [(0, "zero"), (2, "two")]
    snapshot = assembler.snapshot()
    assert BlockAssembler.snapshot_has_previews(snapshot)
    assert not BlockAssembler.snapshot_has_previews(
        {**snapshot, "blocks": snapshot["blocks"][1:2] + snapshot["blocks"][3:]}
    )
    assert assembler.finish() == Incomplete(R.MISSING_STOP, "no message stop; open blocks [3]", True)
    assert assembler.previews_retracted == 2


def candidate(**update: object) -> CandidateBlock:
    base = CandidateBlock(
        0,
        "tool_call",
        call_id="c1",
        tool_name="get_weather",
        arguments=WEATHER,
        argument_digest=digest_of({"location": "Rome"}),
    )
    return replace(base, **update)  # type: ignore[arg-type]


def stopped_call_assembler(*, block_stopped: bool = True, message_stopped: bool = True) -> BlockAssembler:
    stream = Stream().start().call(0, "c1", "get_weather", WEATHER, stop=block_stopped)
    if message_stopped:
        stream.stop()
    assembler = BlockAssembler(TOOLS)
    for delta in stream.deltas:
        assembler.feed(delta)
    return assembler


@pytest.mark.parametrize(
    ("forged", "block_stopped", "message_stopped"),
    [
        (candidate(argument_digest="sha256:00"), True, True),
        (candidate(arguments=None), True, True),
        (candidate(call_id=None), True, True),
        (candidate(call_id=""), True, True),
        (candidate(arguments='{"location": "Ro'), True, True),
        (candidate(arguments='{"location": NaN}'), True, True),
        (candidate(), False, True),
        (candidate(), True, False),
    ],
)
def test_the_final_guard_refuses_a_call_that_breaks_any_commit_rule(
    forged: CandidateBlock, block_stopped: bool, message_stopped: bool
) -> None:
    assembler = stopped_call_assembler(block_stopped=block_stopped, message_stopped=message_stopped)
    text = CandidateBlock(1, "text", text="t")
    outcome = assembler._guarded((text, forged))
    assert outcome == Incomplete(R.INCOMPLETE_ARGUMENTS, "guard: block 0", retract_previews=False)
    assert assembler.partial_tool_dispatches == 1


def test_the_final_guard_lets_a_committable_call_through() -> None:
    assembler = stopped_call_assembler()
    outcome = assembler._guarded((candidate(),))
    assert isinstance(outcome, Complete) and outcome.blocks == (candidate(),)
    assert assembler.partial_tool_dispatches == 0


def test_a_snapshot_holds_every_field_and_restores_an_equal_assembler() -> None:
    stream = Stream().add(DeltaType.MESSAGE_START, model="m", input_tokens=2)
    stream.add(DeltaType.BLOCK_START, 0, block_kind="thinking").add(DeltaType.THINKING_DELTA, 0, text="th")
    stream.add(DeltaType.SIGNATURE, 0, text="s").add(DeltaType.BLOCK_STOP, 0)
    stream.text(1, "hi").call(2, "c1", "get_weather", WEATHER)
    stream.add(DeltaType.PROVIDER_ERROR, error_type="e", error_message="m")
    stream.add(DeltaType.BLOCK_START, 1, block_kind="text")  # a violation
    stream.add(DeltaType.USAGE, output_tokens=4)
    stream.stop(StopReason.MAX_TOKENS, "length")
    assembler = BlockAssembler(TOOLS)
    deltas = stream.deltas
    for delta in [*deltas[:-1], deltas[2]]:
        assembler.feed(delta)
    assembler.feed(
        NormalizedDelta(
            response_handle="h1",
            generation=3,
            block_index=-1,
            delta_sequence=len(deltas) + 1,
            type=DeltaType.USAGE,
        )
    )  # held
    snapshot = json.loads(json.dumps(assembler.snapshot()))
    assert snapshot == {
        "v": 1,
        "response_handle": "h1",
        "generation": 3,
        "next_sequence": len(deltas) - 1,
        "held": [snapshot["held"][0]],
        "blocks": [
            {"index": 0, "kind": "thinking", "call_id": None, "tool_name": None, "content": "th",
             "signature": "s", "stopped": True, "deltas": 2},
            {"index": 1, "kind": "text", "call_id": None, "tool_name": None, "content": "hi",
             "signature": None, "stopped": True, "deltas": 1, "shown": 0},  # fed, never previewed
            {"index": 2, "kind": "tool_call", "call_id": "c1", "tool_name": "get_weather", "content": WEATHER,
             "signature": None, "stopped": True, "deltas": 1},
        ],
        "started": True,
        "stopped": False,
        "stop_reason": None,
        "raw_stop_reason": None,
        "model": "m",
        "input_tokens": 2,
        "output_tokens": 4,
        "error": ["e", "m"],
        "violation": ["MALFORMED_BLOCK", "block 1 started twice (call ids None, None)"],
        "closed": None,
        "finished": False,
        "retracted": False,
        "counters": {"duplicates_dropped": 1, "previews_retracted": 0, "partial_tool_dispatches": 0,
                     "unknown_events": 0},
    }  # fmt: skip
    assert snapshot["held"][0]["delta_sequence"] == len(deltas) + 1
    restored = BlockAssembler.restore(snapshot, TOOLS)
    assert restored == assembler and restored.snapshot() == snapshot
    assert restored._blocks[0].size == 3 and restored._blocks[2].size == len(WEATHER)
    restored.feed(deltas[-1])
    assembler.feed(deltas[-1])
    assert restored == assembler
    assert restored.finish() == assembler.finish() == Incomplete(R.PROVIDER_ERROR, "e: m", True)
    assert restored.snapshot()["retracted"] is True


def test_a_finished_stopped_snapshot_restores_its_stop_and_closure() -> None:
    assembler = BlockAssembler(TOOLS)
    for delta in Stream().start().text(0, "a").stop(StopReason.END_TURN, "stop").deltas:
        assembler.feed(delta)
    assembler.discard(R.STREAM_DISCONNECTED, "gone")
    snapshot = json.loads(json.dumps(assembler.snapshot()))
    assert (snapshot["stop_reason"], snapshot["raw_stop_reason"], snapshot["closed"]) == (
        "end_turn",
        "stop",
        ["STREAM_DISCONNECTED", "gone"],
    )
    restored = BlockAssembler.restore(snapshot, TOOLS)
    assert restored._stop_reason is StopReason.END_TURN
    assert restored._closed == (R.STREAM_DISCONNECTED, "gone")
    assert restored == assembler
    assert restored.finish() == Incomplete(R.STREAM_DISCONNECTED, "gone", retract_previews=True)
    assert restored.previews_retracted == 1


def test_a_restored_block_without_content_has_no_parts() -> None:
    assembler = BlockAssembler(TOOLS)
    for delta in Stream().start().call(0, "c1", "get_weather", stop=False).deltas:
        assembler.feed(delta)
    restored = BlockAssembler.restore(assembler.snapshot(), TOOLS)
    assert restored._blocks[0].parts == [] and restored._blocks[0].deltas == 0


def test_an_old_snapshot_without_delta_counts_restores_with_zero() -> None:
    assembler = BlockAssembler(TOOLS)
    for delta in Stream().start().text(0, "a", stop=False).deltas:
        assembler.feed(delta)
    snapshot = assembler.snapshot()
    del snapshot["blocks"][0]["deltas"]
    assert BlockAssembler.restore(snapshot, TOOLS)._blocks[0].deltas == 0


def test_a_snapshot_of_another_version_is_refused() -> None:
    snapshot = BlockAssembler(TOOLS).snapshot()
    with pytest.raises(ValueError, match=r"^unsupported assembler snapshot version 2$"):
        BlockAssembler.restore({**snapshot, "v": 2}, TOOLS)
    with pytest.raises(ValueError, match=r"^unsupported assembler snapshot version None$"):
        BlockAssembler.restore({k: v for k, v in snapshot.items() if k != "v"}, TOOLS)


def test_restore_uses_the_given_limits() -> None:
    limits = replace(Limits(), max_deltas_per_block=1)
    assembler = BlockAssembler(TOOLS, limits=limits)
    for delta in Stream().start().text(0, "a", stop=False).deltas:
        assembler.feed(delta)
    restored = BlockAssembler.restore(assembler.snapshot(), TOOLS, limits)
    restored.feed(Stream().start().text(0, "a", "b", stop=False).deltas[3])
    assert restored.finish() == Incomplete(R.TOO_MANY_DELTAS, "block 0 received 2 deltas, at most 1", True)


def test_an_assembler_is_unhashable_and_unequal_to_other_types() -> None:
    assert BlockAssembler(TOOLS) != object()
    assert BlockAssembler(TOOLS) == BlockAssembler(TOOLS)
    with pytest.raises(TypeError):
        hash(BlockAssembler(TOOLS))


def test_a_fresh_assembler_has_the_empty_snapshot() -> None:
    assert BlockAssembler(TOOLS, response_handle="h", generation=2, start_sequence=5).snapshot() == {
        "v": 1,
        "response_handle": "h",
        "generation": 2,
        "next_sequence": 5,
        "held": [],
        "blocks": [],
        "started": False,
        "stopped": False,
        "stop_reason": None,
        "raw_stop_reason": None,
        "model": None,
        "input_tokens": None,
        "output_tokens": None,
        "error": None,
        "violation": None,
        "closed": None,
        "finished": False,
        "retracted": False,
        "counters": {
            "duplicates_dropped": 0,
            "previews_retracted": 0,
            "partial_tool_dispatches": 0,
            "unknown_events": 0,
        },
    }


def test_resume_at_exactly_the_next_sequence_acknowledges_a_delta_never_applied() -> None:
    deltas = Stream().start().text(0, "a").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    for delta in deltas[:2]:
        assembler.feed(delta)
    assembler.resume(2)
    for delta in deltas[3:]:
        assembler.feed(delta)
    assert assembler.finish() == Incomplete(
        R.STREAM_INCOMPLETE, "acknowledged sequence 2 beyond applied 1", retract_previews=False
    )


def test_resume_past_the_applied_sequence_applies_the_held_run_after_the_ack() -> None:
    deltas = Stream().start().text(0, "a", "b", "c").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    for delta in [deltas[0], deltas[1], deltas[4], deltas[5]]:
        assembler.feed(delta)
    assembler.resume(3)
    snapshot = assembler.snapshot()
    assert (snapshot["next_sequence"], snapshot["held"]) == (6, [])
    assert assembler.previews() == {0: "c"}
    assert [b["deltas"] for b in snapshot["blocks"]] == [1]


def test_a_call_without_a_tool_name_is_an_unknown_tool_even_if_the_toolset_names_a_tool_empty() -> None:
    tools = {name: TOOLS["get_time"].model_copy(update={"name": name}) for name in ("", "XXXX")}
    assembler = BlockAssembler(tools)
    for delta in Stream().start().call(0, "c1", "x", '{"timezone": "UTC"}').stop().deltas:
        if delta.type is DeltaType.BLOCK_START:
            delta = delta.model_copy(update={"tool_name": None})
        assembler.feed(delta)
    assert assembler.finish() == Incomplete(
        R.UNKNOWN_TOOL, "tool block 0: tool None is not in the toolset", retract_previews=False
    )


def plain_json(value: object) -> bool:
    """Only JSON's own types (no enum members, even str-valued ones)."""
    if isinstance(value, dict):
        return all(type(k) is str and plain_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain_json(v) for v in value)
    return value is None or type(value) in (str, int, bool, float)


def test_a_snapshot_with_held_deltas_is_plain_json() -> None:
    deltas = Stream().start().text(0, "a").stop(StopReason.END_TURN).deltas
    assembler = BlockAssembler(TOOLS)
    for delta in [deltas[0], deltas[3], deltas[4]]:
        assembler.feed(delta)
    snapshot = assembler.snapshot()
    assert [h["type"] for h in snapshot["held"]] == ["block_stop", "message_stop"]
    assert plain_json({k: v for k, v in snapshot.items() if k != "stop_reason"})


def test_a_tool_call_keeps_its_signature() -> None:
    stream = Stream().start().call(0, "c1", "get_weather", WEATHER, stop=False)
    stream.add(DeltaType.SIGNATURE, 0, text="sig").add(DeltaType.BLOCK_STOP, 0).stop()
    outcome, _ = finish(stream)
    assert isinstance(outcome, Complete)
    assert outcome.blocks[0].signature == "sig"


def test_a_block_keeps_its_item_id_through_a_snapshot_and_into_its_candidate() -> None:
    """A Responses reasoning item's `rs_` id (the block start's `item_id`) is what the next request
    names it by; a snapshot taken mid-stream (a processor restart) must not lose it."""
    stream = Stream().start()
    stream.add(DeltaType.BLOCK_START, 0, block_kind="thinking", item_id="rs_1")
    stream.add(DeltaType.THINKING_DELTA, 0, text="th").add(DeltaType.SIGNATURE, 0, text="enc")
    stream.add(DeltaType.BLOCK_STOP, 0).text(1, "hi").stop(StopReason.END_TURN, "completed")
    assembler = BlockAssembler(TOOLS)
    for delta in stream.deltas[:3]:
        assembler.feed(delta)
    snapshot = json.loads(json.dumps(assembler.snapshot()))
    assert snapshot["blocks"] == [
        {"index": 0, "kind": "thinking", "call_id": None, "tool_name": None, "content": "th",
         "signature": None, "stopped": False, "deltas": 1, "item_id": "rs_1"},
    ]  # fmt: skip
    restored = BlockAssembler.restore(snapshot, TOOLS)
    assert restored == assembler
    for delta in stream.deltas[3:]:
        restored.feed(delta)
    outcome = restored.finish()
    assert isinstance(outcome, Complete)
    assert [(b.kind, b.item_id, b.signature) for b in outcome.blocks] == [
        ("thinking", "rs_1", "enc"),
        ("text", None, None),
    ]


def test_a_snapshot_before_item_ids_restores_its_blocks_without_one() -> None:
    assembler = BlockAssembler(TOOLS)
    for delta in Stream().start().text(0, "a", stop=False).deltas:
        assembler.feed(delta)
    snapshot = assembler.snapshot()
    assert "item_id" not in snapshot["blocks"][0]
    assert BlockAssembler.restore(snapshot, TOOLS)._blocks[0].item_id is None
