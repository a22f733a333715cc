"""The `thinking_only` fault: an answer of thinking alone, no text and no call, ended with each API's own
normal stop (Anthropic's thinking block and `end_turn`, Bedrock's reasoningContent and `end_turn`, Gemini's
thought parts and `STOP` on an empty text part, Responses' reasoning item and `response.completed`; OpenAI
Chat, which streams no reasoning, blank text and `stop`), read by our parsers as a complete answer with
nothing visible; the answer's own thinking kept, or thinking made up when the request asked for none;
recorded, valueless and scripted only."""

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
    BadRequestError,
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
from turnledger.fake_provider.api import ApiSpec, ScriptContext
from turnledger.fake_provider.faults import CONTENT_FAULTS, DRAWN_KINDS, parse_fault_header
from turnledger.fake_provider.model import BLANK_TEXT, Answer, ToolCall, thinking_only
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.streaming import parser_for
from turnledger.streaming.assembler import BlockAssembler, is_visible
from turnledger.streaming.outcomes import Complete

pytestmark = pytest.mark.timeout(30)

THOUGHT = "Considering rain."
ANSWER = Answer(text="It rains.", tool_calls=(ToolCall("get_weather", {"city": "Oslo"}),), thinking=THOUGHT)
SPECS = (anthropic_messages.SPEC, openai_chat.SPEC, openai_responses.SPEC, gemini.SPEC, bedrock.SPEC)
#: per API: the raw stop, and the kinds and texts of the assembled blocks
OUTCOMES = {
    "anthropic-messages": ("end_turn", [("thinking", THOUGHT)]),
    "openai-chat": ("stop", [("text", BLANK_TEXT)]),
    "openai-responses": ("completed", [("thinking", THOUGHT)]),
    "gemini": ("STOP", [("thinking", THOUGHT), ("text", "")]),
    "bedrock-converse": ("end_turn", [("thinking", THOUGHT)]),
}


def test_the_answer_keeps_its_own_thinking_alone_or_blank_text_where_the_api_streams_no_reasoning() -> None:
    rng = random.Random(3)
    assert thinking_only(ANSWER, rng, streams_thinking=True) == Answer(thinking=THOUGHT)
    assert thinking_only(ANSWER, rng, streams_thinking=False) == Answer(text="\n\n", thinking=THOUGHT)
    assert rng.random() == random.Random(3).random()  # its own thinking kept: nothing drawn


def test_an_answer_without_thinking_is_given_thinking_drawn_from_the_rng() -> None:
    made = thinking_only(Answer(text="It rains."), random.Random(3), streams_thinking=True)
    assert made == thinking_only(
        Answer(tool_calls=ANSWER.tool_calls), random.Random(3), streams_thinking=True
    )
    assert (made.text, made.tool_calls) == ("", ())
    assert made.thinking.startswith("Considering the request; ") and made.thinking.endswith(".")
    assert len(made.thinking.removeprefix("Considering the request; ").split(" ")) == 8


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_our_parsers_read_each_api_shape_as_a_complete_answer_with_nothing_visible(spec: ApiSpec) -> None:
    answer = thinking_only(ANSWER, random.Random(0), streams_thinking=spec.streams_thinking)
    ctx = ScriptContext(seed=1, basis="b", model="m", input_tokens=10, rng=random.Random(0))
    data = b"".join(e.encode() for e in spec.script(answer, ctx))
    parser = parser_for(spec.name, generation=1, response_handle="r-1")
    deltas = parser.feed(data) + parser.flush()
    [stop] = [d for d in deltas if d.type == DeltaType.MESSAGE_STOP]
    raw, blocks = OUTCOMES[spec.name]
    assert (stop.stop_reason, stop.raw_stop_reason) == (StopReason.END_TURN, raw)
    assembler = BlockAssembler({})
    for delta in deltas:
        assembler.feed(delta)
    outcome = assembler.finish()
    assert isinstance(outcome, Complete)
    assert [(b.kind, b.text) for b in outcome.blocks] == blocks
    assert not any(is_visible(b.kind, b.text) for b in outcome.blocks)


async def test_the_fault_is_recorded_and_thinks_whether_or_not_the_request_asked() -> None:
    """Anthropic without `thinking` in the request: a signed thinking block of the fake's own, then
    `end_turn`; the fake thinking by default keeps the thinking it would have sent."""
    fault = {"x-fake-fault": "thinking_only"}
    async with FakeProvider(seed=7) as fp, client_of(fp, timeout=10) as client:
        raw, err = await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ, fault)
        assert err is None
        assert fp.fault_log == [FaultRecord("req_000001", Fault(FaultKind.THINKING_ONLY))]
    events = parse_sse(raw)
    assert [d["content_block"]["type"] for n, d in events if n == "content_block_start"] == ["thinking"]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert [d["type"] for d in deltas][-1] == "signature_delta"
    made = "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta")
    assert made.startswith("Considering the request; ")
    assert [d["delta"]["stop_reason"] for n, d in events if n == "message_delta"] == ["end_turn"]
    async with FakeProvider(seed=7, thinking=True) as fp, client_of(fp, timeout=10) as client:
        whole = parse_sse((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ))[0])
        own = parse_sse((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ, fault))[0])
    thought = [
        "".join(
            d["delta"]["thinking"] for n, d in e if n == "content_block_delta" and "thinking" in d["delta"]
        )
        for e in (whole, own)
    ]
    assert thought[0] == thought[1] != made
    assert next(d["content_block"]["type"] for n, d in whole if n == "content_block_start") == "thinking"
    assert [d["content_block"]["type"] for n, d in own if n == "content_block_start"] == ["thinking"]


async def test_non_streaming_answers_hold_thinking_alone_and_stop_normally() -> None:
    fault = {"x-fake-fault": "thinking_only"}
    plain = {"stream": False}
    async with FakeProvider(seed=7) as fp, client_of(fp, timeout=10) as client:
        message = (await client.post("/v1/messages", json={**ANTHROPIC_REQ, **plain}, headers=fault)).json()
        chat = (await client.post("/v1/chat/completions", json={**CHAT_REQ, **plain}, headers=fault)).json()
        response = (await client.post("/v1/responses", json={**RESP_REQ, **plain}, headers=fault)).json()
        assert len(fp.fault_log) == 3
    assert (message["stop_reason"], [c["type"] for c in message["content"]]) == ("end_turn", ["thinking"])
    [choice] = chat["choices"]
    assert (choice["finish_reason"], choice["message"]["content"]) == ("stop", "\n\n")
    assert "tool_calls" not in choice["message"]
    assert (response["status"], [o["type"] for o in response["output"]]) == ("completed", ["reasoning"])


def test_the_fault_takes_no_value_and_is_scripted_only() -> None:
    assert parse_fault_header("thinking_only") == (Fault(FaultKind.THINKING_ONLY),)
    for header, kind in (("thinking_only=1", "thinking_only"), ("missing_stop = 2", "missing_stop")):
        with pytest.raises(BadRequestError) as caught:
            parse_fault_header(header)
        assert caught.value.message == f"fault '{kind}' takes no value, got '{header[-1]}'"
    assert FaultKind.THINKING_ONLY in CONTENT_FAULTS and FaultKind.THINKING_ONLY not in DRAWN_KINDS
    with pytest.raises(
        ValueError, match=r"^faults \['thinking_only'\] are scripted only, not drawn at random$"
    ):
        FaultPlan(rates={FaultKind.THINKING_ONLY: 0.5})
