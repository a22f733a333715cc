"""A final operation keeps its request without policy, and without tools once another operation follows
it (`settled_request`): a conversation keeps every operation it ran, and a toolset once per operation
was most of its state. The last operation keeps its tools so that the changelog keeps the toolset,
written once per conversation (format 8). Nothing the fold emits depends on it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from turnledger.codec import decode
from turnledger.dispatch import step as step_module
from turnledger.dispatch.engine import BatchEngine, read_state
from turnledger.dispatch.state import FINAL_STATES, OperationState, settled_request, settled_state
from turnledger.dispatch.state_keys import request_key, toolset_key
from turnledger.model.base import Frozen
from turnledger.model.events import (
    ConversationSnapshot,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    IngressEvent,
)
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import toolset_digest

from .scenario import ADAPTER, MODEL, WEATHER, Conversation, text_stream, tool_stream
from .test_decisions_unvalidated import FOLD_SCENARIOS
from .test_state_layout import PARIS, Store, _record

S = DispatchState
POLICY = {"temperature": 0.2, "top_p": 0.9}


def _asked(c: Conversation, op: str = "op-1") -> DispatchRequested:
    return next(e for e in c.events if isinstance(e, DispatchRequested) and e.operation_id == op)


def _request(c: Conversation, op: str = "op-1", **fields: Any) -> None:
    values: dict[str, Any] = {
        "operation_id": op,
        "adapter": ADAPTER,
        "provider": "anthropic",
        "model_revision": MODEL,
        "tools": (WEATHER,),
        "max_output_tokens": 256,
        "policy": POLICY,
        **fields,
    }
    c.apply(DispatchRequested(**c._common(), **values))


def _streaming(text: str, **fields: Any) -> Conversation:
    """A conversation whose operation op-1, asked for with `fields`, has its attempt sent and bound."""
    c = Conversation()
    c.user(text)
    _request(c, **fields)
    c.attempt()
    c.sent()
    c.bind()
    return c


def _without_tools(asked: DispatchRequested) -> DispatchRequested:
    return asked.model_copy(update={"tools": (), "policy": {}})


def _without_policy(asked: DispatchRequested) -> DispatchRequested:
    return asked.model_copy(update={"policy": {}})


def test_a_committed_operation_keeps_its_tools_until_the_next_operation_and_never_its_policy() -> None:
    c = _streaming("weather in Paris?")
    deltas = tool_stream([("call-1", "get_weather", ['{"city": ', '"Paris"}'])])
    c.deltas(deltas[:-1])
    live = c.state.operations["op-1"]
    assert (live.state, live.request) == (S.STREAMING, _asked(c))  # the assembler checks calls against it
    assert live.request.tools == (WEATHER,) and live.request.policy == POLICY
    c.deltas(deltas[-1:])
    op = c.state.operations["op-1"]
    assert op.state is S.COMMITTED and op.assembler is None
    assert op.request == _without_policy(_asked(c))  # the last operation: its toolset stays named
    assert op.request.deadline_at_ms == _asked(c).deadline_at_ms
    c.tool_results(("call-1", "get_weather", PARIS))
    assert c.state.operations["op-1"] is op
    _request(c, "op-2")
    settled = c.state.operations["op-1"]
    assert settled.request == _without_tools(_asked(c))
    assert settled == op.model_copy(update={"request": settled.request})  # nothing else changed
    assert c.state.operations["op-2"].request == _asked(c, "op-2")


def test_a_rejected_operation_keeps_its_request_without_policy() -> None:
    c = Conversation()
    c.user("hello")
    _request(c, model_revision="anthropic/no-such-model@2025-01")
    op = c.state.operations["op-1"]
    assert (op.state, c.of(DispatchDecision)[-1].reason) == (S.REJECTED, ReasonCode.UNKNOWN_MODEL)
    assert op.request == _without_policy(_asked(c))


def test_an_operation_still_waiting_keeps_its_whole_request() -> None:
    c = Conversation()
    c.user("weather in Paris?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": "Paris"}'])]))
    _request(c, "op-2")  # the call has no result yet: it waits
    assert c.state.operations["op-2"].state is S.WAITING
    assert c.state.operations["op-2"].request == _asked(c, "op-2")
    assert c.state.operations["op-1"].request == _without_tools(_asked(c, "op-1"))


def test_a_cancelled_attempt_confirmed_later_is_decided_with_the_requests_deadline() -> None:
    """A cancel is final at once, before the holder confirms the attempt ended: the decisions after it
    still carry the deadline the settled request keeps."""
    c = _streaming("tell me a story", settle_within_ms=90_000)
    c.deltas(text_stream(["Once", " upon"], stop=False))
    c.cancel("op-1")
    cancelled = c.state.operations["op-1"]
    assert cancelled.state is S.CANCELLED and cancelled.may_produce_output
    assert cancelled.request == _without_policy(_asked(c))
    c.terminated()
    decisions = c.of(DispatchDecision)
    assert decisions[-1].attempt_terminated and decisions[-1].state is S.CANCELLED
    assert {d.deadline_at_ms for d in decisions} == {_asked(c).deadline_at_ms}
    assert _asked(c).deadline_at_ms == _asked(c).occurred_at_ms + 90_000


def test_a_conversations_toolset_is_written_once_and_its_requests_parts_small() -> None:
    c = _streaming("weather in Paris?")
    c.deltas(text_stream(["Sunny."]))
    c.user("and in Rome?")
    _request(c, "op-2")
    engine, store, written = BatchEngine(), Store(), []
    for offset, event in enumerate(c.events):
        store.log.clear()
        engine.process_batch([_record(event, offset)], store)
        written.append(list(store.log))
    first, second = request_key("conv-1", "op-1"), request_key("conv-1", "op-2")
    toolset = toolset_key("conv-1", toolset_digest((WEATHER,)))
    assert [[k for k, _ in w if k in (first, second, toolset)] for w in written] == [
        [],
        [first, toolset],  # asked for: its request names its toolset, written under its digest
        [],
        [],
        [],
        [first],  # committed: its policy dropped, its tools kept (it is the last operation)
        [],
        [first, second],  # the next one: the first's tools dropped, the second names the same toolset
    ]
    parts = {k: v for w in written for k, v in w}
    snapshot = decode(parts[toolset])
    assert isinstance(snapshot, ConversationSnapshot)
    assert orjson.loads(snapshot.state) == [WEATHER.model_dump(mode="json")]
    assert all(b"get_weather" not in v for k, v in parts.items() if k in (first, second))
    assert all(b"temperature" not in v for v in (store[first], written[5][0][1]))
    assert read_state(store, "conv-1") == c.state


def test_no_output_of_any_fold_scenario_depends_on_settled_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fold scenario run again with final operations keeping their whole request, and again with
    every final operation's tools dropped, the last's too: the same outputs, byte for byte, and the
    same states but for those requests."""

    def run() -> tuple[list[str], list[dict[str, OperationState]]]:
        outputs: list[str] = []
        operations: list[dict[str, OperationState]] = []
        apply = Conversation.apply

        def recording(self: Conversation, event: IngressEvent) -> list[Frozen]:
            emitted = apply(self, event)
            outputs.extend(o.model_dump_json() for o in emitted)
            operations.append(self.state.operations)
            return emitted

        with monkeypatch.context() as patched:
            patched.setattr(Conversation, "apply", recording)
            for scenario in FOLD_SCENARIOS:
                scenario()
        return outputs, operations

    settled_outputs, settled_states = run()
    with monkeypatch.context() as patched:
        patched.setattr(step_module, "settled_request", lambda op, last=False: None)
        whole_outputs, whole_states = run()
    with monkeypatch.context() as patched:
        patched.setattr(step_module, "settled_request", lambda op, last=False: settled_request(op))
        none_kept_outputs, none_kept_states = run()
    assert len(settled_outputs) >= 150 and settled_outputs == whole_outputs == none_kept_outputs
    toolless = [op for ops in none_kept_states for op in ops.values() if op.request.tools == ()]
    assert sum(op.state in FINAL_STATES for op in toolless) >= 20
    settled_count = 0
    for settled, whole in zip(settled_states, whole_states, strict=True):
        assert settled.keys() == whole.keys()
        last = next(reversed(whole), None)
        for op_id, op in settled.items():
            kept = whole[op_id]
            expected = settled_request(kept, op_id == last)
            settled_count += expected is not None
            assert op.request == (kept.request if expected is None else expected)
            assert op.model_copy(update={"request": kept.request}) == kept
            if op.state in FINAL_STATES and op.assembler is None:
                assert op.request.policy == {} and (op.request.tools == () or op_id == last)
    assert settled_count == 3


@pytest.mark.parametrize(
    ("state", "assembler", "tools", "policy", "last", "settles"),
    [
        (S.COMMITTED, None, (WEATHER,), {}, False, True),
        (S.COMMITTED, None, (WEATHER,), {}, True, False),  # the last keeps its tools: nothing to drop
        (S.COMMITTED, None, (WEATHER,), POLICY, True, True),  # its policy goes
        (S.REJECTED, None, (), POLICY, False, True),
        (S.CANCELLED, None, (WEATHER,), POLICY, False, True),
        (S.CANCELLED, None, (), {}, False, False),  # nothing to drop: the same request, no new part
        (S.CANCELLED, {"blocks": []}, (WEATHER,), POLICY, False, False),  # an assembler checks calls
        (S.STREAMING, None, (WEATHER,), POLICY, False, False),
        (S.WAITING, None, (WEATHER,), POLICY, False, False),
        (S.UNKNOWN, None, (WEATHER,), POLICY, False, False),
    ],
)
def test_which_operations_settle_their_request(
    state: DispatchState,
    assembler: dict[str, Any] | None,
    tools: tuple[Any, ...],
    policy: dict[str, Any],
    last: bool,
    settles: bool,
) -> None:
    c = Conversation()
    _request(c, tools=tools, policy=policy)
    op = OperationState(operation_id="op-1", state=state, request=_asked(c), assembler=assembler)
    settled = settled_request(op, last)
    assert (settled is not None) == settles
    if settled is not None:
        expected = _without_policy(_asked(c)) if last else _without_tools(_asked(c))
        assert settled == expected and settled is not op.request


def test_a_state_an_earlier_release_wrote_is_settled_when_read_and_written_small_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An earlier release kept a final operation's whole request: the engine settles it when it reads
    the state, and the conversation's next write puts the request's part again, small."""
    with monkeypatch.context() as earlier_release:
        earlier_release.setattr(step_module, "settled_request", lambda op, last=False: None)
        c = _streaming("weather in Paris?")
        c.deltas(text_stream(["Sunny."]))
        store = Store()
        BatchEngine().process_batch([_record(event, offset) for offset, event in enumerate(c.events)], store)
    assert c.state.operations["op-1"].request == _asked(c)  # committed, whole
    key = request_key("conv-1", "op-1")
    whole = store[key]
    assert b"temperature" in whole
    assert read_state(store, "conv-1") == c.state
    assert settled_state(c.state) is not c.state

    c.user("thanks")
    store.log.clear()
    outputs = BatchEngine().process_batch([_record(c.events[-1], len(c.events) - 1)], store)
    assert [o.record.model_dump_json() for o in outputs] == [
        o.model_dump_json() for o in c.outputs[-len(outputs) :]
    ]
    written = dict(store.log)
    assert b"temperature" not in written[key] and len(written[key]) < len(whole)
    assert read_state(store, "conv-1") == settled_state(c.state)
    assert read_state(store, "conv-1").operations["op-1"].request == _without_policy(_asked(c))  # type: ignore[union-attr]


def test_a_state_with_nothing_to_settle_is_read_as_it_is() -> None:
    c = _streaming("weather in Paris?")
    assert settled_state(c.state) is c.state  # live: it keeps its tools
    c.deltas(text_stream(["Sunny."]))
    assert settled_state(c.state) is c.state  # final and settled by the fold already
