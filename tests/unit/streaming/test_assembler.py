"""BlockAssembler commit rules, resume/discard, binding and counters."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import BlockAssembler
from turnledger.streaming.outcomes import Complete, FeedStatus, Incomplete
from turnledger.streaming.strict_arguments import ArgumentError, parse_strict

from .support import TOOLS, api_of, assemble, fixture, parse


class Stream:
    """Builds a well-numbered delta stream for one (handle, generation)."""

    def __init__(self, handle: str = "h1", generation: int = 3) -> None:
        self.handle, self.generation, self.deltas = handle, generation, []  # type: ignore[var-annotated]

    def add(self, type_: DeltaType, block: int = -1, **fields: Any) -> Stream:
        self.deltas.append(
            NormalizedDelta(
                response_handle=self.handle,
                generation=self.generation,
                block_index=block,
                delta_sequence=len(self.deltas),
                type=type_,
                **fields,
            )
        )
        return self

    def start(self) -> Stream:
        return self.add(DeltaType.MESSAGE_START, model="m")

    def text(self, block: int, *parts: str, stop: bool = True) -> Stream:
        self.add(DeltaType.BLOCK_START, block, block_kind="text")
        for part in parts:
            self.add(DeltaType.TEXT_DELTA, block, text=part)
        return self.add(DeltaType.BLOCK_STOP, block) if stop else self

    def call(self, block: int, call_id: str | None, name: str, *parts: str, stop: bool = True) -> Stream:
        self.add(DeltaType.BLOCK_START, block, block_kind="tool_call", call_id=call_id, tool_name=name)
        for part in parts:
            self.add(DeltaType.ARGUMENT_FRAGMENT, block, text=part)
        return self.add(DeltaType.BLOCK_STOP, block) if stop else self

    def stop(self, reason: StopReason | None = StopReason.TOOL_USE, raw: str = "raw") -> Stream:
        return self.add(DeltaType.MESSAGE_STOP, stop_reason=reason, raw_stop_reason=raw)


def outcome_of(stream: Stream) -> tuple[Any, BlockAssembler]:
    return assemble(stream.deltas)


def reason_of(stream: Stream) -> ReasonCode:
    outcome, assembler = outcome_of(stream)
    assert isinstance(outcome, Incomplete), outcome
    assert assembler.partial_tool_dispatches == 0
    return outcome.reason


WEATHER = '{"location": "Rome"}'


def test_complete_response_with_text_and_call() -> None:
    outcome, assembler = outcome_of(
        Stream().start().text(0, "a", "b").call(1, "c1", "get_weather", WEATHER).stop()
    )
    assert isinstance(outcome, Complete)
    assert [b.kind for b in outcome.blocks] == ["text", "tool_call"]
    assert outcome.blocks[0].text == "ab"
    assert outcome.tool_calls[0].arguments == WEATHER
    assert (outcome.response_handle, outcome.generation) == ("h1", 3)
    assert assembler.partial_tool_dispatches == 0


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"location": "Ro', ReasonCode.TRUNCATED_ARGUMENTS),
        ("", ReasonCode.TRUNCATED_ARGUMENTS),
        ('{"location": "Rome"} x', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"location": NaN}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"location": "a", "location": "b"}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('["Rome"]', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"location": "\\ud800"}', ReasonCode.INVALID_ARGUMENTS_JSON),
        ('{"location": 5}', ReasonCode.ARGUMENTS_SCHEMA_VIOLATION),
        ('{"city": "Rome"}', ReasonCode.ARGUMENTS_SCHEMA_VIOLATION),
        ('{"location": "Rome", "unit": "kelvin"}', ReasonCode.ARGUMENTS_SCHEMA_VIOLATION),
    ],
)
def test_invalid_arguments_make_the_whole_response_incomplete(arguments: str, reason: ReasonCode) -> None:
    stream = Stream().start().text(0, "calling").call(1, "c1", "get_weather", arguments).stop()
    outcome, assembler = outcome_of(stream)
    assert isinstance(outcome, Incomplete) and outcome.reason is reason
    assert outcome.retract_previews and assembler.previews_retracted == 1
    assert assembler.previews() == {}


def test_call_id_rules() -> None:
    assert (
        reason_of(Stream().start().call(0, None, "get_weather", WEATHER).stop()) is ReasonCode.CALL_ID_INVALID
    )
    dup = (
        Stream().start().call(0, "c1", "get_weather", WEATHER).call(1, "c1", "get_time", '{"timezone":"UTC"}')
    )
    assert reason_of(dup.stop()) is ReasonCode.CALL_ID_INVALID
    restarted = Stream().start().call(0, "c1", "get_weather", WEATHER, stop=False)
    restarted.add(DeltaType.BLOCK_START, 0, block_kind="tool_call", call_id="c2", tool_name="get_weather")
    assert reason_of(restarted.add(DeltaType.BLOCK_STOP, 0).stop()) is ReasonCode.CALL_ID_INVALID
    assert reason_of(Stream().start().call(0, "c1", "rm_rf", "{}").stop()) is ReasonCode.UNKNOWN_TOOL


def test_stop_rules() -> None:
    assert reason_of(Stream().start().text(0, "hi")) is ReasonCode.MISSING_STOP
    assert reason_of(Stream().start().text(0, "hi").stop(None)) is ReasonCode.MISSING_STOP
    assert reason_of(Stream().text(0, "hi").stop()) is ReasonCode.STREAM_INCOMPLETE
    assert reason_of(Stream().start().text(0, "hi", stop=False).stop()) is ReasonCode.STREAM_INCOMPLETE
    assert reason_of(Stream().start().text(0, "x").stop(StopReason.ERROR)) is ReasonCode.PROVIDER_ERROR
    error = Stream().start().text(0, "x").add(DeltaType.PROVIDER_ERROR, error_type="overloaded_error").stop()
    assert reason_of(error) is ReasonCode.PROVIDER_ERROR


def test_output_limit_rules() -> None:
    open_call = Stream().start().call(0, "c1", "get_weather", '{"loc', stop=False).stop(StopReason.MAX_TOKENS)
    assert reason_of(open_call) is ReasonCode.OUTPUT_LIMIT_REACHED
    cut = Stream().start().call(0, "c1", "get_weather", '{"loc').stop(StopReason.MAX_TOKENS)
    assert reason_of(cut) is ReasonCode.OUTPUT_LIMIT_REACHED
    cut_elsewhere = Stream().start().call(0, "c1", "get_weather", '{"loc').stop(StopReason.TOOL_USE)
    assert reason_of(cut_elsewhere) is ReasonCode.TRUNCATED_ARGUMENTS
    last = Stream().start().call(0, "c1", "get_weather", WEATHER).stop(StopReason.MAX_TOKENS)
    assert reason_of(last) is ReasonCode.OUTPUT_LIMIT_REACHED
    text_only, _ = outcome_of(Stream().start().text(0, "long answer, cut").stop(StopReason.MAX_TOKENS))
    assert isinstance(text_only, Complete) and text_only.stop_reason is StopReason.MAX_TOKENS


def test_protocol_violations_and_unknown_kinds() -> None:
    late = Stream().start().text(0, "a").add(DeltaType.TEXT_DELTA, 0, text="late").stop()
    assert reason_of(late) is ReasonCode.MALFORMED_BLOCK
    orphan = Stream().start().add(DeltaType.ARGUMENT_FRAGMENT, 4, text="{}").stop()
    assert reason_of(orphan) is ReasonCode.MALFORMED_BLOCK
    wrong = Stream().start().text(0, stop=False).add(DeltaType.ARGUMENT_FRAGMENT, 0, text="{}")
    assert reason_of(wrong.add(DeltaType.BLOCK_STOP, 0).stop()) is ReasonCode.MALFORMED_BLOCK
    unknown = Stream().start().add(DeltaType.BLOCK_START, 0, block_kind="server_tool_use")
    outcome, assembler = outcome_of(unknown.add(DeltaType.BLOCK_STOP, 0).stop())
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.UNKNOWN_KIND
    assert assembler.unknown_events == 1


def test_previews_are_full_text_and_only_for_text_blocks() -> None:
    stream = Stream().start().text(0, "Hel", "lo", stop=False)
    assembler = BlockAssembler(TOOLS)
    results = [assembler.feed(d) for d in stream.deltas]
    assert [r.preview_updates for r in results] == [{}, {}, {0: "Hel"}, {0: "Hello"}]
    assert assembler.previews() == {0: "Hello"}


def test_foreign_late_and_duplicate_deltas() -> None:
    ours = Stream().start().text(0, "hi").stop(StopReason.END_TURN)
    other_generation = Stream(generation=2).start()
    other_handle = Stream(handle="h2").start()
    assembler = BlockAssembler(TOOLS, response_handle="h1", generation=3)
    assert assembler.feed(other_generation.deltas[0]).foreign
    assert assembler.feed(other_handle.deltas[0]).foreign
    for delta in ours.deltas:
        assert assembler.feed(delta).status is FeedStatus.ACCEPTED
    assert assembler.feed(ours.deltas[2]).duplicate and assembler.duplicates_dropped == 1
    assert isinstance(assembler.finish(), Complete)
    assert assembler.feed(ours.deltas[0]).status is FeedStatus.LATE


def test_resume_drops_everything_at_or_before_the_ack() -> None:
    stream = Stream().start().text(0, "one ", "two").call(1, "c1", "get_weather", WEATHER).stop()
    assembler = BlockAssembler(TOOLS)
    for delta in stream.deltas[:5]:
        assembler.feed(delta)
    assembler.resume(3)
    # the re-opened stream replays from the start: the applied prefix is dropped
    for delta in stream.deltas:
        assembler.feed(delta)
    assert assembler.duplicates_dropped == 5
    assert assembler.finish() == assemble(stream.deltas)[0]


def test_resume_beyond_what_was_applied_cannot_commit() -> None:
    stream = Stream().start().text(0, "one ", "two").stop(StopReason.END_TURN)
    assembler = BlockAssembler(TOOLS)
    for delta in stream.deltas[:2]:
        assembler.feed(delta)
    assembler.resume(3)
    for delta in stream.deltas[4:]:
        assembler.feed(delta)
    outcome = assembler.finish()
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.STREAM_INCOMPLETE


def test_discard_drops_candidates_and_retracts_previews() -> None:
    stream = Stream().start().text(0, "shown").text(1, "also").call(2, "c1", "get_weather", WEATHER).stop()
    assembler = BlockAssembler(TOOLS)
    for delta in stream.deltas[:-1]:
        assembler.feed(delta)
    assert BlockAssembler.snapshot_has_previews(assembler.snapshot())
    result = assembler.discard()
    assert result == Incomplete(ReasonCode.STREAM_DISCONNECTED, "attempt discarded", retract_previews=True)
    assert assembler.previews_retracted == 2 and assembler.previews() == {}
    assert not BlockAssembler.snapshot_has_previews(assembler.snapshot())
    assert assembler.feed(stream.deltas[-1]).status is FeedStatus.LATE
    assert assembler.finish() == result
    assert assembler.previews_retracted == 2 and assembler.partial_tool_dispatches == 0


def test_a_gap_never_commits() -> None:
    stream = Stream().start().text(0, "a", "b").stop(StopReason.END_TURN)
    outcome, _ = assemble([d for d in stream.deltas if d.delta_sequence != 3])
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.STREAM_INCOMPLETE


def test_snapshot_is_json_and_restores_counters() -> None:
    import json

    deltas = parse(api_of("anthropic_error.sse"), [fixture("anthropic_error.sse")])
    assembler = BlockAssembler(TOOLS)
    for delta in [*deltas, deltas[1]]:
        assembler.feed(delta)
    snapshot = json.loads(json.dumps(assembler.snapshot()))
    restored = BlockAssembler.restore(snapshot, TOOLS)
    assert restored == assembler and restored.duplicates_dropped == 1
    assert restored.finish() == assembler.finish()


def test_strict_parse_policy() -> None:
    assert parse_strict(' {"a": [1, {"b": null}]} ') == {"a": [1, {"b": None}]}
    for bad in ('{"a": Infinity}', '{"a": -Infinity}', '{"a": {"b": 1, "b": 2}}', "1", "null"):
        with pytest.raises(ArgumentError):
            parse_strict(bad)
