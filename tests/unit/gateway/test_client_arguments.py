"""A caller's mistake in an argument of the gateway client is an `EventArgumentError` naming the
argument, what it must be and what it was, before anything is built or sent: never a pydantic
ValidationError, an AttributeError, a value silently replaced or coerced, nor an event the ledger
would take for something else."""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from turnledger.codec import decode
from turnledger.errors import GatewayError, TurnledgerError
from turnledger.gateway import client as client_module
from turnledger.gateway.client import EventFactory, GatewayClient, ToolResult, WorkerEvents
from turnledger.gateway.event_arguments import AVRO_LONG_MAX, EventArgumentError
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.model.events import (
    CancelRequested,
    DispatchAttempt,
    DispatchRequested,
    DispatchSent,
    ExpiryClaimed,
    IngressEvent,
    StreamDeltas,
    StreamEnded,
    StreamOutcome,
    SubmittedBlock,
    TurnSubmitted,
)
from turnledger.model.graph import ResultStatus
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition

Call = Callable[[GatewayClient], Awaitable[Any]]
STAMP: dict[str, Any] = {"conversation_id": "conv-1", "event_id": "ev-1", "occurred_at_ms": 1234}
NON_BLANK = "must be a string that is not empty or blank"
REVISION = f"must be an integer from 0 to {AVRO_LONG_MAX}"


class _Producer:
    """Stands in for the AIOKafkaProducer: records what was sent, acknowledges at once."""

    def __init__(self, **options: Any) -> None:
        self.sent: list[bytes] = []

    async def send(self, topic: str, *, value: bytes, key: bytes) -> Any:
        self.sent.append(value)

        async def ack() -> None:
            return None

        return ack()


@pytest.fixture(autouse=True)
def no_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "AIOKafkaProducer", _Producer)


@pytest.fixture
def fixed_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every event built gets event id `ev-1` and time 1234 ms."""
    monkeypatch.setattr(client_module, "new_event_id", lambda: "ev-1")
    monkeypatch.setattr(client_module, "now_ms", lambda: 1234)


def _client() -> tuple[GatewayClient, _Producer]:
    client = GatewayClient("127.0.0.1:1")
    return client, client._producer


async def _refused(call: Call) -> str:
    """The message of the refusal `call` meets, having checked that it is typed and sent nothing."""
    client, producer = _client()
    with pytest.raises(EventArgumentError) as caught:
        await call(client)
    assert isinstance(caught.value, GatewayError) and isinstance(caught.value, TurnledgerError)
    assert isinstance(caught.value, ValueError)
    assert producer.sent == []
    return str(caught.value)


async def _sent(call: Call) -> list[Any]:
    client, producer = _client()
    await call(client)
    return [decode(value) for value in producer.sent]


def _user(text: str = "hi", **kwargs: Any) -> Call:
    return lambda client: client.submit_user_turn("conv-1", text, **kwargs)


USER_TURN_REFUSALS: list[tuple[Call, str]] = [
    (lambda c: c.submit_user_turn("", "hi"), f"conversation_id {NON_BLANK}, not ''"),
    (lambda c: c.submit_user_turn("  ", "hi"), f"conversation_id {NON_BLANK}, not '  '"),
    (lambda c: c.submit_user_turn(5, "hi"), f"conversation_id {NON_BLANK}, not 5"),  # type: ignore[arg-type]
    (_user(""), f"text {NON_BLANK}, not ''"),
    (_user(" \n\t"), f"text {NON_BLANK}, not ' \\n\\t'"),
    (_user(5), f"text {NON_BLANK}, not 5"),  # type: ignore[arg-type]
    (_user(None), f"text {NON_BLANK}, not None"),  # type: ignore[arg-type]
    (_user(["a"]), f"text {NON_BLANK}, not ['a']"),  # type: ignore[arg-type]
    (_user(" " * 38), f"text {NON_BLANK}, not '{' ' * 38}'"),  # a repr of 40 characters, shown whole
    (_user(" " * 39), f"text {NON_BLANK}, not '{' ' * 38}…"),  # of 41, cut to 39 and an ellipsis
    (_user(turn_id=""), f"turn_id {NON_BLANK}, not ''"),
    (_user(turn_id="  "), f"turn_id {NON_BLANK}, not '  '"),
    (_user(turn_id=5), f"turn_id {NON_BLANK}, not 5"),
    (_user(block_id=""), f"block_id {NON_BLANK}, not ''"),
    (_user(expected_revision=-1), f"expected_revision {REVISION}, not -1"),
    (_user(expected_revision="1"), f"expected_revision {REVISION}, not '1'"),
    (_user(expected_revision=1.0), f"expected_revision {REVISION}, not 1.0"),
    (_user(expected_revision=True), f"expected_revision {REVISION}, not True"),
    (_user(expected_revision=2**63), f"expected_revision {REVISION}, not {2**63}"),
]


@pytest.mark.parametrize(("call", "problem"), USER_TURN_REFUSALS)
async def test_a_user_turn_with_a_bad_argument_is_refused_naming_it(call: Call, problem: str) -> None:
    """Before: an empty turn or block id was replaced by a fresh one, "1", 1.0 and True taken for
    revision 1, an empty conversation id or text committed, other types a pydantic ValidationError."""
    assert await _refused(call) == f"user_turn: nothing sent: {problem}"


async def test_every_bad_argument_of_a_call_is_named_in_one_line() -> None:
    message = await _refused(lambda c: c.submit_user_turn("", "", turn_id="", expected_revision=-2))
    assert message == (
        f"user_turn: nothing sent: conversation_id {NON_BLANK}, not ''; text {NON_BLANK}, not ''; "
        f"turn_id {NON_BLANK}, not ''; expected_revision {REVISION}, not -2"
    )


async def test_a_user_turn_at_the_edges_of_its_arguments_is_sent(fixed_stamp: None) -> None:
    """Revision 0 and the largest Avro long; text with blanks around it is kept as it is."""
    for revision in (0, AVRO_LONG_MAX):
        block = SubmittedBlock(id="u/b0", role="user", kind="text", trust_label="user", text=" hi ")
        expected = TurnSubmitted(**STAMP, turn_id="u", blocks=(block,), expected_revision=revision)
        assert await _sent(_user(" hi ", turn_id="u", expected_revision=revision)) == [expected]


def _result(**fields: Any) -> ToolResult:
    return ToolResult(
        **{"call_id": "c1", "tool_name": "t", "argument_digest": "d", "generation": 1, "text": "ok", **fields}
    )


def _results(*results: Any, **kwargs: Any) -> Call:
    return lambda client: client.submit_tool_results("conv-1", list(results), **kwargs)


RESULTS = "must be a non-empty list or tuple of ToolResult"
GENERATION = f"must be an integer from 1 to {AVRO_LONG_MAX}"
TERMINAL = "must be one of cancel, error, success"

TOOL_RESULTS_REFUSALS: list[tuple[Call, str]] = [
    (lambda c: c.submit_tool_results("", [_result()]), f"conversation_id {NON_BLANK}, not ''"),
    (_results(), f"results {RESULTS}, not []"),
    (
        lambda c: c.submit_tool_results("conv-1", _result()),
        f"results {RESULTS}, not ToolResult(call_id='c1', tool_name='t',…",
    ),  # type: ignore[arg-type]
    (
        lambda c: c.submit_tool_results("conv-1", {"call_id": "c1"}),
        f"results {RESULTS}, not {{'call_id': 'c1'}}",
    ),  # type: ignore[arg-type]
    (_results({"call_id": "c1"}), "results[0] must be a ToolResult, not dict {'call_id': 'c1'}"),
    (
        _results(_result(), _result(text="again"), _result(call_id="c2"), _result(text="thrice")),
        "results[1].call_id 'c1' is also results[0]'s; results[3].call_id 'c1' is also results[0]'s",
    ),
    (_results(_result(call_id="")), f"results[0].call_id {NON_BLANK}, not ''"),
    (_results(_result(tool_name=" ")), f"results[0].tool_name {NON_BLANK}, not ' '"),
    (_results(_result(argument_digest="")), f"results[0].argument_digest {NON_BLANK}, not ''"),
    (_results(_result(generation=0)), f"results[0].generation {GENERATION}, not 0"),
    (_results(_result(generation="1")), f"results[0].generation {GENERATION}, not '1'"),
    (_results(_result(generation=True)), f"results[0].generation {GENERATION}, not True"),
    (_results(_result(generation=2**64)), f"results[0].generation {GENERATION}, not {2**64}"),
    (_results(_result(text=None)), "results[0].text must be a string, not None"),
    (_results(_result(text={"a": 1})), "results[0].text must be a string, not {'a': 1}"),
    (
        _results(_result(status=ResultStatus.PENDING)),
        f"results[0].status {TERMINAL}, not <ResultStatus.PENDING: 'pending'>",
    ),
    (_results(_result(status="bogus")), f"results[0].status {TERMINAL}, not 'bogus'"),
    (_results(_result(), turn_id=""), f"turn_id {NON_BLANK}, not ''"),
]


@pytest.mark.parametrize(("call", "problem"), TOOL_RESULTS_REFUSALS)
async def test_tool_results_with_a_bad_argument_are_refused_naming_it(call: Call, problem: str) -> None:
    """Before: no results, a result without a call id, tool name or text, a generation of 0 or a
    status not terminal were sent for the ledger to reject (INVALID_EVENT, MALFORMED_BLOCK, ...), a
    call answered twice in one turn too (DUPLICATE_BLOCK_ID); an empty turn id was replaced by a
    fresh one, "1" and True taken for generation 1; a dict or one result alone raised an
    AttributeError or TypeError, other types a pydantic ValidationError."""
    assert await _refused(call) == f"tool_results: nothing sent: {problem}"


async def test_tool_results_are_sent_with_a_status_given_as_its_text(fixed_stamp: None) -> None:
    """ "error" is the status ERROR; a result's text may be empty (a tool that printed nothing)."""
    [event] = await _sent(_results(_result(status="error", text=""), turn_id="tr"))
    assert event == EventFactory().tool_results(
        "conv-1", [_result(status=ResultStatus.ERROR, text="")], turn_id="tr"
    )
    assert event.blocks[0].result_status == "error"


DISPATCH: dict[str, Any] = {
    "adapter": "anthropic-messages@1",
    "provider": "anthropic",
    "model_revision": "anthropic/claude-sonnet-4@2025-05-14",
    "max_output_tokens": 100,
}


def _dispatch(**changes: Any) -> Call:
    return lambda client: client.request_dispatch("conv-1", **{**DISPATCH, **changes})


TOKENS = f"must be an integer from 1 to {AVRO_LONG_MAX}"
SETTLE = (
    f"must be an integer from 1 to {AVRO_LONG_MAX - 1234} (the request's time, 1234 ms, plus it is its "
    "deadline, an Avro long)"
)
TOOLS = "must be a list or tuple of ToolDefinition"
JSON = "must be JSON (a dict with string keys, a list, a string, a finite number, a bool or None)"
FINITE = "must be a finite number (JSON has no NaN or infinity)"

THINKING_1024 = {"thinking": {"type": "enabled", "budget_tokens": 1024}}


def _nested(levels: int) -> dict[str, Any]:
    """A dict nesting `levels` dicts deep (itself the first)."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


DEEP = "must nest dicts and lists at most 32 levels deep"
STREAMED = (
    "must be True or left out: the worker streams every answer (stream=False builds a request without the "
    "stream policy)"
)

DISPATCH_REFUSALS: list[tuple[Call, str]] = [
    (lambda c: c.request_dispatch(" ", **DISPATCH), f"conversation_id {NON_BLANK}, not ' '"),
    (_dispatch(adapter=""), f"adapter {NON_BLANK}, not ''"),
    (_dispatch(adapter=5), f"adapter {NON_BLANK}, not 5"),
    (_dispatch(provider=""), f"provider {NON_BLANK}, not ''"),
    (_dispatch(model_revision=" "), f"model_revision {NON_BLANK}, not ' '"),
    (_dispatch(max_output_tokens=0), f"max_output_tokens {TOKENS}, not 0"),
    (_dispatch(max_output_tokens=-5), f"max_output_tokens {TOKENS}, not -5"),
    (_dispatch(max_output_tokens="100"), f"max_output_tokens {TOKENS}, not '100'"),
    (_dispatch(max_output_tokens=100.0), f"max_output_tokens {TOKENS}, not 100.0"),
    (_dispatch(max_output_tokens=True), f"max_output_tokens {TOKENS}, not True"),
    (_dispatch(max_output_tokens=None), f"max_output_tokens {TOKENS}, not None"),
    (_dispatch(max_output_tokens=2**63), f"max_output_tokens {TOKENS}, not {2**63}"),
    (_dispatch(tools=[{"name": "t"}]), "tools[0] must be a ToolDefinition, not dict {'name': 't'}"),
    (
        _dispatch(tools=ToolDefinition(name="t")),
        f"tools {TOOLS}, not ToolDefinition(name='t', description=''…",
    ),
    (_dispatch(tools="abc"), f"tools {TOOLS}, not 'abc'"),
    (_dispatch(tools=[ToolDefinition(name="")]), f"tools[0].name {NON_BLANK}, not ''"),
    (
        _dispatch(tools=[ToolDefinition(name="t"), ToolDefinition(name="u"), ToolDefinition(name="t")]),
        "tools[2].name 't' is also tools[0]'s",
    ),
    (
        _dispatch(tools=[{"name": "t"}, ToolDefinition(name="")]),
        f"tools[0] must be a ToolDefinition, not dict {{'name': 't'}}; tools[1].name {NON_BLANK}, not ''",
    ),
    (
        _dispatch(
            tools=[
                ToolDefinition(name=""),
                ToolDefinition(name=""),
                ToolDefinition(name="t", input_schema={"enum": {"a"}}),
            ]
        ),
        f"tools[0].name {NON_BLANK}, not ''; tools[1].name {NON_BLANK}, not ''; "
        f"tools[2].input_schema['enum'] {JSON}, not set {{'a'}}",
    ),  # a name refused is not also called a duplicate, and the tools after it are checked
    (
        _dispatch(tools=[ToolDefinition(name="t", input_schema={"enum": {"a"}})]),
        f"tools[0].input_schema['enum'] {JSON}, not set {{'a'}}",
    ),
    (_dispatch(policy={"stop_sequences": {"a"}}), f"policy['stop_sequences'] {JSON}, not set {{'a'}}"),
    (_dispatch(policy={"temperature": math.nan}), f"policy['temperature'] {FINITE}, not nan"),
    (_dispatch(policy={"x": [1, {"y": -math.inf}]}), f"policy['x'][1]['y'] {FINITE}, not -inf"),
    (_dispatch(policy={1: 2}), "policy must have string keys, not 1"),
    (
        _dispatch(policy={"seed": 2**64}),
        f"policy['seed'] must be an integer from {-(2**63)} to {2**64 - 1}, not {2**64}",
    ),
    (_dispatch(policy=[("temperature", 1)]), "policy must be a dict, not [('temperature', 1)]"),
    (_dispatch(policy={"stream": False}), f"policy['stream'] {STREAMED}, not False"),
    (_dispatch(policy={"stream": "yes", "temperature": 1}), f"policy['stream'] {STREAMED}, not 'yes'"),
    (
        _dispatch(adapter="openai-responses@4", provider="openai", policy={"stream": None}),
        f"policy['stream'] {STREAMED}, not None",
    ),
    (_dispatch(policy=_nested(33)), f"policy {DEEP}, not 33"),
    (_dispatch(policy=_nested(5000)), f"policy {DEEP}, not 5000"),  # was a RecursionError
    (_dispatch(policy={"x": [_nested(31)]}), f"policy {DEEP}, not 33"),
    (
        _dispatch(tools=[ToolDefinition(name="t", input_schema=_nested(33))]),
        f"tools[0].input_schema {DEEP}, not 33",
    ),
    (
        _dispatch(adapter="anthropic-messages@3", policy=THINKING_1024),
        "policy thinking.budget_tokens must be below maxOutputTokens (100), not 1024 "
        "(adapter anthropic-messages@3)",
    ),
    (_dispatch(operation_id=""), f"operation_id {NON_BLANK}, not ''"),
    (_dispatch(operation_id=5), f"operation_id {NON_BLANK}, not 5"),
    (_dispatch(stream="no"), "stream must be True or False, not 'no'"),
    (_dispatch(settle_within_ms=0), f"settle_within_ms {SETTLE}, not 0"),
    (_dispatch(settle_within_ms=-1), f"settle_within_ms {SETTLE}, not -1"),
    (_dispatch(settle_within_ms="5"), f"settle_within_ms {SETTLE}, not '5'"),
    (_dispatch(settle_within_ms=AVRO_LONG_MAX), f"settle_within_ms {SETTLE}, not {AVRO_LONG_MAX}"),
]


@pytest.mark.parametrize(("call", "problem"), DISPATCH_REFUSALS)
async def test_a_dispatch_with_a_bad_argument_is_refused_naming_it(
    fixed_stamp: None, call: Call, problem: str
) -> None:
    """Before: a max_output_tokens of 0 or less, a settle_within_ms of 0 or less, an empty provider
    and tools without a name or with one name twice were sent, and the ledger prepared a manifest
    with them; an empty operation id was replaced by a fresh one; "100", 100.0 and True taken for
    an integer, "no" for stream=True; NaN and infinities in a policy were sent as null; a deadline
    past the Avro long made the processor fail to encode its decision; a dict for a tool was taken
    as one; a set in a policy or schema, or an integer past the Avro long, failed in the codec
    without naming the argument; other types raised a ValidationError, AttributeError or TypeError."""
    assert await _refused(call) == f"request_dispatch: nothing sent: {problem}"


@pytest.mark.parametrize(
    ("adapter", "max_output_tokens"),
    [("anthropic-messages@3", 1025), ("anthropic-messages@2", 100), ("anthropic-messages@9", 100)],
)
async def test_a_thinking_policy_is_sent_when_its_adapter_takes_it_or_is_the_ledgers_to_judge(
    fixed_stamp: None, adapter: str, max_output_tokens: int
) -> None:
    """Below the output budget; sent to a version that does not send `thinking`; or to an adapter the
    registry does not know (the ledger refuses it, UNKNOWN_ADAPTER)."""
    call = _dispatch(adapter=adapter, max_output_tokens=max_output_tokens, policy=THINKING_1024, stream=False)
    [event] = await _sent(call)
    assert (event.adapter, event.max_output_tokens, event.policy) == (
        adapter,
        max_output_tokens,
        THINKING_1024,
    )


async def test_past_five_problems_the_message_counts_the_rest_and_the_error_keeps_them_all() -> None:
    client, producer = _client()
    call = _dispatch(
        adapter="", provider="", model_revision="", max_output_tokens=0, operation_id="", stream="no"
    )
    with pytest.raises(EventArgumentError) as caught:
        await call(client)
    refused = caught.value
    assert str(refused) == (
        f"request_dispatch: nothing sent: adapter {NON_BLANK}, not ''; provider {NON_BLANK}, not ''; "
        f"model_revision {NON_BLANK}, not ''; max_output_tokens {TOKENS}, not 0; "
        f"operation_id {NON_BLANK}, not ''; and 1 more"
    )
    assert refused.method == "request_dispatch"
    assert refused.problems[5:] == ("stream must be True or False, not 'no'",)
    assert producer.sent == []


async def test_a_dispatch_at_the_edges_of_its_arguments_is_sent(fixed_stamp: None) -> None:
    """One output token, the longest deadline an Avro long holds, JSON of every kind (a tuple is an
    array), a policy and a tool schema nesting 32 levels (the most), and no stream policy (so a `stream`
    key of the caller's own is taken)."""
    policy = {
        "stop_sequences": ("a",),
        "seed": 2**64 - 1,
        "t": -1.5,
        "on": True,
        "none": None,
        "d": _nested(31),
    }
    tool = ToolDefinition(name="t", input_schema=_nested(32))
    call = _dispatch(
        max_output_tokens=1,
        settle_within_ms=AVRO_LONG_MAX - 1234,
        policy=policy,
        tools=(tool,),
        stream=False,
        operation_id="op",
    )
    [event] = await _sent(call)
    assert event == DispatchRequested(
        **STAMP,
        operation_id="op",
        **{**DISPATCH, "max_output_tokens": 1},
        tools=(tool,),
        policy={**policy, "stop_sequences": ["a"]},
        settle_within_ms=AVRO_LONG_MAX - 1234,
    )


CANCEL_REFUSALS: list[tuple[Call, str]] = [
    (lambda c: c.cancel(""), f"conversation_id {NON_BLANK}, not ''"),
    (lambda c: c.cancel("conv-1", ""), f"operation_id {NON_BLANK}, not ''"),
    (lambda c: c.cancel("conv-1", 5), f"operation_id {NON_BLANK}, not 5"),  # type: ignore[arg-type]
    (lambda c: c.cancel("conv-1", None, None), "reason must be a string, not None"),  # type: ignore[arg-type]
    (lambda c: c.cancel("conv-1", "op", 5), "reason must be a string, not 5"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "problem"), CANCEL_REFUSALS)
async def test_a_cancel_with_a_bad_argument_is_refused_naming_it(call: Call, problem: str) -> None:
    """Before: an empty operation id was sent (UNKNOWN_OPERATION, where None cancels every open
    operation), an empty conversation id too; other types raised a pydantic ValidationError."""
    assert await _refused(call) == f"cancel: nothing sent: {problem}"


async def test_a_cancel_of_every_operation_with_an_empty_reason_is_sent(fixed_stamp: None) -> None:
    assert await _sent(lambda c: c.cancel("conv-1")) == [
        CancelRequested(**STAMP, operation_id=None, reason="")
    ]


EVENT = "must be an ingress event (an IngressEvent)"
APPEND_REFUSALS: list[tuple[Call, str]] = [
    (
        lambda c: c.append("event"),
        f"append: nothing sent: event {EVENT}, not 'event'",
    ),  # type: ignore[arg-type]
    (
        lambda c: c.append_many(5),
        "append_many: nothing sent: events must be an iterable of ingress events, not 5",
    ),  # type: ignore[arg-type]
    (
        lambda c: c.append_many([c.user_turn("conv-1", "fine"), {"text": "bad"}]),  # type: ignore[list-item]
        f"append_many: nothing sent: events[1] {EVENT}, not {{'text': 'bad'}}",
    ),
]


@pytest.mark.parametrize(("call", "message"), APPEND_REFUSALS)
async def test_appending_what_is_no_ingress_event_is_refused_and_sends_none(call: Call, message: str) -> None:
    """Before: an AttributeError (`model_dump`) or a TypeError; not even the good event ahead was sent,
    and that stays so."""
    assert await _refused(call) == message


class _Sink:
    def __init__(self) -> None:
        self.events: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)


WorkerCall = Callable[[WorkerEvents], Awaitable[Any]]
ATTEMPT_GENERATION = f"must be an integer from 1 to {AVRO_LONG_MAX}"
CLAIM_GENERATION = f"must be an integer from 0 to {AVRO_LONG_MAX}"
COUNTER = f"must be an integer from 0 to {AVRO_LONG_MAX}"
LEASE = (
    f"must be an integer from 1 to {AVRO_LONG_MAX - 1234} (the attempt's time, 1234 ms, plus it is when "
    "its lease ends, an Avro long)"
)
DELTAS = "must be a non-empty list or tuple of NormalizedDelta"
OUTCOME = "must be one of completed, disconnected, provider_error"
LAST_SEQUENCE = f"must be an integer from -1 to {AVRO_LONG_MAX}"
REASON_CODE = "must be a ReasonCode"


def _delta(**fields: Any) -> NormalizedDelta:
    """A text delta of generation 1; `fields` set as they are, unchecked (as `model_copy` does)."""
    delta = NormalizedDelta(
        response_handle="h",
        generation=1,
        block_index=0,
        delta_sequence=0,
        type=DeltaType.TEXT_DELTA,
        text="a",
    )
    return delta.model_copy(update=fields)


def _generation_refusals(method: str, call: Callable[[WorkerEvents, Any], Awaitable[Any]]) -> list[Any]:
    """The generations every builder of an attempt refuses: below 1, past the Avro long, not an int."""
    return [
        (lambda w, g=bad: call(w, g), f"{method}: nothing sent: generation {ATTEMPT_GENERATION}, not {shown}")
        for bad, shown in ((0, "0"), (-1, "-1"), ("3", "'3'"), (3.0, "3.0"), (True, "True"), (None, "None"),
                           (2**63, str(2**63)))
    ]  # fmt: skip


WORKER_REFUSALS: list[tuple[WorkerCall, str]] = [
    # attempt
    (lambda w: w.attempt("", "op", 1, 0), f"attempt: nothing sent: conversation_id {NON_BLANK}, not ''"),
    (lambda w: w.attempt("conv-1", " ", 1, 0), f"attempt: nothing sent: operation_id {NON_BLANK}, not ' '"),
    (lambda w: w.attempt("conv-1", None, 1, 0), f"attempt: nothing sent: operation_id {NON_BLANK}, not None"),
    (
        lambda w: w.attempt("conv-1", "op", -1, 0),
        f"attempt: nothing sent: expected_revision {COUNTER}, not -1",
    ),
    (
        lambda w: w.attempt("conv-1", "op", "1", 0),
        f"attempt: nothing sent: expected_revision {COUNTER}, not '1'",
    ),
    (
        lambda w: w.attempt("conv-1", "op", True, 0),
        f"attempt: nothing sent: expected_revision {COUNTER}, not True",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, -1),
        f"attempt: nothing sent: expected_cancel_generation {COUNTER}, not -1",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0.0),
        f"attempt: nothing sent: expected_cancel_generation {COUNTER}, not 0.0",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 2**63),
        f"attempt: nothing sent: expected_cancel_generation {COUNTER}, not {2**63}",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0, lease_ms=0),
        f"attempt: nothing sent: lease_ms {LEASE}, not 0",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0, lease_ms=-5),
        f"attempt: nothing sent: lease_ms {LEASE}, not -5",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0, lease_ms="3"),
        f"attempt: nothing sent: lease_ms {LEASE}, not '3'",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0, lease_ms=30.5),
        f"attempt: nothing sent: lease_ms {LEASE}, not 30.5",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0, lease_ms=AVRO_LONG_MAX - 1233),
        f"attempt: nothing sent: lease_ms {LEASE}, not {AVRO_LONG_MAX - 1233}",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0, replayable="no"),
        "attempt: nothing sent: replayable must be True or False, not 'no'",
    ),
    (
        lambda w: w.attempt("conv-1", "op", 1, 0, replayable=1),
        "attempt: nothing sent: replayable must be True or False, not 1",
    ),
    # sent
    (lambda w: w.sent("", "op", 1), f"sent: nothing sent: conversation_id {NON_BLANK}, not ''"),
    (lambda w: w.sent("conv-1", "", 1), f"sent: nothing sent: operation_id {NON_BLANK}, not ''"),
    *_generation_refusals("sent", lambda w, g: w.sent("conv-1", "op", g)),
    # handle_bound
    (
        lambda w: w.handle_bound("conv-1", "op", 0, "h", "d"),
        f"handle_bound: nothing sent: generation {ATTEMPT_GENERATION}, not 0",
    ),
    (
        lambda w: w.handle_bound("conv-1", "op", 1, "", "d"),
        f"handle_bound: nothing sent: handle {NON_BLANK}, not ''",
    ),
    (
        lambda w: w.handle_bound("conv-1", "op", 1, None, "d"),
        f"handle_bound: nothing sent: handle {NON_BLANK}, not None",
    ),
    (
        lambda w: w.handle_bound("conv-1", "op", 1, "h", " "),
        f"handle_bound: nothing sent: manifest_digest {NON_BLANK}, not ' '",
    ),
    (
        lambda w: w.handle_bound("conv-1", "op", 1, "h", "d", resumable="yes"),
        "handle_bound: nothing sent: resumable must be True or False, not 'yes'",
    ),
    # deltas
    *_generation_refusals("deltas", lambda w, g: w.deltas("conv-1", "op", g, [_delta()])),
    (
        lambda w: w.deltas("", "op", 1, [_delta()]),
        f"deltas: nothing sent: conversation_id {NON_BLANK}, not ''",
    ),
    (lambda w: w.deltas("conv-1", "op", 1, []), f"deltas: nothing sent: deltas {DELTAS}, not []"),
    (lambda w: w.deltas("conv-1", "op", 1, ()), f"deltas: nothing sent: deltas {DELTAS}, not ()"),
    (lambda w: w.deltas("conv-1", "op", 1, None), f"deltas: nothing sent: deltas {DELTAS}, not None"),
    (lambda w: w.deltas("conv-1", "op", 1, "abc"), f"deltas: nothing sent: deltas {DELTAS}, not 'abc'"),
    (
        lambda w: w.deltas("conv-1", "op", 1, [_delta(), {"text": "b"}]),
        "deltas: nothing sent: deltas[1] must be a NormalizedDelta, not dict {'text': 'b'}",
    ),
    (
        lambda w: w.deltas("conv-1", "op", 1, [_delta(delta_sequence=-1)]),
        f"deltas: nothing sent: deltas[0].delta_sequence {COUNTER}, not -1",
    ),
    (
        lambda w: w.deltas("conv-1", "op", 1, [_delta(), _delta(generation=0, delta_sequence="1")]),
        f"deltas: nothing sent: deltas[1].generation {ATTEMPT_GENERATION}, not 0; "
        f"deltas[1].delta_sequence {COUNTER}, not '1'",
    ),
    # ended
    *_generation_refusals(
        "ended", lambda w, g: w.ended("conv-1", "op", g, "completed", resumable=False, last_delta_sequence=0)
    ),
    (
        lambda w: w.ended("conv-1", "op", 1, "bogus", resumable=False, last_delta_sequence=0),
        f"ended: nothing sent: outcome {OUTCOME}, not 'bogus'",
    ),
    (
        lambda w: w.ended("conv-1", "op", 1, None, resumable=False, last_delta_sequence=0),
        f"ended: nothing sent: outcome {OUTCOME}, not None",
    ),
    (
        lambda w: w.ended("conv-1", "op", 1, "completed", resumable=None, last_delta_sequence=0),
        "ended: nothing sent: resumable must be True or False, not None",
    ),
    (
        lambda w: w.ended("conv-1", "op", 1, "completed", resumable=False, last_delta_sequence=-2),
        f"ended: nothing sent: last_delta_sequence {LAST_SEQUENCE}, not -2",
    ),
    (
        lambda w: w.ended("conv-1", "op", 1, "completed", resumable=False, last_delta_sequence=False),
        f"ended: nothing sent: last_delta_sequence {LAST_SEQUENCE}, not False",
    ),
    (
        lambda w: w.ended("conv-1", "op", 1, "completed", resumable=False, last_delta_sequence=0, detail=" "),
        f"ended: nothing sent: detail {NON_BLANK}, not ' '",
    ),
    (
        lambda w: w.ended("conv-1", "op", 1, "completed", resumable=False, last_delta_sequence=0, detail=7),
        f"ended: nothing sent: detail {NON_BLANK}, not 7",
    ),
    # the builders signed with the worker's id
    *_generation_refusals("recovered", lambda w, g: w.recovered("conv-1", "op", g)),
    (lambda w: w.recovered("conv-1", "", 1), f"recovered: nothing sent: operation_id {NON_BLANK}, not ''"),
    *_generation_refusals("resume_started", lambda w, g: w.resume_started("conv-1", "op", g, "h")),
    (
        lambda w: w.resume_started("conv-1", "op", 1, ""),
        f"resume_started: nothing sent: handle {NON_BLANK}, not ''",
    ),
    (
        lambda w: w.resume_started(" ", "op", 1, 7),
        f"resume_started: nothing sent: conversation_id {NON_BLANK}, not ' '; handle {NON_BLANK}, not 7",
    ),
    *_generation_refusals("replay_started", lambda w, g: w.replay_started("conv-1", "op", g)),
    *_generation_refusals("terminated", lambda w, g: w.terminated("conv-1", "op", g)),
    (lambda w: w.terminated("", "op", 1), f"terminated: nothing sent: conversation_id {NON_BLANK}, not ''"),
    *_generation_refusals("renew", lambda w, g: w.renew("conv-1", "op", g)),
    (lambda w: w.renew("conv-1", "\t", 1), f"renew: nothing sent: operation_id {NON_BLANK}, not '\\t'"),
    (
        lambda w: w.claim_expiry("conv-1", "op", -1),
        f"claim_expiry: nothing sent: generation {CLAIM_GENERATION}, not -1",
    ),
    (
        lambda w: w.claim_expiry("conv-1", "op", "0"),
        f"claim_expiry: nothing sent: generation {CLAIM_GENERATION}, not '0'",
    ),
    (
        lambda w: w.claim_expiry("conv-1", "op", False),
        f"claim_expiry: nothing sent: generation {CLAIM_GENERATION}, not False",
    ),
    (
        lambda w: w.claim_expiry("conv-1", "", 0),
        f"claim_expiry: nothing sent: operation_id {NON_BLANK}, not ''",
    ),
    # give_up
    (lambda w: w.give_up("", "op", "why"), f"give_up: nothing sent: conversation_id {NON_BLANK}, not ''"),
    (lambda w: w.give_up("conv-1", 5, "why"), f"give_up: nothing sent: operation_id {NON_BLANK}, not 5"),
    (
        lambda w: w.give_up("conv-1", None, "why"),
        f"give_up: nothing sent: operation_id {NON_BLANK}, not None",
    ),
    (lambda w: w.give_up("conv-1", "op", ""), f"give_up: nothing sent: reason {NON_BLANK}, not ''"),
    (lambda w: w.give_up("conv-1", "op", None), f"give_up: nothing sent: reason {NON_BLANK}, not None"),
    (
        lambda w: w.give_up("conv-1", "op", "why", "NOT_A_CODE"),
        f"give_up: nothing sent: reason_code {REASON_CODE}, not 'NOT_A_CODE'",
    ),
    (
        lambda w: w.give_up("conv-1", "op", "why", 3),
        f"give_up: nothing sent: reason_code {REASON_CODE}, not 3",
    ),
]


@pytest.mark.parametrize(("call", "message"), WORKER_REFUSALS)
async def test_a_worker_event_with_a_bad_argument_is_refused_naming_it_and_nothing_is_appended(
    fixed_stamp: None, call: WorkerCall, message: str
) -> None:
    """Before: only what pydantic refused was an EventArgumentError, in pydantic's words. "3", 3.0 and
    True were taken for an integer, "no" for True; a lease of 0 or less, a generation of 0 or less, a
    negative revision, cancel generation or delta sequence, an empty id, handle, digest or give-up
    reason and an empty list of deltas were sent; a lease past the Avro long failed the fold's
    decision; a dict or a string for the deltas raised an AttributeError."""
    sink = _Sink()
    with pytest.raises(EventArgumentError) as caught:
        await call(WorkerEvents(sink, "w-1"))
    assert isinstance(caught.value, GatewayError) and isinstance(caught.value, ValueError)
    assert (str(caught.value), sink.events) == (message, [])


@pytest.mark.parametrize(
    ("sink", "worker_id", "message"),
    [
        (_Sink(), "", f"worker_id {NON_BLANK}, not ''"),
        (_Sink(), " ", f"worker_id {NON_BLANK}, not ' '"),
        (_Sink(), None, f"worker_id {NON_BLANK}, not None"),
        (None, "w-1", "sink must be an ingress sink (with an async append(event)), not None"),
        ([], "w-1", "sink must be an ingress sink (with an async append(event)), not []"),
    ],
)
def test_worker_events_without_a_sink_or_a_worker_id_are_refused(
    sink: Any, worker_id: Any, message: str
) -> None:
    """Before: an empty worker id signed every event with no lease holder (the fold checks leases only
    against non-empty ids); a sink without an async `append` failed at the first event."""
    with pytest.raises(EventArgumentError) as caught:
        WorkerEvents(sink, worker_id)
    assert str(caught.value) == f"WorkerEvents: nothing sent: {message}"


async def test_worker_events_at_the_edges_of_their_arguments_are_appended(fixed_stamp: None) -> None:
    """Generation 1 and the largest Avro long, a claim of generation 0 (a deadline before any
    attempt), revision and cancel generation 0, a lease of 1 ms and the longest an Avro long holds, no
    delta appended (-1), a delta at sequence 0, an outcome and a reason code given as their text."""
    sink = _Sink()
    worker = WorkerEvents(sink, "w-1")
    longest = AVRO_LONG_MAX - 1234
    built = [
        await worker.attempt("conv-1", "op", 0, 0, lease_ms=1),
        await worker.attempt("conv-1", "op", AVRO_LONG_MAX, AVRO_LONG_MAX, lease_ms=longest),
        await worker.sent("conv-1", "op", AVRO_LONG_MAX),
        await worker.deltas("conv-1", "op", 1, (_delta(),)),
        await worker.ended("conv-1", "op", 1, "disconnected", resumable=False, last_delta_sequence=-1),
        await worker.claim_expiry("conv-1", "op", 0),
        await worker.give_up("conv-1", "op", "why", "PROVIDER_ERROR"),
    ]
    op = {**STAMP, "operation_id": "op"}
    assert built == [
        DispatchAttempt(**op, expected_revision=0, expected_cancel_generation=0, worker_id="w-1", lease_ms=1),
        DispatchAttempt(
            **op,
            expected_revision=AVRO_LONG_MAX,
            expected_cancel_generation=AVRO_LONG_MAX,
            worker_id="w-1",
            lease_ms=longest,
        ),
        DispatchSent(**op, attempt_generation=AVRO_LONG_MAX),
        StreamDeltas(**op, attempt_generation=1, deltas=(_delta(),)),
        StreamEnded(**op, attempt_generation=1, outcome=StreamOutcome.DISCONNECTED, last_delta_sequence=-1),
        ExpiryClaimed(**op, attempt_generation=0, worker_id="w-1"),
        CancelRequested(**op, reason="why", worker_gave_up=True, reason_code=ReasonCode.PROVIDER_ERROR),
    ]
    assert sink.events == built


def test_a_field_pydantic_refuses_inside_a_list_is_named_by_its_path() -> None:
    """A builder without rules of its own says pydantic's error at the field's place, its parts joined
    by dots."""
    with pytest.raises(EventArgumentError) as caught:
        EventFactory().build(TurnSubmitted, "conv-1", turn_id="t", blocks=[{"id": "b"}], expected_revision=0)
    problems = tuple(
        f"blocks.0.{field}: Field required, not {{'id': 'b'}}" for field in ("role", "kind", "trustLabel")
    )
    assert (caught.value.method, caught.value.problems) == ("TurnSubmitted", problems)
    assert str(caught.value) == f"TurnSubmitted: nothing sent: {'; '.join(problems)}"


@pytest.mark.parametrize(
    ("adapter", "provider", "policy", "sent"),
    [
        ("anthropic-messages@3", "anthropic", {"stream": True}, {"stream": True}),
        ("gemini@3", "google", {"stream": False}, {"stream": False}),  # Gemini streams by its endpoint
        (
            "openai-responses@4",
            "openai",
            {"stream": True, "background": False},
            {"stream": True, "background": False},
        ),
    ],
)
async def test_a_stream_flag_the_worker_can_read_is_sent(
    fixed_stamp: None, adapter: str, provider: str, policy: dict[str, Any], sent: dict[str, Any]
) -> None:
    """Only the API's own stream flag is held to True; an API that streams by endpoint has none, and
    the other keys of the stream policy stay the caller's to set."""
    model = {
        "anthropic": DISPATCH["model_revision"],
        "google": "google/gemini-2.5-pro@2025-06",
        "openai": "openai/gpt-4.1@2025-04",
    }
    [event] = await _sent(
        _dispatch(adapter=adapter, provider=provider, model_revision=model[provider], policy=policy)
    )
    assert event.policy == sent


async def test_an_adapter_the_client_does_not_know_is_sent_for_the_ledger_to_refuse(
    fixed_stamp: None,
) -> None:
    """No profile, no stream flag to hold (the fold refuses the adapter: UNKNOWN_ADAPTER); the generated
    operation id is `op-` and 16 hex digits."""
    [event] = await _sent(_dispatch(adapter="retired@9", policy={"stream": False}))
    assert (event.adapter, event.policy) == ("retired@9", {"stream": False})
    assert re.fullmatch(r"op-[0-9a-f]{16}", event.operation_id), event.operation_id
