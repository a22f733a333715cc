"""The demo's fault plan with every fault kind: a cut inside a call goes to a conversation whose first
answer has calls, by its marker, never to a request number that may be a text answer."""

from __future__ import annotations

from tests.unit.demo.test_driver_moving import AnsweringClient
from turnledger.demo.driver import Driver, cancels, interjects, limit_marker, limited_conversation, throttled
from turnledger.demo.run import DemoOptions, _fault_plan
from turnledger.fake_provider import Fault, FaultKind
from turnledger.model.events import TurnSubmitted

RATES = {"cancel_rate": 0.2, "interject_rate": 0.1, "throttle_rate": 0.1}


def test_the_limited_conversation_is_the_first_that_neither_cancels_interjects_nor_is_throttled() -> None:
    chosen = limited_conversation(7, 24, **RATES)
    assert chosen is not None
    plain = [
        i
        for i in range(24)
        if not cancels(7, i, 0.2) and not interjects(7, i, 0.1, 0.2) and not throttled(7, i, 0.1)
    ]
    assert chosen == plain[0]
    assert limited_conversation(7, 24, cancel_rate=1.0, interject_rate=0.0, throttle_rate=0.0) is None


def test_every_fault_kind_scripts_the_cut_by_the_marker_and_the_others_by_request_number() -> None:
    options = DemoOptions(conversations=24, seed=7, every_fault_kind=True, **RATES)
    plan = _fault_plan(options)
    chosen = limited_conversation(7, 24, **RATES)
    assert chosen is not None
    assert plan.first_with_marker[limit_marker(chosen)] == (Fault(FaultKind.MAX_TOKENS_IN_CALL),)
    scripted = [f.kind for faults in plan.by_request.values() for f in faults]
    assert scripted == [k for k in FaultKind if k is not FaultKind.MAX_TOKENS_IN_CALL]


def test_without_every_fault_kind_no_conversation_is_cut() -> None:
    plan = _fault_plan(DemoOptions(conversations=24, seed=7, **RATES))
    assert not any(marker.startswith("[demo: output limit") for marker in plan.first_with_marker)
    assert plan.by_request == {}


async def test_the_limited_conversation_asks_its_first_question_with_the_marker() -> None:
    questions: dict[int, list[str]] = {}
    for index in (3, 4):
        client = AnsweringClient()
        driver = Driver(client, seed=7, turns=2, invalid_rate=0.0, op_timeout_s=5.0, limited_conversation=3)
        client.driver = driver
        await driver.conversation(index)
        turns = [e for e in client.events if isinstance(e, TurnSubmitted)]
        questions[index] = [t.blocks[0].text or "" for t in turns]
    assert [q.startswith(limit_marker(3)) for q in questions[3]] == [True, False]
    assert not any("[demo: output limit" in q for q in questions[4])
