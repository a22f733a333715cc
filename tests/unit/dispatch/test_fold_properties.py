"""Random interleavings of every event kind, with duplicates and stale generations.

Whatever the order, the promises hold: revisions advance one at a time with at most
one canonical turn each, tool calls reach the ledger only from committed complete
responses, no manifest is built while a call lacks its result, and the fold never
raises. And every operation settles: after any interleaving (crashes, lease expiries,
interjections, cancels, replays among them), once its lease and deadline have passed
one claim per operation makes every operation final with no attempt left open, and the
conversation's next dispatch is accepted.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnledger.dispatch.state import FINAL_STATES, ConversationState
from turnledger.model.events import DEFAULT_SETTLE_WITHIN_MS, DispatchState, StreamOutcome

from .scenario import CommittedTurn, Conversation, ManifestIssued, ToolCallReady, text_stream, tool_stream

OPS = ["op-1", "op-2"]
WORKERS = ["w1", "w2"]
HANDLES = {1: "h1", 2: "h2", 3: "h3"}


def _streams(gen: int) -> list[list[Any]]:
    handle = HANDLES[gen]
    return [
        text_stream(["Hel", "lo"], handle=handle, gen=gen),
        tool_stream([("c1", "get_weather", ['{"city":', ' "Paris"}'])], handle=handle, gen=gen),
        tool_stream([("c2", "get_weather", ['{"city": "Ro'])], handle=handle, gen=gen),
    ]


action = st.one_of(
    st.tuples(st.just("user")),
    st.tuples(st.just("request"), st.sampled_from(OPS)),
    st.tuples(st.just("attempt"), st.sampled_from(OPS), st.integers(-1, 1)),
    st.tuples(st.just("sent"), st.sampled_from(OPS), st.integers(1, 3)),
    st.tuples(st.just("bind"), st.sampled_from(OPS), st.integers(1, 3), st.booleans()),
    st.tuples(
        st.just("deltas"),
        st.sampled_from(OPS),
        st.integers(1, 3),
        st.integers(0, 2),
        st.integers(0, 9),
        st.integers(1, 10),
    ),
    st.tuples(
        st.just("ended"), st.sampled_from(OPS), st.integers(1, 3), st.sampled_from(list(StreamOutcome))
    ),
    st.tuples(st.just("recovered"), st.sampled_from(OPS), st.integers(1, 3)),
    st.tuples(st.just("resume"), st.sampled_from(OPS), st.integers(1, 3)),
    st.tuples(st.just("terminated"), st.sampled_from(OPS), st.integers(1, 3)),
    st.tuples(st.just("cancel"), st.sampled_from([None, *OPS])),
    st.tuples(st.just("results"), st.sampled_from(["c1", "c2", "c9"])),
    st.tuples(st.just("renew"), st.sampled_from(OPS), st.integers(1, 3), st.sampled_from(WORKERS)),
    st.tuples(st.just("claim"), st.sampled_from(OPS), st.sampled_from(WORKERS)),
    st.tuples(st.just("advance"), st.sampled_from([1_000, 29_000, 31_000, 700_000])),
    st.tuples(st.just("replay"), st.sampled_from(OPS), st.integers(1, 3), st.sampled_from(WORKERS)),
    st.tuples(st.just("attempt_as"), st.sampled_from(OPS), st.sampled_from(WORKERS), st.booleans()),
)


def _run(c: Conversation, step: tuple[Any, ...]) -> None:
    kind, *args = step
    if kind == "user":
        c.user("hi")
    elif kind == "request":
        c.request(args[0])
    elif kind == "attempt":
        op, skew = args
        c.attempt(op, revision=c.state.graph.revision + skew)
    elif kind == "sent":
        c.sent(*args)
    elif kind == "bind":
        op, gen, *kept = args
        operation = c.state.operations.get(op)
        digest = operation.manifest.manifest_digest if operation and operation.manifest else "sha256:x"
        c.bind(op, gen, HANDLES[gen], digest=digest, resumable=bool(kept and kept[0]))
    elif kind == "deltas":
        op, gen, which, start, length = args
        c.deltas(_streams(gen)[which][start : start + length], op=op, gen=gen)
    elif kind == "ended":
        op, gen, outcome = args
        c.ended(outcome, op=op, gen=gen)
    elif kind == "recovered":
        c.recovered(*args)
    elif kind == "resume":
        op, gen = args
        c.resume(op, gen, HANDLES[gen])
    elif kind == "terminated":
        c.terminated(*args)
    elif kind == "cancel":
        c.cancel(args[0])
    elif kind == "renew":
        c.renew(*args)
    elif kind == "claim":
        op, worker = args
        if op in c.state.operations:
            c.claim(op, worker=worker)
    elif kind == "advance":
        c.advance(args[0])
    elif kind == "replay":
        c.replay(*args)
    elif kind == "attempt_as":
        op, worker, replayable = args
        c.attempt(op, worker=worker, replayable=replayable)
    elif kind == "results":
        args_json = '{"city": "Paris"}' if args[0] == "c1" else '{"city": "Rome"}'
        gen = next((o.attempt_generation for o in c.of(ToolCallReady) if o.call_id == args[0]), 1)
        c.tool_results((args[0], "get_weather", args_json), generation=gen)


def _happy_path(op: str, which: int, gen: int) -> list[tuple[Any, ...]]:
    return [
        ("request", op),
        ("attempt", op, 0),
        ("sent", op, gen),
        ("bind", op, gen),
        ("deltas", op, gen, which, 0, 4),
        ("deltas", op, gen, which, 4, 10),
        ("results", "c1"),
    ]


@st.composite
def scripts(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """A path that can commit, mutated: noise inserted, steps duplicated and swapped."""
    steps = _happy_path("op-1", draw(st.integers(0, 2)), 1)
    if draw(st.booleans()):
        steps += _happy_path("op-2", draw(st.integers(0, 2)), 1)
    for _ in range(draw(st.integers(0, 12))):
        position = draw(st.integers(0, len(steps)))
        mutation = draw(st.sampled_from(["noise", "duplicate", "swap"]))
        if mutation == "noise":
            steps.insert(position, draw(action))
        elif mutation == "duplicate" and position < len(steps):
            steps.insert(position, steps[position])
        elif mutation == "swap" and position + 1 < len(steps):
            steps[position], steps[position + 1] = steps[position + 1], steps[position]
    return steps


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_promises_hold_under_any_interleaving(steps: list[tuple[Any, ...]]) -> None:
    c = Conversation()
    c.user("weather?")
    for step in steps:
        _run(c, step)

    turns = c.of(CommittedTurn)
    assert [t.revision for t in turns] == list(range(1, len(turns) + 1))

    committed_calls = {(t.revision, b.call_id): b for t in turns for b in t.blocks if b.kind == "tool_call"}
    for ready in c.of(ToolCallReady):
        block = committed_calls[(ready.revision, ready.call_id)]
        assert block.arguments == ready.arguments
        assert isinstance(orjson.loads(ready.arguments), dict)
    assert len(c.of(ToolCallReady)) == len(committed_calls)

    for issued in c.of(ManifestIssued):
        kinds = {(b.kind, b.call_id) for b in issued.manifest.blocks}
        calls = {call for kind, call in kinds if kind == "tool_call"}
        results = {call for kind, call in kinds if kind == "tool_result"}
        assert calls == results, "a manifest was built with a pending tool call"

    assert ConversationState.model_validate_json(c.state.model_dump_json()) == c.state

    _settle(c)


def _settle(c: Conversation) -> None:
    """Past every lease and deadline, one claim per operation settles it, and the conversation moves on."""
    c.advance(DEFAULT_SETTLE_WITHIN_MS + 60_000)
    for op_id in list(c.state.operations):
        c.claim(op_id, worker="sweeper")
    for op in c.state.operations.values():
        assert op.state in FINAL_STATES, f"{op.operation_id} is {op.state} after its deadline"
        assert not op.may_produce_output and op.lease_owner is None
    c.user("next question")
    c.request("op-next")
    if c.state.operations["op-next"].state == DispatchState.PREPARED:
        c.attempt("op-next")
        assert c.state.operations["op-next"].state == DispatchState.DISPATCHING
