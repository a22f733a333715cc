"""The example tool executor: the demo tools' exact answers, each call run once into exactly one result,
one TurnSubmitted per assistant turn with a turn id derived from its calls, partial calls counted, and
nothing run before the rollout hands tool calls to the protocol. Driven through a fake ingress sink."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import REGISTRY

from turnledger.gateway.client import ToolResult
from turnledger.gateway.rollout import RolloutStage
from turnledger.gateway.tool_executor import (
    DEMO_SCHEMAS,
    ToolError,
    ToolExecutor,
    get_weather,
    is_partial,
    lookup_invoice,
    run_call,
)
from turnledger.model.events import IngressEvent, ToolCallReady, TurnSubmitted
from turnledger.model.graph import ResultStatus

OK, ERROR = ResultStatus.SUCCESS, ResultStatus.ERROR
LIMA = '{"city": "Lima", "sky": "fog", "temperature": 29, "unit": "celsius"}'


class Sink:
    """The executor's one dependency: appends are kept in order."""

    def __init__(self) -> None:
        self.events: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)


def call(
    call_id: str, tool: str, arguments: str, conversation: str = "c1", revision: int = 4
) -> ToolCallReady:
    return ToolCallReady(
        conversation_id=conversation, revision=revision, operation_id="op-1", attempt_generation=3,
        block_id=f"b-{call_id}", call_id=call_id, tool_name=tool, arguments=arguments,
        argument_digest=f"d-{call_id}", occurred_at_ms=1,
    )  # fmt: skip


def result(call_id: str, tool: str, text: str, status: ResultStatus = OK) -> ToolResult:
    return ToolResult(call_id, tool, f"d-{call_id}", 3, text, status)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("city", "sky", "temperature"),
    [
        ("Paris", "clear", 5),
        ("Rome", "cloudy", 16),
        ("Berlin", "rain", 17),
        ("Dublin", "snow", 8),
        ("Lima", "fog", 29),
    ],
)
def test_each_sky_the_weather_can_have(city: str, sky: str, temperature: int) -> None:
    """The city's hash picks one of five skies and a temperature from -5 to 29 celsius."""
    expected = {"city": city, "sky": sky, "temperature": temperature, "unit": "celsius"}
    assert json.loads(get_weather({"city": city})) == expected


def test_get_weather_answers_the_same_city_the_same_way_in_either_unit() -> None:
    """The city is trimmed and hashed lower-case; celsius by default, fahrenheit rounded."""
    assert (
        get_weather({"city": "Paris"})
        == '{"city": "Paris", "sky": "clear", "temperature": 5, "unit": "celsius"}'
    )
    assert (
        get_weather({"city": " paris "})
        == '{"city": "paris", "sky": "clear", "temperature": 5, "unit": "celsius"}'
    )
    assert get_weather({"city": "Lima", "unit": "fahrenheit"}) == (
        '{"city": "Lima", "sky": "fog", "temperature": 84, "unit": "fahrenheit"}'
    )
    assert get_weather({"city": "Lima", "unit": "celsius"}) == (
        '{"city": "Lima", "sky": "fog", "temperature": 29, "unit": "celsius"}'
    )


@pytest.mark.parametrize("args", [{}, {"city": "  "}, {"city": ""}])
def test_get_weather_needs_a_city(args: dict[str, object]) -> None:
    """A missing or blank city is a ToolError with its words."""
    with pytest.raises(ToolError) as info:
        get_weather(args)
    assert str(info.value) == "city is required"


def test_lookup_invoice_answers_by_id_and_some_ids_are_not_found() -> None:
    """The id is trimmed; an id whose hash is a multiple of 11 is not found; else a fixed answer."""
    assert lookup_invoice({"invoice_id": " INV-1 "}) == (
        '{"amount_cents": 24422, "currency": "EUR", "invoice_id": "INV-1", "status": "paid"}'
    )
    assert lookup_invoice({"invoice_id": "INV-5"}) == (
        '{"amount_cents": 37508, "currency": "EUR", "invoice_id": "INV-5", "status": "open"}'
    )
    assert lookup_invoice({"invoice_id": "INV-8"}) == (
        '{"amount_cents": 26608, "currency": "EUR", "invoice_id": "INV-8", "status": "overdue"}'
    )
    for args, words in (({"invoice_id": "INV-2"}, "invoice INV-2 not found"), ({}, "invoice_id is required"),
                        ({"invoice_id": " "}, "invoice_id is required")):  # fmt: skip
        with pytest.raises(ToolError) as info:
            lookup_invoice(args)
        assert str(info.value) == words


@pytest.mark.parametrize(
    ("tool", "arguments", "partial"),
    [
        ("get_weather", '{"city": "Paris"}', False),
        ("get_weather", '{"city": "Paris"', True),  # cut short
        ("get_weather", '{"city": ""}', True),  # against the schema
        ("get_weather", '{"city": "Paris", "wind": true}', True),
        ("lookup_invoice", '{"invoice_id": "INV-1"}', False),
        ("lookup_invoice", '{"city": "Paris"}', True),
        ("translate", '{"anything": 1}', False),  # no schema held: JSON only
        ("translate", "[1]", True),  # ... and an object
        ("translate", "{", True),
    ],
)
def test_a_call_is_partial_when_its_arguments_do_not_parse_or_fail_the_schema_held(
    tool: str, arguments: str, partial: bool
) -> None:
    """`is_partial` with the demo schemas: a tool without a schema must still get a JSON object."""
    assert is_partial(call("k", tool, arguments), DEMO_SCHEMAS) is partial


@pytest.mark.parametrize(
    ("tool", "arguments", "text", "status"),
    [
        ("get_weather", '{"city": "Lima"}', LIMA, OK),
        ("get_weather", '{"city": " "}', "city is required", ERROR),
        ("translate", '{"text": "hi"}', "unknown tool 'translate'", ERROR),
        ("get_weather", "[]", "arguments are not a JSON object", ERROR),
        ("get_weather", "{",
         "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)", ERROR),
    ],
)  # fmt: skip
def test_run_call_answers_every_call_with_one_result_that_names_it(
    tool: str, arguments: str, text: str, status: ResultStatus
) -> None:
    """Unknown tools, bad JSON and tool errors are `error` results with their words; every result carries
    the call's id, tool, argument digest and generation."""
    assert run_call(call("k1", tool, arguments), {"get_weather": get_weather}) == result(
        "k1", tool, text, status
    )


def test_a_tool_that_fails_unexpectedly_is_an_error_result_naming_the_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not a crash of the executor, nor (an OSError) a Kafka outage its caller would wait out by
    running the batch's tools again: the call gets its one result, and the traceback is logged."""

    def broken(args: dict[str, object]) -> str:
        return str(args["missing"])

    def unreadable(args: dict[str, object]) -> str:
        raise FileNotFoundError(2, "No such file or directory", "/srv/invoices.db")

    tools = {"broken": broken, "unreadable": unreadable}
    caplog.set_level(logging.ERROR, "turnledger.gateway.tool_executor")
    assert run_call(call("k1", "broken", "{}"), tools) == result(
        "k1", "broken", "the tool failed: KeyError: 'missing'", ERROR
    )
    assert run_call(call("k2", "unreadable", "{}"), tools) == result(
        "k2",
        "unreadable",
        "the tool failed: FileNotFoundError: [Errno 2] No such file or directory: '/srv/invoices.db'",
        ERROR,
    )
    assert [(r.getMessage(), type(r.exc_info[1]).__name__) for r in caplog.records if r.exc_info] == [
        ("tool 'broken' failed on call k1", "KeyError"),
        ("tool 'unreadable' failed on call k2", "FileNotFoundError"),
    ]


async def test_each_turns_calls_are_run_once_and_answered_in_one_turn() -> None:
    """Calls are grouped by (conversation, revision) in arrival order; each group is one TurnSubmitted
    whose turn id joins its call ids, so a redelivered batch repeats the same turn (refused as a
    duplicate by the fold); the counters say what ran and what failed."""
    sink = Sink()
    executor = ToolExecutor(sink)
    assert executor.events.worker_id == "tool-executor"
    calls = [
        call("a1", "get_weather", '{"city": "Lima"}'),
        call("b1", "lookup_invoice", '{"invoice_id": "INV-2"}', conversation="c2"),
        call("a2", "lookup_invoice", '{"invoice_id": "INV-1"}'),
        call("a3", "get_weather", '{"city": "Lima"}', revision=6),
    ]
    runs_before = sample("turnledger_tool_calls_total", tool="lookup_invoice", status="error")
    await executor.handle(calls)
    assert sample("turnledger_tool_calls_total", tool="lookup_invoice", status="error") == runs_before + 1
    assert (executor.calls_run, executor.errors, executor.left_to_legacy) == (4, 1, 0)
    inv1 = '{"amount_cents": 24422, "currency": "EUR", "invoice_id": "INV-1", "status": "paid"}'
    expected = [
        ("c1", "tr-a1+a2", [result("a1", "get_weather", LIMA), result("a2", "lookup_invoice", inv1)]),
        ("c2", "tr-b1", [result("b1", "lookup_invoice", "invoice INV-2 not found", ERROR)]),
        ("c1", "tr-a3", [result("a3", "get_weather", LIMA)]),
    ]
    assert all(isinstance(e, TurnSubmitted) for e in sink.events)
    turns = [
        (e.conversation_id, e.turn_id, list(e.blocks)) for e in sink.events if isinstance(e, TurnSubmitted)
    ]
    assert turns == [(c, t, [r.block() for r in rs]) for c, t, rs in expected]
    await executor.handle(calls[:1])
    last = sink.events[-1]
    assert isinstance(last, TurnSubmitted) and (last.turn_id, len(sink.events)) == ("tr-a1", 4)
    assert (executor.calls_run, executor.errors) == (5, 1)


@pytest.mark.parametrize("stage", [RolloutStage.MANIFESTS_ONLY, RolloutStage.WITHOUT_TOOLS])
async def test_before_stage_all_nothing_runs_and_every_call_is_left_to_legacy(stage: RolloutStage) -> None:
    """The legacy gateway runs tool calls before `all`: nothing is appended, the calls are counted as left,
    and a partial call is still counted as one."""
    sink = Sink()
    executor = ToolExecutor(sink, rollout_stage=stage)
    partial_before = sample("turnledger_partial_tool_dispatches_total")
    await executor.handle([call("a1", "get_weather", '{"city": "Lima"}'), call("a2", "get_weather", "{")])
    await executor.handle([call("a3", "get_weather", '{"city": "Oslo"}')])
    assert sample("turnledger_partial_tool_dispatches_total") == partial_before + 1
    assert (sink.events, executor.calls_run, executor.errors, executor.left_to_legacy) == ([], 0, 0, 3)


async def test_partial_calls_are_counted_and_still_answered_with_the_tools_and_schemas_given() -> None:
    """At stage `all` every partial call is counted once, by the schemas the executor was given, and
    answered by the tools it was given."""
    sink = Sink()
    executor = ToolExecutor(
        sink,
        tools={"echo": lambda args: str(sorted(args))},
        schemas={"echo": {"type": "object", "required": ["x"]}},
    )
    partial_before = sample("turnledger_partial_tool_dispatches_total")
    await executor.handle(
        [call("e1", "echo", '{"y": 1}'), call("e2", "echo", '{"x": 1}'), call("e3", "get_weather", "[]")]
    )
    assert sample("turnledger_partial_tool_dispatches_total") == partial_before + 2
    (turn,) = sink.events
    assert isinstance(turn, TurnSubmitted)
    assert [(b.call_id, b.text, b.result_status) for b in turn.blocks] == [
        ("e1", "['y']", OK), ("e2", "['x']", OK), ("e3", "unknown tool 'get_weather'", ERROR),
    ]  # fmt: skip
    assert (executor.calls_run, executor.errors) == (3, 1)
