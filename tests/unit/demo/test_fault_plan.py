"""The demo's fault plan with every fault kind: a fault that needs a particular answer goes to a chosen
conversation by its marker, never to a request number that may be a text answer, a throttled request or
an answer of thinking alone: a cut inside a call and a call's arguments cut mid-string to the first answer
of a conversation whose first answer has calls, an answer of thinking alone to every attempt at another's
first question."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.demo.test_driver_moving import AnsweringClient
from turnledger.demo.driver import (
    SLOW_MARKER,
    Driver,
    cancels,
    fault_marker,
    interjects,
    plain_conversations,
    throttled,
    throttled_marker,
)
from turnledger.demo.run import BY_MARKER_ONLY, MARKED_FAULTS, DemoOptions, _fault_plan, _marked
from turnledger.fake_provider import Fault, FaultKind
from turnledger.fake_provider.faults import DRAWN_KINDS, ScriptCursor
from turnledger.model.events import TurnSubmitted

RATES = {"cancel_rate": 0.2, "interject_rate": 0.1, "throttle_rate": 0.1}
K = FaultKind


def _plain() -> list[int]:
    return [
        i
        for i in range(24)
        if not cancels(7, i, 0.2) and not interjects(7, i, 0.1, 0.2) and not throttled(7, i, 0.1)
    ]


def test_each_marked_fault_goes_to_one_conversation_that_neither_cancels_interjects_nor_is_throttled() -> (
    None
):
    plain = _plain()
    marked = _marked(DemoOptions(conversations=24, seed=7, every_fault_kind=True, **RATES))
    assert {i: m.kind for i, m in marked.items()} == {
        plain[0]: K.MAX_TOKENS_IN_CALL,
        plain[1]: K.THINKING_ONLY,
        plain[2]: K.TRUNCATED_ARGS,
        plain[3]: K.RATE_LIMITED,
        plain[4]: K.HTTP_STATUS,
    }
    assert _marked(DemoOptions(conversations=24, seed=7, **RATES)) == {}


def test_every_fault_kind_with_too_few_plain_conversations_is_refused_not_left_unscripted() -> None:
    options = DemoOptions(conversations=4, seed=7, every_fault_kind=True, cancel_rate=0.0, interject_rate=0.0)
    with pytest.raises(ValueError, match=r"every fault kind needs 5 conversations .* this run has 4"):
        _fault_plan(options)


def test_every_fault_kind_scripts_the_faults_needing_an_answer_by_markers_the_others_by_request_number() -> (
    None
):
    """`truncate_tool_args` was scripted by request number: a CI run's 4th request was the answer of
    thinking alone (no call left to cut), so the run never applied it."""
    plan = _fault_plan(DemoOptions(conversations=24, seed=7, every_fault_kind=True, **RATES))
    plain = _plain()
    marked = {K.MAX_TOKENS_IN_CALL, K.THINKING_ONLY, K.TRUNCATED_ARGS, K.RATE_LIMITED, K.HTTP_STATUS}
    assert frozenset(marked) == BY_MARKER_ONLY
    assert [m.every_attempt for m in MARKED_FAULTS] == [False, True, False, False, False]
    assert plan.first_with_marker[fault_marker("max_tokens_in_call", plain[0])] == (
        Fault(K.MAX_TOKENS_IN_CALL),
    )
    assert plan.first_with_marker[fault_marker("truncate_tool_args", plain[2])] == (Fault(K.TRUNCATED_ARGS),)
    assert fault_marker("thinking_only", plain[1]) not in plan.first_with_marker
    assert plan.by_last_user_marker == {
        "[demo: slow stream]": (Fault(K.SLOW, 300),),
        f"[demo: thinking_only {plain[1]}]": (Fault(K.THINKING_ONLY),),
    }
    scripted = [(i, f.kind) for i, faults in plan.by_unmarked_request.items() for f in faults]
    assert scripted == [(i, k) for i, k in enumerate(FaultKind) if k not in BY_MARKER_ONLY]
    # a refusal by request number could fall on a marked conversation's first request and take its
    # content fault with it (a CI run lost max_tokens_in_call so): refusals are marked too
    assert {k for _, k in scripted}.isdisjoint(marked)


@pytest.mark.parametrize("arrives", range(len(FaultKind)))
def test_a_marked_question_arriving_at_any_request_number_gets_its_own_fault_alone(arrives: int) -> None:
    """A CI run lost the answer of thinking alone: its conversation's first request arrived at the number
    the demo scripts `refusal_after` for, which stopped it as a refusal. A fault by number now goes to
    the next request without a marked fault (`FaultPlan.by_unmarked_request`), whenever the marked one
    arrives."""
    plan = _fault_plan(DemoOptions(conversations=24, seed=7, every_fault_kind=True, **RATES))
    plain = _plain()
    cursor = ScriptCursor()
    got = [plan.scripted(cursor, b"hello", "hello") for _ in range(arrives)]
    question = f"{fault_marker('thinking_only', plain[1])} What is the weather?"
    thinking = plan.scripted(cursor, question.encode(), question)
    got += [plan.scripted(cursor, b"hello", "hello") for _ in range(len(FaultKind) - arrives)]
    assert thinking == (Fault(K.THINKING_ONLY),)
    assert [f.kind for faults in got for f in faults] == [k for k in FaultKind if k not in BY_MARKER_ONLY]


def test_without_every_fault_kind_no_conversation_is_cut() -> None:
    plan = _fault_plan(DemoOptions(conversations=24, seed=7, **RATES))
    assert all(marker.startswith("[demo: throttled ") for marker in plan.first_with_marker)
    assert list(plan.by_last_user_marker) == ["[demo: slow stream]"]
    assert plan.by_request == plan.by_unmarked_request == {}


async def test_a_marked_conversation_asks_its_first_question_with_its_marker_and_no_other() -> None:
    questions: dict[int, list[str]] = {}
    markers = {3: fault_marker("max_tokens_in_call", 3), 4: fault_marker("thinking_only", 4)}
    for index in (3, 4, 5):
        client = AnsweringClient()
        driver = Driver(client, seed=7, turns=2, invalid_rate=0.0, op_timeout_s=5.0, markers=markers)
        client.driver = driver
        await driver.conversation(index)
        turns = [e for e in client.events if isinstance(e, TurnSubmitted)]
        questions[index] = [t.blocks[0].text or "" for t in turns]
    assert [q.startswith("[demo: max_tokens_in_call 3] ") for q in questions[3]] == [True, False]
    assert [q.startswith("[demo: thinking_only 4] ") for q in questions[4]] == [True, False]
    assert not any("[demo: " in q for q in questions[5])
    assert not any("thinking_only" in q for q in questions[3])


def test_the_plain_conversations_are_every_one_that_neither_cancels_interjects_nor_is_throttled() -> None:
    plain = _plain()
    assert plain_conversations(7, 24, **RATES) == plain
    assert 2 < len(plain) < 24


def test_the_plan_draws_the_drawn_kinds_at_the_fault_rate_and_throttles_each_throttled_conversation() -> None:
    options = DemoOptions(
        conversations=24, seed=7, fault_rate=0.05, throttle_ms=250, every_fault_kind=True, **RATES
    )
    plan = _fault_plan(options)
    assert plan.rates == dict.fromkeys(DRAWN_KINDS, 0.05)
    assert _fault_plan(replace(options, fault_rate=0.0)).rates == {}
    throttled_ones = [i for i in range(24) if throttled(7, i, 0.1)]
    assert throttled_ones
    plain = _plain()
    assert plan.first_with_marker == {
        **{throttled_marker(i): (Fault(FaultKind.RATE_LIMITED, 250),) for i in throttled_ones},
        fault_marker("max_tokens_in_call", plain[0]): (Fault(FaultKind.MAX_TOKENS_IN_CALL),),
        fault_marker("truncate_tool_args", plain[2]): (Fault(FaultKind.TRUNCATED_ARGS),),
        fault_marker("rate_limited", plain[3]): (Fault(FaultKind.RATE_LIMITED),),
        fault_marker("http_status", plain[4]): (Fault(FaultKind.HTTP_STATUS),),
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
