"""Throughput of parser + assembler vs the official SDK accumulators, same events, same run.

    .venv/bin/python bench/bench_streaming.py [--repeats 7] [--text-deltas 4000] [--calls 8]

Ours: raw SSE bytes (fed in 4 KiB network-sized chunks) → `parser_for(...)` →
`BlockAssembler.feed` per delta → `finish()` (strict parse, schema validation,
digests). The SDKs: their own SSE decoder → `json.loads` → their accumulator
(anthropic `accumulate_event`; openai `construct_type` + `ChatCompletionStreamState`,
which is what `client.chat.completions.stream` runs). Rates are provider events
per second (one SSE event = one unit for both sides); median of the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from openai import omit
from openai._models import construct_type
from openai._streaming import SSEDecoder as OpenAISSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from turnledger.model.tools import ToolDefinition
from turnledger.streaming import BlockAssembler, Complete, parser_for

TOOLS = {
    "search": ToolDefinition(
        name="search",
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    )
}
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "—", "café", "日本", "🎉"]
CHUNK = 4096


def _sse(event: str | None, payload: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def _arguments(i: int) -> list[str]:
    raw = json.dumps({"query": " ".join(WORDS[: 3 + i % 5]) * 4, "limit": 10 + i})
    return [raw[j : j + 6] for j in range(0, len(raw), 6)]


def anthropic_stream(text_deltas: int, calls: int) -> tuple[bytes, int]:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-bench",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
    ]
    for i in range(text_deltas):
        delta = {"type": "text_delta", "text": WORDS[i % len(WORDS)] + " "}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
        if i % 500 == 0:
            events.append(("ping", {"type": "ping"}))
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    for c in range(calls):
        index = c + 1
        block = {"type": "tool_use", "id": f"toolu_{c:04d}", "name": "search", "input": {}}
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        )
        for piece in _arguments(c):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 999}},
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(_sse(n, p) for n, p in events), len(events)


def openai_chat_stream(text_deltas: int, calls: int) -> tuple[bytes, int]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": WORDS[i % len(WORDS)] + " "}) for i in range(text_deltas)]
    for c in range(calls):
        for j, piece in enumerate(_arguments(c)):
            call: dict[str, Any] = {"index": c, "function": {"arguments": piece}}
            if j == 0:
                call.update(
                    id=f"call_{c:04d}", type="function", function={"name": "search", "arguments": piece}
                )
            chunks.append(chunk({"tool_calls": [call]}))
    chunks.append(chunk({}, "tool_calls"))
    usage = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "gpt-bench"}
    chunks.append(
        {**usage, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}
    )
    raw = b"".join(_sse(None, c) for c in chunks) + b"data: [DONE]\n\n"
    return raw, len(chunks) + 1


def _chunks(raw: bytes) -> Iterator[bytes]:
    return (raw[i : i + CHUNK] for i in range(0, len(raw), CHUNK))


def ours(api: str, raw: bytes) -> None:
    parser = parser_for(api, generation=1)
    assembler = BlockAssembler(TOOLS)
    for piece in _chunks(raw):
        for delta in parser.feed(piece):
            assembler.feed(delta)
    for delta in parser.flush():
        assembler.feed(delta)
    assert isinstance(assembler.finish(), Complete)


def sdk_anthropic(raw: bytes) -> None:
    snapshot, bufs = None, {}  # type: ignore[var-annotated]
    for sse in AnthropicSSEDecoder().iter_bytes(_chunks(raw)):
        event = json.loads(sse.data)
        if event["type"] != "ping":
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot is not None and snapshot.stop_reason == "tool_use"


def sdk_openai_chat(raw: bytes) -> None:
    state = ChatCompletionStreamState(input_tools=omit, response_format=omit)
    for sse in OpenAISSEDecoder().iter_bytes(_chunks(raw)):
        if sse.data.startswith("[DONE]"):
            break
        state.handle_chunk(construct_type(type_=ChatCompletionChunk, value=json.loads(sse.data)))  # type: ignore[arg-type]
    assert state.current_completion_snapshot.choices[0].finish_reason == "tool_calls"


def _median_seconds(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up: imports, validator cache
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__)
    cli.add_argument("--repeats", type=int, default=7)
    cli.add_argument("--text-deltas", type=int, default=4000)
    cli.add_argument("--calls", type=int, default=8)
    args = cli.parse_args()
    cases = [
        (
            "anthropic-messages",
            anthropic_stream(args.text_deltas, args.calls),
            sdk_anthropic,
            "anthropic accumulate_event",
        ),
        (
            "openai-chat",
            openai_chat_stream(args.text_deltas, args.calls),
            sdk_openai_chat,
            "openai ChatCompletionStreamState",
        ),
    ]
    print(f"repeats={args.repeats} text deltas={args.text_deltas} tool calls={args.calls} chunk={CHUNK} B\n")
    print("| stream | events | bytes | turnledger events/s | SDK events/s (oracle) | ratio (ours / SDK) |")
    print("|---|---:|---:|---:|---:|---:|")
    for api, (raw, events), sdk, label in cases:
        t_ours = _median_seconds(lambda api=api, raw=raw: ours(api, raw), args.repeats)  # type: ignore[misc]
        t_sdk = _median_seconds(lambda sdk=sdk, raw=raw: sdk(raw), args.repeats)  # type: ignore[misc]
        print(
            f"| {api} | {events} | {len(raw)} | {events / t_ours:,.0f} | {events / t_sdk:,.0f} ({label}) "
            f"| {t_sdk / t_ours:.2f}x |"
        )


if __name__ == "__main__":
    main()
