"""The fake provider over real loopback HTTP: well-formed streams (checked by the official SDK
accumulators), deterministic answers, every fault kind observed exactly, background mode and resume."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import jsonschema
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from openai import omit
from openai._models import construct_type
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from turnledger.fake_provider import (
    FakeProvider,
    Fault,
    FaultKind,
    FaultPlan,
    FaultRecord,
    NonLoopbackBindError,
)
from turnledger.fake_provider.delivery import HoldEnd
from turnledger.fake_provider.faults import parse_fault_header, truncate_mid_string

pytestmark = pytest.mark.timeout(30)

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city"],
}
CLOCK = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}}, "required": ["tz"]}
SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}

ANTHROPIC_TOOLS = [{"name": n, "description": n, "input_schema": s} for n, s in SCHEMAS.items()]
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in SCHEMAS.items()]
RESP_TOOLS = [{"type": "function", "name": n, "parameters": s} for n, s in SCHEMAS.items()]

ANTHROPIC_REQ = {
    "model": "claude-fake",
    "max_tokens": 256,
    "stream": True,
    "tools": ANTHROPIC_TOOLS,
    "messages": [{"role": "user", "content": "Weather and time in Paris?"}],
}
CHAT_REQ = {
    "model": "gpt-fake",
    "stream": True,
    "tools": CHAT_TOOLS,
    "messages": [{"role": "user", "content": "Weather and time in Paris?"}],
}
RESP_REQ = {"model": "gpt-fake", "stream": True, "tools": RESP_TOOLS, "input": "Weather and time in Paris?"}

PATHS = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
REQS = {"anthropic": ANTHROPIC_REQ, "chat": CHAT_REQ, "responses": RESP_REQ}


def fake_headers(fp: FakeProvider) -> dict[str, str]:
    """Every SSE API's credential at once (each API reads only its own header)."""
    return {
        "x-api-key": fp.keys.anthropic,
        "anthropic-version": "2023-06-01",
        "authorization": f"Bearer {fp.keys.openai}",
        "x-goog-api-key": fp.keys.gemini,
    }


def client_of(fp: FakeProvider, **options: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=fp.base_url, headers=fake_headers(fp), **options)


def parse_sse(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, decoded data) per complete SSE event; a trailing partial event is dropped."""
    out: list[tuple[str | None, Any]] = []
    text = raw.decode("utf-8", errors="replace")
    for block in text.split("\n\n")[:-1]:
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                payload = line[len("data: ") :]
                data = payload if payload == "[DONE]" else json.loads(payload)
        out.append((name, data))
    return out


async def stream_bytes(
    client: httpx.AsyncClient, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[bytes, BaseException | None]:
    """The raw body as received, and the transport error that ended it (None for a clean end)."""
    chunks: list[bytes] = []
    try:
        async with client.stream(method, path, json=body, headers=headers) as resp:
            assert resp.status_code == 200, await resp.aread()
            async for chunk in resp.aiter_raw():
                chunks.append(chunk)
    except httpx.TransportError as exc:
        return b"".join(chunks), exc
    return b"".join(chunks), None


@pytest.fixture
async def fp() -> Any:
    async with FakeProvider(seed=7) as server:
        yield server


@pytest.fixture
async def client(fp: FakeProvider) -> Any:
    async with httpx.AsyncClient(base_url=fp.base_url, headers=fake_headers(fp), timeout=10) as c:
        yield c


def anthropic_final(events: list[tuple[str | None, Any]]) -> tuple[Any, dict[int, bytes]]:
    snap, bufs = None, {}
    for _, data in events:
        if data["type"] == "ping":
            continue
        snap = accumulate_event(event=data, current_snapshot=snap, json_bufs=bufs)
    return snap, bufs


def chat_final(events: list[tuple[str | None, Any]]) -> Any:
    state = ChatCompletionStreamState(input_tools=omit, response_format=omit)
    assert events[-1][1] == "[DONE]"
    for _, data in events[:-1]:
        state.handle_chunk(ChatCompletionChunk.model_validate(data))
    return state.get_final_completion()


def responses_final(events: list[tuple[str | None, Any]]) -> Any:
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for name, data in events:
        assert name == data["type"]
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=data))
    assert state._completed_response is not None
    return state._completed_response


# --- binding --------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "localhost", "::1", "192.168.1.10"])
def test_refuses_non_loopback_hosts(host: str) -> None:
    with pytest.raises(NonLoopbackBindError):
        FakeProvider(host=host)


# --- well-formed streams, exact arguments ---------------------------------------------------------


async def test_anthropic_stream_accumulates_with_sdk(client: httpx.AsyncClient) -> None:
    raw, err = await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ)
    assert err is None
    events = parse_sse(raw)
    assert [n for n, _ in events] == [d["type"] for _, d in events]
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    final, bufs = anthropic_final(events)
    assert final.stop_reason == "tool_use"
    calls = [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert 1 <= len(calls) <= 3
    for (name, args), raw_args in zip(calls, bufs.values(), strict=True):
        assert json.loads(raw_args) == args
        jsonschema.validate(args, SCHEMAS[name])
    assert calls == [("get_weather", {"city": "invoice", "days": 7})]


async def test_chat_stream_accumulates_with_sdk(client: httpx.AsyncClient) -> None:
    raw, err = await stream_bytes(client, "POST", "/v1/chat/completions", CHAT_REQ)
    assert err is None
    completion = chat_final(parse_sse(raw))
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [(tc.function.name, json.loads(tc.function.arguments)) for tc in choice.message.tool_calls]
    for name, args in calls:
        jsonschema.validate(args, SCHEMAS[name])
    assert all(tc.id.startswith("call_") for tc in choice.message.tool_calls)
    assert calls == [("get_weather", {"city": "beta"}), ("get_time", {"tz": "alpha re"})]


async def test_responses_stream_accumulates_with_sdk(client: httpx.AsyncClient) -> None:
    raw, err = await stream_bytes(client, "POST", "/v1/responses", RESP_REQ)
    assert err is None
    events = parse_sse(raw)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    final = responses_final(events)
    assert final.status == "completed"
    calls = [(o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"]
    for name, args in calls:
        jsonschema.validate(args, SCHEMAS[name])
    assert all(o.call_id.startswith("call_") and o.id.startswith("fc_") for o in final.output)
    assert calls == [("get_time", {"tz": "berlin s"})]


async def test_anthropic_thinking_block_has_signature(client: httpx.AsyncClient) -> None:
    req = {**ANTHROPIC_REQ, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    raw, _ = await stream_bytes(client, "POST", "/v1/messages", req)
    events = parse_sse(raw)
    kinds = [d["delta"]["type"] for _, d in events if d["type"] == "content_block_delta"]
    assert "thinking_delta" in kinds and "signature_delta" in kinds
    final, _ = anthropic_final(events)
    assert final.content[0].type == "thinking" and final.content[0].signature


GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
GEMINI_REQ = {"contents": [{"role": "user", "parts": [{"text": "Tell me about rain."}]}]}


async def test_gemini_ends_a_thought_through_answer_with_its_signature_on_an_empty_text_part(
    client: httpx.AsyncClient,
) -> None:
    """As Gemini 2.5 does (provider-formats §2d), when the request asks for thoughts; without, no
    thought part and no signature."""
    thinking = {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
    raw, _ = await stream_bytes(client, "POST", GEMINI_PATH, {**GEMINI_REQ, **thinking})
    parts = [part for _, data in parse_sse(raw) for part in data["candidates"][0]["content"]["parts"]]
    assert parts[0]["thought"] is True
    assert parts[-1] == {"text": "", "thoughtSignature": parts[-1]["thoughtSignature"]}
    assert parts[-1]["thoughtSignature"].startswith("CiQB")  # as Gemini's begin (test_signatures.py)
    assert parse_sse(raw)[-1][1]["candidates"][0]["finishReason"] == "STOP"
    raw, _ = await stream_bytes(client, "POST", GEMINI_PATH, GEMINI_REQ)
    parts = [part for _, data in parse_sse(raw) for part in data["candidates"][0]["content"]["parts"]]
    assert [p for p in parts if "thought" in p or "thoughtSignature" in p] == []
    assert all(p["text"] for p in parts)


async def test_tool_results_give_text_mentioning_them(client: httpx.AsyncClient) -> None:
    a = {
        **ANTHROPIC_REQ,
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny 21C"}],
            },
        ],
    }
    final, _ = anthropic_final(parse_sse((await stream_bytes(client, "POST", "/v1/messages", a))[0]))
    assert final.stop_reason == "end_turn"
    assert "sunny 21C" in final.content[0].text and "get_weather" in final.content[0].text

    c = {
        **CHAT_REQ,
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    },
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
        ],
    }
    text = chat_final(parse_sse((await stream_bytes(client, "POST", "/v1/chat/completions", c))[0]))
    content = text.choices[0].message.content
    assert "rain" in content and "noon" in content and text.choices[0].finish_reason == "stop"

    r = {
        **RESP_REQ,
        "input": [
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_9", "output": "foggy"},
        ],
    }
    final_r = responses_final(parse_sse((await stream_bytes(client, "POST", "/v1/responses", r))[0]))
    assert "foggy" in final_r.output_text and "call_9" in final_r.output_text


async def test_no_tools_gives_plain_text(client: httpx.AsyncClient) -> None:
    req = {"model": "gpt-fake", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
    completion = chat_final(parse_sse((await stream_bytes(client, "POST", "/v1/chat/completions", req))[0]))
    assert completion.choices[0].message.content.startswith("About hello:")
    assert completion.choices[0].message.tool_calls is None


async def test_non_streaming_bodies(client: httpx.AsyncClient) -> None:
    for api, path in PATHS.items():
        resp = await client.post(path, json={**REQS[api], "stream": False})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["id"]
    retrieved = await client.get(f"/v1/responses/{body['id']}")
    assert retrieved.json()["status"] == "completed"


# --- determinism and idempotency ------------------------------------------------------------------


async def test_same_request_and_seed_give_identical_bytes() -> None:
    results: list[list[bytes]] = []
    for seed in (7, 7, 8):
        async with FakeProvider(seed=seed) as fp, client_of(fp) as c:
            results.append([(await stream_bytes(c, "POST", PATHS[a], REQS[a]))[0] for a in PATHS])
    assert results[0] == results[1]
    assert all(x != y for x, y in zip(results[0], results[2], strict=True))


async def test_retry_gets_new_ids_idempotency_key_the_same(client: httpx.AsyncClient) -> None:
    def msg_id(raw: bytes) -> str:
        return str(parse_sse(raw)[0][1]["message"]["id"])

    first = msg_id((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ))[0])
    retry = msg_id((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ))[0])
    assert first != retry
    key = {"Idempotency-Key": "k-1"}
    k1 = msg_id((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ, key))[0])
    k2 = msg_id((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ, key))[0])
    assert k1 == k2 and k1 not in (first, retry)
    clash = await client.post("/v1/messages", json={**ANTHROPIC_REQ, "max_tokens": 5}, headers=key)
    assert clash.status_code == 409 and clash.json()["type"] == "error"


async def test_a_keyed_request_sent_again_keeps_its_content_faults_and_draws_its_delivery_faults_anew() -> (
    None
):
    """The same key is the same response (a cut tool argument stays cut) over a new connection: a cut,
    a duplicate or a missing stop is a property of the connection, so a replay may go through."""
    plan = FaultPlan(rates={FaultKind.DISCONNECT: 0.5, FaultKind.TRUNCATED_ARGS: 1.0})
    async with FakeProvider(seed=7, fault_plan=plan) as fp, client_of(fp, timeout=10) as c:
        key = {"Idempotency-Key": "k-replayed"}
        sends = [await stream_bytes(c, "POST", "/v1/messages", ANTHROPIC_REQ, key) for _ in range(8)]
        by_request: dict[str, set[FaultKind]] = {}
        for record in fp.fault_log:
            by_request.setdefault(record.request_id, set()).add(record.fault.kind)
    cut = [err is not None for _, err in sends]
    assert cut == [kinds == {FaultKind.DISCONNECT, FaultKind.TRUNCATED_ARGS} for kinds in by_request.values()]
    assert len(by_request) == 8 and True in cut and False in cut
    assert all(FaultKind.TRUNCATED_ARGS in kinds for kinds in by_request.values())
    whole = [raw for raw, err in sends if err is None]
    assert len(set(whole)) == 1  # every complete delivery is the same response


# --- faults -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", list(PATHS))
async def test_disconnect_at_byte_delivers_exactly_n_bytes(
    fp: FakeProvider, client: httpx.AsyncClient, api: str
) -> None:
    raw, err = await stream_bytes(
        client, "POST", PATHS[api], REQS[api], {"x-fake-fault": "disconnect_at_byte=300"}
    )
    assert len(raw) == 300
    assert isinstance(err, httpx.RemoteProtocolError)
    full, _ = await stream_bytes(client, "POST", PATHS[api], REQS[api], {"x-fake-fault": "none"})
    assert len(full) > 300
    assert fp.fault_log == [FaultRecord("req_000001", Fault(FaultKind.DISCONNECT, 300))]


@pytest.mark.parametrize("api", list(PATHS))
async def test_duplicated_event_appears_twice(fp: FakeProvider, client: httpx.AsyncClient, api: str) -> None:
    clean = parse_sse((await stream_bytes(client, "POST", PATHS[api], REQS[api]))[0])
    fp2 = FakeProvider(seed=fp.seed)
    async with fp2, client_of(fp2) as c2:
        raw, _ = await stream_bytes(c2, "POST", PATHS[api], REQS[api], {"x-fake-fault": "duplicate_event=3"})
    dup = parse_sse(raw)
    assert len(dup) == len(clean) + 1
    assert dup[3] == dup[4] == clean[3]
    assert dup[:4] + dup[5:] == clean
    assert fp2.fault_log == [FaultRecord("req_000001", Fault(FaultKind.DUPLICATE, 3))]


@pytest.mark.parametrize(
    ("api", "stop"), [("anthropic", "message_stop"), ("chat", "[DONE]"), ("responses", "response.completed")]
)
async def test_missing_stop(client: httpx.AsyncClient, api: str, stop: str) -> None:
    raw, err = await stream_bytes(client, "POST", PATHS[api], REQS[api], {"x-fake-fault": "missing_stop"})
    assert err is None  # a clean end of the body: only the missing final event tells
    events = parse_sse(raw)
    names = [d if d == "[DONE]" else d.get("type", "chunk") for _, d in events]
    assert stop not in names and len(names) > 3


@pytest.mark.parametrize("api", list(PATHS))
async def test_truncated_tool_arguments_are_not_json(
    fp: FakeProvider, client: httpx.AsyncClient, api: str
) -> None:
    req = REQS[api]
    raw, _ = await stream_bytes(client, "POST", PATHS[api], req, {"x-fake-fault": "truncate_tool_args"})
    events = parse_sse(raw)
    if api == "anthropic":
        final, bufs = anthropic_final(events)
        args = [bufs[i].decode() for i in sorted(bufs)]
        assert final.stop_reason == "tool_use"
    elif api == "chat":
        msg = chat_final(events).choices[0].message
        args = [tc.function.arguments for tc in msg.tool_calls]
    else:
        args = [o.arguments for o in responses_final(events).output if o.type == "function_call"]
    *complete, cut = args
    for a in complete:
        json.loads(a)
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut)
    assert fp.fault_log[0].fault.kind is FaultKind.TRUNCATED_ARGS


def test_truncate_mid_string_cuts_inside_a_string() -> None:
    assert truncate_mid_string('{"city":"Paris"}') == '{"city":"Pa'
    assert truncate_mid_string('{"n":1}') == '{"'
    assert truncate_mid_string("{}") == "{"


async def test_slow_stream_waits_between_events(client: httpx.AsyncClient) -> None:
    t0 = time.monotonic()
    raw, _ = await stream_bytes(client, "POST", "/v1/responses", RESP_REQ, {"x-fake-fault": "slow_ms=20"})
    n = len(parse_sse(raw))
    assert time.monotonic() - t0 >= n * 0.02 * 0.9


async def test_provider_error_events(client: httpx.AsyncClient) -> None:
    h = {"x-fake-fault": "error_event=4"}
    a = parse_sse((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ, h))[0])
    assert len(a) == 5 and a[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    c = parse_sse((await stream_bytes(client, "POST", "/v1/chat/completions", CHAT_REQ, h))[0])
    assert len(c) == 5 and c[-1][1]["error"]["type"] == "server_error" and "[DONE]" not in [d for _, d in c]
    r = parse_sse((await stream_bytes(client, "POST", "/v1/responses", RESP_REQ, h))[0])
    assert r[-1][0] == "response.failed" and r[-1][1]["sequence_number"] == 4
    assert r[-1][1]["response"]["status"] == "failed"


async def test_an_error_event_at_0_is_the_whole_stream(client: httpx.AsyncClient) -> None:
    """`error_event=0`: the provider fails before anything names the response (it used to be read as 1,
    after the event that names it)."""
    h = {"x-fake-fault": "error_event=0"}
    a = parse_sse((await stream_bytes(client, "POST", "/v1/messages", ANTHROPIC_REQ, h))[0])
    assert a == [("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
    c = parse_sse((await stream_bytes(client, "POST", "/v1/chat/completions", CHAT_REQ, h))[0])
    assert [set(data) for _, data in c] == [{"error"}]
    r = parse_sse((await stream_bytes(client, "POST", "/v1/responses", RESP_REQ, h))[0])
    assert [(event, data["sequence_number"]) for event, data in r] == [("response.failed", 0)]
    g = parse_sse((await stream_bytes(client, "POST", GEMINI_PATH, GEMINI_REQ, h))[0])
    assert [data["error"]["status"] for _, data in g] == ["UNAVAILABLE"]


async def test_late_events_of_the_old_stream_after_a_reconnect(
    fp: FakeProvider, client: httpx.AsyncClient
) -> None:
    old = parse_sse((await stream_bytes(client, "POST", "/v1/chat/completions", CHAT_REQ))[0])
    raw, _ = await stream_bytes(
        client, "POST", "/v1/chat/completions", CHAT_REQ, {"x-fake-fault": "late_events=2"}
    )
    new = parse_sse(raw)
    assert new[:2] == old[-3:-1]  # the old stream's last two events before its [DONE]
    assert new[0][1]["id"] != new[2][1]["id"]  # the old generation's id, then the new one's
    assert fp.fault_log == [FaultRecord("req_000002", Fault(FaultKind.LATE_EVENTS, 2))]


async def until_held(fp: FakeProvider, n: int = 1) -> None:
    """Until the fake has recorded how `n` holds ended (a condition, polled; the test's timeout bounds it)."""
    while len(fp.holds) < n:
        await asyncio.sleep(0.01)


TERMINAL = {"anthropic": "message_stop", "chat": "[DONE]", "responses": "response.completed"}


@pytest.mark.parametrize("api", list(PATHS))
async def test_hold_open_keeps_the_connection_after_the_last_event_until_the_client_closes_it(
    fp: FakeProvider, client: httpx.AsyncClient, api: str
) -> None:
    """`hold_open`: every event is sent, the terminal one last, and then nothing: the body does not end.
    The client closing the connection ends the hold, which the fake records."""
    received: list[tuple[str | None, Any]] = []
    raw = b""
    async with client.stream(
        "POST", PATHS[api], json=REQS[api], headers={"x-fake-fault": "hold_open"}
    ) as resp:
        chunks = resp.aiter_raw()
        while not received or kind(received[-1][1]) != TERMINAL[api]:
            raw += await anext(chunks)
            received = parse_sse(raw)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await anext(chunks)
    async with asyncio.timeout(5):
        await until_held(fp)
    [hold] = fp.holds
    assert (hold.request_id, hold.ended) == ("req_000001", HoldEnd.CLIENT_CLOSED) and hold.held_s >= 0.3
    assert fp.fault_log == [FaultRecord("req_000001", Fault(FaultKind.HOLD_OPEN))]


def kind(data: Any) -> str:
    return data if isinstance(data, str) else str(data.get("type", "chunk"))


async def test_hold_open_for_n_ms_then_ends_the_body_after_the_error_event(
    fp: FakeProvider, client: httpx.AsyncClient
) -> None:
    """`hold_open=N` after `error_event`: the error is the last event; N ms later the body ends cleanly."""
    began = time.monotonic()
    raw, err = await stream_bytes(
        client, "POST", "/v1/messages", ANTHROPIC_REQ, {"x-fake-fault": "error_event=2, hold_open=300"}
    )
    assert err is None and time.monotonic() - began >= 0.3
    assert parse_sse(raw)[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    [hold] = fp.holds
    assert (hold.request_id, hold.ended) == ("req_000001", HoldEnd.TIME_UP) and hold.held_s >= 0.3
    assert fp.fault_log == [
        FaultRecord("req_000001", Fault(FaultKind.ERROR_EVENT, 2)),
        FaultRecord("req_000001", Fault(FaultKind.HOLD_OPEN, 300)),
    ]


def test_hold_open_is_scripted_only() -> None:
    with pytest.raises(ValueError, match=r"faults \['hold_open'\] are scripted only"):
        FaultPlan(rates={FaultKind.HOLD_OPEN: 0.5})
    assert parse_fault_header("hold_open, hold_open=250") == (
        Fault(FaultKind.HOLD_OPEN),
        Fault(FaultKind.HOLD_OPEN, 250),
    )


async def test_unknown_fault_is_a_400(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/chat/completions", json=CHAT_REQ, headers={"x-fake-fault": "explode"})
    assert resp.status_code == 400 and "unknown fault" in resp.json()["error"]["message"]


async def test_random_faults_are_seeded() -> None:
    logs = []
    for _ in range(2):
        plan = FaultPlan.uniform(0.3)
        async with FakeProvider(seed=11, fault_plan=plan) as fp, client_of(fp) as c:
            for i in range(12):
                req = {**CHAT_REQ, "messages": [{"role": "user", "content": f"q{i}"}]}
                await stream_bytes(c, "POST", "/v1/chat/completions", req)
            logs.append(list(fp.fault_log))
    assert logs[0] == logs[1] and len(logs[0]) > 3
    assert {r.fault.kind for r in logs[0]} >= {FaultKind.DISCONNECT, FaultKind.DUPLICATE}


async def test_scripted_plan_by_request_index() -> None:
    plan = FaultPlan(by_request={1: (Fault(FaultKind.MISSING_STOP),)})
    async with FakeProvider(fault_plan=plan) as fp, client_of(fp) as c:
        for _ in range(3):
            await stream_bytes(c, "POST", "/v1/messages", ANTHROPIC_REQ)
    assert fp.fault_log == [FaultRecord("req_000002", Fault(FaultKind.MISSING_STOP))]
    assert len(fp.requests) == 3 and fp.requests[0].json() == ANTHROPIC_REQ


async def test_scripted_plan_by_unmarked_request_skips_a_request_a_marker_faults() -> None:
    """A CI demo lost its answer of thinking alone: the marked request arrived n-th, and the refusal
    scripted for the n-th request stopped it. A fault by unmarked number goes to the next request no
    marker faults; one by plain number (`by_request`) lands where it lands, beside a marked fault."""
    plan = FaultPlan(
        by_request={2: (Fault(FaultKind.DUPLICATE, 3),)},
        by_unmarked_request={0: (Fault(FaultKind.REFUSAL_AFTER, 0),), 1: (Fault(FaultKind.MISSING_STOP),)},
        by_last_user_marker={"go slow": (Fault(FaultKind.SLOW, 1),)},
    )
    async with FakeProvider(fault_plan=plan) as fp, client_of(fp) as c:
        for text in ("please go slow", "hello", "go slow again", "hello again"):
            req = {**ANTHROPIC_REQ, "messages": [{"role": "user", "content": text}]}
            await stream_bytes(c, "POST", "/v1/messages", req)
    assert fp.fault_log == [
        FaultRecord("req_000001", Fault(FaultKind.SLOW, 1)),
        FaultRecord("req_000002", Fault(FaultKind.REFUSAL_AFTER, 0)),
        FaultRecord("req_000003", Fault(FaultKind.SLOW, 1)),
        FaultRecord("req_000003", Fault(FaultKind.DUPLICATE, 3)),
        FaultRecord("req_000004", Fault(FaultKind.MISSING_STOP)),
    ]


async def test_scripted_plan_first_with_marker_faults_only_the_first_such_request() -> None:
    plan = FaultPlan(first_with_marker={"cut here": (Fault(FaultKind.MISSING_STOP),)})
    asked = ["hello", "please cut here", "hello again", "please cut here", "cut here too"]
    async with FakeProvider(fault_plan=plan) as fp, client_of(fp) as c:
        for text in asked:
            req = {**ANTHROPIC_REQ, "messages": [{"role": "user", "content": text}]}
            await stream_bytes(c, "POST", "/v1/messages", req)
    assert fp.fault_log == [FaultRecord("req_000002", Fault(FaultKind.MISSING_STOP))]


async def test_scripted_plan_by_last_user_marker_faults_the_answer_to_that_turn_only() -> None:
    """The marked turn's answer (and its retry) is faulted; a tool round or a later turn, with the marker
    in their history only, is not."""
    plan = FaultPlan(by_last_user_marker={"go slow": (Fault(FaultKind.MISSING_STOP),)})
    asked = {"role": "user", "content": "please go slow"}
    call = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}
    ]}  # fmt: skip
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "9C"}]}
    conversations = [
        [asked],  # req_000001: faulted
        [asked, call, result],  # the tool round
        [asked, call, result, {"role": "assistant", "content": "9C"}, {"role": "user", "content": "thanks"}],
        [{"role": "user", "content": "hello"}],
        [asked],  # req_000005: the retry of the first, faulted again
    ]
    async with FakeProvider(fault_plan=plan) as fp, client_of(fp) as c:
        for messages in conversations:
            await stream_bytes(c, "POST", "/v1/messages", {**ANTHROPIC_REQ, "messages": messages})
    assert fp.fault_log == [
        FaultRecord("req_000001", Fault(FaultKind.MISSING_STOP)),
        FaultRecord("req_000005", Fault(FaultKind.MISSING_STOP)),
    ]


async def test_scripted_plan_by_last_user_marker_leaves_a_turn_merged_after_the_marked_one() -> None:
    """Anthropic, Bedrock and Gemini send consecutive user turns as one message: a turn the user added
    while the marked answer streamed (an interjection) is the message's last text part, and its answer
    is not faulted; the marked text last in the message is."""
    plan = FaultPlan(by_last_user_marker={"go slow": (Fault(FaultKind.MISSING_STOP),)})
    marked, later = {"type": "text", "text": "please go slow"}, {"type": "text", "text": "and also Rome"}
    contents = [[marked, later], [later, marked], "please go slow"]
    async with FakeProvider(fault_plan=plan) as fp, client_of(fp) as c:
        for content in contents:
            messages = [{"role": "user", "content": content}]
            await stream_bytes(c, "POST", "/v1/messages", {**ANTHROPIC_REQ, "messages": messages})
    assert fp.fault_log == [
        FaultRecord("req_000002", Fault(FaultKind.MISSING_STOP)),
        FaultRecord("req_000003", Fault(FaultKind.MISSING_STOP)),
    ]


# --- background mode --------------------------------------------------------------------------------

BG_REQ = {**RESP_REQ, "background": True}


async def test_background_resume_after_disconnect_equals_uninterrupted_stream() -> None:
    async with FakeProvider(seed=7) as ref, client_of(ref) as c:
        whole = parse_sse((await stream_bytes(c, "POST", "/v1/responses", BG_REQ))[0])
    assert whole[-1][0] == "response.completed"

    async with FakeProvider(seed=7) as fp, client_of(fp) as c:
        raw, err = await stream_bytes(
            c, "POST", "/v1/responses", BG_REQ, {"x-fake-fault": "disconnect_at_byte=2500"}
        )
        assert isinstance(err, httpx.RemoteProtocolError) and len(raw) == 2500
        seen = parse_sse(raw)
        cursor = seen[-1][1]["sequence_number"]
        rid = seen[0][1]["response"]["id"]
        # the generation goes on without a client: poll until it is done
        for _ in range(200):
            status = (await c.get(f"/v1/responses/{rid}")).json()["status"]
            if status == "completed":
                break
            await asyncio.sleep(0.01)
        assert status == "completed"
        rest_raw, err = await stream_bytes(
            c, "GET", f"/v1/responses/{rid}?stream=true&starting_after={cursor}"
        )
        assert err is None
        rest = parse_sse(rest_raw)
    assert rest[0][1]["sequence_number"] == cursor + 1
    assert seen + rest == whole
    responses_final(seen + rest)


async def test_background_resume_while_still_generating_and_late_events() -> None:
    async with (
        FakeProvider(seed=7, background_tick_s=0.05) as fp,
        client_of(fp) as c,
    ):
        raw, _ = await stream_bytes(
            c, "POST", "/v1/responses", BG_REQ, {"x-fake-fault": "disconnect_at_byte=2000"}
        )
        seen = parse_sse(raw)
        cursor = seen[-1][1]["sequence_number"]
        rid = seen[0][1]["response"]["id"]
        assert (await c.get(f"/v1/responses/{rid}")).json()["status"] in ("queued", "in_progress")
        rest_raw, _ = await stream_bytes(
            c,
            "GET",
            f"/v1/responses/{rid}?stream=true&starting_after={cursor}",
            headers={"x-fake-fault": "late_events=2"},
        )
        rest = parse_sse(rest_raw)
        assert [d["sequence_number"] for _, d in rest[:3]] == [cursor - 1, cursor, cursor + 1]
        assert rest[-1][0] == "response.completed"
        assert fp.fault_log[-1] == FaultRecord("req_000003", Fault(FaultKind.LATE_EVENTS, 2))


async def test_background_retrieve_cancel_and_idempotent_reattach() -> None:
    async with (
        FakeProvider(seed=7, background_tick_s=0.05) as fp,
        client_of(fp) as c,
    ):
        created = (await c.post("/v1/responses", json={**BG_REQ, "stream": False})).json()
        assert created["status"] in ("queued", "in_progress") and created["background"] is True
        cancelled = (await c.post(f"/v1/responses/{created['id']}/cancel")).json()
        assert cancelled["status"] == "cancelled"
        again = (await c.post(f"/v1/responses/{created['id']}/cancel")).json()
        assert again["status"] == "cancelled"
        assert (await c.get(f"/v1/responses/{created['id']}?stream=true")).status_code == 400
        assert (await c.get("/v1/responses/resp_nope")).status_code == 404

        key = {"Idempotency-Key": "bg-1"}
        first = (await c.post("/v1/responses", json={**BG_REQ, "stream": False}, headers=key)).json()
        second = (await c.post("/v1/responses", json={**BG_REQ, "stream": False}, headers=key)).json()
        assert first["id"] == second["id"] != created["id"]


def test_turnledger_fake_provider_command_documents_its_options() -> None:
    from typer.testing import CliRunner

    from turnledger.cli import _register, app

    if not app.registered_groups:
        _register()
    result = CliRunner().invoke(app, ["fake-provider", "--help"])
    assert result.exit_code == 0
    for option in ("--port", "--seed", "--fault-rate"):
        assert option in result.output
