"""Oracles: our assembled blocks equal what the official SDK accumulators build.

The SDKs are test-only dependencies pinned exactly in the `dev` extra (their
accumulators live in private modules: provider-formats §3). Where the SDKs accept
what we must refuse (truncated arguments, a missing stop), the tests assert the
difference explicitly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from openai import omit
from openai._models import construct_type
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from turnledger.model.canonical import digest_of
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.outcomes import CandidateBlock, Complete, Incomplete

from .support import TOOLS, fixture, run, sse_json_events

# -- the SDK accumulators ---------------------------------------------------------------


def anthropic_snapshot(name: str) -> tuple[Any, dict[int, bytes]]:
    snapshot, bufs = None, {}
    for event in sse_json_events(fixture(name)):
        if event["type"] in ("ping", "error"):
            continue
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot, bufs


def openai_chat_snapshot(name: str) -> Any:
    state = ChatCompletionStreamState(input_tools=omit, response_format=omit)
    for chunk in sse_json_events(fixture(name)):
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    return state.current_completion_snapshot


def openai_responses_state(name: str) -> ResponseStreamState[Any]:
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in sse_json_events(fixture(name)):
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))  # type: ignore[arg-type]
    return state


# -- field-by-field comparison -----------------------------------------------------------


def expect_tool(block: CandidateBlock, call_id: str, name: str, arguments: Any) -> None:
    """`arguments` is the SDK's parsed object (Anthropic) or raw string (OpenAI)."""
    assert block.kind == "tool_call"
    assert block.call_id == call_id
    assert block.tool_name == name
    parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert json.loads(block.arguments or "") == parsed
    if isinstance(arguments, str):
        assert block.arguments == arguments
    assert block.argument_digest == digest_of(parsed)
    assert block.schema_digest == TOOLS[name].schema_digest


ANTHROPIC_COMPLETE = ["anthropic_text.sse", "anthropic_tools_parallel.sse", "anthropic_thinking.sse"]


@pytest.mark.parametrize("name", ANTHROPIC_COMPLETE)
def test_anthropic_blocks_equal_sdk_accumulation(name: str) -> None:
    snapshot, _ = anthropic_snapshot(name)
    outcome, _ = run(name)
    assert isinstance(outcome, Complete)
    assert outcome.response_handle == snapshot.id
    assert outcome.model == snapshot.model
    assert outcome.raw_stop_reason == snapshot.stop_reason
    assert outcome.input_tokens == snapshot.usage.input_tokens
    assert outcome.output_tokens == snapshot.usage.output_tokens
    assert len(outcome.blocks) == len(snapshot.content)
    for ours, theirs in zip(outcome.blocks, snapshot.content, strict=True):
        if theirs.type == "text":
            assert (ours.kind, ours.text) == ("text", theirs.text)
        elif theirs.type == "thinking":
            assert (ours.kind, ours.text, ours.signature) == ("thinking", theirs.thinking, theirs.signature)
        else:
            expect_tool(ours, theirs.id, theirs.name, theirs.input)


def test_anthropic_sdk_accepts_truncated_arguments_we_refuse() -> None:
    snapshot, bufs = anthropic_snapshot("anthropic_truncated_args.sse")
    # the SDK's partial parse dropped the unterminated string and raised nothing
    assert snapshot.stop_reason == "max_tokens"
    assert snapshot.content[0].type == "tool_use" and snapshot.content[0].input == {}
    assert bufs[0] == b'{"location": "Par'
    outcome, assembler = run("anthropic_truncated_args.sse")
    assert isinstance(outcome, Incomplete)
    assert outcome.reason is ReasonCode.OUTPUT_LIMIT_REACHED  # the limit's cut, not sent again
    assert assembler.partial_tool_dispatches == 0


def test_anthropic_sdk_accepts_missing_stop_we_refuse() -> None:
    snapshot, _ = anthropic_snapshot("anthropic_missing_stop.sse")
    assert snapshot.stop_reason is None
    assert snapshot.content[1].input == {"timezone": "UTC"}  # a call the SDK would hand out
    outcome, _ = run("anthropic_missing_stop.sse")
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.MISSING_STOP
    assert outcome.retract_previews


OPENAI_CHAT_COMPLETE = ["openai_chat_text.sse", "openai_chat_tools_parallel.sse"]


@pytest.mark.parametrize("name", OPENAI_CHAT_COMPLETE)
def test_openai_chat_blocks_equal_sdk_state(name: str) -> None:
    snapshot = openai_chat_snapshot(name)
    outcome, _ = run(name)
    assert isinstance(outcome, Complete)
    choice = snapshot.choices[0]
    assert outcome.response_handle == snapshot.id
    assert outcome.model == snapshot.model
    assert outcome.raw_stop_reason == choice.finish_reason
    assert outcome.input_tokens == snapshot.usage.prompt_tokens
    assert outcome.output_tokens == snapshot.usage.completion_tokens
    texts = [b for b in outcome.blocks if b.kind == "text"]
    assert "".join(b.text for b in texts) == (choice.message.content or "")
    calls = [b for b in outcome.blocks if b.kind == "tool_call"]
    sdk_calls = choice.message.tool_calls or []
    assert len(calls) == len(sdk_calls)
    for ours, theirs in zip(calls, sdk_calls, strict=True):
        expect_tool(ours, theirs.id, theirs.function.name, theirs.function.arguments)


def test_openai_chat_sdk_accepts_truncated_length_we_refuse() -> None:
    snapshot = openai_chat_snapshot("openai_chat_truncated_length.sse")
    choice = snapshot.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.tool_calls[0].function.arguments == '{"location":'  # "done" in SDK terms
    outcome, assembler = run("openai_chat_truncated_length.sse")
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.OUTPUT_LIMIT_REACHED
    assert assembler.partial_tool_dispatches == 0


def test_openai_chat_sdk_accepts_missing_finish_we_refuse() -> None:
    snapshot = openai_chat_snapshot("openai_chat_missing_finish.sse")
    assert snapshot.choices[0].message.content == "Here is half of an answer"
    assert snapshot.choices[0].finish_reason is None
    outcome, _ = run("openai_chat_missing_finish.sse")
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.MISSING_STOP


OPENAI_RESPONSES_COMPLETE = ["openai_responses_text.sse", "openai_responses_tools.sse"]


@pytest.mark.parametrize("name", OPENAI_RESPONSES_COMPLETE)
def test_openai_responses_blocks_equal_sdk_state(name: str) -> None:
    final = openai_responses_state(name)._completed_response
    assert final is not None
    outcome, _ = run(name)
    assert isinstance(outcome, Complete)
    assert outcome.response_handle == final.id
    assert outcome.model == final.model
    assert outcome.input_tokens == final.usage.input_tokens
    assert outcome.output_tokens == final.usage.output_tokens
    sdk_blocks: list[tuple[str, Any]] = []
    for item in final.output:
        if item.type == "message":
            sdk_blocks += [("text", part) for part in item.content]
        else:
            sdk_blocks.append((item.type, item))
    assert len(outcome.blocks) == len(sdk_blocks)
    for ours, (kind, theirs) in zip(outcome.blocks, sdk_blocks, strict=True):
        if kind == "text":
            assert (ours.kind, ours.text) == ("text", theirs.text)
        elif kind == "reasoning":
            summary = "".join(s.text for s in theirs.summary)
            assert (ours.kind, ours.text, ours.signature) == ("thinking", summary, theirs.encrypted_content)
        else:
            expect_tool(ours, theirs.call_id, theirs.name, theirs.arguments)


def test_openai_responses_incomplete_is_refused_like_the_sdk_final() -> None:
    state = openai_responses_state("openai_responses_incomplete.sse")
    assert state._completed_response is None  # get_final_response() would raise
    outcome, _ = run("openai_responses_incomplete.sse")
    assert isinstance(outcome, Incomplete) and outcome.reason is ReasonCode.OUTPUT_LIMIT_REACHED
