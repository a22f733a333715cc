"""Shared helpers for the streaming tests: toolset, fixtures, running a stream end to end."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from turnledger.model.deltas import NormalizedDelta
from turnledger.model.tools import ToolDefinition
from turnledger.streaming import BlockAssembler, parser_for
from turnledger.streaming.outcomes import AssemblyOutcome
from turnledger.streaming.sse import SseDecoder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "streams"

TOOLS = {
    "get_weather": ToolDefinition(
        name="get_weather",
        input_schema={
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["location"],
            "additionalProperties": False,
        },
    ),
    "get_time": ToolDefinition(
        name="get_time",
        input_schema={
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    ),
}

API_BY_PREFIX = {
    "anthropic": "anthropic-messages",
    "openai_chat": "openai-chat",
    "openai_responses": "openai-responses",
    "gemini": "gemini",
    "bedrock": "bedrock-converse",
}


def api_of(name: str) -> str:
    return next(api for prefix, api in API_BY_PREFIX.items() if name.startswith(prefix))


def fixture_names() -> list[str]:
    return sorted(p.name for p in FIXTURES.glob("*.sse"))


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def parse(api: str, chunks: Iterable[bytes], generation: int = 1) -> list[NormalizedDelta]:
    parser = parser_for(api, generation=generation)
    deltas: list[NormalizedDelta] = []
    for chunk in chunks:
        deltas += parser.feed(chunk)
    return deltas + parser.flush()


def assemble(deltas: Iterable[NormalizedDelta], tools: Any = None) -> tuple[AssemblyOutcome, BlockAssembler]:
    assembler = BlockAssembler(TOOLS if tools is None else tools)
    for delta in deltas:
        assembler.feed(delta)
    return assembler.finish(), assembler


def run(name: str, data: bytes | None = None) -> tuple[AssemblyOutcome, BlockAssembler]:
    raw = fixture(name) if data is None else data
    return assemble(parse(api_of(name), [raw]))


def sse_json_events(data: bytes) -> list[dict[str, Any]]:
    """The JSON payloads of a fixture, as the SDK oracles are fed them ([DONE] left out)."""
    decoder = SseDecoder()
    events = decoder.feed(data) + decoder.flush()
    return [json.loads(e.data) for e in events if e.data.strip() != "[DONE]"]


def delivery(
    deltas: list[NormalizedDelta], data: st.DataObject, repeatable: list[NormalizedDelta] | None = None
) -> list[NormalizedDelta]:
    """`deltas` reordered, with repeats (of `repeatable`, by default `deltas`) and copies of some as
    deltas of another stream (another generation, another handle) mixed in."""
    order = data.draw(st.permutations(deltas)) if deltas else []
    pool = deltas if repeatable is None else repeatable
    repeats = data.draw(st.lists(st.sampled_from(pool), max_size=6)) if pool else []
    foreign = [
        d.model_copy(update={"generation": d.generation + 1} if i % 2 else {"response_handle": "other"})
        for i, d in enumerate(repeats[:3])
    ]
    mixed = order + repeats + foreign
    return data.draw(st.permutations(mixed)) if data.draw(st.booleans()) else mixed
