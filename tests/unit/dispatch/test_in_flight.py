"""`ConversationState.in_flight` asks only the operations in a state that may produce output."""

from __future__ import annotations

import itertools

from turnledger.dispatch import state as state_module
from turnledger.dispatch.state import ConversationState, OperationState, attempt_may_produce_output
from turnledger.model.events import DispatchRequested, DispatchState


def test_no_state_left_out_can_produce_output() -> None:
    outside = set(DispatchState) - state_module._MAY_PRODUCE
    assert outside == {
        DispatchState.WAITING,
        DispatchState.PREPARED,
        DispatchState.PAUSED,
        DispatchState.COMMITTED,
        DispatchState.REJECTED,
    }
    for state, generation, terminated in itertools.product(outside, (0, 1, 7), (False, True)):
        assert not attempt_may_produce_output(state, generation, terminated)
    inside = [
        (state, generation, terminated)
        for state, generation, terminated in itertools.product(
            state_module._MAY_PRODUCE, (0, 1), (False, True)
        )
        if attempt_may_produce_output(state, generation, terminated)
    ]
    assert {state for state, _, _ in inside} == state_module._MAY_PRODUCE


def _op(operation_id: str, state: DispatchState, generation: int, terminated: bool = False) -> OperationState:
    request = DispatchRequested(
        conversation_id="c",
        event_id=f"e-{operation_id}",
        occurred_at_ms=1,
        operation_id=operation_id,
        adapter="anthropic-messages@2",
        provider="anthropic",
        model_revision="m",
        max_output_tokens=10,
    )
    return OperationState(
        operation_id=operation_id,
        state=state,
        request=request,
        attempt_generation=generation,
        attempt_terminated=terminated,
    )


def test_in_flight_is_every_other_operation_that_may_produce_output() -> None:
    ops = [
        _op(f"op-{i}", state, generation, terminated)
        for i, (state, generation, terminated) in enumerate(
            itertools.product(DispatchState, (0, 2), (False, True))
        )
    ]
    state = ConversationState.empty("c").model_copy(
        update={"operations": {op.operation_id: op for op in ops}}
    )
    expected = [op for op in ops if op.may_produce_output]
    assert state.in_flight() == expected and len(expected) == 14
    assert state.in_flight(except_id=expected[0].operation_id) == expected[1:]
