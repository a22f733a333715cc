"""The pump's guards, each pinned by an exact outcome: the resend filter (`acked`), the final flag,
the wire dedup of numbered events and the stats. Each test fails when its guard is removed."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.unit.streaming.support import fixture
from turnledger.gateway.pump import StreamPump
from turnledger.gateway.worker_config import WorkerConfig
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.streaming.eventstream import encode_message


class Sink:
    def __init__(self) -> None:
        self.handles: list[str] = []
        self.batches: list[list[NormalizedDelta]] = []

    async def on_handle(self, handle: str) -> None:
        self.handles.append(handle)

    async def on_deltas(self, batch: list[NormalizedDelta]) -> None:
        self.batches.append(list(batch))

    @property
    def sequences(self) -> list[int]:
        return [d.delta_sequence for batch in self.batches for d in batch]


def pump_all(name: str, api: str, *, acked: int = -1, handle: str | None = None, chunks: int = 1) -> tuple:
    sink = Sink()
    pump = StreamPump(
        api, 3, on_handle=sink.on_handle, on_deltas=sink.on_deltas, response_handle=handle, acked=acked
    )
    data = fixture(name)
    size = max(1, len(data) // chunks)

    async def go() -> None:
        for start in range(0, len(data), size):
            await pump.feed(data[start : start + size])
        await pump.close()

    asyncio.run(go())
    return pump, sink


def test_a_fresh_read_appends_every_delta_from_zero() -> None:
    pump, sink = pump_all("anthropic_text.sse", "anthropic-messages")
    total = len(sink.sequences)
    assert total > 3
    assert sink.sequences == list(range(total))
    assert pump.acked == total - 1
    assert pump.stats.deltas_appended == total
    assert pump.saw_final is True


def test_a_resumed_read_appends_only_past_acked() -> None:
    """The resend filter: a second read of the same generation re-parses the response from its start;
    what the first read already appended (<= acked) is not appended again."""
    _, first = pump_all("anthropic_text.sse", "anthropic-messages")
    total = len(first.sequences)
    acked = total // 2
    pump, sink = pump_all("anthropic_text.sse", "anthropic-messages", acked=acked, chunks=4)
    assert sink.sequences == list(range(acked + 1, total))
    assert pump.stats.deltas_appended == total - acked - 1
    assert pump.acked == total - 1
    assert pump.saw_final is True


def test_a_resumed_read_past_the_end_appends_nothing_but_still_sees_the_final_event() -> None:
    _, first = pump_all("anthropic_text.sse", "anthropic-messages")
    last = first.sequences[-1]
    pump, sink = pump_all("anthropic_text.sse", "anthropic-messages", acked=last)
    assert sink.batches == []
    assert pump.stats.deltas_appended == 0
    assert pump.acked == last
    assert pump.saw_final is True


def test_a_stream_without_its_stop_is_not_final() -> None:
    pump, sink = pump_all("anthropic_missing_stop.sse", "anthropic-messages")
    assert sink.sequences
    assert all(d.type is not DeltaType.MESSAGE_STOP for batch in sink.batches for d in batch)
    assert pump.saw_final is False


def test_a_provider_error_is_final() -> None:
    pump, sink = pump_all("anthropic_error.sse", "anthropic-messages")
    assert sink.batches[-1][-1].type is DeltaType.PROVIDER_ERROR
    assert pump.saw_final is True


def _pumped(api: str, data: bytes, headers: dict[str, str] | None = None) -> StreamPump:
    sink = Sink()
    pump = StreamPump(api, 3, on_handle=sink.on_handle, on_deltas=sink.on_deltas)

    async def go() -> None:
        await pump.on_response_headers(headers or {})
        await pump.feed(data)
        await pump.close()

    asyncio.run(go())
    return pump


def _anthropic_error(error: dict[str, str]) -> bytes:
    return b"event: error\ndata: " + json.dumps({"type": "error", "error": error}).encode() + b"\n\n"


def test_the_first_error_s_type_and_object_are_kept_for_the_judgement() -> None:
    """`error_type` and `error` are the first error's: the provider's type and the object it sent, ours
    (or a Bedrock exception's name) with no object; a stream without an error has neither."""
    clean, _ = pump_all("anthropic_text.sse", "anthropic-messages")
    assert (clean.error_type, clean.error) == (None, None)
    start = fixture("anthropic_text.sse").split(b"\n\n")[0] + b"\n\n"
    first, second = {"type": "overloaded_error", "message": "m"}, {"type": "api_error", "message": "n"}
    pump = _pumped("anthropic-messages", start + _anthropic_error(first) + _anthropic_error(second))
    assert (pump.error_type, pump.error) == ("overloaded_error", first)
    unnamed = {"type": "", "message": "m"}
    pump = _pumped("anthropic-messages", start + _anthropic_error(unnamed))
    assert (pump.error_type, pump.error) == ("error", unnamed)  # an empty type is the parser's "error"
    pump = _pumped("anthropic-messages", start + b"data: {not json\n\n" + _anthropic_error(first))
    assert (pump.error_type, pump.error) == ("undecodable_event", None)
    exception = encode_message(
        {":message-type": "exception", ":exception-type": "throttlingException"}, b'{"message":"slow"}'
    )
    pump = _pumped("bedrock-converse", exception, {"x-amzn-requestid": "req-1"})
    assert (pump.error_type, pump.error) == ("throttlingException", None)


def test_numbered_events_seen_again_are_dropped_before_the_parser() -> None:
    """OpenAI Responses numbers its events: a resent event (same or lower number) is a wire duplicate."""
    data = fixture("openai_responses_text.sse")
    events = [e + b"\r\n\r\n" for e in data.split(b"\r\n\r\n") if e.strip()]
    assert len(events) > 4
    clean_sink = Sink()
    clean = StreamPump("openai-responses", 1, on_handle=clean_sink.on_handle, on_deltas=clean_sink.on_deltas)
    sink = Sink()
    pump = StreamPump("openai-responses", 1, on_handle=sink.on_handle, on_deltas=sink.on_deltas)
    resent = [*events[:3], events[1], events[2], *events[3:4], events[3], *events[4:]]

    async def go() -> None:
        for event in events:
            await clean.feed(event)
        await clean.close()
        for event in resent:
            await pump.feed(event)
        await pump.close()

    asyncio.run(go())
    assert pump.stats.wire_duplicates == 3
    assert clean.stats.wire_duplicates == 0
    assert pump.stats.events == len(resent)
    assert [d.model_dump() for b in sink.batches for d in b] == [
        d.model_dump() for b in clean_sink.batches for d in b
    ]
    assert sink.handles == clean_sink.handles and len(sink.handles) == 1


BEDROCK_EVENTS = [
    ("messageStart", {"role": "assistant"}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}}),
    ("contentBlockStop", {"contentBlockIndex": 0}),
    ("messageStop", {"stopReason": "end_turn"}),
]


def _bedrock_bytes() -> bytes:
    headers = {":message-type": "event", ":content-type": "application/json"}
    return b"".join(
        encode_message({**headers, ":event-type": name}, json.dumps(payload).encode())
        for name, payload in BEDROCK_EVENTS
    )


def _bedrock(headers: dict[str, str], *, handle: str | None = None, acked: int = -1) -> tuple:
    sink = Sink()
    pump = StreamPump(
        "bedrock-converse",
        2,
        on_handle=sink.on_handle,
        on_deltas=sink.on_deltas,
        response_handle=handle,
        acked=acked,
    )
    data = _bedrock_bytes()

    async def go() -> None:
        await pump.on_response_headers(headers)
        await pump.on_response_headers({"x-amzn-requestid": "req-later"})
        for start in range(0, len(data), 40):
            await pump.feed(data[start : start + 40])
        await pump.close()

    asyncio.run(go())
    return pump, sink


def test_a_bedrock_stream_is_bound_by_its_request_id_header_once() -> None:
    pump, sink = _bedrock({"x-amzn-requestid": "req-1", "other": "x"})
    assert sink.handles == ["req-1"]
    assert pump.response_handle == "req-1"
    deltas = [d for batch in sink.batches for d in batch]
    assert [d.type for d in deltas] == [
        DeltaType.MESSAGE_START,
        DeltaType.BLOCK_START,
        DeltaType.TEXT_DELTA,
        DeltaType.BLOCK_STOP,
        DeltaType.MESSAGE_STOP,
    ]
    assert {(d.response_handle, d.generation) for d in deltas} == {("req-1", 2)}
    assert [d.delta_sequence for d in deltas] == [0, 1, 2, 3, 4]
    assert pump.saw_final is True and pump.stats.deltas_appended == 5


def test_a_bedrock_stream_without_the_header_appends_nothing() -> None:
    """No handle, nothing can be bound to the manifest: the bytes are read but never appended.
    (The second header set arrives too late here: on_response_headers is once per response.)"""
    sink = Sink()
    pump = StreamPump("bedrock-converse", 2, on_handle=sink.on_handle, on_deltas=sink.on_deltas)

    async def go() -> None:
        await pump.on_response_headers({"x-other": "req-1", "x-amzn-requestid": ""})
        await pump.feed(_bedrock_bytes())
        await pump.close()

    asyncio.run(go())
    assert sink.handles == [] and sink.batches == []
    assert pump.response_handle is None and pump.stats.deltas_appended == 0


def test_a_resumed_bedrock_read_with_its_handle_binds_nothing_again_and_skips_acked() -> None:
    pump, sink = _bedrock({"x-amzn-requestid": "req-9"}, handle="req-1", acked=2)
    assert sink.handles == []
    assert pump.response_handle == "req-1"
    assert sink.sequences == [3, 4]


def test_headers_do_not_bind_an_api_whose_stream_names_its_response() -> None:
    sink = Sink()
    pump = StreamPump("anthropic-messages", 1, on_handle=sink.on_handle, on_deltas=sink.on_deltas)
    asyncio.run(pump.on_response_headers({"x-amzn-requestid": "req-1"}))
    assert sink.handles == [] and pump.response_handle is None


#: per API, a stream that fails before anything names its response: its error event, first; the type
#: the parser names and the object the provider sent
EARLY_ERRORS = {
    "anthropic-messages": (
        b'event: error\ndata: {"type": "error", "error": {"type": "billing_error", "message": "m"}}\n\n',
        "billing_error",
        {"type": "billing_error", "message": "m"},
    ),
    "openai-chat": (
        b'data: {"error": {"message": "m", "type": "requests", "param": null, '
        b'"code": "insufficient_quota"}}\n\n',
        "requests",
        {"message": "m", "type": "requests", "param": None, "code": "insufficient_quota"},
    ),
    "openai-responses": (
        b'event: error\ndata: {"type": "error", "code": "insufficient_quota", "message": "m", '
        b'"param": null, "sequence_number": 0}\n\n',
        "insufficient_quota",
        {"type": "error", "code": "insufficient_quota", "message": "m", "param": None, "sequence_number": 0},
    ),
    "gemini": (
        b'data: {"error": {"code": 403, "message": "m", "status": "PERMISSION_DENIED"}}\n\n',
        "PERMISSION_DENIED",
        {"code": 403, "message": "m", "status": "PERMISSION_DENIED"},
    ),
}

#: per API, a whole answer that names its response (after which an earlier error is shown late)
NAMED_ANSWERS = {
    "anthropic-messages": "anthropic_text.sse",
    "openai-chat": "openai_chat_text.sse",
    "openai-responses": "openai_responses_text.sse",
    "gemini": "gemini_text_thought.sse",
}


def _sse_pump(api: str, chunks: list[bytes]) -> tuple[StreamPump, Sink]:
    sink = Sink()
    pump = StreamPump(api, 3, on_handle=sink.on_handle, on_deltas=sink.on_deltas)

    async def go() -> None:
        for chunk in chunks:
            await pump.feed(chunk)
        await pump.close()

    asyncio.run(go())
    return pump, sink


@pytest.mark.parametrize("api", list(EARLY_ERRORS))
def test_an_error_before_anything_names_the_response_is_the_stream_s_failure(api: str) -> None:
    """The stream's first event is the provider's error and nothing names a response: the error is this
    stream's (its type and object kept for the judgement), nothing is appended (there is no handle to
    append it under), and the stream has not ended yet (no final flag: a response named within the grace
    would show the error an earlier stream's)."""
    event, error_type, error = EARLY_ERRORS[api]
    pump, sink = _sse_pump(api, [event])
    assert (pump.error_type, pump.error, pump.unnamed_failure) == (error_type, error, True)
    assert (sink.handles, sink.batches, pump.response_handle, pump.saw_final) == ([], [], None, False)
    assert (pump.stats.late_deltas, pump.stats.deltas_appended, pump.ended) == (0, 0, False)


@pytest.mark.parametrize("api", list(EARLY_ERRORS))
def test_an_error_before_a_response_named_after_it_is_an_earlier_stream_s_late_event(api: str) -> None:
    """The rule for late events holds for an error among them: the stream names its response after the
    error, so the error was an earlier stream's. It goes to the fold under the empty handle (quarantined)
    and judges nothing; this stream's deltas are numbered from 0 as without it."""
    event, _, _ = EARLY_ERRORS[api]
    answer = fixture(NAMED_ANSWERS[api])
    _, clean_sink = _sse_pump(api, [answer])
    pump, sink = _sse_pump(api, [event, answer])
    late, *rest = sink.batches
    assert [(d.type, d.response_handle) for d in late] == [(DeltaType.PROVIDER_ERROR, "")]
    clean = [d.model_dump() for b in clean_sink.batches for d in b]
    assert [d.model_dump() for b in rest for d in b] == clean
    assert sink.handles == clean_sink.handles and len(sink.handles) == 1
    assert (pump.error_type, pump.error, pump.unnamed_failure) == (None, None, False)
    assert (pump.stats.late_deltas, pump.saw_final) == (1, True)


def test_of_errors_before_any_name_the_last_is_the_stream_s() -> None:
    """Late events come before the stream's own: of two errors and no response named, the second is this
    stream's; our parser's own error (an undecodable event) has no object."""
    first, _, _ = EARLY_ERRORS["anthropic-messages"]
    second = _anthropic_error({"type": "overloaded_error", "message": "n"})
    pump, _ = _sse_pump("anthropic-messages", [first + second])
    assert (pump.error_type, pump.error) == ("overloaded_error", {"type": "overloaded_error", "message": "n"})
    pump, _ = _sse_pump("anthropic-messages", [second, b"data: {not json\n\n"])
    assert (pump.error_type, pump.error, pump.unnamed_failure) == ("undecodable_event", None, True)
    pump, _ = _sse_pump("anthropic-messages", [_anthropic_error({"type": "", "message": "m"})])
    assert (pump.error_type, pump.error, pump.unnamed_failure) == (
        "error",
        {"type": "", "message": "m"},
        True,
    )
    pump, _ = _sse_pump("anthropic-messages", [b": keep-alive\n\n", b"event: ping\ndata: {}\n\n"])
    assert (pump.error_type, pump.error, pump.unnamed_failure) == (None, None, False)


def test_a_bedrock_exception_without_the_request_id_header_is_the_stream_s_failure() -> None:
    """Bedrock's handle is its `x-amzn-requestid` header: with it, an exception first is a mid-stream
    error of a named response (appended); without it nothing names the response, and the exception is
    the stream's failure as an SSE stream's early error is."""
    exception = encode_message(
        {":message-type": "exception", ":exception-type": "accessDeniedException"}, b'{"message":"no"}'
    )
    named = _pumped("bedrock-converse", exception, {"x-amzn-requestid": "req-1"})
    assert (named.error_type, named.unnamed_failure, named.saw_final) == (
        "accessDeniedException",
        False,
        True,
    )
    assert named.stats.deltas_appended == 1
    unnamed = _pumped("bedrock-converse", exception)
    assert (unnamed.error_type, unnamed.error, unnamed.unnamed_failure) == (
        "accessDeniedException",
        None,
        True,
    )
    assert (unnamed.response_handle, unnamed.stats.deltas_appended) == (None, 0)


def _responses_event(payload: dict[str, object]) -> bytes:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


FAILED_ERROR = {"code": "server_error", "message": "The model failed to generate a response."}
FAILED_FIRST = _responses_event(
    {
        "type": "response.failed",
        "sequence_number": 0,
        "response": {"id": "resp_early", "status": "failed", "error": FAILED_ERROR},
    }
)
COMPLETED_FIRST = _responses_event(
    {"type": "response.completed", "sequence_number": 0, "response": {"id": "resp_early", "output": []}}
)


def test_a_responses_stream_that_fails_before_it_is_created_is_its_unnamed_failure() -> None:
    """`response.failed` carries its response's id, but only `response.created` binds the handle (the
    parser): a stream that fails first (the fake's `error_event=0`) is judged by its error's code with
    nothing appended (stream_read: PROVIDER_ERROR, "stream ended before any delta"); an earlier stream's
    `response.failed` before this stream's `response.created` is a late event, and this stream is bound
    to its own id; a stream that completes uncreated names nothing and fails nothing: a missing stop."""
    pump, sink = _sse_pump("openai-responses", [FAILED_FIRST])
    assert (pump.error_type, pump.error, pump.unnamed_failure) == ("server_error", FAILED_ERROR, True)
    assert (sink.handles, sink.batches, pump.response_handle, pump.saw_final) == ([], [], None, False)

    pump, sink = _sse_pump("openai-responses", [FAILED_FIRST, fixture("openai_responses_text.sse")])
    assert sink.handles == ["resp_68a1f0c2b7e88190a1b2c3d4e5f60718"]
    assert [(d.type, d.response_handle) for d in sink.batches[0]] == [(DeltaType.PROVIDER_ERROR, "")]
    assert (pump.error_type, pump.unnamed_failure, pump.saw_final) == (None, False, True)

    pump, sink = _sse_pump("openai-responses", [COMPLETED_FIRST])
    assert (sink.handles, sink.batches, pump.response_handle) == ([], [], None)
    assert (pump.error_type, pump.unnamed_failure, pump.saw_final) == (None, False, False)


MORE_TEXT = (
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
    b'"delta": {"type": "text_delta", "text": "MORE"}}\n\n'
)


def test_nothing_after_the_final_event_is_parsed_or_appended() -> None:
    """More text and an error after the message stop, in its chunk and in the next: the parser would
    number them on (test_parser_edges.py); the pump parses none of them, appends none (more text is no
    part of the answer) and the error judges nothing (`error_type`); `after_final` counts the events."""
    clean, clean_sink = pump_all("anthropic_text.sse", "anthropic-messages")
    late_error = _anthropic_error({"type": "overloaded_error", "message": "m"})
    pump, sink = _sse_pump(
        "anthropic-messages", [fixture("anthropic_text.sse") + MORE_TEXT + late_error, MORE_TEXT]
    )
    assert [d.model_dump() for b in sink.batches for d in b] == [
        d.model_dump() for b in clean_sink.batches for d in b
    ]
    assert (pump.error_type, pump.error, pump.saw_final, pump.acked) == (None, None, True, clean.acked)
    assert (pump.stats.after_final, pump.stats.events) == (3, clean.stats.events)


def test_an_error_ends_the_stream_and_the_stop_after_it_is_not_appended() -> None:
    """The first of two finals ends the stream: an error, then a message stop in the next chunk."""
    start = fixture("anthropic_text.sse").split(b"\n\n")[0] + b"\n\n"
    error = _anthropic_error({"type": "overloaded_error", "message": "m"})
    pump, sink = _sse_pump(
        "anthropic-messages", [start + error, b'event: message_stop\ndata: {"type": "message_stop"}\n\n']
    )
    assert [d.type for b in sink.batches for d in b] == [DeltaType.MESSAGE_START, DeltaType.PROVIDER_ERROR]
    assert (pump.error_type, pump.stats.after_final) == ("overloaded_error", 1)


def _bedrock_of(*messages: tuple[str, dict[str, object]]) -> bytes:
    """Bedrock's event stream of `(event type, payload)` messages; `!name` is an exception message."""
    return b"".join(
        encode_message(
            {":message-type": "exception", ":exception-type": name[1:]}, json.dumps(payload).encode()
        )
        if name.startswith("!")
        else encode_message({":message-type": "event", ":event-type": name}, json.dumps(payload).encode())
        for name, payload in messages
    )


def test_a_bedrock_stream_ends_at_its_exception_even_with_a_stop_held_for_the_close() -> None:
    """Bedrock's frames are decoded a chunk at a time: the deltas after the exception in its chunk are
    dropped, and so is the message stop its parser held for the metadata and gives up at the close
    (`after_final` counts the deltas)."""
    data = _bedrock_of(
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}}),
        ("!throttlingException", {"message": "slow"}),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("messageStop", {"stopReason": "end_turn"}),
    )
    pump = _pumped("bedrock-converse", data, {"x-amzn-requestid": "req-1"})
    assert (pump.error_type, pump.saw_final, pump.acked, pump.stats.after_final) == (
        "throttlingException",
        True,
        3,
        2,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def test_an_error_before_any_name_ends_the_stream_once_its_grace_has_passed() -> None:
    """The stream may still name its response (the error was then an earlier stream's) for the grace,
    counted from its last unnamed error, whatever else not named (a ping) comes meanwhile; then it has
    ended, and the reader waits no more (`next_wait`). A stream with no error, or named, has no grace."""
    event, _, _ = EARLY_ERRORS["anthropic-messages"]
    clock, sink = Clock(), Sink()
    pump = StreamPump(
        "anthropic-messages",
        3,
        on_handle=sink.on_handle,
        on_deltas=sink.on_deltas,
        unnamed_error_grace_s=2.0,
        clock=clock,
    )
    seen: list[tuple[bool, float | None]] = []

    async def go() -> None:
        await pump.feed(PING)
        seen.append((pump.ended, pump.next_wait()))
        await pump.feed(event)
        seen.append((pump.ended, pump.next_wait()))
        clock.now += 1.5
        await pump.feed(PING)
        seen.append((pump.ended, pump.next_wait()))
        await pump.feed(event)
        seen.append((pump.ended, pump.next_wait()))
        clock.now += 2.0
        seen.append((pump.ended, pump.next_wait()))
        clock.now += 5.0
        seen.append((pump.ended, pump.next_wait()))

    asyncio.run(go())
    assert seen == [(False, None), (False, 2.0), (False, 0.5), (False, 2.0), (True, 0.0), (True, 0.0)]
    assert (pump.unnamed_failure, pump.saw_final, sink.batches) == (True, False, [])


def test_a_response_named_after_an_unnamed_error_has_no_grace_left_to_end_it() -> None:
    event, _, _ = EARLY_ERRORS["anthropic-messages"]
    clock, sink = Clock(), Sink()
    pump = StreamPump(
        "anthropic-messages",
        3,
        on_handle=sink.on_handle,
        on_deltas=sink.on_deltas,
        clock=clock,
        flush_interval_s=1.0,
    )
    start = fixture("anthropic_text.sse").split(b"\n\n")[0] + b"\n\n"

    async def go() -> None:
        await pump.feed(event)
        clock.now += 1.0
        await pump.feed(start)

    asyncio.run(go())
    clock.now += 10.0
    assert (pump.ended, pump.next_wait(), pump.unnamed_failure, sink.handles) == (
        False,
        None,
        False,
        ["msg_01XFDUDYJgAACzvnptvVoYEL"],
    )


def test_the_default_grace_is_the_documented_five_seconds() -> None:
    """README and docs/architecture.md say 5 s; the worker's default is the pump's."""
    event, _, _ = EARLY_ERRORS["openai-chat"]
    clock, sink = Clock(), Sink()
    pump = StreamPump("openai-chat", 1, on_handle=sink.on_handle, on_deltas=sink.on_deltas, clock=clock)
    asyncio.run(pump.feed(event))
    assert (pump.next_wait(), WorkerConfig().unnamed_error_grace_s) == (5.0, 5.0)
