"""The demo's fault plan with every fault kind: a cut inside a call goes to a conversation whose first
answer has calls, by its marker, never to a request number that may be a text answer; an answer of
thinking alone goes to another such conversation, by its marker, to every attempt at its first question."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.demo.test_driver_moving import AnsweringClient
from turnledger.demo.driver import (
    SLOW_MARKER,
    Driver,
    _plain_conversations,
    cancels,
    interjects,
    limit_marker,
    limited_conversation,
    thinking_only_conversation,
    thinking_only_marker,
    throttled,
    throttled_marker,
)
from turnledger.demo.run import DemoOptions, _fault_plan
from turnledger.fake_provider import Fault, FaultKind
from turnledger.fake_provider.faults import DRAWN_KINDS
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


def test_the_thinking_only_conversation_is_the_second_that_neither_cancels_interjects_nor_is_throttled() -> (
    None
):
    plain = [
        i
        for i in range(24)
        if not cancels(7, i, 0.2) and not interjects(7, i, 0.1, 0.2) and not throttled(7, i, 0.1)
    ]
    assert len(plain) > 2
    assert thinking_only_conversation(7, 24, **RATES) == plain[1]
    assert thinking_only_conversation(7, 1, cancel_rate=0.0, interject_rate=0.0, throttle_rate=0.0) is None
    assert thinking_only_conversation(7, 2, cancel_rate=0.0, interject_rate=0.0, throttle_rate=0.0) == 1


def test_every_fault_kind_scripts_the_cut_and_thinking_alone_by_markers_the_others_by_request_number() -> (
    None
):
    options = DemoOptions(conversations=24, seed=7, every_fault_kind=True, **RATES)
    plan = _fault_plan(options)
    chosen = limited_conversation(7, 24, **RATES)
    thinking = thinking_only_conversation(7, 24, **RATES)
    assert chosen is not None and thinking is not None and thinking != chosen
    assert plan.first_with_marker[limit_marker(chosen)] == (Fault(FaultKind.MAX_TOKENS_IN_CALL),)
    assert thinking_only_marker(thinking) not in plan.first_with_marker
    assert plan.by_last_user_marker == {
        "[demo: slow stream]": (Fault(FaultKind.SLOW, 300),),
        thinking_only_marker(thinking): (Fault(FaultKind.THINKING_ONLY),),
    }
    scripted = [(i, f.kind) for i, faults in plan.by_request.items() for f in faults]
    by_marker = (FaultKind.MAX_TOKENS_IN_CALL, FaultKind.THINKING_ONLY)
    assert scripted == [(i, k) for i, k in enumerate(FaultKind) if k not in by_marker]


def test_without_every_fault_kind_no_conversation_is_cut() -> None:
    plan = _fault_plan(DemoOptions(conversations=24, seed=7, **RATES))
    assert not any(marker.startswith("[demo: output limit") for marker in plan.first_with_marker)
    assert list(plan.by_last_user_marker) == ["[demo: slow stream]"]
    assert plan.by_request == {}


async def test_the_limited_and_the_thinking_only_conversations_ask_their_first_question_with_the_marker() -> (
    None
):
    questions: dict[int, list[str]] = {}
    for index in (3, 4, 5):
        client = AnsweringClient()
        driver = Driver(
            client, seed=7, turns=2, invalid_rate=0.0, op_timeout_s=5.0, limited_conversation=3,
            thinking_only_conversation=4,
        )  # fmt: skip
        client.driver = driver
        await driver.conversation(index)
        turns = [e for e in client.events if isinstance(e, TurnSubmitted)]
        questions[index] = [t.blocks[0].text or "" for t in turns]
    assert [q.startswith(limit_marker(3) + " ") for q in questions[3]] == [True, False]
    assert [q.startswith(thinking_only_marker(4) + " ") for q in questions[4]] == [True, False]
    assert not any("[demo: output limit" in q or "[demo: thinking only" in q for q in questions[5])
    assert not any("[demo: thinking only" in q for q in questions[3])


def test_the_plain_conversations_are_every_one_that_neither_cancels_interjects_nor_is_throttled() -> None:
    plain = [
        i
        for i in range(24)
        if not cancels(7, i, 0.2) and not interjects(7, i, 0.1, 0.2) and not throttled(7, i, 0.1)
    ]
    assert _plain_conversations(7, 24, 0.2, 0.1, 0.1) == plain
    assert 0 < len(plain) < 24


def test_the_plan_draws_the_drawn_kinds_at_the_fault_rate_and_throttles_each_throttled_conversation() -> None:
    options = DemoOptions(
        conversations=24, seed=7, fault_rate=0.05, throttle_ms=250, every_fault_kind=True, **RATES
    )
    plan = _fault_plan(options)
    assert plan.rates == dict.fromkeys(DRAWN_KINDS, 0.05)
    assert _fault_plan(replace(options, fault_rate=0.0)).rates == {}
    throttled_ones = [i for i in range(24) if throttled(7, i, 0.1)]
    assert throttled_ones
    chosen = limited_conversation(7, 24, **RATES)
    assert chosen is not None
    assert plan.first_with_marker == {
        **{throttled_marker(i): (Fault(FaultKind.RATE_LIMITED, 250),) for i in throttled_ones},
        limit_marker(chosen): (Fault(FaultKind.MAX_TOKENS_IN_CALL),),
    }


@pytest.mark.parametrize(
    ("cancel_rate", "interject_rate", "slow"), [(0.2, 0.0, True), (0.0, 0.1, True), (0.0, 0.0, False)]
)
def test_only_a_run_that_cancels_or_interjects_slows_the_answers_to_the_slow_marker(
    cancel_rate: float, interject_rate: float, slow: bool
) -> None:
    options = DemoOptions(
        conversations=24, seed=7, cancel_rate=cancel_rate, interject_rate=interject_rate, slow_ms=120
    )
    expected = {SLOW_MARKER: (Fault(FaultKind.SLOW, 120),)} if slow else {}
    assert _fault_plan(options).by_last_user_marker == expected
