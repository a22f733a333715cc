"""A final operation keeps its request without tools and policy (`settled_request`): a conversation keeps
every operation it ran, and a toolset once per operation was most of its state. Nothing the fold emits
depends on it; the request's part on the changelog is written again once, small."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.dispatch import step as step_module
from turnledger.dispatch.engine import BatchEngine, read_state
from turnledger.dispatch.state import FINAL_STATES, OperationState, settled_request, settled_state
from turnledger.dispatch.state_layout import request_key
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchDecision, DispatchRequested, DispatchState, IngressEvent
from turnledger.model.reasons import ReasonCode

from .scenario import ADAPTER, MODEL, WEATHER, Conversation, text_stream, tool_stream
from .test_decisions_unvalidated import FOLD_SCENARIOS
from .test_state_layout import Store, _record

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


def test_a_committed_operation_keeps_its_request_without_tools_and_policy() -> None:
    c = _streaming("weather in Paris?")
    deltas = tool_stream([("call-1", "get_weather", ['{"city": ', '"Paris"}'])])
    c.deltas(deltas[:-1])
    live = c.state.operations["op-1"]
    assert (live.state, live.request) == (S.STREAMING, _asked(c))  # the assembler checks calls against it
    assert live.request.tools == (WEATHER,) and live.request.policy == POLICY
    c.deltas(deltas[-1:])
    op = c.state.operations["op-1"]
    assert op.state is S.COMMITTED and op.assembler is None
    assert op.request == _without_tools(_asked(c))
    assert (op.request.tools, op.request.policy) == ((), {})
    assert op.request.deadline_at_ms == _asked(c).deadline_at_ms


def test_a_rejected_operation_keeps_its_request_without_tools_and_policy() -> None:
    c = Conversation()
    c.user("hello")
    _request(c, model_revision="anthropic/no-such-model@2025-01")
    op = c.state.operations["op-1"]
    assert (op.state, c.of(DispatchDecision)[-1].reason) == (S.REJECTED, ReasonCode.UNKNOWN_MODEL)
    assert op.request == _without_tools(_asked(c))


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
    assert cancelled.request == _without_tools(_asked(c))
    c.terminated()
    decisions = c.of(DispatchDecision)
    assert decisions[-1].attempt_terminated and decisions[-1].state is S.CANCELLED
    assert {d.deadline_at_ms for d in decisions} == {_asked(c).deadline_at_ms}
    assert _asked(c).deadline_at_ms == _asked(c).occurred_at_ms + 90_000


def test_the_request_part_is_written_again_once_when_the_operation_is_final() -> None:
    c = _streaming("weather in Paris?")
    c.deltas(text_stream(["Sunny."]))
    c.user("thanks")
    engine, store, written = BatchEngine(), Store(), []
    key = request_key("conv-1", "op-1")
    for offset, event in enumerate(c.events):
        store.log.clear()
        engine.process_batch([_record(event, offset)], store)
        written.append([value for k, value in store.log if k == key])
    first, settled = written[1][0], written[-2][0]
    assert [len(values) for values in written] == [0, 1, 0, 0, 0, 1, 0]  # asked, then committed
    assert b"get_weather" in first and b"temperature" in first
    assert b"get_weather" not in settled and b"temperature" not in settled
    assert len(first) - len(settled) > len(WEATHER.model_dump_json())
    assert store[key] == settled
    assert read_state(store, "conv-1") == c.state


def test_no_output_of_any_fold_scenario_depends_on_settled_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fold scenario run again with final operations keeping their whole request: the same
    outputs, byte for byte, and the same states but for those requests."""

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
        patched.setattr(step_module, "settled_request", lambda op: None)
        whole_outputs, whole_states = run()
    assert len(settled_outputs) >= 150 and settled_outputs == whole_outputs
    settled_count = 0
    for settled, whole in zip(settled_states, whole_states, strict=True):
        assert settled.keys() == whole.keys()
        for op_id, op in settled.items():
            kept = whole[op_id]
            expected = settled_request(kept)
            settled_count += expected is not None
            assert op.request == (kept.request if expected is None else expected)
            assert op.model_copy(update={"request": kept.request}) == kept
            if op.state in FINAL_STATES and op.assembler is None:
                assert (op.request.tools, op.request.policy) == ((), {})
    assert settled_count >= 20


@pytest.mark.parametrize(
    ("state", "assembler", "tools", "policy", "settles"),
    [
        (S.COMMITTED, None, (WEATHER,), {}, True),
        (S.REJECTED, None, (), POLICY, True),
        (S.CANCELLED, None, (WEATHER,), POLICY, True),
        (S.CANCELLED, None, (), {}, False),  # nothing to drop: the same request, no new part
        (
            S.CANCELLED,
            {"blocks": []},
            (WEATHER,),
            POLICY,
            False,
        ),  # an assembler checks calls against the tools
        (S.STREAMING, None, (WEATHER,), POLICY, False),
        (S.WAITING, None, (WEATHER,), POLICY, False),
        (S.UNKNOWN, None, (WEATHER,), POLICY, False),
    ],
)
def test_which_operations_settle_their_request(
    state: DispatchState,
    assembler: dict[str, Any] | None,
    tools: tuple[Any, ...],
    policy: dict[str, Any],
    settles: bool,
) -> None:
    c = Conversation()
    _request(c, tools=tools, policy=policy)
    op = OperationState(operation_id="op-1", state=state, request=_asked(c), assembler=assembler)
    settled = settled_request(op)
    assert (settled is not None) == settles
    if settled is not None:
        assert settled == _without_tools(_asked(c)) and settled is not op.request


def test_a_state_an_earlier_release_wrote_is_settled_when_read_and_written_small_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An earlier release kept a final operation's whole request: the engine settles it when it reads
    the state, and the conversation's next write puts the request's part again, small."""
    with monkeypatch.context() as earlier_release:
        earlier_release.setattr(step_module, "settled_request", lambda op: None)
        c = _streaming("weather in Paris?")
        c.deltas(text_stream(["Sunny."]))
        store = Store()
        BatchEngine().process_batch([_record(event, offset) for offset, event in enumerate(c.events)], store)
    assert c.state.operations["op-1"].request == _asked(c)  # committed, whole
    key = request_key("conv-1", "op-1")
    whole = store[key]
    assert b"get_weather" in whole
    assert read_state(store, "conv-1") == c.state
    assert settled_state(c.state) is not c.state

    c.user("thanks")
    store.log.clear()
    outputs = BatchEngine().process_batch([_record(c.events[-1], len(c.events) - 1)], store)
    assert [o.record.model_dump_json() for o in outputs] == [
        o.model_dump_json() for o in c.outputs[-len(outputs) :]
    ]
    written = dict(store.log)
    assert b"get_weather" not in written[key] and len(written[key]) < len(whole)
    assert read_state(store, "conv-1") == settled_state(c.state)
    assert read_state(store, "conv-1").operations["op-1"].request == _without_tools(_asked(c))  # type: ignore[union-attr]


def test_a_state_with_nothing_to_settle_is_read_as_it_is() -> None:
    c = _streaming("weather in Paris?")
    assert settled_state(c.state) is c.state  # live: it keeps its tools
    c.deltas(text_stream(["Sunny."]))
    assert settled_state(c.state) is c.state  # final and settled by the fold already
