"""A realistic ingress mix for the dispatch processor, built with the pure fold in the loop.

Per conversation, `rounds` times: a user turn, then a dispatch (DispatchRequested →
DispatchAttempt → DispatchSent → HandleBound → StreamDeltas batches). Every
`tool_every`-th round the model first answers with a tool call (argument fragments),
the tool result is submitted as a turn and a second dispatch streams the text answer;
the other rounds answer with text directly. Adapters alternate between
`anthropic-messages@1` and `openai-chat@1` per conversation.

Each conversation's events are produced by folding them as they are built (as
`tests/unit/dispatch/scenario.py` does), so HandleBound carries the manifest digest the
processor will compute, and the expected committed outputs are known. Conversations
are then interleaved round-robin so a processor batch mixes many of them.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnledger.codec import encode
from turnledger.dispatch.fold import fold
from turnledger.dispatch.state import ConversationState
from turnledger.model.canonical import digest_of
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.events import (
    CommittedTurn,
    DispatchAttempt,
    DispatchRequested,
    DispatchSent,
    HandleBound,
    IngressEvent,
    StreamDeltas,
    SubmittedBlock,
    TurnSubmitted,
)
from turnledger.model.tools import ToolDefinition
from turnledger.streaming.runs import merge_runs

ADAPTERS = (
    ("anthropic-messages@1", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
    ("openai-chat@1", "openai", "openai/gpt-4o@2024-08-06"),
)

WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
SEARCH = ToolDefinition(
    name="search_docs",
    description="Search the product documentation",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    },
)
TOOLS = (WEATHER, SEARCH)


@functools.cache
def padding_tool(i: int) -> ToolDefinition:
    """An offered tool no conversation calls: ~1 KB of JSON, eight described string fields."""
    field = {"type": "string", "description": "A field of the operation's input, described at some length."}
    return ToolDefinition(
        name=f"internal_tool_{i}",
        description="An internal operation of the agent's toolbox, described at the length such "
        "descriptions usually have, so that the model knows when and how to call it. " * 2,
        input_schema={
            "type": "object",
            "properties": {f"field_{j}": field for j in range(8)},
            "required": ["field_0"],
            "additionalProperties": False,
        },
    )


def offered_tools(mix: Mix) -> tuple[ToolDefinition, ...]:
    return TOOLS + tuple(padding_tool(i) for i in range(mix.extra_tools))


WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "streaming",
    "tokens",
    "arrive",
    "in",
    "order",
)


@dataclass(frozen=True)
class Mix:
    rounds: int = 3  # user turns per conversation
    tool_every: int = 2  # every n-th round starts with a tool call (0: never)
    text_deltas: int = 24  # text deltas per streamed text answer
    arg_fragments: int = 4  # argument fragments per tool call
    deltas_per_event: int = 8  # normalized deltas per StreamDeltas ingress event
    runs: bool = True  # consecutive content deltas of a block as one run, as the worker appends them
    words_per_delta: int = 2
    extra_tools: int = 0
    """Tools offered beside the two the conversations call, ~1 KB of JSON each (`padding_tool`): an
    agent's toolset is tens of KB a request, which the mix's two small tools (737-byte requests) hide."""


@dataclass
class Workload:
    events: list[IngressEvent]
    values: list[bytes]  # Avro single-object encoded events, same order
    commit_events: frozenset[str] = field(default_factory=frozenset)  # event ids that commit a turn
    conversations: int = 0
    committed_turns: int = 0


@dataclass
class _Driver:
    """One conversation: builds its events, folding each one as it goes."""

    conversation_id: str
    adapter: tuple[str, str, str]
    state: ConversationState = field(init=False)
    events: list[IngressEvent] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _ops: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.state = ConversationState.empty(self.conversation_id)

    def _common(self) -> dict[str, Any]:
        n = next(self._ids)
        return {
            "conversation_id": self.conversation_id,
            "event_id": f"{self.conversation_id}/e{n}",
            "occurred_at_ms": 1_700_000_000_000 + n,
        }

    def apply(self, event: IngressEvent) -> None:
        result = fold(self.state, event)
        self.state = result.state
        self.events.append(event)
        if any(isinstance(o, CommittedTurn) for o in result.outputs):
            self.commits.append(event.event_id)

    def user(self, text: str) -> None:
        turn_id = f"u{len(self.state.turn_ids) + 1}"
        block = SubmittedBlock(id=f"{turn_id}-b0", role="user", kind="text", trust_label="user", text=text)
        self.apply(TurnSubmitted(**self._common(), turn_id=turn_id, blocks=(block,)))

    def tool_result(self, call_id: str, tool: str, args: str, generation: int) -> None:
        turn_id = f"t{len(self.state.turn_ids) + 1}"
        block = SubmittedBlock(
            id=f"{turn_id}-r0",
            role="tool",
            kind="tool_result",
            trust_label="tool",
            call_id=call_id,
            tool_name=tool,
            argument_digest=digest_of(orjson.loads(args)),
            generation=generation,
            result_status="success",
            text=f"result of {call_id}: 21 degrees, light wind, {' '.join(WORDS[:8])}",
        )
        self.apply(TurnSubmitted(**self._common(), turn_id=turn_id, blocks=(block,)))

    def dispatch(self, deltas: list[NormalizedDelta], mix: Mix, handle: str) -> int:
        """Request → attempt → sent → bound → stream; returns the attempt generation."""
        op = f"op-{next(self._ops)}"
        adapter, provider, model = self.adapter
        self.apply(
            DispatchRequested(
                **self._common(),
                operation_id=op,
                adapter=adapter,
                provider=provider,
                model_revision=model,
                tools=offered_tools(mix),
                max_output_tokens=1024,
            )
        )
        self.apply(
            DispatchAttempt(
                **self._common(),
                operation_id=op,
                expected_revision=self.state.graph.revision,
                expected_cancel_generation=self.state.cancel_generation,
                worker_id="worker-1",
            )
        )
        operation = self.state.operations[op]
        gen = operation.attempt_generation
        assert operation.manifest is not None, f"{op} was not prepared: {operation.state}"
        self.apply(DispatchSent(**self._common(), operation_id=op, attempt_generation=gen))
        self.apply(
            HandleBound(
                **self._common(),
                operation_id=op,
                attempt_generation=gen,
                response_handle=handle,
                manifest_digest=operation.manifest.manifest_digest,
            )
        )
        for i in range(0, len(deltas), mix.deltas_per_event):
            chunk = tuple(
                d.model_copy(update={"generation": gen}) for d in deltas[i : i + mix.deltas_per_event]
            )
            if mix.runs:  # as the worker appends them (GatewayClient.deltas)
                chunk = merge_runs(chunk)
            self.apply(StreamDeltas(**self._common(), operation_id=op, attempt_generation=gen, deltas=chunk))
        return gen


def _text_deltas(handle: str, mix: Mix, salt: int) -> list[NormalizedDelta]:
    d = _Deltas(handle)
    out = [
        d(DeltaType.MESSAGE_START, -1, model="m", input_tokens=100),
        d(DeltaType.BLOCK_START, 0, block_kind="text"),
    ]
    for i in range(mix.text_deltas):
        words = [WORDS[(salt + i * mix.words_per_delta + k) % len(WORDS)] for k in range(mix.words_per_delta)]
        out.append(d(DeltaType.TEXT_DELTA, 0, text=" ".join(words) + " "))
    out.append(d(DeltaType.BLOCK_STOP, 0))
    out.append(
        d(
            DeltaType.MESSAGE_STOP,
            -1,
            stop_reason=StopReason.END_TURN,
            raw_stop_reason="end_turn",
            output_tokens=50,
        )
    )
    return out


def _tool_deltas(handle: str, call_id: str, tool: str, args: str, mix: Mix) -> list[NormalizedDelta]:
    d = _Deltas(handle)
    out = [d(DeltaType.MESSAGE_START, -1, model="m", input_tokens=100)]
    out.append(d(DeltaType.BLOCK_START, 0, block_kind="tool_call", call_id=call_id, tool_name=tool))
    step = max(1, -(-len(args) // mix.arg_fragments))
    out += [d(DeltaType.ARGUMENT_FRAGMENT, 0, text=args[i : i + step]) for i in range(0, len(args), step)]
    out.append(d(DeltaType.BLOCK_STOP, 0))
    out.append(d(DeltaType.MESSAGE_STOP, -1, stop_reason=StopReason.TOOL_USE, raw_stop_reason="tool_use"))
    return out


@dataclass
class _Deltas:
    handle: str
    seq: int = 0

    def __call__(self, type_: DeltaType, index: int, **fields: Any) -> NormalizedDelta:
        delta = NormalizedDelta(
            response_handle=self.handle,
            generation=1,
            block_index=index,
            delta_sequence=self.seq,
            type=type_,
            **fields,
        )
        self.seq += 1
        return delta


def conversation_events(conversation_id: str, index: int, mix: Mix) -> _Driver:
    c = _Driver(conversation_id, ADAPTERS[index % len(ADAPTERS)])
    for r in range(mix.rounds):
        c.user(f"question {r} of {conversation_id}: " + " ".join(WORDS[r % 5 : r % 5 + 6]))
        if mix.tool_every and r % mix.tool_every == 0:
            call_id = f"call-{r}"
            tool = TOOLS[r % 2].name
            args = (
                '{"city": "Paris", "unit": "c"}'
                if tool == "get_weather"
                else '{"query": "refunds", "limit": 3}'
            )
            gen = c.dispatch(_tool_deltas(f"h-{r}a", call_id, tool, args, mix), mix, f"h-{r}a")
            c.tool_result(call_id, tool, args, gen)
            c.dispatch(_text_deltas(f"h-{r}b", mix, r), mix, f"h-{r}b")
        else:
            c.dispatch(_text_deltas(f"h-{r}", mix, r), mix, f"h-{r}")
    return c


def interleave(streams: list[list[IngressEvent]], concurrency: int) -> list[IngressEvent]:
    """Merge per-conversation streams keeping each one's order, about `concurrency` of them active at
    once at staggered phases (conversation i starts when the one before it is 1/concurrency through),
    so no stretch of the log is all one event type."""
    if not streams:
        return []
    length = max(len(s) for s in streams)
    stride = length / max(1, min(concurrency, len(streams)))
    keyed = [(i * stride + j, i, j) for i, s in enumerate(streams) for j in range(len(s))]
    keyed.sort()
    return [streams[i][j] for _, i, j in keyed]


def build(
    conversations: int, mix: Mix = Mix(), *, prefix: str = "conv", concurrency: int | None = None
) -> Workload:
    """`conversations` conversations of `mix`, interleaved (`concurrency` active at once, default all)."""
    streams: list[list[IngressEvent]] = []
    commits: set[str] = set()
    for i in range(conversations):
        c = conversation_events(f"{prefix}-{i}", i, mix)
        streams.append(c.events)
        commits.update(c.commits)
    events = interleave(streams, concurrency or conversations)
    return Workload(
        events=events,
        values=[encode(e) for e in events],
        commit_events=frozenset(commits),
        conversations=conversations,
        committed_turns=len(commits),
    )
