"""The demo's conversation whose first answer is thinking alone (`thinking_only`): the fold ends that
operation COMMITTED EMPTY_RESPONSE with no CommittedTurn, so the driver takes that decision as the
operation's outcome, counts it and lets the user speak next; the checks count it settled, never a
violation; the report shows the count."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tests.unit.demo.test_driver_moving import AnsweringClient
from tests.unit.demo.workload import evidence_of, last_decision, workload
from tests.unit.dispatch.test_provider_answers_commit import anthropic_thinking_only, streamed
from turnledger.demo.checks import all_checks
from turnledger.demo.driver import Driver, DriverStats, commits_no_turn, fault_marker
from turnledger.demo.report import render
from turnledger.demo.run import DemoOptions, DemoResult
from turnledger.model.events import (
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    IngressEvent,
    TurnSubmitted,
)
from turnledger.model.reasons import ReasonCode
from turnledger.replay.metrics import Metrics

S = DispatchState
R = ReasonCode
MARKER = fault_marker("thinking_only", 0)
DETAIL = "the provider's complete answer holds only thinking: nothing visible enters the history"


def _decision(state: DispatchState, reason: ReasonCode | None) -> DispatchDecision:
    decision: DispatchDecision = last_decision(workload(), "a", "op-2")
    return decision.model_copy(update={"state": state, "reason": reason})


@pytest.mark.parametrize(
    ("state", "reason", "no_turn"),
    [
        (S.COMMITTED, R.EMPTY_RESPONSE, True),
        (S.COMMITTED, None, False),
        (S.COMMITTED, R.OUTPUT_LIMIT_REACHED, False),
        (S.CANCELLED, R.EMPTY_RESPONSE, False),
    ],
)
def test_only_a_commit_of_nothing_visible_has_no_turn_behind_it(
    state: DispatchState, reason: ReasonCode | None, no_turn: bool
) -> None:
    assert commits_no_turn(_decision(state, reason)) is no_turn


class ThinkingOnlyClient(AnsweringClient):
    """Answers a dispatch for the marked question (or, `every`, each dispatch) with the fold's COMMITTED
    EMPTY_RESPONSE decision (no turn), every other one as `AnsweringClient` does; the normal commits'
    decisions come first."""

    def __init__(self, every: bool = False) -> None:
        super().__init__()
        self.every = every

    async def append(self, event: IngressEvent) -> None:
        assert self.driver is not None
        if isinstance(event, DispatchRequested):
            turns = [e for e in self.events if isinstance(e, TurnSubmitted)]
            if self.every or MARKER in (turns[-1].blocks[0].text or ""):
                self.events.append(event)
                ended = _decision(S.COMMITTED, R.EMPTY_RESPONSE).model_copy(
                    update={
                        "conversation_id": event.conversation_id,
                        "operation_id": event.operation_id,
                        "detail": DETAIL,
                    }
                )
                await self.driver.observe([ended])
                return
            committed = _decision(S.COMMITTED, None).model_copy(
                update={"conversation_id": event.conversation_id, "operation_id": event.operation_id}
            )
            await self.driver.observe([committed])  # not an outcome: its turn follows
        await super().append(event)


async def test_the_driver_counts_an_answer_with_nothing_visible_and_the_user_speaks_next() -> None:
    """Before, the driver waited for a turn that never came: the conversation stalled at its timeout."""
    client = ThinkingOnlyClient()
    driver = Driver(client, seed=7, turns=2, invalid_rate=0.0, op_timeout_s=1.0, markers={0: MARKER})
    client.driver = driver
    await driver.conversation(0)
    s = driver.stats
    assert (s.nothing_visible, s.completed, s.stalled, s.failed, s.dispatches, s.tool_rounds) == (
        1,
        1,
        0,
        0,
        3,
        1,
    )
    assert (s.user_turns, s.conversations) == (2, 1)
    questions = [e.blocks[0].text or "" for e in client.events if isinstance(e, TurnSubmitted)]
    assert [q.startswith(MARKER + " ") for q in questions] == [True, False]


def test_the_checks_count_a_commit_of_nothing_visible_settled_and_no_violation() -> None:
    """The fold's own records of an Anthropic answer of signed thinking alone at `end_turn`, in a
    conversation that moved between APIs: every check clean, the operation checked as settled and as a
    completed move, no assistant turn counted."""
    conversation = streamed("anthropic-messages", anthropic_thinking_only())
    evidence = evidence_of(conversation)
    final = last_decision(evidence, "c1", "op-1")
    assert (final.state, final.reason, final.detail) == (S.COMMITTED, R.EMPTY_RESPONSE, DETAIL)
    checks = {c.name: (c.checked, c.violations) for c in all_checks(evidence, [], moving=["c1"])}
    assert checks == {
        "every provider request = bytes of a CAS-accepted manifest": (0, 0),
        "every dispatched tool call is complete and schema-valid": (0, 0),
        "at most one canonical assistant turn per conversation revision": (0, 0),
        "every submitted turn is committed or rejected, exactly once": (1, 0),
        "no commit or tool call of a cancelled operation": (0, 0),
        "every dispatch settled (committed, rejected or cancelled)": (1, 0),
        "every dispatch of a conversation moving between APIs completes, none refused": (1, 0),
    }


def test_the_report_shows_the_answers_with_nothing_visible() -> None:
    result = DemoResult(
        options=DemoOptions(conversations=1),
        prefix="p-",
        seconds=1.0,
        driver=DriverStats(completed=1, nothing_visible=1),
        worker_counts={},
        faults={"thinking_only": 1},
        requests=3,
        checks=[],
        metrics=Metrics(),
    )
    out = io.StringIO()
    render(result, Console(file=out, width=200))
    [row] = [line for line in out.getvalue().splitlines() if "nothing visible" in line]
    assert [cell.strip() for cell in row.split("│")[1:3]] == [
        "answers with nothing visible (COMMITTED EMPTY_RESPONSE, no turn)",
        "1",
    ]


async def test_each_answer_with_nothing_visible_is_counted() -> None:
    """Every answer of both turns is thinking alone: two counted, two dispatches, the conversation done."""
    client = ThinkingOnlyClient(every=True)
    driver = Driver(client, seed=7, turns=2, invalid_rate=0.0, op_timeout_s=1.0)
    client.driver = driver
    await driver.conversation(3)
    s = driver.stats
    assert (s.nothing_visible, s.completed, s.stalled, s.dispatches, s.tool_rounds, s.user_turns) == (
        2,
        1,
        0,
        2,
        0,
        2,
    )
