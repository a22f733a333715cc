"""Every recorded answer of a complete stream (`tests/fixtures/streams`), parsed by its API's parser and
folded with a request for its API's adapter, commits once: no answer a provider really sends is refused
by the message-graph rules at the commit. A real Gemini 2.5 answer (`gemini_text_thought.sse`) did not:
its last chunk's empty text part carries a `thoughtSignature`, the parser puts it on the text block,
and the rules refused any text block with a signature (MALFORMED_BLOCK), so the operation went UNKNOWN
and every attempt after it met the same end."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.dispatch.scenario import Conversation
from tests.unit.streaming.support import TOOLS, api_of, fixture
from turnledger.dispatch.lifecycle import commit_note
from turnledger.gateway.pump import FINAL_TYPES
from turnledger.model.deltas import NormalizedDelta, StopReason
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    PreviewRetracted,
    Quarantined,
    Rejected,
    StreamOutcome,
    ToolCallReady,
)
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import parser_for
from turnledger.streaming.eventstream import EventStreamDecoder, encode_message
from turnledger.streaming.outcomes import CandidateBlock, Complete

REQUESTS = {
    "anthropic-messages": ("anthropic-messages@2", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
    "openai-chat": ("openai-chat@2", "openai", "openai/gpt-4o@2024-08"),
    "openai-responses": ("openai-responses@2", "openai", "openai/gpt-4o@2024-08"),
    "gemini": ("gemini@2", "google", "google/gemini-2.5-flash@2025-06"),
    "bedrock-converse": ("bedrock-converse@1", "bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05"),
}
HEADER_HANDLES = {"bedrock-converse": "7d1c4e2a-5b3f-4a8e-9c6d-2f0e1b3a4c5d"}
"""The handle of an API whose stream names none: ConverseStream's `x-amzn-RequestId` header."""
COMPLETE = {
    "anthropic_text.sse": 1,
    "anthropic_thinking.sse": 2,
    "anthropic_thinking_tool_use.sse": 2,
    "anthropic_tool_use_only.sse": 1,
    "bedrock_reasoning_tool_use.eventstream": 3,
    "anthropic_tools_parallel.sse": 3,
    "gemini_parallel_calls.sse": 3,
    "gemini_text_thought.sse": 2,
    "openai_chat_refusal.sse": 1,
    "openai_chat_text.sse": 1,
    "openai_chat_tool_call_usage.sse": 1,
    "openai_chat_tools_parallel.sse": 2,
    "openai_responses_text.sse": 1,
    "openai_responses_tools.sse": 3,
}
"""Each fixture of an answer that ends with its final event, and the blocks it commits."""


def answered(name: str, op: str = "op-1") -> Conversation:
    """A conversation whose dispatch `op` the recorded stream `name` answered."""
    return streamed(api_of(name), fixture(name), op)


def streamed(api: str, data: bytes, op: str = "op-1") -> Conversation:
    """A conversation (one user turn) whose dispatch `op`, for `api`'s adapter with the bench tools, the
    stream `data` answered: parsed as the worker parses it, appended as its pump appends it."""
    adapter, provider, model = REQUESTS[api]
    c = Conversation("c1")
    c.user("hello")
    c.apply(
        DispatchRequested(
            **c._common(),
            operation_id=op,
            adapter=adapter,
            provider=provider,
            model_revision=model,
            tools=tuple(TOOLS.values()),
            max_output_tokens=256,
        )
    )
    c.attempt(op)
    c.sent(op)
    parser = parser_for(api, generation=1, response_handle=HEADER_HANDLES.get(api))
    deltas = parser.feed(data) + parser.flush()
    c.bind(op, handle=next(d.response_handle for d in deltas if d.response_handle))
    for batch in appended(deltas):
        c.deltas(batch, op)
    c.ended(StreamOutcome.COMPLETED, op)
    return c


def appended(deltas: list[NormalizedDelta]) -> list[list[NormalizedDelta]]:
    """The StreamDeltas records the gateway's pump appends for a stream: a final delta (message stop,
    provider error) goes out at once with what is pending (`gateway/pump.py`), so what follows it comes
    in a record of its own."""
    batches: list[list[NormalizedDelta]] = [[]]
    for delta in deltas:
        batches[-1].append(delta)
        if delta.type in FINAL_TYPES:
            batches.append([])
    return [batch for batch in batches if batch]


@pytest.mark.parametrize("name", sorted(COMPLETE))
def test_a_complete_recorded_answer_commits_once(name: str) -> None:
    c = answered(name)
    assert (c.of(Quarantined), c.of(Rejected)) == ([], [])
    assert c.state.operations["op-1"].state == DispatchState.COMMITTED
    assistant = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [len(t.blocks) for t in assistant] == [COMPLETE[name]]


def test_the_gemini_text_signature_is_committed_and_sent_back_on_its_part() -> None:
    c = answered("gemini_text_thought.sse")
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [(b.kind, b.signature) for b in turn.blocks] == [
        ("thinking", None),
        ("text", "CiQBS3hu3z/CuRCQ7u7zKMu1W7R0NhA62Wol/NLCP9dhQbg="),
    ]
    c.user("and again")
    adapter, provider, model = REQUESTS["gemini"]
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-2", adapter=adapter, provider=provider, model_revision=model,
            tools=(), max_output_tokens=256,
        )
    )  # fmt: skip
    c.attempt("op-2")
    (manifest,) = [m.manifest for m in c.of(ManifestIssued) if m.manifest.operation_id == "op-2"]
    contents = orjson.loads(manifest.request_body)["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {
                "text": "Soft rain on the roof,\ngray café windows weep—\nthe kettle answers.",
                "thoughtSignature": "CiQBS3hu3z/CuRCQ7u7zKMu1W7R0NhA62Wol/NLCP9dhQbg=",
            }
        ],
    }


def test_a_gemini_signature_in_a_part_without_text_is_committed_and_sent_back_on_its_text() -> None:
    """The last chunk of a Gemini 3 answer may hold a part with a `thoughtSignature` and no `text` key
    at all ("a part may contain only thoughtSignature and no text"; "the last chunk usually contains
    only thoughtSignature and no text":
    https://docs.apiyi.com/en/api-capabilities/gemini/response-handling, a gateway's page on the native
    `streamGenerateContent` format; the empty-text form of the same signature is provider-formats §2d).
    The parser counted such a part as unknown and dropped its signature, so the next request sent the
    answer unsigned. It is read as the empty text part it stands for: the signature goes on the text."""
    c = answered("gemini_signature_only_part.sse")
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [(b.kind, b.text, b.signature) for b in turn.blocks] == [("text", GEMINI_HAIKU, GEMINI_SIGNATURE)]
    contents = next_request(c, "gemini")["contents"]
    assert contents[1:] == [
        {"role": "model", "parts": [{"text": GEMINI_HAIKU, "thoughtSignature": GEMINI_SIGNATURE}]},
        {"role": "user", "parts": [{"text": "and again"}]},
    ]


GEMINI_HAIKU = "Soft rain on the roof,\ngray café windows weep—\nthe kettle answers."
GEMINI_SIGNATURE = "CiQBS3hu3z/CuRCQ7u7zKMu1W7R0NhA62Wol/NLCP9dhQbg="


def next_request(c: Conversation, api: str) -> dict[str, Any]:
    """The body of the conversation's next request to `api`, after the results of every call of op-1
    (or a user text when it made none)."""
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    calls = [(b.call_id, b.tool_name, b.arguments) for b in turn.blocks if b.kind == "tool_call"]
    if calls:
        c.tool_results(*calls)
    else:
        c.user("and again")
    adapter, provider, model = REQUESTS[api]
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-2", adapter=adapter, provider=provider, model_revision=model,
            tools=tuple(TOOLS.values()), max_output_tokens=256,
        )
    )  # fmt: skip
    c.attempt("op-2")
    (manifest,) = [m.manifest for m in c.of(ManifestIssued) if m.manifest.operation_id == "op-2"]
    body: dict[str, Any] = orjson.loads(manifest.request_body)
    return body


def test_a_bedrock_answer_commits_on_its_stop_and_its_usage_after_it_is_no_late_delta() -> None:
    """ConverseStream sends `metadata` (usage) after `messageStop`, as its last event
    (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStreamOutput.md;
    provider-formats §2e). The pump appends a final delta at once, so the usage came in a record of its
    own after the commit and was quarantined (AFTER_COMMIT '1 deltas while COMMITTED') on every answer.
    The reasoning (text + signature), the text and the call split over three deltas commit, and the next
    request returns the reasoning with its signature before the call, and the result after it."""
    c = answered("bedrock_reasoning_tool_use.eventstream")
    assert (c.of(Quarantined), c.of(Rejected)) == ([], [])
    messages = next_request(c, "bedrock-converse")["messages"]
    assert messages[1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "reasoningContent": {
                        "reasoningText": {
                            "text": "The user wants the weather in Madrid; call get_weather.",
                            "signature": BEDROCK_SIGNATURE,
                        }
                    }
                },
                {"text": "Checking Madrid."},
                {
                    "toolUse": {
                        "toolUseId": "tooluse_Qm3xV8nB2cL6zT1kR9sD3f",
                        "name": "get_weather",
                        "input": {"location": "Madrid, Spain"},
                    }
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "tooluse_Qm3xV8nB2cL6zT1kR9sD3f",
                        "content": [{"text": "result of tooluse_Qm3xV8nB2cL6zT1kR9sD3f"}],
                        "status": "success",
                    }
                }
            ],
        },
    ]


BEDROCK_SIGNATURE = (
    "EqoBCkgIBxABGAIiQLx2Zq0fJz3aTnVg8pQk1mW4rE9sY7uB2cH5dK0jL6nM3oP8qR1tU4vX7yA0bC3eF6gI9jK2lM5nO8pQ=="
)


def test_a_bedrock_answer_with_redacted_reasoning_is_refused_not_committed_without_it() -> None:
    """A reasoning block may be `redactedContent` only: encrypted reasoning the model provider
    flagged (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ReasoningContentBlock.md,
    a union of reasoningText and redactedContent). The parser counted it as an unknown event and
    committed an empty thinking block in its place, which the adapter leaves out: the redacted
    reasoning was silently dropped from every later request. The graph has no block for it, so the
    answer is refused with its kind named, as Anthropic's `redacted_thinking` is."""
    c = answered("bedrock_redacted_reasoning.eventstream")
    assert c.of(CommittedTurn)[-1].operation_id != "op-1"
    assert c.state.operations["op-1"].state == DispatchState.UNKNOWN
    (decision,) = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1:]
    assert (decision.reason, decision.detail) == (
        ReasonCode.UNKNOWN_KIND,
        "block 0 has kind 'redactedContent'",
    )


REFUSED = {
    "anthropic_redacted_thinking.sse": (ReasonCode.UNKNOWN_KIND, "block 0 has kind 'redacted_thinking'"),
    "anthropic_server_tool_pause.sse": (ReasonCode.UNKNOWN_KIND, "block 1 has kind 'server_tool_use'"),
    "gemini_malformed_function_call.sse": (ReasonCode.PROVIDER_ERROR, "stopped with MALFORMED_FUNCTION_CALL"),
}
"""Complete answers the graph cannot hold whole. Anthropic's (stop reasons and block types of
https://platform.claude.com/docs/en/api/messages-streaming; provider-formats §1c, §2a): redacted
thinking (data, no text) that the next request would have to return, a server tool's call and result
with `pause_turn`. Gemini's `MALFORMED_FUNCTION_CALL`
(provider-formats §2d; its `finishMessage` quotes the call the model wrote and no part holds it), an
error another generation may not repeat. Each is refused with its reason, never committed without the
part it cannot carry, and no call of it is dispatched."""


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_answer_the_graph_cannot_hold_whole_is_refused_with_its_reason(name: str) -> None:
    c = answered(name)
    assert [t.operation_id for t in c.of(CommittedTurn)] == [None]
    assert c.state.operations["op-1"].state == DispatchState.UNKNOWN
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.reason, decision.detail) == REFUSED[name]
    assert c.of(ToolCallReady) == []


CUT_CALLS = {
    "anthropic_max_tokens_tool_use.sse": (
        "tool block 1 at max_tokens: cut at 17: Unterminated string starting at at 13"
    ),
    "openai_chat_truncated_length.sse": "tool block 0 at length: cut at 12: Expecting value at 12",
    "openai_responses_incomplete.sse": "tool block 0 open at max_output_tokens",
}
"""Calls the output limit cut: Anthropic's by `max_tokens` (provider-formats §1c, §2a), OpenAI Chat's by
`finish_reason: "length"` (provider-formats §2b, §3b: the SDK calls such arguments done), Responses'
by `response.incomplete` for `max_output_tokens`, the call's item never done."""


@pytest.mark.parametrize("name", sorted(CUT_CALLS))
def test_a_call_cut_by_the_output_limit_ends_the_operation_and_none_of_it_is_history(name: str) -> None:
    """It settled UNKNOWN (TRUNCATED_ARGUMENTS for arguments that do not parse), and a new generation
    sent the same request with the same budget, to be cut again. Now CANCELLED OUTPUT_LIMIT_REACHED, the
    detail saying what was cut and what to do; no call dispatched; the conversation may dispatch again."""
    c = answered(name)
    assert [t.operation_id for t in c.of(CommittedTurn)] == [None]
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        DispatchState.CANCELLED,
        ReasonCode.OUTPUT_LIMIT_REACHED,
        f"{CUT_CALLS[name]}; raise maxOutputTokens",
        True,
    )
    assert c.of(ToolCallReady) == []
    c.attempt("op-1")
    again = c.of(DispatchDecision)[-1]
    assert (again.accepted, again.reason) == (False, ReasonCode.CAS_STATE_MISMATCH)


WITHDRAWN = {
    "anthropic_refusal.sse": "stopped with refusal, a refusal",
    "openai_chat_content_filter.sse": "stopped with content_filter, a refusal",
    "openai_responses_content_filter.sse": "stopped with content_filter, a refusal",
    "gemini_safety_after_text.sse": "stopped with SAFETY, a refusal",
}
"""Answers the provider stopped for a refusal after some text: Anthropic's streaming classifiers
(`stop_reason: "refusal"`, after which the context must be reset or the refusals go on:
https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals),
OpenAI's content filter (Chat's `finish_reason: "content_filter"`, Responses' `response.incomplete`
with `incomplete_details.reason: "content_filter"`: provider-formats §2b, §2c) and Gemini's
`finishReason: SAFETY` on a last chunk without content (provider-formats §2d: "streamed content is
empty if blocked")."""


@pytest.mark.parametrize("name", sorted(WITHDRAWN))
def test_an_answer_stopped_for_a_refusal_ends_the_operation_and_none_of_it_is_history(name: str) -> None:
    """Before, its partial text ("I can") was committed, and with it every later request of the
    conversation carried what the provider refuses; a new generation of the same bytes would meet the
    same refusal, so the operation ends CANCELLED, as the worker's HTTP refusals end it."""
    c = answered(name)
    assert [t.operation_id for t in c.of(CommittedTurn)] == [None]
    op = c.state.operations["op-1"]
    assert (op.state, op.attempt_terminated) == (DispatchState.CANCELLED, True)
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.state, decision.reason, decision.detail) == (
        DispatchState.CANCELLED,
        ReasonCode.PROVIDER_REFUSED,
        WITHDRAWN[name],
    )
    assert [r.reason for r in c.of(PreviewRetracted)] == [ReasonCode.PROVIDER_REFUSED]
    c.user("something else")
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-2", adapter=REQUESTS[api_of(name)][0],
            provider=REQUESTS[api_of(name)][1], model_revision=REQUESTS[api_of(name)][2], tools=(),
            max_output_tokens=64,
        )
    )  # fmt: skip
    assert c.state.operations["op-2"].state == DispatchState.PREPARED


def test_a_gemini_prompt_blocked_before_any_candidate_ends_the_operation_as_a_refusal() -> None:
    """`promptFeedback.blockReason` with no candidate (provider-formats §2d): before, a complete empty
    answer (COMMITTED EMPTY_RESPONSE); the same request is blocked again, so it is a refusal."""
    blocked = b'data: {"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r-blocked"}\n\n'
    c = streamed("gemini", blocked)
    decision = c.of(DispatchDecision)[-1]
    assert (decision.state, decision.reason, decision.detail) == (
        DispatchState.CANCELLED,
        ReasonCode.PROVIDER_REFUSED,
        "stopped with SAFETY, a refusal",
    )
    assert (c.of(CommittedTurn)[-1].operation_id, c.of(PreviewRetracted)) == (None, [])


CUT = {
    "anthropic_max_tokens_text.sse": "The harbour wakes slowly: fishing boats nose out past the",
    "anthropic_stop_sequence.sse": "1. Preheat the oven.\n2. Mix the flour and salt.\n",
    "gemini_max_tokens_text.sse": "Rain taps the window,\npuddles gather the gray",
    "openai_chat_length_text.sse": "The tide rolls in, the gulls",
    "openai_responses_max_output_tokens_text.sse": "The tide rolls in, the gulls wheel over the",
    "openai_responses_annotations.sse": (
        "Lisbon is sunny today, around 24 °C, per [IPMA](https://www.ipma.pt/en/otempo/prev.localidade.hora/)."
    ),
}
"""Text answers stopped by the output limit or a stop sequence, and one citing a URL. The limit:
Anthropic's `stop_reason: "max_tokens"` after the block's stop (§2a), Gemini's `finishReason:
MAX_TOKENS` on the last chunk (§2d), Chat's `finish_reason: "length"` (§2b) and Responses'
`response.incomplete` with `max_output_tokens` after the message item is done with status
`incomplete` (§2c; `ResponseOutputMessage.status` in openai 3.57.0). Anthropic's `stop_sequence` names
the sequence, which the text leaves out (§1c's stop reasons). A Responses `output_text` with a
`url_citation` annotation (`response.output_text.annotation.added`, the annotation again on the part's
done: `openai/types/responses/response_output_text.py`, 3.57.0) is text like any other.

Text has no syntax a cut can break: the assembler refuses at the limit only a tool call that is open,
unparsable or last, and an answer with nothing visible (`_output_limit`), so each commits its text whole,
and the next request returns it as the assistant's text, nothing of the annotations or stop sequence
added."""
ASSISTANT_TEXT = {
    "anthropic-messages": lambda text: {"role": "assistant", "content": [{"type": "text", "text": text}]},
    "openai-chat": lambda text: {"role": "assistant", "content": [{"type": "text", "text": text}]},
    "openai-responses": lambda text: {"type": "message", "role": "assistant", "content": text},
    "gemini": lambda text: {"role": "model", "parts": [{"text": text}]},
}
"""The next request's entry of an assistant's text, per API."""


@pytest.mark.parametrize("name", sorted(CUT))
def test_a_text_answer_cut_by_the_limit_or_a_stop_sequence_commits_whole_and_is_sent_back(name: str) -> None:
    c = answered(name)
    assert (c.of(Quarantined), c.of(Rejected), c.of(PreviewRetracted)) == ([], [], [])
    (turn,) = [t for t in c.of(CommittedTurn) if t.operation_id == "op-1"]
    assert [(b.kind, b.text, b.signature) for b in turn.blocks] == [("text", CUT[name], None)]
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.state, decision.reason, decision.detail) == (
        DispatchState.COMMITTED,
        *COMMIT_NOTES[name],
    )
    api = api_of(name)
    assert next_request(c, api)[HISTORY[api]][1] == ASSISTANT_TEXT[api](CUT[name])


def _cut_at(stop: str) -> tuple[ReasonCode, str]:
    return (
        ReasonCode.OUTPUT_LIMIT_REACHED,
        f"the answer was cut at the output limit ({stop}) and is committed as far as it went",
    )


COMMIT_NOTES: dict[str, tuple[ReasonCode | None, str]] = {
    "anthropic_max_tokens_text.sse": _cut_at("max_tokens"),
    "anthropic_stop_sequence.sse": (None, ""),
    "gemini_max_tokens_text.sse": _cut_at("MAX_TOKENS"),
    "openai_chat_length_text.sse": _cut_at("length"),
    "openai_responses_max_output_tokens_text.sse": _cut_at("max_output_tokens"),
    "openai_responses_annotations.sse": (None, ""),
}
"""What the COMMITTED decision tells the client of each answer's stop: a cut at the output limit is named,
as the provider's own `finish_reason: "length"` is (a client deciding whether to ask for more needs it);
a stop sequence or a normal end says nothing."""


HISTORY = {
    "anthropic-messages": "messages",
    "openai-chat": "messages",
    "openai-responses": "input",
    "gemini": "contents",
    "bedrock-converse": "messages",
}
"""The key of a request's history, per API."""


CUT_WHILE_REASONING = {
    "anthropic_max_tokens_thinking.sse": "limit reached at max_tokens while the model was still reasoning",
    "gemini_max_tokens_thought.sse": "limit reached at MAX_TOKENS while the model was still reasoning",
}
"""Answers the output limit cut before anything visible: thinking only. A model that thinks spends its
output tokens on the thinking first, so a limit too small for it ends the answer inside its reasoning:
Anthropic's `{"content": [{"type": "thinking", ...}], "stop_reason": "max_tokens"}` with thinking
tokens all but the whole budget (https://github.com/Izzetee/PiPiMink/issues/45, a response body of
Claude on Azure AI Foundry; streamed in the events of provider-formats §2a, the thinking block started
as in `anthropic_thinking.sse`, with no `signature_delta` as that body shows none: a signed one is
refused alike, `test_assembler_guards.py`), and Gemini 2.5's last chunk
`{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}` with `thoughtsTokenCount` and no part
(https://github.com/google/adk-python/issues/1357, a raw response; "Gemini models that support
thinking can reach the max token limit during thinking, resulting in a response with no output text":
https://github.com/stanford-crfm/helm/pull/3804) after a `thought: true` part, as the thoughts of
`gemini_text_thought.sse` (a real capture) come when they are asked for (provider-formats §2d).
Neither can be continued: "thinking blocks cannot be partially recovered" (§2a's error recovery)."""
HELLO = {
    "anthropic-messages": {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    "gemini": {"role": "user", "parts": [{"text": "hello"}]},
    "openai-chat": {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    "openai-responses": {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hello"}],
    },
    "bedrock-converse": {"role": "user", "content": [{"text": "hello"}]},
}
"""The next request's entry of the conversation's one user turn, per API."""


@pytest.mark.parametrize("name", sorted(CUT_WHILE_REASONING))
def test_an_answer_cut_while_still_reasoning_commits_nothing_and_is_asked_again(name: str) -> None:
    """Before, its thinking committed alone: a turn the next request rendered to nothing (the Anthropic
    adapter leaves out unsigned thinking, the Gemini adapter every thought), so the user's next turn
    merged into the previous one, and a signed one went out as an assistant message of thinking alone.
    It is OUTPUT_LIMIT_REACHED now, as a call the limit cut is: CANCELLED (the same request with the same
    budget would be cut again, so no new generation), nothing committed, no preview to retract; the
    conversation's next dispatch sends the history without it."""
    c = answered(name)
    assert (c.of(Quarantined), c.of(Rejected), c.of(PreviewRetracted)) == ([], [], [])
    assert [t.operation_id for t in c.of(CommittedTurn)] == [None]
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        DispatchState.CANCELLED,
        ReasonCode.OUTPUT_LIMIT_REACHED,
        f"{CUT_WHILE_REASONING[name]}: nothing visible to commit; raise maxOutputTokens",
        True,
    )
    c.attempt("op-1")
    again = c.of(DispatchDecision)[-1]
    assert (again.accepted, again.reason) == (False, ReasonCode.CAS_STATE_MISMATCH)
    api = api_of(name)
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-2", adapter=REQUESTS[api][0], provider=REQUESTS[api][1],
            model_revision=REQUESTS[api][2], tools=(), max_output_tokens=4096,
        )
    )  # fmt: skip
    (manifest,) = [m.manifest for m in c.of(ManifestIssued) if m.manifest.operation_id == "op-2"]
    assert orjson.loads(manifest.request_body)[HISTORY[api]] == [HELLO[api]]


def test_a_gemini_answer_cut_by_the_limit_with_its_thoughts_hidden_is_refused_alike() -> None:
    """The same cut when the request does not ask for thoughts: no part at all, only the stop and the
    thoughts' token count (the raw response of https://github.com/google/adk-python/issues/1357).
    Before, a complete empty answer (COMMITTED EMPTY_RESPONSE, never asked again); whether the thoughts
    were streamed no longer decides the outcome."""
    chunk = {
        "candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS", "index": 0}],
        "usageMetadata": {"promptTokenCount": 1706, "thoughtsTokenCount": 2999, "totalTokenCount": 4705},
        "modelVersion": "gemini-2.5-pro",
        "responseId": "Dj9LaPCjJsCvgLUPgeGuqAU",
    }
    c = streamed("gemini", b"data: " + orjson.dumps(chunk) + b"\n\n")
    decision = c.of(DispatchDecision)[-1]
    assert (decision.state, decision.reason, decision.detail) == (
        DispatchState.CANCELLED,
        ReasonCode.OUTPUT_LIMIT_REACHED,
        "limit reached at MAX_TOKENS while the model was still reasoning: nothing visible to commit; "
        "raise maxOutputTokens",
    )
    assert (c.of(CommittedTurn)[-1].operation_id, c.of(PreviewRetracted)) == (None, [])


def test_a_gemini_answer_with_a_part_the_graph_has_no_block_for_is_refused_not_committed_without_it() -> None:
    """An image (`inlineData`) or executed code (`executableCode`, `codeExecutionResult`) in an answer
    (https://ai.google.dev/api/caching#Part): the parser counted such a part unknown and the answer
    committed without it, so every later request left it out. It is a block of its kind now, which the
    assembler refuses, as an Anthropic block type the graph does not model is refused."""
    parts = [{"text": "Here is the plot:"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]
    chunk = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}
    c = streamed("gemini", b"data: " + orjson.dumps({**chunk, "responseId": "r-img"}) + b"\n\n")
    decision = c.of(DispatchDecision)[-1]
    assert (decision.state, decision.reason, decision.detail) == (
        DispatchState.UNKNOWN,
        ReasonCode.UNKNOWN_KIND,
        "block 1 has kind 'inlineData'",
    )
    assert c.of(CommittedTurn)[-1].operation_id is None


@pytest.mark.parametrize(
    ("stop", "raw", "note"),
    [
        (StopReason.MAX_TOKENS, None, (ReasonCode.OUTPUT_LIMIT_REACHED, _cut_at("max_tokens")[1])),
        (StopReason.MAX_TOKENS, "model_context_window_exceeded", _cut_at("model_context_window_exceeded")),
        (StopReason.END_TURN, "end_turn", (None, "")),
        (StopReason.TOOL_USE, "tool_use", (None, "")),
        (StopReason.STOP_SEQUENCE, None, (None, "")),
    ],
)
def test_a_commit_names_the_output_limit_and_the_stop_the_provider_gave(
    stop: StopReason, raw: str | None, note: tuple[ReasonCode | None, str]
) -> None:
    """The provider's own word for the stop when it gave one, else the normalized one."""
    answer = Complete((CandidateBlock(0, "text", "cut"),), stop, "resp-1", 1, raw_stop_reason=raw)
    assert commit_note(answer) == note


def events_of(name: str) -> list[str]:
    """The SSE events of the recorded stream `name`, each as written."""
    return [event for event in fixture(name).decode().split("\n\n") if event.strip()]


def sse(events: list[str]) -> bytes:
    return "".join(f"{event}\n\n" for event in events).encode()


def anthropic_thinking_only() -> bytes:
    """`anthropic_thinking.sse` without its text block: signed thinking, then `end_turn`."""
    return sse([event for event in events_of("anthropic_thinking.sse") if '"index":1' not in event])


def gemini_thought_only(signed: bool) -> bytes:
    """`gemini_text_thought.sse`'s thought chunk and its last chunk (`STOP`), the text chunks between
    left out; the last chunk's empty text part with its `thoughtSignature` kept, or no part at all."""
    first, *_, last = events_of("gemini_text_thought.sse")
    if not signed:
        chunk = orjson.loads(last.removeprefix("data: "))
        del chunk["candidates"][0]["content"]["parts"]
        last = "data: " + orjson.dumps(chunk).decode()
    return sse([first, last])


def responses_reasoning_only() -> bytes:
    """`openai_responses_tools.sse`'s reasoning item (its events up to `response.output_item.done`), then
    `response.completed` with that item alone in its output: the calls after it left out."""
    events = events_of("openai_responses_tools.sse")
    done = next(i for i, event in enumerate(events) if "response.output_item.done" in event)
    name, data = events[-1].split("\ndata: ")
    completed = orjson.loads(data)
    completed["response"]["output"] = completed["response"]["output"][:1]
    return sse([*events[: done + 1], f"{name}\ndata: {orjson.dumps(completed).decode()}"])


def chat_blank_text() -> bytes:
    """`openai_chat_text.sse` with its text "\\n\\n": its first text chunk's content, the others left out."""
    events: list[str] = []
    texts = 0
    for event in events_of("openai_chat_text.sse"):
        chunk = orjson.loads(event.removeprefix("data: ")) if event.startswith("data: {") else None
        content = chunk["choices"][0]["delta"].get("content") if chunk and chunk["choices"] else None
        if content:
            texts += 1
            if texts > 1:
                continue
            chunk["choices"][0]["delta"]["content"] = "\n\n"  # type: ignore[index]
            event = "data: " + orjson.dumps(chunk).decode()
        events.append(event)
    return sse(events)


def bedrock_reasoning_only() -> bytes:
    """`bedrock_reasoning_tool_use.eventstream`'s reasoning (text and signature), its text and call left
    out, stopped with `end_turn`, and its `metadata`."""
    out = b""
    for message in EventStreamDecoder().feed(fixture("bedrock_reasoning_tool_use.eventstream")):
        payload = orjson.loads(message.payload)
        if payload.get("contentBlockIndex", 0) != 0:
            continue
        if "stopReason" in payload:
            payload["stopReason"] = "end_turn"
        out += encode_message(message.headers, orjson.dumps(payload))
    return out


ONLY_THINKING = "the provider's complete answer holds only thinking: nothing visible enters the history"
NOTHING_VISIBLE_ANSWERS = {
    "anthropic signed thinking": ("anthropic-messages", anthropic_thinking_only, ONLY_THINKING),
    "gemini thought, its signature on an empty text": (
        "gemini",
        lambda: gemini_thought_only(signed=True),
        "the provider's complete answer holds only thinking and blank text: "
        "nothing visible enters the history",
    ),
    "gemini thought": ("gemini", lambda: gemini_thought_only(signed=False), ONLY_THINKING),
    "responses reasoning item": ("openai-responses", responses_reasoning_only, ONLY_THINKING),
    "bedrock signed reasoning": ("bedrock-converse", bedrock_reasoning_only, ONLY_THINKING),
    "chat blank text": (
        "openai-chat",
        chat_blank_text,
        "the provider's complete answer holds only blank text: nothing visible enters the history",
    ),
}
"""Complete answers with nothing visible, each API's own shape of them, made from its recorded streams
(the visible part left out): Claude's thinking alone at `end_turn` ("Claude models intermittently return
a response containing only thinking blocks with no text or tool_use content":
https://github.com/boldsoftware/shelley/pull/177; the same on Bedrock), Gemini's thought at `STOP` (a
thinking-only normal stop: https://github.com/router-for-me/CLIProxyAPI/pull/5858), with or without
the last chunk's signature on an empty text part, a Responses reasoning item alone in a completed
response, and Chat's blank text (Chat streams no reasoning)."""


@pytest.mark.parametrize("name", list(NOTHING_VISIBLE_ANSWERS))
def test_a_complete_answer_with_nothing_visible_is_no_turn_and_the_next_request_sends_none(name: str) -> None:
    """Before, it committed: a turn each adapter rendered to nothing (unsigned thinking, Gemini's thoughts,
    a Responses reasoning item with nothing after it, all left out: the user's turns around it merged, or
    two user messages in a row) or to an assistant message with nothing in it (signed thinking alone, an
    empty text part carrying a signature, blank text). Now COMMITTED EMPTY_RESPONSE with the detail
    naming what it held, nothing appended, the blank text's previews retracted, and the next request
    sends the history without it."""
    api, stream, detail = NOTHING_VISIBLE_ANSWERS[name]
    c = streamed(api, stream())
    assert (c.of(Quarantined), c.of(Rejected)) == ([], [])
    assert [t.operation_id for t in c.of(CommittedTurn)] == [None]
    decision = [d for d in c.of(DispatchDecision) if d.operation_id == "op-1"][-1]
    assert (decision.state, decision.reason, decision.detail, decision.attempt_terminated) == (
        DispatchState.COMMITTED,
        ReasonCode.EMPTY_RESPONSE,
        detail,
        True,
    )
    blank_text = ["chat blank text"]
    assert [r.reason for r in c.of(PreviewRetracted)] == [ReasonCode.EMPTY_RESPONSE] * (name in blank_text)
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-2", adapter=REQUESTS[api][0], provider=REQUESTS[api][1],
            model_revision=REQUESTS[api][2], tools=(), max_output_tokens=4096,
        )
    )  # fmt: skip
    (manifest,) = [m.manifest for m in c.of(ManifestIssued) if m.manifest.operation_id == "op-2"]
    assert orjson.loads(manifest.request_body)[HISTORY[api]] == [HELLO[api]]
