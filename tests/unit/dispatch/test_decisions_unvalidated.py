"""`Step.decide` builds a `DispatchDecision` without validating it (`of_validated`): every decision of
every fold scenario is the very instance validation builds from the same values."""

from __future__ import annotations

import inspect

import pytest

from turnledger.dispatch.state import OperationState
from turnledger.dispatch.step import Step
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchDecision, IngressEvent
from turnledger.model.reasons import ReasonCode

from . import test_fold
from .scenario import Conversation

FOLD_SCENARIOS = [
    fn
    for name, fn in inspect.getmembers(test_fold, inspect.isfunction)
    if name.startswith("test_") and not inspect.signature(fn).parameters
]
FROM_OPERATION = [
    "operation_id",
    "state",
    "attempt_generation",
    "idempotency_key",
    "response_handle",
    "lease_owner",
    "attempt_terminated",
]


def test_a_decision_has_nothing_validation_could_change() -> None:
    """No validators and no constraints, and the fields taken from an operation have its types."""
    decorators = DispatchDecision.__pydantic_decorators__
    assert not (decorators.validators or decorators.field_validators or decorators.model_validators)
    assert not any(info.metadata for info in DispatchDecision.model_fields.values())
    for name in FROM_OPERATION:
        assert DispatchDecision.model_fields[name].annotation == OperationState.model_fields[name].annotation


def _assert_as_validated(decision: DispatchDecision) -> None:
    validated = DispatchDecision.model_validate(dict(decision.__dict__))
    assert list(decision.__dict__.items()) == list(validated.__dict__.items())
    assert [type(v) for v in decision.__dict__.values()] == [type(v) for v in validated.__dict__.values()]
    assert decision.__pydantic_fields_set__ == set(DispatchDecision.model_fields)
    assert decision.model_dump_json() == validated.model_dump_json()


def test_every_decision_of_every_fold_scenario_is_as_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    decisions: list[DispatchDecision] = []
    apply = Conversation.apply

    def checked(self: Conversation, event: IngressEvent) -> list[Frozen]:
        outputs = apply(self, event)
        decisions.extend(o for o in outputs if isinstance(o, DispatchDecision))
        return outputs

    monkeypatch.setattr(Conversation, "apply", checked)
    for scenario in FOLD_SCENARIOS:
        scenario()
    assert len(decisions) >= 98
    assert {d.reason for d in decisions} > {None} and {d.accepted for d in decisions} == {True, False}
    for decision in decisions:
        _assert_as_validated(decision)


def test_a_decision_of_other_types_than_its_fields_is_validated() -> None:
    """The types `decide` checks: a value of another type takes the validated path, which converts it
    (an int for `accepted`, a reason code's name for `reason`), never the unvalidated one."""
    c = Conversation()
    c.user("hello")
    c.request("op-1")
    op = c.state.operations["op-1"]
    step = Step(event=c.events[-1], state=c.state)
    step.decide(op, None, accepted=1, detail="x")  # type: ignore[arg-type]
    step.decide(op, None, accepted=True, reason="CAS_STATE_MISMATCH", detail="x")  # type: ignore[arg-type]
    step.decide(op, None, accepted=True, reason=ReasonCode.CAS_STATE_MISMATCH, detail="x")
    step.decide(op, None, accepted=True, detail="x")
    accepted_int, reason_name, typed, plain = step.outputs
    assert all(isinstance(d, DispatchDecision) for d in step.outputs)
    for converted, twin in ((accepted_int, plain), (reason_name, typed)):
        assert isinstance(converted, DispatchDecision) and isinstance(twin, DispatchDecision)
        assert [type(v) for v in converted.__dict__.values()] == [type(v) for v in twin.__dict__.values()]
        assert list(converted.__dict__.items()) == list(twin.__dict__.items())
        _assert_as_validated(converted)
