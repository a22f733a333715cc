"""The demo's check of the conversations that move between APIs: every dispatch of one completes, none is
refused by the provider (a foreign signature, an unsigned Gemini 3 call, a Responses call without its
reasoning item). Clean workload, then each way a dispatch can end seeded into it (`workload.py`)."""

from __future__ import annotations

import itertools

import pytest

from tests.unit.demo.workload import add, evidence_of, last_decision, of, workload
from tests.unit.dispatch.scenario import Conversation
from turnledger.demo.checks import FAULT_ENDINGS, SETTLED, check_moving, moving_violation
from turnledger.gateway.verdicts import GIVE_UP_PREFIX
from turnledger.model.events import CancelRequested, DispatchDecision, DispatchRequested, DispatchState
from turnledger.model.reasons import ReasonCode
from turnledger.replay.evidence import Evidence

S = DispatchState
R = ReasonCode
NAME = "every dispatch of a conversation moving between APIs completes, none refused"
REFUSED = f"{GIVE_UP_PREFIX}the provider refused the request (HTTP 400 invalid_request_error); not sent again"


def _ending(state: DispatchState, reason: ReasonCode | None = None, detail: str = "") -> DispatchDecision:
    """a/op-2's last decision, made to end so."""
    decision: DispatchDecision = last_decision(workload(), "a", "op-2")
    return decision.model_copy(update={"state": state, "reason": reason, "detail": detail})


def _with_ending(decision: DispatchDecision) -> Evidence:
    return add(workload(), decision)


# ------------------------------------------------------------------ the check over the topics


def test_a_moving_conversation_whose_dispatches_all_committed_is_clean() -> None:
    check = check_moving(workload(), ["a"])
    assert check.name == NAME
    assert (check.checked, check.violations, check.examples) == (2, 0, [])


def test_no_moving_conversation_is_nothing_checked() -> None:
    check = check_moving(workload(), [])
    assert (check.checked, check.violations, check.examples) == (0, 0, [])
    assert check_moving(Evidence(), ["a"]).checked == 0


def test_only_the_moving_conversations_dispatches_are_checked() -> None:
    """b's dispatch was cancelled by its client: counted when b moves, not when only a does."""
    assert check_moving(workload(), ["a"]).violations == 0
    assert check_moving(workload(), ["a", "b"]).violations == 1
    check = check_moving(workload(), ["a", "b", "c"])
    assert (check.checked, check.violations) == (3, 1)
    cancelled = "b/op-1 (anthropic-messages@1): did not complete: CANCELLED ( user pressed stop)"
    assert check.examples == [cancelled]


def test_a_dispatch_the_provider_refused_is_counted_with_the_workers_words() -> None:
    """The fold's own decision of a worker's give-up on a refused request (CancelRequested marked so)."""
    c = Conversation("m", _ids=itertools.count(501))
    c.user("weather in Oslo?")
    c.dispatch_to_streaming()
    c.apply(
        CancelRequested(
            **c._common(),
            operation_id="op-1",
            reason=REFUSED,
            worker_gave_up=True,
            reason_code=R.PROVIDER_REFUSED,
        )
    )
    check = check_moving(evidence_of(c), ["m"])
    assert (check.checked, check.violations) == (1, 1)
    assert check.examples == [f"m/op-1 (anthropic-messages@1): refused by the provider: {REFUSED}"]


def test_a_dispatch_with_no_decision_is_counted() -> None:
    evidence = workload()
    request = of(evidence, DispatchRequested, conversation_id="a", operation_id="op-2")[0]
    evidence.raw["manifests"] = [
        r for r in evidence.raw["manifests"] if getattr(r.record, "operation_id", None) != "op-2"
    ]
    check = check_moving(evidence, ["a"])
    assert (check.checked, check.violations) == (2, 1)
    assert check.examples == [f"a/op-2 ({request.adapter}): did not complete: no decision"]


def test_a_dispatch_requested_twice_is_one_dispatch() -> None:
    evidence = workload()
    add(evidence, of(evidence, DispatchRequested, conversation_id="a", operation_id="op-2")[0])
    assert check_moving(evidence, ["a"]).checked == 2


def test_the_last_decision_is_the_one_judged() -> None:
    evidence = _with_ending(_ending(S.STREAMING))
    assert check_moving(evidence, ["a"]).violations == 1
    add(evidence, _ending(S.COMMITTED))
    assert check_moving(evidence, ["a"]).violations == 0


def test_every_violation_is_counted_and_five_are_shown() -> None:
    evidence = workload()
    for n in range(7):
        c = Conversation(f"m{n}", _ids=itertools.count(1000 + 100 * n))
        c.user("hi")
        c.dispatch_to_streaming()
        add(evidence, *c.events, *c.outputs)
    check = check_moving(evidence, [f"m{n}" for n in range(7)])
    assert (check.checked, check.violations, len(check.examples)) == (7, 7, 5)
    assert check.examples[0] == "m0/op-1 (anthropic-messages@1): did not complete: STREAMING ( )"


# ------------------------------------------------------------------ the rule


def test_a_committed_dispatch_is_fine() -> None:
    assert moving_violation(_ending(S.COMMITTED)) is None
    assert check_moving(_with_ending(_ending(S.COMMITTED)), ["a"]).violations == 0


@pytest.mark.parametrize("reason", sorted(FAULT_ENDINGS))
def test_a_dispatch_an_injected_fault_ended_is_not_counted(reason: ReasonCode) -> None:
    """Attempts spent on drawn faults, a scripted max_tokens_in_call, a scripted refusal_after's refusal
    stop (PROVIDER_REFUSED without a worker's give-up: the answer's own stop, not a refused request)."""
    decision = _ending(S.CANCELLED, reason, "an injected fault")
    assert moving_violation(decision) is None
    assert check_moving(_with_ending(decision), ["a"]).violations == 0


def test_the_fault_endings_are_these_three() -> None:
    assert {R.WORKER_GAVE_UP, R.OUTPUT_LIMIT_REACHED, R.PROVIDER_REFUSED} == FAULT_ENDINGS


def test_a_request_the_provider_refused_is_counted_though_its_reason_is_a_fault_ending() -> None:
    decision = _ending(S.CANCELLED, R.PROVIDER_REFUSED, REFUSED)
    assert moving_violation(decision) == f"refused by the provider: {REFUSED}"
    check = check_moving(_with_ending(decision), ["a"])
    assert (check.checked, check.violations) == (2, 1)
    assert check.examples == [f"a/op-2 (anthropic-messages@1): refused by the provider: {REFUSED}"]


def test_a_give_up_for_spent_attempts_is_not_a_refusal() -> None:
    spent = _ending(S.CANCELLED, R.WORKER_GAVE_UP, f"{GIVE_UP_PREFIX}4 attempts failed")
    assert moving_violation(spent) is None


@pytest.mark.parametrize(
    ("reason", "detail"),
    [
        (R.DEADLINE_EXCEEDED, "operation deadline passed"),
        (R.SUPERSEDED, "a newer revision"),
        (None, "user pressed stop"),
        (R.NO_PROVIDER_ENDPOINT, f"{GIVE_UP_PREFIX}no route"),
    ],
)
def test_a_dispatch_cancelled_otherwise_did_not_complete(reason: ReasonCode | None, detail: str) -> None:
    decision = _ending(S.CANCELLED, reason, detail)
    assert moving_violation(decision) == f"did not complete: CANCELLED ({reason or ''} {detail})"
    assert check_moving(_with_ending(decision), ["a"]).violations == 1


def test_a_rejected_dispatch_did_not_complete() -> None:
    decision = _ending(S.REJECTED, R.TOKEN_BUDGET_EXCEEDED, "over budget")
    assert moving_violation(decision) == "did not complete: REJECTED (TOKEN_BUDGET_EXCEEDED over budget)"


@pytest.mark.parametrize("state", sorted(set(S) - SETTLED))
def test_a_dispatch_left_open_did_not_complete(state: DispatchState) -> None:
    assert moving_violation(_ending(state)) == f"did not complete: {state.value} ( )"


def test_no_decision_did_not_complete() -> None:
    assert moving_violation(None) == "did not complete: no decision"
