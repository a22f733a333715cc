"""Each provider parser on the edges of its format, delta by delta: errors in every shape a provider
sends them, events with fields missing, choices and candidates we do not assemble, stop reasons we
do not know. Every case states the exact deltas it must produce (`brief`), so a changed mapping
fails here, not only somewhere downstream in the assembler."""

from __future__ import annotations

import json
from typing import Any

import pytest

from turnledger.model.deltas import NormalizedDelta
from turnledger.streaming import parser_for
from turnledger.streaming.eventstream import encode_message

_STAMPS = ("response_handle", "generation", "block_index", "delta_sequence", "type")


def brief(delta: NormalizedDelta) -> str:
    """`type block field=value…`, the fields that are set, in the model's order."""
    fields = delta.model_dump(mode="json", exclude_none=True)
    rest = " ".join(f"{k}={v}" for k, v in fields.items() if k not in _STAMPS)
    return f"{delta.type} {delta.block_index}" + (f" {rest}" if rest else "")


def sse(*payloads: dict[str, Any] | str) -> bytes:
    return b"".join(
        b"data: " + (p if isinstance(p, str) else json.dumps(p)).encode() + b"\n\n" for p in payloads
    )


def run(api: str, data: bytes, **kwargs: Any) -> tuple[list[str], int, str | None]:
    """The deltas in brief, the parser's unknown events and its response handle."""
    parser = parser_for(api, generation=1, **kwargs)
    deltas = parser.feed(data) + parser.flush()
    return [brief(d) for d in deltas], parser.unknown_events, parser.response_handle


# -- Anthropic Messages ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "provider_error -1 error_type=overloaded_error error_message=Overloaded",
        ),
        ({"type": "error"}, "provider_error -1 error_type=error error_message="),
        ({"type": "error", "error": None}, "provider_error -1 error_type=error error_message="),
        ({"type": "error", "error": {"message": 7}}, "provider_error -1 error_type=error error_message=7"),
        (  # the fuzzer's seed 49, input 68326: an empty type was passed on, an untyped provider error
            {"type": "error", "error": {"type": "", "message": "Overloaded"}},
            "provider_error -1 error_type=error error_message=Overloaded",
        ),
        ({"type": "error", "error": {"type": None}}, "provider_error -1 error_type=error error_message="),
        (
            {"type": "error", "error": "Overloaded"},
            "provider_error -1 error_type=error error_message=Overloaded",
        ),
    ],
)
def test_anthropic_errors(event: dict[str, Any], expected: str) -> None:
    assert run("anthropic-messages", sse(event))[0] == [expected]


def test_a_parser_does_not_end_at_a_final_event_the_pump_does() -> None:
    """Pinned: a parser numbers on whatever follows a message stop or an error, as it would anywhere
    (it knows nothing of where a stream ends); the gateway's pump parses nothing after the final event
    (gateway/pump.py, test_pump_guards.py)."""
    stop = {"type": "message_stop"}
    text = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "more"}}
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "m"}}
    assert run("anthropic-messages", sse(stop, text, error, stop))[0] == [
        "message_stop -1",
        "text_delta 0 text=more",
        "provider_error -1 error_type=overloaded_error error_message=m",
        "message_stop -1",
    ]


def test_anthropic_message_and_blocks_with_fields_missing() -> None:
    deltas, unknown, handle = run(
        "anthropic-messages",
        sse(
            {"type": "message_start", "message": {"id": 7, "model": "m", "usage": {"input_tokens": 3}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
            {"type": "content_block_delta", "index": 0},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "thinking", "thinking": "hm"},
            },
            {"type": "content_block_start", "index": 2},
            {"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "t"}},
            {
                "type": "content_block_delta",
                "index": 3,
                "delta": {"type": "input_json_delta", "partial_json": ""},
            },
            {"type": "content_block_stop", "index": 3},
            {"type": "message_delta", "delta": {"stop_reason": "brand_new"}},
            {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 4}},
            {"type": "message_stop"},
        ),
    )
    assert (unknown, handle) == (1, None)  # an id that is not a string is no handle
    assert deltas == [
        "message_start -1 input_tokens=3 model=m",
        "block_start 0 block_kind=text",
        "text_delta 0 text=Hi",
        "text_delta 0 text=",
        "block_stop 0",
        "block_start 1 block_kind=thinking",
        "thinking_delta 1 text=hm",
        "block_start 2 block_kind=None",  # no block at all: its raw type, which nothing commits
        "block_start 3 block_kind=tool_call call_id=t",
        "argument_fragment 3 text=",
        "argument_fragment 3 text={}",  # no input in the start: an empty object, as the SDK ends with
        "block_stop 3",
        "usage -1",
        "usage -1 output_tokens=4",
        "message_stop -1 stop_reason=other raw_stop_reason=brand_new",  # remembered across deltas
    ]


def test_anthropic_message_start_model_and_a_stop_without_a_reason() -> None:
    deltas, _, handle = run(
        "anthropic-messages",
        sse(
            {
                "type": "message_start",
                "message": {"id": "msg_1", "model": "claude", "usage": {"output_tokens": 1}},
            },
            {"type": "message_stop"},
        ),
    )
    assert handle == "msg_1"
    assert deltas == ["message_start -1 output_tokens=1 model=claude", "message_stop -1"]


# -- OpenAI Chat Completions -----------------------------------------------------------------------

CHUNK = "chat.completion.chunk"


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"error": {"message": "server overloaded", "type": "server_error", "code": "x"}},
            "provider_error -1 error_type=server_error error_message=server overloaded",
        ),
        (
            {"error": {"message": "m", "code": "rate_limit"}},
            "provider_error -1 error_type=rate_limit error_message=m",
        ),
        ({"error": {"type": None, "code": None}}, "provider_error -1 error_type=error error_message="),
        ({"error": "upstream died"}, "provider_error -1 error_type=error error_message=upstream died"),
        ({"error": {}, "object": CHUNK}, "provider_error -1 error_type=error error_message="),
    ],
)
def test_openai_chat_errors(event: dict[str, Any], expected: str) -> None:
    assert run("openai-chat", sse(event))[0] == [expected]


def test_openai_chat_a_null_error_is_a_chunk_and_other_choices_are_counted() -> None:
    deltas, unknown, handle = run(
        "openai-chat",
        sse(
            {"object": CHUNK, "error": None, "id": "chatcmpl-1", "model": "gpt", "choices": []},
            {"object": CHUNK, "choices": [{"index": 1, "delta": {"content": "other"}}]},
            {"object": CHUNK, "choices": [{"delta": {"content": "one", "refusal": "no"}}]},
            {
                "object": CHUNK,
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "brand_new"}],
            },
            {"object": CHUNK, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}},
            {"object": CHUNK, "choices": None, "usage": {}},
            {"object": "something.else"},
            "[DONE]",
        ),
    )
    assert (unknown, handle) == (2, "chatcmpl-1")
    assert deltas == [
        "message_start -1 model=gpt",
        "block_start 0 block_kind=text",
        "text_delta 0 text=one",
        "block_start 1 block_kind=text",
        "text_delta 1 text=no",
        "block_stop 0",
        "block_stop 1",
        "usage -1 input_tokens=5 output_tokens=6",
        "message_stop -1 stop_reason=other raw_stop_reason=brand_new",
    ]


def test_openai_chat_tool_fragments_by_index_and_a_new_id_announced_again() -> None:
    def call(**fields: Any) -> dict[str, Any]:
        return {"object": CHUNK, "choices": [{"delta": {"tool_calls": [fields]}}]}

    deltas, _, handle = run(
        "openai-chat",
        sse(
            call(index=1, id="call_b", function={"name": "get_time", "arguments": '{"t'}),
            call(index=0, id="call_a", function={"name": "get_weather"}),
            call(index=1, function={"arguments": 'z":1}'}),
            call(index=1, id="call_b", function={"arguments": ""}),
            call(index=0, id="call_c", type="function", function={"name": "get_time", "arguments": "{}"}),
            {"object": CHUNK, "choices": [{"delta": {"tool_calls": [{"function": {"arguments": "{"}}]}}]},
            {"object": CHUNK, "choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
            "[DONE]",
        ),
        response_handle="bound",
    )
    assert handle == "bound"
    assert deltas == [
        "message_start -1",
        "block_start 0 block_kind=tool_call call_id=call_b tool_name=get_time",
        'argument_fragment 0 text={"t',
        "block_start 1 block_kind=tool_call call_id=call_a tool_name=get_weather",
        'argument_fragment 0 text=z":1}',
        "block_start 1 block_kind=tool_call call_id=call_c tool_name=get_time",  # a second call: refused
        "argument_fragment 1 text={}",
        "argument_fragment 1 text={",  # no index: its position in the list, 0
        "block_stop 0",
        "block_stop 1",
        "message_stop -1 stop_reason=tool_use raw_stop_reason=tool_calls",
    ]


def test_openai_chat_done_without_a_finish_reason_is_a_stop_without_one() -> None:
    assert run("openai-chat", sse("[DONE]"))[0] == ["message_stop -1"]
    assert run(
        "openai-chat",
        sse(
            {"object": CHUNK, "choices": [{"delta": {"content": "x"}, "finish_reason": "length"}]}, " [DONE] "
        ),
    )[0][-1] == ("message_stop -1 stop_reason=max_tokens raw_stop_reason=length")


# -- OpenAI Responses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"type": "response.failed", "response": {"error": {"code": "server_error", "message": "boom"}}},
            "provider_error -1 error_type=server_error error_message=boom",
        ),
        (
            {"type": "response.failed", "response": {"error": {"code": None}}},
            "provider_error -1 error_type=response.failed error_message=",
        ),
        ({"type": "response.failed"}, "provider_error -1 error_type=response.failed error_message="),
        (
            {"type": "response.failed", "response": None},
            "provider_error -1 error_type=response.failed error_message=",
        ),
        (
            {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"},
            "provider_error -1 error_type=rate_limit_exceeded error_message=slow down",
        ),
        ({"type": "error", "code": None}, "provider_error -1 error_type=error error_message="),
    ],
)
def test_openai_responses_errors(event: dict[str, Any], expected: str) -> None:
    assert run("openai-responses", sse(event))[0] == [expected]


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"type": "response.failed", "response": {"id": "resp_b", "error": {"code": "server_error"}}},
            "provider_error -1 error_type=server_error error_message=",
        ),
        (
            {"type": "response.completed", "response": {"id": "resp_b", "status": "completed"}},
            "message_stop -1 stop_reason=end_turn raw_stop_reason=completed",
        ),
        (
            {
                "type": "response.incomplete",
                "response": {"id": "resp_b", "incomplete_details": {"reason": "max_output_tokens"}},
            },
            "message_stop -1 stop_reason=max_tokens raw_stop_reason=max_output_tokens",
        ),
    ],
)
def test_openai_responses_a_terminal_event_before_created_names_no_response(
    event: dict[str, Any], expected: str
) -> None:
    """A terminal event carries `response.id` too, but only `response.created` (every stream's first
    event) binds the handle: before it, a terminal event may be an earlier stream's, re-sent late
    (gateway/pump.py), and binding its id would put this stream's deltas under another response. A
    stream that fails first is judged by its error all the same (`StreamPump.unnamed_failure`)."""
    assert run("openai-responses", sse(event)) == ([expected], 0, None)
    created = {"type": "response.created", "response": {"id": "resp_a", "model": "m"}}
    assert run("openai-responses", sse(event, created)) == (
        [expected, "message_start -1 model=m"],
        0,
        "resp_a",
    )


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (
            {
                "incomplete_details": {"reason": "content_filter"},
                "usage": {"input_tokens": 2, "output_tokens": 3},
            },
            [
                "usage -1 input_tokens=2 output_tokens=3",
                "message_stop -1 stop_reason=refusal raw_stop_reason=content_filter",
            ],
        ),
        (
            {"incomplete_details": {"reason": "max_output_tokens"}},
            ["message_stop -1 stop_reason=max_tokens raw_stop_reason=max_output_tokens"],
        ),
        ({"incomplete_details": None}, ["message_stop -1 stop_reason=other raw_stop_reason=incomplete"]),
        (None, ["message_stop -1 stop_reason=other raw_stop_reason=incomplete"]),
    ],
)
def test_openai_responses_incomplete(response: dict[str, Any] | None, expected: list[str]) -> None:
    assert run("openai-responses", sse({"type": "response.incomplete", "response": response}))[0] == expected


def test_openai_responses_items_of_every_kind_and_a_completion_without_a_status() -> None:
    deltas, unknown, handle = run(
        "openai-responses",
        sse(
            {"type": "response.created", "response": {"id": "resp_1", "model": "o4"}},
            {"type": "response.in_progress"},
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning"}},
            {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "think"},
            {"type": "response.reasoning_summary_text.delta", "output_index": 0},
            {"type": "response.output_item.done", "output_index": 0, "item": {"encrypted_content": "enc=="}},
            {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message"}},
            {
                "type": "response.content_part.added",
                "output_index": 1,
                "content_index": 0,
                "part": {"type": "refusal"},
            },
            {"type": "response.refusal.delta", "output_index": 1, "content_index": 0, "delta": "no"},
            {"type": "response.content_part.done", "output_index": 1, "content_index": 0},
            {
                "type": "response.content_part.added",
                "output_index": 1,
                "content_index": 1,
                "part": {"type": "audio"},
            },
            {"type": "response.output_item.done", "output_index": 1, "item": {"type": "message"}},
            {
                "type": "response.output_item.added",
                "output_index": 2,
                "item": {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_time",
                    "arguments": '{"a"',
                },
            },
            {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": ":1}"},
            {"type": "response.function_call_arguments.delta", "output_index": 2},
            {"type": "response.output_item.done", "output_index": 2},
            {"type": "response.output_item.added", "output_index": 3, "item": {"type": "web_search_call"}},
            {"type": "response.output_item.added", "output_index": 4},
            {"type": "response.brand_new"},
            {"type": "response.completed", "response": {"usage": {"output_tokens": 9}}},
        ),
    )
    assert (unknown, handle) == (1, "resp_1")
    assert deltas == [
        "message_start -1 model=o4",
        "block_start 0 block_kind=thinking",
        "thinking_delta 0 text=think",
        "thinking_delta 0 text=",
        "signature 0 text=enc==",
        "block_stop 0",
        "block_start 1 block_kind=text",
        "text_delta 1 text=no",
        "block_stop 1",
        "block_start 2 block_kind=audio",  # a part we do not model: its raw kind, which nothing commits
        "block_start 3 block_kind=tool_call call_id=call_1 tool_name=get_time",
        'argument_fragment 3 text={"a"',
        "argument_fragment 3 text=:1}",
        "argument_fragment 3 text=",
        "block_stop 3",
        "block_start 4 block_kind=web_search_call",
        "block_start 5 block_kind=None",
        "usage -1 output_tokens=9",
        "message_stop -1 stop_reason=tool_use raw_stop_reason=completed",
    ]


def test_openai_responses_an_item_we_do_not_model_is_stopped_by_its_done() -> None:
    deltas, unknown, _ = run(
        "openai-responses",
        sse(
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "web_search_call"}},
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "web_search_call"}},
        ),
    )
    assert (deltas, unknown) == (["block_start 0 block_kind=web_search_call", "block_stop 0"], 0)


def test_openai_responses_a_reasoning_item_id_that_is_not_a_string_is_no_item_id() -> None:
    deltas, unknown, _ = run(
        "openai-responses",
        sse(
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": 7}}
        ),
    )
    assert (deltas, unknown) == (["block_start 0 block_kind=thinking"], 0)


def test_openai_responses_completion_without_a_call_ends_the_turn_and_keeps_its_status() -> None:
    deltas, _, handle = run(
        "openai-responses",
        sse(
            {"type": "response.created", "response": {"id": 5}},
            {"type": "response.completed", "response": {"status": "done"}},
        ),
    )
    assert handle is None
    assert deltas == ["message_start -1", "message_stop -1 stop_reason=end_turn raw_stop_reason=done"]


# -- Gemini ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"error": {"code": 503, "status": "UNAVAILABLE", "message": "busy"}},
            "provider_error -1 error_type=UNAVAILABLE error_message=busy",
        ),
        (
            {"error": {"code": 429, "message": "quota"}},
            "provider_error -1 error_type=429 error_message=quota",
        ),
        ({"error": {"status": "", "detail": "x"}}, "provider_error -1 error_type=error error_message="),
    ],
)
def test_gemini_errors(event: dict[str, Any], expected: str) -> None:
    assert run("gemini", sse(event))[0] == [expected]


def test_gemini_parts_blocks_and_other_candidates() -> None:
    def chunk(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
        candidate = {"content": {"parts": list(parts)}, **fields}
        return {"candidates": [candidate], "responseId": "r1", "modelVersion": "g"}

    deltas, unknown, handle = run(
        "gemini",
        sse(
            chunk({"text": "plan", "thought": True}, {"text": "", "thought": True, "thoughtSignature": "s1"}),
            {"candidates": [{"index": 1, "content": {"parts": [{"text": "other"}]}}, {"content": None}]},
            chunk({"text": "Hello"}, {"inlineData": {}}),
            chunk({"text": " world"}, {"functionCall": {"name": "get_time"}, "thoughtSignature": "s2"}),
            chunk({"functionCall": {"id": "own", "name": "get_weather", "args": {"b": 1, "a": 2}}}),
            chunk({"text": "done"}, finishReason="SAFETY"),
            {"usageMetadata": {"promptTokenCount": 1}},
        ),
    )
    assert (unknown, handle) == (2, "r1")  # candidates 1 (by index, then by position)
    assert deltas == [
        "message_start -1 model=g",
        "block_start 0 block_kind=thinking",
        "thinking_delta 0 text=plan",
        "signature 0 text=s1",
        "block_stop 0",  # a part of another kind closes the block
        "block_start 1 block_kind=text",
        "text_delta 1 text=Hello",
        "block_stop 1",
        "block_start 2 block_kind=inlineData",  # a block of its kind, which the assembler refuses
        "block_stop 2",
        "block_start 3 block_kind=text",
        "text_delta 3 text= world",
        "block_stop 3",
        "block_start 4 block_kind=tool_call call_id=gemini:r1:4 tool_name=get_time",
        "argument_fragment 4 text={}",
        "signature 4 text=s2",
        "block_stop 4",
        "block_start 5 block_kind=tool_call call_id=own tool_name=get_weather",
        'argument_fragment 5 text={"a":2,"b":1}',
        "block_stop 5",
        "block_start 6 block_kind=text",
        "text_delta 6 text=done",
        "block_stop 6",
        "message_stop -1 stop_reason=refusal raw_stop_reason=SAFETY",
    ]


def test_gemini_a_part_with_a_signature_and_no_data_is_an_empty_text_part() -> None:
    """A part with only a `thoughtSignature` (and perhaps `thought`) signs the block of its kind, as
    the same part with `"text": ""` does; a signature beside data the parser does not model is a block
    of that data's kind (refused by the assembler), and an empty one leaves the part unknown."""
    chunk = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {"text": "plan", "thought": True},
                        {"thought": True, "thoughtSignature": "s1"},
                        {"text": "Hi"},
                        {"thoughtSignature": "s2"},
                        {"thoughtSignature": "s3", "inlineData": {}},
                        {"thoughtSignature": ""},
                    ]
                },
                "finishReason": "STOP",
            }
        ]
    }
    deltas, unknown, _ = run("gemini", sse(chunk))
    assert unknown == 1
    assert deltas == [
        "message_start -1",
        "block_start 0 block_kind=thinking",
        "thinking_delta 0 text=plan",
        "signature 0 text=s1",
        "block_stop 0",
        "block_start 1 block_kind=text",
        "text_delta 1 text=Hi",
        "signature 1 text=s2",
        "block_stop 1",
        "block_start 2 block_kind=inlineData",
        "block_stop 2",
        "message_stop -1 stop_reason=end_turn raw_stop_reason=STOP",
    ]


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("STOP", "message_stop -1 stop_reason=tool_use raw_stop_reason=STOP"),  # a call was made
        ("MAX_TOKENS", "message_stop -1 stop_reason=max_tokens raw_stop_reason=MAX_TOKENS"),
        (
            "MALFORMED_FUNCTION_CALL",
            "message_stop -1 stop_reason=error raw_stop_reason=MALFORMED_FUNCTION_CALL",
        ),
        ("BRAND_NEW", "message_stop -1 stop_reason=other raw_stop_reason=BRAND_NEW"),
    ],
)
def test_gemini_finish_reasons_after_a_call(finish: str, expected: str) -> None:
    chunk = {
        "candidates": [{"content": {"parts": [{"functionCall": {"name": "f"}}]}, "finishReason": finish}],
        "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 5},
    }
    deltas, _, handle = run("gemini", sse(chunk))
    assert handle is None
    assert deltas[1] == "block_start 0 block_kind=tool_call call_id=gemini::0 tool_name=f"
    assert deltas[-2:] == ["usage -1 input_tokens=4 output_tokens=5", expected]


def test_gemini_a_blocked_prompt_is_a_refusal_only_without_candidates() -> None:
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "responseId": "r"}
    assert run("gemini", sse(blocked))[0] == [
        "message_start -1",
        "message_stop -1 stop_reason=refusal raw_stop_reason=PROHIBITED_CONTENT",
    ]
    text = {
        "candidates": [{"content": {"parts": [{"text": "a"}]}}],
        "promptFeedback": {"blockReason": "OTHER"},
    }
    assert run("gemini", sse(text))[0] == [
        "message_start -1",
        "block_start 0 block_kind=text",
        "text_delta 0 text=a",
    ]
    assert run("gemini", sse({"promptFeedback": {}}, {"candidates": []}))[0] == ["message_start -1"]


# -- Bedrock ConverseStream ------------------------------------------------------------------------


NO_INDEX = "provider_error -1 error_type=malformed_event error_message=" + (
    "contentBlockStop: KeyError('contentBlockIndex')"
)


def frame(event: str, payload: dict[str, Any] | bytes, **headers: str) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return encode_message({":message-type": "event", ":event-type": event, **headers}, body)


def exception(payload: bytes, **headers: str) -> bytes:
    return encode_message({":message-type": "exception", **headers}, payload)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            exception(b'{"message":"slow down"}', **{":exception-type": "throttlingException"}),
            'provider_error -1 error_type=throttlingException error_message={"message":"slow down"}',
        ),
        (
            exception(b"\xff" + b"x" * 300),
            "provider_error -1 error_type=exception error_message=\ufffd" + "x" * 199,
        ),
        (  # an empty exception type names nothing: typed as the others without one
            exception(b"busy", **{":exception-type": ""}),
            "provider_error -1 error_type=exception error_message=busy",
        ),
        (
            frame("contentBlockDelta", b"{not json"),
            "provider_error -1 error_type=undecodable_event error_message={not json",
        ),
        (
            encode_message(
                {":message-type": "event", ":exception-type": "internalServerException"},
                b'{"message":"oops"}',
            ),
            "provider_error -1 error_type=internalServerException error_message=oops",
        ),
        (
            frame("modelStreamErrorException", {"message": "m" * 300}),
            "provider_error -1 error_type=modelStreamErrorException error_message=" + "m" * 200,
        ),
        (
            frame("contentBlockStop", {}),
            NO_INDEX,
        ),
    ],
)
def test_bedrock_errors(data: bytes, expected: str) -> None:
    assert run("bedrock-converse", data)[0] == [expected]


def test_bedrock_framing_errors_keep_the_messages_before_them() -> None:
    good = frame("messageStart", {"role": "assistant"})
    corrupt = bytearray(frame("messageStop", {"stopReason": "end_turn"}))
    corrupt[-1] ^= 0xFF
    assert run("bedrock-converse", good + bytes(corrupt))[0] == [
        "message_start -1",
        "provider_error -1 error_type=malformed_event error_message=event-stream message CRC mismatch",
    ]


def test_bedrock_blocks_deltas_and_stops() -> None:
    deltas, unknown, handle = run(
        "bedrock-converse",
        b"".join(
            (
                frame("messageStart", {"role": "assistant"}),
                frame("contentBlockStart", {"contentBlockIndex": 0, "start": {"image": {}}}),
                frame("contentBlockStart", {"contentBlockIndex": 1}),
                frame(
                    "contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t1"}}}
                ),
                frame("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {}}}),
                frame("contentBlockDelta", {"contentBlockIndex": 3, "delta": {"text": "a"}}),
                frame("contentBlockDelta", {"contentBlockIndex": 3, "delta": {"text": "b"}}),
                frame(
                    "contentBlockDelta",
                    {"contentBlockIndex": 4, "delta": {"reasoningContent": {"redactedContent": "x"}}},
                ),
                frame(
                    "contentBlockDelta",
                    {"contentBlockIndex": 4, "delta": {"reasoningContent": {"text": "t", "signature": "s"}}},
                ),
                frame("contentBlockDelta", {"contentBlockIndex": 4, "delta": {"citation": {}}}),
                frame("contentBlockDelta", {"contentBlockIndex": 4}),
                frame("contentBlockStop", {"contentBlockIndex": 4}),
                frame("messageStop", {"stopReason": "guardrail_intervened"}),
                frame("metadata", {}),
                frame("brandNewEvent", {}),
            )
        ),
        response_handle="req-1",
    )
    assert (unknown, handle) == (3, "req-1")  # two unknown deltas, the new event
    assert deltas == [
        "message_start -1",
        "block_start 0 block_kind=image",
        "block_start 1 block_kind=unknown",
        "block_start 2 block_kind=tool_call call_id=t1",
        "argument_fragment 2 text=",
        "block_start 3 block_kind=text",
        "text_delta 3 text=a",
        "text_delta 3 text=b",
        "block_start 4 block_kind=redactedContent",
        "thinking_delta 4 text=t",
        "signature 4 text=s",
        "block_stop 4",
        "message_stop -1 stop_reason=refusal raw_stop_reason=guardrail_intervened",
    ]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({}, "message_stop -1"),
        ({"stopReason": "brand_new"}, "message_stop -1 stop_reason=other raw_stop_reason=brand_new"),
        (
            {"stopReason": "model_context_window_exceeded"},
            "message_stop -1 stop_reason=max_tokens raw_stop_reason=model_context_window_exceeded",
        ),
    ],
)
def test_bedrock_stop_reasons(payload: dict[str, Any], expected: str) -> None:
    assert run("bedrock-converse", frame("messageStop", payload))[0] == [expected]


def test_bedrock_holds_its_message_stop_for_the_usage_that_follows_it() -> None:
    """`metadata` is ConverseStream's last event, after `messageStop`: the stop goes out with its usage,
    or at `flush` when the stream ends without it; a second stop releases the first."""
    parser = parser_for("bedrock-converse", generation=1, response_handle="req-1")
    assert parser.feed(frame("messageStop", {"stopReason": "end_turn"})) == []
    usage = {"usage": {"inputTokens": 7, "outputTokens": 9}, "metrics": {"latencyMs": 1}}
    assert [brief(d) for d in parser.feed(frame("metadata", usage))] == [
        "message_stop -1 stop_reason=end_turn raw_stop_reason=end_turn input_tokens=7 output_tokens=9"
    ]
    assert run("bedrock-converse", frame("messageStop", {"stopReason": "tool_use"}) * 2)[0] == [
        "message_stop -1 stop_reason=tool_use raw_stop_reason=tool_use",
        "message_stop -1 stop_reason=tool_use raw_stop_reason=tool_use",
    ]


def test_bedrock_decoded_events_as_boto3_yields_them() -> None:
    parser = parser_for("bedrock-converse", generation=1)
    assert [brief(d) for d in parser.feed_event({"validationException": {"message": "bad"}})] == [
        "provider_error -1 error_type=validationException error_message=bad"
    ]
    assert [brief(d) for d in parser.feed_event({"contentBlockStop": 5})] == [NO_INDEX]
    assert [brief(d) for d in parser.feed_event({"contentBlockIndex": 0}, "contentBlockStop")] == [
        "block_stop 0"
    ]
    usage = {"usage": {"inputTokens": 1, "outputTokens": 2}}
    assert [brief(d) for d in parser.feed_event(usage, "metadata")] == [
        "usage -1 input_tokens=1 output_tokens=2"
    ]
    assert parser.unknown_events == 0


# -- the parser base -------------------------------------------------------------------------------


def test_data_that_is_no_json_object_is_undecodable_and_cut_at_200_characters() -> None:
    garbage = "{" + "g" * 300
    assert run("anthropic-messages", sse(garbage, "[1, 2]"))[0] == [
        "provider_error -1 error_type=undecodable_event error_message=" + garbage[:200],
        "provider_error -1 error_type=undecodable_event error_message=[1, 2]",
    ]


def test_the_sse_event_name_is_the_type_only_when_the_data_names_none() -> None:
    data = b'event: content_block_stop\ndata: {"index": 0}\n\nevent: ping\ndata: {"type": "message_stop"}\n\n'
    assert run("anthropic-messages", data)[0] == ["block_stop 0", "message_stop -1"]
    parser = parser_for("anthropic-messages", generation=1)
    assert [brief(d) for d in parser.feed_event({"index": 2}, "content_block_stop")] == ["block_stop 2"]
    assert [brief(d) for d in parser.feed_event({"type": 7})] == [] and parser.unknown_events == 1


def test_a_known_event_without_its_fields_is_malformed_and_its_message_is_cut() -> None:
    event = {"type": "content_block_start", "index": "x" * 300}
    [delta] = run("anthropic-messages", sse(event))[0]
    prefix = "provider_error -1 error_type=malformed_event error_message=content_block_start: ValueError("
    assert (
        delta.startswith(prefix) and len(delta) == len(prefix) - len("content_block_start: ValueError(") + 200
    )


# -- what the first mutation run of the parsers left alive -----------------------------------------


def test_anthropic_start_input_usage_in_the_message_delta_and_a_known_stop() -> None:
    deltas, unknown, _ = run(
        "anthropic-messages",
        sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "input": {"a": 1}},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "redacted_thinking", "thinking": "x"},
            },
            {"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta"}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta"}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 8}},
            {"type": "message_stop"},
        ),
    )
    assert unknown == 2
    assert deltas == [
        "block_start 0 block_kind=tool_call",
        'argument_fragment 0 text={"a":1}',  # the start's input: a call whose fragments were all empty
        "block_stop 0",
        "block_start 1 block_kind=redacted_thinking",  # no text from a kind we do not model
        "usage -1 input_tokens=8",
        "message_stop -1 stop_reason=end_turn raw_stop_reason=end_turn",
    ]


def test_bedrock_each_message_after_an_exception_or_undecodable_one_still_counts() -> None:
    deltas, unknown, _ = run(
        "bedrock-converse",
        b"".join(
            (
                exception(b"{}"),
                frame("contentBlockDelta", b"\xff{"),
                frame("throttlingException", {}),
                frame("contentBlockStart", {"contentBlockIndex": 0, "start": {"text": {}}}),
                frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "a"}}),
                frame(
                    "contentBlockDelta",
                    {"contentBlockIndex": 1, "delta": {"reasoningContent": {"redactedContent": "r"}}},
                ),
                frame(
                    "contentBlockDelta",
                    {"contentBlockIndex": 1, "delta": {"reasoningContent": {"redactedContent": "s"}}},
                ),
            )
        ),
    )
    assert unknown == 0
    assert deltas == [
        "provider_error -1 error_type=exception error_message={}",
        # not UTF-8: replaced, no crash
        "provider_error -1 error_type=undecodable_event error_message=\ufffd{",
        "provider_error -1 error_type=throttlingException error_message=",
        "block_start 0 block_kind=text",  # started once: the delta of a started block starts nothing
        "text_delta 0 text=a",
        "block_start 1 block_kind=redactedContent",  # started once, with its raw kind: never committed
    ]


def test_gemini_a_text_answer_ends_the_turn_and_any_blocked_prompt_is_a_refusal() -> None:
    chunk = {"candidates": [{"content": {"parts": [{"text": "a"}]}, "finishReason": "STOP"}]}
    assert run("gemini", sse(chunk))[0][-1] == "message_stop -1 stop_reason=end_turn raw_stop_reason=STOP"
    blocked = {"promptFeedback": {"blockReason": "OTHER"}}
    assert run("gemini", sse(blocked))[0][-1] == "message_stop -1 stop_reason=refusal raw_stop_reason=OTHER"


def test_openai_chat_every_choice_but_the_first_is_counted_and_the_first_read_wherever_it_is() -> None:
    choices = [{"index": 2, "delta": {"content": "x"}}, {"index": 1}, {"index": 0, "delta": {"content": "y"}}]
    deltas, unknown, _ = run("openai-chat", sse({"object": CHUNK, "choices": choices}))
    assert unknown == 2
    assert deltas == ["message_start -1", "block_start 0 block_kind=text", "text_delta 0 text=y"]


def test_openai_chat_reads_the_sse_event_name_when_the_chunk_names_no_object() -> None:
    data = b'event: chat.completion.chunk\ndata: {"choices": [{"delta": {"content": "z"}}]}\n\n'
    assert run("openai-chat", data)[0] == [
        "message_start -1",
        "block_start 0 block_kind=text",
        "text_delta 0 text=z",
    ]


def test_a_parser_made_directly_numbers_from_zero_and_stamps_no_handle_until_it_knows_one() -> None:
    from turnledger.streaming.anthropic import AnthropicMessagesParser

    parser = AnthropicMessagesParser(generation=3)
    [delta] = parser.feed(sse({"type": "message_stop"}))
    assert (delta.delta_sequence, delta.response_handle, delta.generation) == (0, "", 3)


def test_gemini_counts_every_part_with_nothing_in_it() -> None:
    """An empty part, or one with an empty signature only, holds nothing to keep: counted, no block."""
    chunk = {"candidates": [{"content": {"parts": [{}, {"thoughtSignature": ""}, {"text": "Hi"}]}}]}
    deltas, unknown, _ = run("gemini", sse(chunk))
    assert unknown == 2
    assert deltas == ["message_start -1", "block_start 0 block_kind=text", "text_delta 0 text=Hi"]
