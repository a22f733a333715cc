"""The stream pump (one SSE decode, one JSON parse per event) against the pump it replaced
(reference_pump: events re-encoded to bytes for a parser that decoded and parsed them again).

Same chunks in, so the same calls out: the handle and every delta batch in the same order,
delta for delta, field for field, and the same stats, acked sequence, final flag and handle.
Inputs are the recorded fixture streams, cut into random chunks, with events dropped,
repeated, replayed from earlier, truncated, interleaved with garbage and preceded by late
events of other responses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.gateway import reference_pump
from tests.unit.streaming.support import api_of, fixture, fixture_names
from turnledger.gateway.pump import StreamPump
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.streaming import parser_for

FIXTURES = fixture_names()
PROPERTY = settings(max_examples=25, derandomize=True, deadline=None)

GARBAGE = [
    b"data: {not json\n\n",
    b"data: [1, 2]\n\n",
    b'data: "text"\n\n',
    b"data: 42\n\n",
    b"data: null\n\n",
    b"data:\n\n",
    b"event: ping\n\n",
    b": keep-alive\n\n",
    b":\n",
    b'data: {"type":\ndata: "ping"}\n\n',
    b"data: {\ndata: oops\n\n",
    b"data: [DONE]\n\n",
    b"data:  [DONE] \n\n",
    b"event:\ndata: {}\n\n",
    b"event: message_stop\ndata: {}\n\n",
    b'event: response.completed\ndata: {"response": {"output": []}}\n\n',
    b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}\n\n',
    b'data: {"error": {"message": "busy"}}\n\n',
    b'id: 7\nretry: 100\nfoo: bar\ndata: {"type": "unknown.kind"}\n\n',
    b'data: {"type": "response.output_text.delta", "sequence_number": true}\n\n',
    b'data: {"sequence_number": -1}\n\n',
    b'data: {"sequence_number": "3"}\n\n',
    b'data: {"sequence_number": 2.0}\n\n',
    b'data: {"sequence_number": 100000000000000000000000}\n\n',
    b'data: {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_other"}}\n\n',
    b'data: {"type": "message_start", "message": {"id": "msg_other", "model": "m"}}\n\n',
    'data: {"type": "content_block_delta", "index": 0, "delta": {"text": "é€😀"}}\n\n'.encode(),
    b"data: \xff\xfe\xc3\n\n",
    b'data: {"a": NaN}\n\n',
]


def split_events(data: bytes) -> list[bytes]:
    events = re.findall(rb".*?(?:\r\n\r\n|\n\n)", data, re.S)
    assert b"".join(events) == data
    return events


EVENTS = {name: split_events(fixture(name)) for name in FIXTURES}
ALL_EVENTS = [event for events in EVENTS.values() for event in events]


def exact(delta: NormalizedDelta) -> tuple[str, list[str]]:
    """Field values with their types (1, 1.0 and True differ) and the fields that were set."""
    return repr(delta.__dict__), sorted(delta.model_fields_set)


class Trace(NamedTuple):
    calls: list[tuple[str, Any]]  # ("handle", str) and ("deltas", [NormalizedDelta]), in call order
    stats: dict[str, int]
    acked: int
    saw_final: bool
    response_handle: str | None

    def exact(self) -> Trace:
        calls = [(kind, [exact(d) for d in arg] if kind == "deltas" else arg) for kind, arg in self.calls]
        return self._replace(calls=calls)

    def deltas(self) -> list[NormalizedDelta]:
        return [d for kind, arg in self.calls if kind == "deltas" for d in arg]


async def _drive(pump_class: Any, api: str, chunks: Sequence[bytes], close: bool, **options: Any) -> Trace:
    calls: list[tuple[str, Any]] = []

    async def on_handle(handle: str) -> None:
        calls.append(("handle", handle))

    async def on_deltas(deltas: list[NormalizedDelta]) -> None:
        calls.append(("deltas", list(deltas)))

    pump = pump_class(api, on_handle=on_handle, on_deltas=on_deltas, **options)
    for chunk in chunks:
        await pump.feed(chunk)
    if close:
        await pump.close()
    return Trace(calls, dataclasses.asdict(pump.stats), pump.acked, pump.saw_final, pump.response_handle)


def assert_same(api: str, chunks: Sequence[bytes], close: bool = True, **options: Any) -> Trace:
    """Both pumps over the same chunks; returns the trace they agree on."""
    options = {"generation": 1, **options}
    ours = asyncio.run(_drive(StreamPump, api, chunks, close, **options))
    reference = asyncio.run(_drive(reference_pump.StreamPump, api, chunks, close, **options))
    assert ours.exact() == reference.exact()
    return ours


@st.composite
def mutated_streams(draw: st.DrawFn, name: str) -> bytes:
    api = api_of(name)
    same_api = [e for other in FIXTURES if api_of(other) == api for e in EVENTS[other]]
    out = draw(st.lists(st.sampled_from(same_api), max_size=4))  # late events of other responses
    for event in EVENTS[name]:
        action = draw(st.sampled_from(["keep", "keep", "keep", "drop", "twice", "earlier", "cut", "garbage"]))
        if action == "drop":
            continue
        if action == "garbage":
            out.append(draw(st.sampled_from(GARBAGE + ALL_EVENTS)))
        if action == "earlier" and out:
            out.append(draw(st.sampled_from(out)))
        if action == "cut":
            event = event[: draw(st.integers(0, len(event)))] + b"\n\n"
        out.append(event)
        if action == "twice":
            out.append(event)
    data = b"".join(out)
    if draw(st.booleans()):
        data = data.replace(b"\n", b"\r\n")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]  # the connection dropped
    return data


def draw_chunks(data: st.DataObject, raw: bytes, max_cuts: int) -> list[bytes]:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(raw)), max_size=max_cuts), label="cuts"))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


@pytest.mark.parametrize("name", FIXTURES)
@given(data=st.data())
@PROPERTY
def test_pump_matches_the_reference_on_recorded_streams(name: str, data: st.DataObject) -> None:
    assert_same(api_of(name), draw_chunks(data, fixture(name), 40))


@pytest.mark.parametrize("name", FIXTURES)
@given(data=st.data())
@PROPERTY
def test_pump_matches_the_reference_on_mutated_streams(name: str, data: st.DataObject) -> None:
    stream = data.draw(mutated_streams(name), label="stream")
    assert_same(
        api_of(name),
        draw_chunks(data, stream, 24),
        close=data.draw(st.booleans(), label="close"),
        generation=data.draw(st.integers(1, 3), label="generation"),
        response_handle=data.draw(st.sampled_from([None, "resp_given"]), label="response_handle"),
        acked=data.draw(st.integers(-1, 6), label="acked"),
    )


@pytest.mark.parametrize("name", FIXTURES)
@given(data=st.data())
@PROPERTY
def test_parser_bytes_input_matches_the_reference(name: str, data: st.DataObject) -> None:
    chunks = draw_chunks(data, data.draw(mutated_streams(name), label="stream"), 24)
    ours, reference = parser_for(api_of(name), generation=1), parser_for(api_of(name), generation=1)
    got = [d for chunk in chunks for d in ours.feed(chunk)] + ours.flush()
    want = [d for chunk in chunks for d in reference_pump.parser_feed(reference, chunk)]
    want += reference_pump.parser_flush(reference)
    assert [exact(d) for d in got] == [exact(d) for d in want]
    assert ours.response_handle == reference.response_handle
    assert ours.unknown_events == reference.unknown_events


@pytest.mark.parametrize("garbage", GARBAGE)
def test_each_garbage_event_gives_the_reference_deltas(garbage: bytes) -> None:
    for name in FIXTURES:
        first, *rest = EVENTS[name]
        for stream in (first + garbage, garbage + first):
            assert_same(api_of(name), [stream + b"".join(rest)])


def test_undecodable_and_non_object_events_are_provider_errors() -> None:
    """Each is the stream's final event: the first ends it, and nothing after it is parsed."""
    first, *rest = EVENTS["anthropic_text.sse"]
    for bad in (b"data: {not json\n\n", b"data: [1]\n\n"):
        trace = assert_same("anthropic-messages", [first + bad + bad + b"".join(rest)])
        assert [d.type for d in trace.deltas()[1:]] == [DeltaType.PROVIDER_ERROR]
        assert trace.stats["after_final"] == 1 + len(rest)


@pytest.mark.parametrize("handle", [None, "resp_given"])
def test_wire_duplicates_are_dropped_as_before(handle: str | None) -> None:
    twice = b"".join(event + event for event in EVENTS["openai_responses_tools.sse"])
    assert assert_same("openai-responses", [twice], response_handle=handle).stats["wire_duplicates"] > 0


@pytest.mark.parametrize("name", [n for n in FIXTURES if n.startswith(("anthropic", "openai_responses"))])
def test_late_events_before_the_handle_restart_the_parser_as_before(name: str) -> None:
    events = EVENTS[name]
    trace = assert_same(api_of(name), [b"".join(events[1:] + events)])
    assert trace.stats["late_deltas"] > 0
