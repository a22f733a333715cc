"""Parser specifics: numbering, unknown events, errors, Gemini and Bedrock mappings."""

from __future__ import annotations

import json
from typing import Any

import pytest

from turnledger.model.deltas import DeltaType, StopReason
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import parser_for
from turnledger.streaming.eventstream import encode_message
from turnledger.streaming.outcomes import Complete, Incomplete

from .support import api_of, assemble, fixture, fixture_names, parse


@pytest.mark.parametrize("name", fixture_names())
def test_sequences_are_contiguous_and_keys_unique(name: str) -> None:
    parser = parser_for(api_of(name), generation=4, start_sequence=100)
    deltas = parser.feed(fixture(name)) + parser.flush()
    assert [d.delta_sequence for d in deltas] == list(range(100, 100 + len(deltas)))
    assert parser.last_sequence == 99 + len(deltas)
    assert {d.generation for d in deltas} == {4}
    assert {d.response_handle for d in deltas} == {parser.response_handle}
    assert deltas[0].type is DeltaType.MESSAGE_START


def test_known_response_handle_is_kept_and_unknown_api_is_refused() -> None:
    parser = parser_for("anthropic-messages", generation=1, response_handle="bound")
    assert {d.response_handle for d in parser.feed(fixture("anthropic_text.sse"))} == {"bound"}
    with pytest.raises(KeyError):
        parser_for("cohere", generation=1)


def test_unknown_events_are_tolerated_and_counted() -> None:
    extra = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"citations_delta","citation":{}}}\n\n'
        b'event: brand_new\ndata: {"type":"brand_new"}\n\n'
    )
    raw = fixture("anthropic_text.sse")
    cut = raw.index(b"event: content_block_stop")
    parser = parser_for("anthropic-messages", generation=1)
    deltas = parser.feed(raw[:cut] + extra + raw[cut:])
    assert parser.unknown_events == 2
    assert isinstance(assemble(deltas)[0], Complete)


def test_garbage_json_and_malformed_events_are_provider_errors() -> None:
    raw = fixture("openai_chat_text.sse")
    for poison in (
        b"data: {not json\n\n",
        b'data: {"object":"chat.completion.chunk","choices":[{"delta":7}]}\n\n',
    ):
        deltas = parse("openai-chat", [raw[:400], poison, raw[400:]])
        assert any(d.type is DeltaType.PROVIDER_ERROR for d in deltas)
        outcome, _ = assemble(deltas)
        assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.PROVIDER_ERROR


def test_text_without_a_utf8_form_is_a_provider_error_never_a_delta() -> None:
    """A lone surrogate escape has no UTF-8 form: the ledger could not record such a delta, so the
    event is malformed (PROVIDER_ERROR), in the SSE parsers and in Bedrock's event stream alike."""
    lone = '"\\ud800"'
    chunk = (
        '{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":' + lone + "}}]}"
    ).encode()
    raw = fixture("openai_chat_text.sse")
    boundary = raw.index(b"\n\n", 400) + 2
    deltas = parse("openai-chat", [raw[:boundary], b"data: " + chunk + b"\n\n"])
    assert [d.type for d in deltas][-1] is DeltaType.PROVIDER_ERROR
    assert not [d for d in deltas if d.text is not None and "\ud800" in d.text]
    framed = encode_message(
        {":message-type": "event", ":event-type": "contentBlockDelta"},
        ('{"contentBlockIndex":0,"delta":{"text":' + lone + "}}").encode(),
    )
    bedrock = parse("bedrock-converse", [bedrock_bytes(BEDROCK_EVENTS[:3]) + framed])
    assert bedrock[-1].type is DeltaType.PROVIDER_ERROR
    assert not [d for d in bedrock if d.text is not None and "\ud800" in d.text]


def test_openai_chat_error_chunk_and_finish_without_done() -> None:
    err = b'data: {"error":{"message":"server overloaded","type":"server_error"}}\n\n'
    deltas = parse("openai-chat", [err])
    assert deltas[-1].type is DeltaType.PROVIDER_ERROR and deltas[-1].error_type == "server_error"
    raw = fixture("openai_chat_text.sse")
    outcome, _ = assemble(parse("openai-chat", [raw[: raw.index(b"data: [DONE]")]]))
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.MISSING_STOP


def test_openai_responses_reasoning_starts_with_its_rs_item_id_and_nothing_else_has_one() -> None:
    """The next request names a reasoning item by its `rs_` id; a function call is paired by `call_id`
    (never its `fc_` id) and a message part has none of its own."""
    deltas = parse("openai-responses", [fixture("openai_responses_tools.sse")])
    starts = [(d.block_kind, d.item_id) for d in deltas if d.type is DeltaType.BLOCK_START]
    assert starts == [
        ("thinking", "rs_0b7d2e9f4c1a6b3e0168a1f1"),
        ("tool_call", None),
        ("tool_call", None),
    ]
    assert {d.item_id for d in deltas if d.type is not DeltaType.BLOCK_START} == {None}


def test_gemini_whole_calls_signatures_and_synthetic_ids() -> None:
    deltas = parse("gemini", [fixture("gemini_parallel_calls.sse")])
    calls = [d for d in deltas if d.type is DeltaType.BLOCK_START and d.block_kind == "tool_call"]
    assert [c.call_id for c in calls] == [
        "gemini:q1ykaN7bHoOUnvgP6O2v4Aw:1",
        "gemini:q1ykaN7bHoOUnvgP6O2v4Aw:2",
    ]
    fragments = [d.text for d in deltas if d.type is DeltaType.ARGUMENT_FRAGMENT]
    assert fragments == ['{"location":"Lisbon, Portugal","unit":"celsius"}', '{"timezone":"Europe/Lisbon"}']
    signatures = [(d.block_index, d.text) for d in deltas if d.type is DeltaType.SIGNATURE]
    assert signatures == [(1, "EqcBCqQBiI26stc0kWdww0K1m3KXEfs5JiU5XicdSYnbRUzVU3zwoL2s05slknb31vHdlA==")]
    outcome, _ = assemble(deltas)
    assert isinstance(outcome, Complete) and outcome.stop_reason is StopReason.TOOL_USE


def test_gemini_matches_google_genai_reading_of_the_chunks() -> None:
    """google-genai has no accumulator (provider-formats §3d): merge its per-chunk parts ourselves."""
    genai_types = pytest.importorskip("google.genai.types")
    text, calls = "", []
    for chunk in (
        json.loads(line[6:]) for line in fixture("gemini_parallel_calls.sse").decode().split("\n\n") if line
    ):
        response = genai_types.GenerateContentResponse.model_validate(chunk)
        text += "".join(p.text or "" for p in response.candidates[0].content.parts if not p.thought)
        calls += response.function_calls or []
    outcome, _ = assemble(parse("gemini", [fixture("gemini_parallel_calls.sse")]))
    assert isinstance(outcome, Complete)
    assert outcome.blocks[0].text == text
    assert [(b.tool_name, json.loads(b.arguments or "")) for b in outcome.tool_calls] == [
        (c.name, c.args) for c in calls
    ]


def test_gemini_final_empty_part_keeps_its_signature_and_max_tokens_maps() -> None:
    outcome, _ = assemble(parse("gemini", [fixture("gemini_text_thought.sse")]))
    assert isinstance(outcome, Complete)
    assert outcome.blocks[1].signature == "CiQBS3hu3z/CuRCQ7u7zKMu1W7R0NhA62Wol/NLCP9dhQbg="
    chunk = {
        "candidates": [{"content": {"parts": [{"text": "cut"}]}, "finishReason": "MAX_TOKENS"}],
        "responseId": "r",
    }
    deltas = parse("gemini", [b"data: " + json.dumps(chunk).encode() + b"\n\n"])
    assert deltas[-1].stop_reason is StopReason.MAX_TOKENS
    err = parse("gemini", [b'data: {"error": {"code": 503, "status": "UNAVAILABLE", "message": "busy"}}\n\n'])
    assert err[-1].type is DeltaType.PROVIDER_ERROR and err[-1].error_type == "UNAVAILABLE"


BEDROCK_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("messageStart", {"role": "assistant"}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Need weather."}}}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig=="}}}),
    ("contentBlockStop", {"contentBlockIndex": 0}),
    ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Checking "}}),
    ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Madrid."}}),
    ("contentBlockStop", {"contentBlockIndex": 1}),
    (
        "contentBlockStart",
        {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_Ab3", "name": "get_weather"}}},
    ),
    ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '{"location": '}}}),
    ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '"Madrid"}'}}}),
    ("contentBlockStop", {"contentBlockIndex": 2}),
    ("messageStop", {"stopReason": "tool_use"}),
    (
        "metadata",
        {"usage": {"inputTokens": 50, "outputTokens": 30, "totalTokens": 80}, "metrics": {"latencyMs": 9}},
    ),
]


def bedrock_bytes(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    headers = {":message-type": "event", ":content-type": "application/json"}
    return b"".join(encode_message({**headers, ":event-type": n}, json.dumps(p).encode()) for n, p in events)


def test_bedrock_binary_framing_and_decoded_events_agree() -> None:
    raw = bedrock_bytes(BEDROCK_EVENTS)
    framed = parse("bedrock-converse", [raw[i : i + 7] for i in range(0, len(raw), 7)])
    parser = parser_for("bedrock-converse", generation=1)
    decoded = [d for name, payload in BEDROCK_EVENTS for d in parser.feed_event({name: payload})]
    assert framed == decoded
    outcome, _ = assemble(framed)
    assert isinstance(outcome, Complete)
    assert [b.kind for b in outcome.blocks] == ["thinking", "text", "tool_call"]
    assert outcome.blocks[0].signature == "sig==" and outcome.blocks[1].text == "Checking Madrid."
    assert outcome.tool_calls[0].arguments == '{"location": "Madrid"}'
    assert (outcome.input_tokens, outcome.output_tokens) == (50, 30)


def test_bedrock_exceptions_and_corrupt_frames_never_commit() -> None:
    exception = encode_message(
        {":message-type": "exception", ":exception-type": "throttlingException"}, b'{"message":"slow down"}'
    )
    deltas = parse("bedrock-converse", [bedrock_bytes(BEDROCK_EVENTS[:5]) + exception])
    assert deltas[-1].error_type == "throttlingException"
    corrupt = bytearray(bedrock_bytes(BEDROCK_EVENTS))
    corrupt[-3] ^= 0xFF
    outcome, _ = assemble(parse("bedrock-converse", [bytes(corrupt)]))
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.PROVIDER_ERROR
    raw = bedrock_bytes(BEDROCK_EVENTS)
    for offset in range(0, len(raw), 13):
        cut, _ = assemble(parse("bedrock-converse", [raw[:offset]]))
        assert isinstance(cut, Incomplete) or cut.tool_calls[0].arguments == '{"location": "Madrid"}'


@pytest.mark.parametrize("name", fixture_names())
def test_fast_constructed_deltas_equal_validated_ones(name: str) -> None:
    from turnledger.model.deltas import NormalizedDelta

    for delta in parse(api_of(name), [fixture(name)]):
        validated = NormalizedDelta.model_validate(delta.model_dump())
        assert validated == delta and delta == validated
        assert validated.model_dump() == delta.model_dump()
        assert validated.dedup_key == delta.dedup_key


#: (api, the error event's JSON, where in it the error object is): the object the worker judges by
ERROR_OBJECTS = [
    (
        "anthropic-messages",
        {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "m", "details": {"error_code": "x"}},
        },
        ("error",),
    ),
    (
        "openai-chat",
        {"error": {"message": "m", "type": "requests", "code": "insufficient_quota"}},
        ("error",),
    ),
    ("openai-responses", {"type": "error", "code": "server_error", "message": "m"}, ()),
    (
        "openai-responses",
        {"type": "response.failed", "response": {"error": {"code": "invalid_image", "message": "m"}}},
        ("response", "error"),
    ),
    ("gemini", {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "m"}}, ("error",)),
]


@pytest.mark.parametrize(("api", "event", "path"), ERROR_OBJECTS)
def test_an_error_event_s_object_is_kept_by_its_delta_s_sequence(
    api: str, event: dict[str, Any], path: tuple[str, ...]
) -> None:
    """Each SSE API's error event: the error object it carried, under the sequence of its PROVIDER_ERROR
    delta (a later error's under its own); our parser's own errors carry none."""
    parser = parser_for(api, generation=1, start_sequence=7)
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    deltas = parser.feed(b"data: {not json\n\n" + data + data)
    expected: Any = event
    for key in path:
        expected = expected[key]
    assert [(d.type, d.delta_sequence) for d in deltas] == [(DeltaType.PROVIDER_ERROR, s) for s in (7, 8, 9)]
    assert parser.error_objects == {8: expected, 9: expected}
