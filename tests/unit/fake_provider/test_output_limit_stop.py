"""The `max_tokens_in_call=K` fault: the answer cut at the output limit inside call K's arguments, ended
with each API's own max-tokens stop (the shapes of tests/fixtures/streams/anthropic_truncated_args.sse,
openai_chat_truncated_length.sse, openai_responses_incomplete.sse, gemini_max_tokens_thought.sse;
Bedrock's MessageStopEvent `max_tokens`), read by our parsers as MAX_TOKENS with the raw stop and by
the assembler as OUTPUT_LIMIT_REACHED, recorded with the call it cut, and scripted only."""

from __future__ import annotations

import random

import pytest

from tests.unit.fake_provider.test_fake_provider import (
    ANTHROPIC_REQ,
    CHAT_REQ,
    RESP_REQ,
    client_of,
    parse_sse,
    stream_bytes,
)
from turnledger.fake_provider import (
    FakeProvider,
    Fault,
    FaultKind,
    FaultPlan,
    FaultRecord,
    anthropic_messages,
    bedrock,
    gemini,
    openai_chat,
    openai_responses,
)
from turnledger.fake_provider.api import ApiSpec, ScriptContext, WireEvent
from turnledger.fake_provider.faults import DRAWN_KINDS, parse_fault_header, truncate_mid_string
from turnledger.fake_provider.model import Answer, ToolCall, cut_at_limit
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import parser_for
from turnledger.streaming.assembler import BlockAssembler
from turnledger.streaming.outcomes import Incomplete

pytestmark = pytest.mark.timeout(30)

CALLS = (
    ToolCall("get_weather", {"city": "Oslo"}),
    ToolCall("get_time", {"timezone": "Europe/Oslo"}),
    ToolCall("get_weather", {"city": "Rome"}),
)
ANSWER = Answer(tool_calls=CALLS, thinking="Considering rain.")
CUT = Answer(tool_calls=CALLS[:2], thinking="Considering rain.", limited=True)
SPECS = (anthropic_messages.SPEC, openai_chat.SPEC, openai_responses.SPEC, gemini.SPEC, bedrock.SPEC)
ADVICE = "; raise maxOutputTokens"
#: per API, the raw stop, and the assembler's detail of `CUT` (the second call's arguments cut)
OUTCOMES = {
    "anthropic-messages": (
        "max_tokens",
        "tool block 2 at max_tokens: cut at 18: Unterminated string starting at at 12" + ADVICE,
    ),
    "openai-chat": (
        "length",
        "tool block 1 at length: cut at 18: Unterminated string starting at at 12" + ADVICE,
    ),
    "openai-responses": ("max_output_tokens", "tool block 2 open at max_output_tokens" + ADVICE),
    "gemini": ("MAX_TOKENS", "last block is a tool call at MAX_TOKENS" + ADVICE),  # the call before the cut
    "bedrock-converse": (
        "max_tokens",
        "tool block 2 at max_tokens: cut at 18: Unterminated string starting at at 12" + ADVICE,
    ),
}


def script_of(spec: ApiSpec, answer: Answer = CUT) -> list[WireEvent]:
    ctx = ScriptContext(seed=1, basis="b", model="m", input_tokens=10, rng=random.Random(0))
    if answer.limited:
        last = len(answer.tool_calls) - 1
        ctx.truncated[last] = truncate_mid_string(answer.tool_calls[last].arguments_json)
    return list(spec.script(answer, ctx))


def test_a_cut_answer_keeps_its_thinking_text_and_the_calls_up_to_the_cut_one() -> None:
    assert cut_at_limit(ANSWER, 1) == CUT
    assert cut_at_limit(ANSWER, 2) == Answer(tool_calls=CALLS, thinking="Considering rain.", limited=True)
    assert cut_at_limit(Answer(text="a", tool_calls=CALLS), 0) == Answer(
        text="a", tool_calls=CALLS[:1], limited=True
    )
    assert truncate_mid_string(CALLS[1].arguments_json) == '{"timezone":"Europ'


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_our_parsers_read_the_fake_cut_as_the_output_limit_and_nothing_commits(spec: ApiSpec) -> None:
    data = b"".join(e.encode() for e in script_of(spec))
    parser = parser_for(spec.name, generation=1, response_handle="r-1")
    deltas = parser.feed(data) + parser.flush()
    [stop] = [d for d in deltas if d.type == DeltaType.MESSAGE_STOP]
    raw, detail = OUTCOMES[spec.name]
    assert (stop.stop_reason, stop.raw_stop_reason) == (StopReason.MAX_TOKENS, raw)
    assert [d for d in deltas if d.type == DeltaType.PROVIDER_ERROR] == []
    assembler = BlockAssembler({})
    for delta in deltas:
        assembler.feed(delta)
    assert assembler.finish() == Incomplete(ReasonCode.OUTPUT_LIMIT_REACHED, detail, retract_previews=False)


def test_the_responses_call_cut_is_never_done_and_the_response_is_incomplete_for_max_output_tokens() -> None:
    events = script_of(openai_responses.SPEC)
    last_delta, incomplete = events[-2:]
    assert isinstance(last_delta.data, dict) and isinstance(incomplete.data, dict)
    assert last_delta.data["type"] == "response.function_call_arguments.delta"
    assert (incomplete.event, incomplete.terminal) == ("response.incomplete", True)
    response = incomplete.data["response"]
    assert (response["status"], response["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )
    calls = [(o["status"], o["arguments"]) for o in response["output"] if o["type"] == "function_call"]
    assert calls == [("completed", '{"city":"Oslo"}'), ("incomplete", '{"timezone":"Europ')]


def test_gemini_ends_with_max_tokens_and_the_calls_before_the_cut_or_no_part() -> None:
    last = script_of(gemini.SPEC)[-1]
    assert isinstance(last.data, dict) and last.terminal
    [candidate] = last.data["candidates"]
    assert candidate["finishReason"] == "MAX_TOKENS"
    assert [p["functionCall"]["name"] for p in candidate["content"]["parts"]] == ["get_weather"]
    first = script_of(gemini.SPEC, cut_at_limit(Answer(tool_calls=CALLS), 0))
    assert [e.data["candidates"] for e in first if isinstance(e.data, dict)] == [
        [{"content": {"role": "model"}, "index": 0, "finishReason": "MAX_TOKENS"}]
    ]


@pytest.mark.parametrize("header", ["max_tokens_in_call", "max_tokens_in_call=0"])
async def test_the_fault_is_recorded_with_the_call_it_cut_and_leaves_a_text_answer_whole(header: str) -> None:
    """By default the answer's last call is cut; a text answer has no call to cut, and the fault is not
    applied (nor recorded)."""
    parallel = {**ANTHROPIC_REQ, "messages": [{"role": "user", "content": "Weather in Oslo and Rome?"}]}
    text_only = {**ANTHROPIC_REQ, "messages": [{"role": "user", "content": "hello there"}], "tools": []}
    async with FakeProvider(seed=7) as fp, client_of(fp, timeout=10) as client:
        whole = parse_sse((await stream_bytes(client, "POST", "/v1/messages", parallel))[0])
        raw, err = await stream_bytes(client, "POST", "/v1/messages", parallel, {"x-fake-fault": header})
        text, _ = await stream_bytes(client, "POST", "/v1/messages", text_only, {"x-fake-fault": header})
        calls = sum(n == "content_block_start" for n, _ in whole)
        assert calls == 3  # parallel calls: the default cuts the last
        cut = calls - 1 if header == "max_tokens_in_call" else 0
        assert err is None
        assert fp.fault_log == [FaultRecord("req_000002", Fault(FaultKind.MAX_TOKENS_IN_CALL, cut))]
    events = parse_sse(raw)
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["tool_use"] * (cut + 1)
    assert [d["delta"]["stop_reason"] for n, d in events if n == "message_delta"] == ["max_tokens"]
    assert [d["delta"]["stop_reason"] for n, d in parse_sse(text) if n == "message_delta"] == ["end_turn"]


async def test_non_streaming_answers_carry_the_max_tokens_stop() -> None:
    cut = {"x-fake-fault": "max_tokens_in_call=0"}
    async with FakeProvider(seed=7) as fp, client_of(fp, timeout=10) as client:
        plain = {"stream": False}
        message = (await client.post("/v1/messages", json={**ANTHROPIC_REQ, **plain}, headers=cut)).json()
        assert (message["stop_reason"], [c["input"] for c in message["content"]]) == ("max_tokens", [{}])
        chat = (await client.post("/v1/chat/completions", json={**CHAT_REQ, **plain}, headers=cut)).json()
        [choice] = chat["choices"]
        assert choice["finish_reason"] == "length"
        [call] = choice["message"]["tool_calls"]
        assert call["function"]["arguments"] == '{"tz":"inv'
        response = (await client.post("/v1/responses", json={**RESP_REQ, **plain}, headers=cut)).json()
        assert (response["status"], response["incomplete_details"]) == (
            "incomplete",
            {"reason": "max_output_tokens"},
        )
        assert [o["status"] for o in response["output"]] == ["incomplete"]
        assert len(fp.fault_log) == 3


def test_the_output_limit_stop_is_scripted_only() -> None:
    assert parse_fault_header("max_tokens_in_call=2") == (Fault(FaultKind.MAX_TOKENS_IN_CALL, 2),)
    assert FaultKind.MAX_TOKENS_IN_CALL not in DRAWN_KINDS
    assert [k.value for k in DRAWN_KINDS] == [
        "disconnect_at_byte",
        "duplicate_event",
        "missing_stop",
        "truncate_tool_args",
        "slow_ms",
        "error_event",
        "late_events",
    ]
    with pytest.raises(
        ValueError, match=r"^faults \['max_tokens_in_call'\] are scripted only, not drawn at random$"
    ):
        FaultPlan(rates={FaultKind.MAX_TOKENS_IN_CALL: 0.5})
