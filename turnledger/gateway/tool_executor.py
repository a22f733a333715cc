"""An example tool executor: canonical tool calls in, terminal result envelopes out.

Only `turnledger.tool-calls` feeds it, and only complete, validated calls of
canonical responses reach that topic, so it never sees a partial call. Each result
carries what the validator checks against the call: the call id, the tool name, the
call's argument digest and the attempt generation that produced it. The calls of
one assistant turn that arrive in one batch are answered in one TurnSubmitted; the
fold accepts results one by one as well and keeps the next dispatch WAITING until
every call has its result.

The turn id is derived from the call ids, so a redelivered batch is refused as a
DUPLICATE_TURN instead of adding results twice.

Before the rollout reaches `all` (gateway/rollout.py), tool turns belong to the legacy
gateway: it runs their calls and submits the results itself, so the executor runs
nothing and counts what it left (`left_to_legacy`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from turnledger.errors import GatewayError
from turnledger.gateway.client import IngressSink, ToolResult, WorkerEvents
from turnledger.gateway.rollout import RolloutStage, protocol_runs_tool_calls
from turnledger.model.events import ToolCallReady
from turnledger.model.graph import ResultStatus
from turnledger.model.tools import ToolDefinition
from turnledger.observability import runtime_metrics as live
from turnledger.streaming.strict_arguments import ArgumentError, validate_arguments

log = logging.getLogger(__name__)

ToolFn = Callable[[dict[str, Any]], str]


class ToolError(GatewayError):
    """A tool refused its input: becomes an `error` result, never a crash."""


def _stable_int(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x00".join(parts).encode()).digest()[:4], "big")


def get_weather(args: dict[str, Any]) -> str:
    city = str(args.get("city", "")).strip()
    if not city:
        raise ToolError("city is required")
    unit = str(args.get("unit", "celsius"))
    n = _stable_int("weather", city.lower())
    temp_c = n % 35 - 5
    temp = temp_c if unit == "celsius" else round(temp_c * 9 / 5 + 32)
    sky = ("clear", "cloudy", "rain", "snow", "fog")[n % 5]
    return json.dumps({"city": city, "temperature": temp, "unit": unit, "sky": sky}, sort_keys=True)


def lookup_invoice(args: dict[str, Any]) -> str:
    invoice_id = str(args.get("invoice_id", "")).strip()
    if not invoice_id:
        raise ToolError("invoice_id is required")
    n = _stable_int("invoice", invoice_id)
    if n % 11 == 0:
        raise ToolError(f"invoice {invoice_id} not found")
    status = ("paid", "open", "overdue")[n % 3]
    return json.dumps(
        {"invoice_id": invoice_id, "amount_cents": n % 100_000, "currency": "EUR", "status": status},
        sort_keys=True,
    )


DEMO_TOOLS: tuple[ToolDefinition, ...] = (
    ToolDefinition(
        name="get_weather",
        description="Current weather for a city.",
        input_schema={
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    ),
    ToolDefinition(
        name="lookup_invoice",
        description="Look up an invoice by id.",
        input_schema={
            "type": "object",
            "properties": {"invoice_id": {"type": "string", "minLength": 1}},
            "required": ["invoice_id"],
            "additionalProperties": False,
        },
    ),
)

DEMO_IMPLEMENTATIONS: Mapping[str, ToolFn] = {"get_weather": get_weather, "lookup_invoice": lookup_invoice}
DEMO_SCHEMAS: Mapping[str, Mapping[str, Any]] = {t.name: t.input_schema for t in DEMO_TOOLS}


def is_partial(call: ToolCallReady, schemas: Mapping[str, Mapping[str, Any]]) -> bool:
    """Did an incomplete call reach the topic: arguments that are no strict JSON object, or that fail the
    schema the executor holds for the tool? (A tool it holds no schema for is checked for JSON only.)"""
    schema = schemas.get(call.tool_name, {"type": "object"})
    try:
        validate_arguments(call.arguments, schema)
    except ArgumentError:
        return True
    return False


def run_call(call: ToolCallReady, tools: Mapping[str, ToolFn]) -> ToolResult:
    """Run one call; unknown tools, bad JSON and tool errors become `error` results. A tool that fails
    in a way it did not mean to (any other exception: a bug in the tool, a file it could not read) is
    an `error` result too, naming the exception, and logged with its traceback: the conversation gets
    its answer, and the executor neither stops nor mistakes the failure for a Kafka outage."""
    status, text = ResultStatus.SUCCESS, ""
    fn = tools.get(call.tool_name)
    try:
        if fn is None:
            raise ToolError(f"unknown tool {call.tool_name!r}")
        args = json.loads(call.arguments)
        if not isinstance(args, dict):
            raise ToolError("arguments are not a JSON object")
        text = fn(args)
    except (ToolError, ValueError) as exc:
        status, text = ResultStatus.ERROR, str(exc)
    except Exception as exc:
        log.error("tool %r failed on call %s", call.tool_name, call.call_id, exc_info=exc)
        status, text = ResultStatus.ERROR, f"the tool failed: {type(exc).__name__}: {exc}"
    return ToolResult(
        call_id=call.call_id,
        tool_name=call.tool_name,
        argument_digest=call.argument_digest,
        generation=call.attempt_generation,
        text=text,
        status=status,
    )


class ToolExecutor:
    """Answers batches of ToolCallReady records through any ingress sink."""

    def __init__(
        self,
        sink: IngressSink,
        tools: Mapping[str, ToolFn] = DEMO_IMPLEMENTATIONS,
        rollout_stage: RolloutStage = RolloutStage.ALL,
        schemas: Mapping[str, Mapping[str, Any]] = DEMO_SCHEMAS,
    ) -> None:
        self.events = WorkerEvents(sink, "tool-executor")
        self.tools = tools
        self.schemas = schemas
        self.runs_calls = protocol_runs_tool_calls(rollout_stage)
        self.calls_run = 0
        self.errors = 0
        self.left_to_legacy = 0

    async def handle(self, calls: Sequence[ToolCallReady]) -> None:
        for call in calls:
            if is_partial(call, self.schemas):
                live.PARTIAL_TOOL_DISPATCHES.inc()
        if not self.runs_calls:
            self.left_to_legacy += len(calls)
            return
        turns: dict[tuple[str, int], list[ToolCallReady]] = {}
        for call in calls:
            turns.setdefault((call.conversation_id, call.revision), []).append(call)
        for (conversation_id, _revision), group in turns.items():
            results = [run_call(call, self.tools) for call in group]
            for result in results:
                live.TOOL_CALLS.labels(result.tool_name, str(result.status)).inc()
            self.calls_run += len(results)
            self.errors += sum(1 for r in results if r.status == ResultStatus.ERROR)
            await self.events.sink.append(self.events.tool_results(conversation_id, results))
