"""The `refusal_after=N` fault: the answer stopped for a refusal after its first N words, ended with each
API's own terminal events and refusal stop (the shapes of tests/fixtures/streams/anthropic_refusal.sse,
openai_chat_content_filter.sse, openai_responses_content_filter.sse, gemini_safety_after_text.sse;
Bedrock's MessageStopEvent `guardrail_intervened`), read as a refusal by our parsers, recorded with the
words it kept, and scripted only."""

from __future__ import annotations

import asyncio
import random
from typing import Any

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
from turnledger.fake_provider.faults import parse_fault_header
from turnledger.fake_provider.model import Answer, ToolCall, refused
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.streaming import parser_for

pytestmark = pytest.mark.timeout(30)

ANSWER = Answer(text="About rain: the ledger is consistent.", thinking="Considering rain.")
REFUSED = Answer(text="About rain:", thinking="Considering rain.", refused=True)
SPECS = (anthropic_messages.SPEC, openai_chat.SPEC, openai_responses.SPEC, gemini.SPEC, bedrock.SPEC)
RAW_STOPS = {
    "anthropic-messages": "refusal",
    "openai-chat": "content_filter",
    "openai-responses": "content_filter",
    "gemini": "SAFETY",
    "bedrock-converse": "guardrail_intervened",
}
BLOCKED = {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}


def script_of(spec: ApiSpec, answer: Answer = REFUSED) -> list[WireEvent]:
    ctx = ScriptContext(seed=1, basis="b", model="m", input_tokens=10, rng=random.Random(0))
    return list(spec.script(answer, ctx))


def test_a_refused_answer_keeps_its_thinking_and_first_words_and_no_call() -> None:
    assert refused(ANSWER, 2) == (REFUSED, 2)
    assert refused(ANSWER, None) == (Answer(text="About", thinking="Considering rain.", refused=True), 1)
    assert refused(ANSWER, 0) == (Answer(thinking="Considering rain.", refused=True), 0)
    whole = refused(ANSWER, 99)
    assert whole == (Answer(text=ANSWER.text, thinking=ANSWER.thinking, refused=True), 6)
    calls = Answer(tool_calls=(ToolCall("get_weather", {"city": "Oslo"}),))
    assert refused(calls, 3) == (Answer(refused=True), 0)


def _tail(events: list[WireEvent], n: int) -> list[tuple[str | None, Any]]:
    return [(e.event, e.data) for e in events[-n:]]


def test_anthropic_ends_with_the_text_block_closed_and_stop_reason_refusal() -> None:
    events = script_of(anthropic_messages.SPEC)
    assert _tail(events, 4) == [
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "About rain:"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "refusal", "stop_sequence": None},
                "usage": {"output_tokens": 7},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    assert [e.terminal for e in events].index(True) == len(events) - 1


def test_openai_chat_ends_with_finish_reason_content_filter_then_done() -> None:
    events = script_of(openai_chat.SPEC)
    finish, done = events[-2:]
    assert isinstance(finish.data, dict)
    assert finish.data["choices"] == [
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "content_filter"}
    ]
    assert (done.data, done.terminal) == ("[DONE]", True)
    texts = [e.data["choices"][0]["delta"].get("content") for e in events[:-2] if isinstance(e.data, dict)]
    assert "".join(t for t in texts if t) == "About rain:"


def test_openai_responses_ends_with_the_item_incomplete_and_response_incomplete_for_content_filter() -> None:
    events = script_of(openai_responses.SPEC)
    item_done, incomplete = events[-2:]
    assert isinstance(item_done.data, dict) and isinstance(incomplete.data, dict)
    item = item_done.data["item"]
    assert (item["type"], item["status"], item["content"][0]["text"]) == (
        "message",
        "incomplete",
        "About rain:",
    )
    assert (incomplete.event, incomplete.terminal) == ("response.incomplete", True)
    response = incomplete.data["response"]
    reasoning, *rest = response["output"]  # the answer's thinking is its reasoning item
    assert (response["status"], response["incomplete_details"], reasoning["type"], rest) == (
        "incomplete",
        {"reason": "content_filter"},
        "reasoning",
        [item],
    )
    assert [e.data["sequence_number"] for e in events if isinstance(e.data, dict)] == list(range(len(events)))


def test_gemini_ends_with_a_safety_chunk_without_content() -> None:
    events = script_of(gemini.SPEC)
    last = events[-1]
    assert isinstance(last.data, dict) and last.terminal
    assert last.data["candidates"] == [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [BLOCKED]}]
    assert last.data["usageMetadata"] == {
        "promptTokenCount": 10,
        "candidatesTokenCount": 7,
        "totalTokenCount": 17,
    }
    parts = [
        p
        for e in events[:-1]
        if isinstance(e.data, dict)
        for p in e.data["candidates"][0]["content"]["parts"]
    ]
    assert "".join(p["text"] for p in parts if not p.get("thought")) == "About rain:"
    assert [e.terminal for e in events[:-1]] == [False] * (len(events) - 1)


def test_gemini_refused_before_any_text_sends_no_text_chunk() -> None:
    events = script_of(gemini.SPEC, Answer(refused=True))
    assert len(events) == 1
    assert isinstance(events[0].data, dict) and events[0].data["candidates"][0]["finishReason"] == "SAFETY"


def test_bedrock_ends_with_message_stop_guardrail_intervened_then_metadata() -> None:
    events = script_of(bedrock.SPEC, Answer(text="About rain:", refused=True))
    assert [(e.event, e.terminal) for e in events] == [
        ("messageStart", False),
        ("contentBlockDelta", False),
        ("contentBlockStop", False),
        ("messageStop", True),
        ("metadata", False),
    ]
    assert events[3].data == {"stopReason": "guardrail_intervened", "p": "abcd"}


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_our_parser_reads_the_fake_refusal_as_a_refusal_after_its_text(spec: ApiSpec) -> None:
    data = b"".join(e.encode() for e in script_of(spec, Answer(text="About rain:", refused=True)))
    parser = parser_for(spec.name, generation=1, response_handle="r-1")
    deltas = parser.feed(data) + parser.flush()
    assert "".join(d.text or "" for d in deltas if d.type == DeltaType.TEXT_DELTA) == "About rain:"
    [stop] = [d for d in deltas if d.type == DeltaType.MESSAGE_STOP]
    assert (stop.stop_reason, stop.raw_stop_reason) == (StopReason.REFUSAL, RAW_STOPS[spec.name])
    assert [d for d in deltas if d.type == DeltaType.PROVIDER_ERROR] == []


@pytest.mark.parametrize(
    ("header", "recorded", "text"),
    [
        ("refusal_after", 1, "About"),
        ("refusal_after=0", 0, ""),
        ("refusal_after=3", 3, "About hello there:"),
        ("refusal_after=999", 17, None),  # every word of the answer: the whole text, then the refusal
    ],
)
async def test_the_fault_is_recorded_with_the_words_it_kept(
    header: str, recorded: int, text: str | None
) -> None:
    request = {"model": "gpt-fake", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
    async with FakeProvider(seed=7) as fp, client_of(fp, timeout=10) as client:
        whole = parse_sse((await stream_bytes(client, "POST", "/v1/chat/completions", request))[0])
        raw, err = await stream_bytes(
            client, "POST", "/v1/chat/completions", request, {"x-fake-fault": header}
        )
        assert err is None
        events = parse_sse(raw)
        assert fp.fault_log == [FaultRecord("req_000002", Fault(FaultKind.REFUSAL_AFTER, recorded))]
    streamed = "".join(d["choices"][0]["delta"].get("content") or "" for _, d in events[:-2])
    answer = "".join(d["choices"][0]["delta"].get("content") or "" for _, d in whole[:-2])
    assert len(answer.split(" ")) == 17
    assert streamed == (answer if text is None else text)
    assert [d["choices"][0]["finish_reason"] for _, d in events[:-1]] == [None] * (len(events) - 2) + [
        "content_filter"
    ]


async def test_a_refused_tool_answer_sends_no_call_and_no_cut_arguments() -> None:
    faults = {"x-fake-fault": "refusal_after=2, truncate_tool_args=0"}
    async with FakeProvider(seed=7) as fp, client_of(fp, timeout=10) as client:
        raw, _ = await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ, faults)
        assert fp.fault_log == [FaultRecord("req_000001", Fault(FaultKind.REFUSAL_AFTER, 0))]
    events = parse_sse(raw)
    assert [n for n, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]
    assert events[2][1]["delta"]["stop_reason"] == "refusal"


async def test_non_streaming_answers_carry_the_refusal_stop() -> None:
    refuse = {"x-fake-fault": "refusal_after=2"}
    async with FakeProvider(seed=7) as fp, client_of(fp, timeout=10) as client:
        text_only = {"messages": [{"role": "user", "content": "hello there"}], "stream": False, "tools": []}
        message = (
            await client.post("/v1/messages", json={**ANTHROPIC_REQ, **text_only}, headers=refuse)
        ).json()
        assert (message["stop_reason"], message["content"]) == (
            "refusal",
            [{"type": "text", "text": "About hello"}],
        )
        chat = (
            await client.post("/v1/chat/completions", json={**CHAT_REQ, **text_only}, headers=refuse)
        ).json()
        assert (chat["choices"][0]["finish_reason"], chat["choices"][0]["message"]["content"]) == (
            "content_filter",
            "About hello",
        )
        body = {**RESP_REQ, "input": "hello there", "stream": False, "tools": []}
        response = (await client.post("/v1/responses", json=body, headers=refuse)).json()
        assert (response["status"], response["incomplete_details"]) == (
            "incomplete",
            {"reason": "content_filter"},
        )
        assert response["output"][0]["status"] == "incomplete"
        stored = (await client.get(f"/v1/responses/{response['id']}")).json()
        assert stored == response
        path = "/v1beta/models/gemini-2.5-flash:generateContent"
        contents = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}
        blocked = (await client.post(path, json=contents, headers=refuse)).json()
        assert blocked["candidates"] == [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [BLOCKED]}]


async def test_a_background_response_refused_reads_back_incomplete_for_content_filter() -> None:
    """Before, a background response's snapshot knew only `response.completed` and `response.failed`
    as ends: one that ended with `response.incomplete` read back without its `incomplete_details`."""
    plan = FaultPlan(always=(Fault(FaultKind.REFUSAL_AFTER, 2),))
    async with (
        FakeProvider(seed=7, fault_plan=plan, background_tick_s=0.0) as fp,
        client_of(fp, timeout=10) as c,
    ):
        body = {**RESP_REQ, "input": "hello there", "stream": False, "tools": [], "background": True}
        created = (await c.post("/v1/responses", json=body)).json()
        for _ in range(200):
            snapshot = (await c.get(f"/v1/responses/{created['id']}")).json()
            if snapshot["status"] != created["status"] and snapshot["status"] not in (
                "queued",
                "in_progress",
            ):
                break
            await asyncio.sleep(0.01)
    assert (snapshot["status"], snapshot["incomplete_details"]) == (
        "incomplete",
        {"reason": "content_filter"},
    )
    assert [(o["status"], o["content"][0]["text"]) for o in snapshot["output"]] == [
        ("incomplete", "About hello")
    ]


def test_the_refusal_stop_is_scripted_only() -> None:
    assert parse_fault_header("refusal_after=3") == (Fault(FaultKind.REFUSAL_AFTER, 3),)
    with pytest.raises(
        ValueError, match=r"^faults \['refusal_after'\] are scripted only, not drawn at random$"
    ):
        FaultPlan(rates={FaultKind.REFUSAL_AFTER: 0.5})
