"""Fuzz every provider parser, the block assembler and the fold's event interleavings.

Parsers: the recorded streams of each API (and Bedrock's binary framing), their events dropped,
repeated, swapped, replaced by garbage or by a known event type with random fields. A parser never
raises: bad input becomes a typed PROVIDER_ERROR delta (undecodable / malformed event), and its deltas
are numbered 0, 1, 2, ... The assembler, fed any deltas, returns Complete (every tool call's arguments
strict JSON, valid against its schema) or Incomplete with a ReasonCode, never an exception. The fold's
interleavings are tests/unit/dispatch/test_fold_properties.py's scripts and promises, at fuzz scale."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.support import seen
from tests.unit.dispatch import test_fold_properties
from tests.unit.streaming.support import TOOLS, api_of, fixture, fixture_names
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import PARSERS, BlockAssembler, SseDecoder, parse_event, parser_for
from turnledger.streaming.eventstream import encode_message
from turnledger.streaming.outcomes import Complete, Incomplete
from turnledger.streaming.strict_arguments import validate_arguments

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _events(data: bytes) -> list[bytes]:
    return re.findall(rb".*?(?:\r\n\r\n|\n\n)", data, re.S)


SSE_STREAMS = {name: (api_of(name), _events(fixture(name))) for name in fixture_names()}
HANDLER_NAMES = {api: sorted(cls.handlers) for api, cls in PARSERS.items()}
BEDROCK_EVENTS = [
    ("messageStart", {"role": "assistant"}),
    ("contentBlockStart", {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t1", "name": "get_time"}}}),  # noqa: E501
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": '{"timezone": "UTC"}'}}}),
    ("contentBlockStop", {"contentBlockIndex": 0}),
    ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "hi"}}),
    ("contentBlockStop", {"contentBlockIndex": 1}),
    ("messageStop", {"stopReason": "tool_use"}),
    ("metadata", {"usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8}}),
]  # fmt: skip
HEADERS = {":message-type": "event", ":content-type": "application/json"}


def _known_event(api: str) -> st.SearchStrategy[dict[str, Any]]:
    """An event of a type the parser handles, with random (usually wrong) fields."""
    return st.builds(
        lambda kind, fields: {**fields, "type": kind},
        st.sampled_from(HANDLER_NAMES[api]),
        st.dictionaries(
            st.sampled_from(["index", "delta", "content_block", "item", "output_index", "x"]), JSON
        ),
    )


@st.composite
def sse_stream(draw: st.DrawFn, api: str) -> bytes:
    name = draw(st.sampled_from(sorted(n for n, (a, _) in SSE_STREAMS.items() if a == api)))
    events = SSE_STREAMS[name][1]
    events = list(events)
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(events)))
        kind = draw(st.sampled_from(["drop", "repeat", "swap", "garbage", "known", "json", "cut"]))
        if kind == "drop" and at < len(events):
            del events[at]
        elif kind == "repeat" and at < len(events):
            events.insert(at, events[at])
        elif kind == "swap" and at + 1 < len(events):
            events[at], events[at + 1] = events[at + 1], events[at]
        elif kind == "garbage":
            events.insert(at, b"data: " + draw(st.binary(max_size=20)) + b"\n\n")
        elif kind == "known":
            events.insert(at, b"data: " + json.dumps(draw(_known_event(api))).encode() + b"\n\n")
        elif kind == "json":
            events.insert(at, b"data: " + json.dumps(draw(JSON)).encode() + b"\n\n")
        elif kind == "cut" and at < len(events):
            events[at] = events[at][: draw(st.integers(0, len(events[at])))]
    return b"".join(events)


def _check_numbering(deltas: list[NormalizedDelta]) -> None:
    assert [d.delta_sequence for d in deltas] == list(range(len(deltas)))
    for d in deltas:
        if d.type is DeltaType.PROVIDER_ERROR:
            assert d.error_type, d


def _outcome(deltas: list[NormalizedDelta]) -> str:
    errors = sorted({d.error_type or "" for d in deltas if d.type is DeltaType.PROVIDER_ERROR})
    return f"errors {','.join(errors)}" if errors else "clean"


SSE_APIS = sorted({api for api, _ in SSE_STREAMS.values()})


@pytest.mark.parametrize("api", SSE_APIS)
@given(data=st.data(), size=st.integers(1, 64))
def test_every_sse_parser_turns_any_stream_into_numbered_deltas(
    api: str, data: st.DataObject, size: int
) -> None:
    data = data.draw(sse_stream(api))
    decoder = SseDecoder()
    parser = parser_for(api, generation=1)
    deltas: list[NormalizedDelta] = []
    for start in range(0, len(data), size):
        for event in decoder.feed(data[start : start + size]):
            deltas += parser.feed_sse(parse_event(event))
    for event in decoder.flush():
        deltas += parser.feed_sse(parse_event(event))
    deltas += parser.flush()
    _check_numbering(deltas)
    seen(f"parser {api}", _outcome(deltas))


@st.composite
def bedrock_stream(draw: st.DrawFn) -> bytes:
    events: list[bytes] = [
        encode_message({**HEADERS, ":event-type": n}, json.dumps(p).encode()) for n, p in BEDROCK_EVENTS
    ]
    for _ in range(draw(st.integers(0, 5))):
        at = draw(st.integers(0, len(events)))
        kind = draw(st.sampled_from(["drop", "repeat", "garbage", "json", "exception", "bytes", "cut"]))
        if kind == "drop" and at < len(events):
            del events[at]
        elif kind == "repeat" and at < len(events):
            events.insert(at, events[at])
        elif kind == "garbage":
            events.insert(
                at, encode_message({**HEADERS, ":event-type": "contentBlockDelta"}, draw(st.binary()))
            )
        elif kind == "json":
            name = draw(st.sampled_from([n for n, _ in BEDROCK_EVENTS] + ["other"]))
            events.insert(
                at, encode_message({**HEADERS, ":event-type": name}, json.dumps(draw(JSON)).encode())
            )
        elif kind == "exception":
            headers = {":message-type": "exception", ":exception-type": "throttlingException"}
            events.insert(at, encode_message(headers, b'{"message": "slow down"}'))
        elif kind == "bytes":
            events.insert(at, draw(st.binary(max_size=30)))
        elif kind == "cut" and at < len(events):
            events[at] = events[at][: draw(st.integers(0, len(events[at])))]
    return b"".join(events)


@given(bedrock_stream(), st.integers(1, 64))
def test_the_bedrock_parser_turns_any_bytes_into_numbered_deltas(data: bytes, size: int) -> None:
    parser = parser_for("bedrock-converse", generation=1)
    deltas: list[NormalizedDelta] = []
    for start in range(0, len(data), size):
        deltas += parser.feed(data[start : start + size])
    deltas += parser.flush()
    _check_numbering(deltas)
    seen("parser bedrock-converse", _outcome(deltas))


TEXTS = st.sampled_from(['{"location": "Paris"}', '{"timezone":', ' "UTC"}', "{", "}", "nu", "1.", '"x"', ""])
DELTA_FIELDS = {
    DeltaType.MESSAGE_START: st.fixed_dictionaries({"model": st.none() | st.just("m")}),
    DeltaType.BLOCK_START: st.fixed_dictionaries(
        {
            "block_kind": st.sampled_from(["text", "thinking", "tool_call", "image", None]),
            "call_id": st.none() | st.sampled_from(["call_1", "call_2", ""]),
            "tool_name": st.none() | st.sampled_from(["get_weather", "get_time", "nope"]),
        }
    ),
    DeltaType.TEXT_DELTA: st.fixed_dictionaries({"text": st.none() | st.text(max_size=6)}),
    DeltaType.ARGUMENT_FRAGMENT: st.fixed_dictionaries({"text": st.none() | TEXTS}),
    DeltaType.BLOCK_STOP: st.just({}),
    DeltaType.MESSAGE_STOP: st.fixed_dictionaries(
        {"stop_reason": st.none() | st.sampled_from(StopReason), "raw_stop_reason": st.none() | st.just("x")}
    ),
    DeltaType.PROVIDER_ERROR: st.fixed_dictionaries(
        {"error_type": st.just("e"), "error_message": st.just("m")}
    ),
}
OTHER = st.fixed_dictionaries({"text": st.none() | st.text(max_size=6)})


@st.composite
def delta_runs(draw: st.DrawFn) -> list[NormalizedDelta]:
    out = []
    sequence = 0
    for _ in range(draw(st.integers(0, 14))):
        type_ = draw(st.sampled_from(DeltaType))
        fields = draw(DELTA_FIELDS.get(type_, OTHER))
        sequence = draw(st.sampled_from([sequence, sequence, sequence, sequence + 1, max(0, sequence - 1)]))
        out.append(
            NormalizedDelta(
                response_handle=draw(st.sampled_from(["h", "h", "h", "other"])),
                generation=draw(st.sampled_from([1, 1, 1, 2])),
                block_index=draw(st.integers(-1, 2)),
                delta_sequence=sequence,
                type=type_,
                **fields,
            )
        )
        sequence += 1
    return out


def _valid_run() -> list[NormalizedDelta]:
    """A complete answer: a text block and two tool calls, numbered 0.."""
    kinds: list[tuple[DeltaType, int, dict[str, Any]]] = [
        (DeltaType.MESSAGE_START, -1, {"model": "m"}),
        (DeltaType.BLOCK_START, 0, {"block_kind": "text"}),
        (DeltaType.TEXT_DELTA, 0, {"text": "Hello"}),
        (DeltaType.BLOCK_STOP, 0, {}),
        (
            DeltaType.BLOCK_START,
            1,
            {"block_kind": "tool_call", "call_id": "call_1", "tool_name": "get_weather"},
        ),
        (DeltaType.ARGUMENT_FRAGMENT, 1, {"text": '{"location": '}),
        (DeltaType.ARGUMENT_FRAGMENT, 1, {"text": '"Paris"}'}),
        (DeltaType.BLOCK_STOP, 1, {}),
        (DeltaType.BLOCK_START, 2, {"block_kind": "tool_call", "call_id": "call_2", "tool_name": "get_time"}),
        (DeltaType.ARGUMENT_FRAGMENT, 2, {"text": '{"timezone": "UTC"}'}),
        (DeltaType.BLOCK_STOP, 2, {}),
        (DeltaType.MESSAGE_STOP, -1, {"stop_reason": StopReason.TOOL_USE, "raw_stop_reason": "tool_use"}),
    ]
    return [
        NormalizedDelta(response_handle="h", generation=1, block_index=i, delta_sequence=n, type=t, **f)
        for n, (t, i, f) in enumerate(kinds)
    ]


@st.composite
def mutated_runs(draw: st.DrawFn) -> list[NormalizedDelta]:
    """The valid run with deltas dropped, repeated, swapped, renumbered or replaced by random ones."""
    run = _valid_run()
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(run) - 1))
        kind = draw(st.sampled_from(["drop", "repeat", "swap", "random", "renumber"]))
        if kind == "drop":
            del run[at]
        elif kind == "repeat":
            run.insert(at, run[at])
        elif kind == "swap" and at + 1 < len(run):
            run[at], run[at + 1] = run[at + 1], run[at]
        elif kind == "random":
            run[at : at + 1] = draw(delta_runs())[:1]
        elif kind == "renumber":
            run[at] = run[at].model_copy(update={"delta_sequence": draw(st.integers(0, 14))})
        if not run:
            break
    return run


@given(delta_runs() | mutated_runs())
def test_the_assembler_completes_or_refuses_with_a_reason(deltas: list[NormalizedDelta]) -> None:
    assembler = BlockAssembler(TOOLS, response_handle="h", generation=1)
    for delta in deltas:
        assembler.feed(delta)
    outcome = assembler.finish()
    if isinstance(outcome, Complete):
        for block in outcome.blocks:
            if block.kind == "tool_call":
                assert block.tool_name in TOOLS and block.arguments is not None
                validate_arguments(block.arguments, TOOLS[block.tool_name].input_schema)
        seen("block assembler", "Complete")
        return
    assert isinstance(outcome, Incomplete) and isinstance(outcome.reason, ReasonCode)
    seen("block assembler", f"Incomplete {outcome.reason.value}")


@given(test_fold_properties.scripts())
def test_fold_interleavings_keep_the_promises(steps: list[tuple[Any, ...]]) -> None:
    test_fold_properties.test_promises_hold_under_any_interleaving.hypothesis.inner_test(steps)
    seen("fold interleavings", "promises held")
