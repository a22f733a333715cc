"""The demo's checks of the operations: every dispatch settled (promise 7), and no commit or tool call of a
cancelled operation, late blocks quarantined only for a cancelled one (promises 3 and 4). Clean workload,
then each kind of violation seeded into it (`workload.py`)."""

from __future__ import annotations

import itertools

import pytest

from tests.unit.demo.workload import add, evidence_of, last_decision, one, workload
from tests.unit.dispatch.scenario import Conversation
from turnledger.demo.checks import SETTLED, check_cancel, check_settled
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    Quarantined,
    ToolCallReady,
)
from turnledger.model.reasons import ReasonCode
from turnledger.replay.evidence import Evidence

S = DispatchState
OPEN = sorted(set(S) - SETTLED)


# ------------------------------------------------------------------ every dispatch settled (promise 7)


def test_committed_and_cancelled_operations_are_settled() -> None:
    check = check_settled(workload())
    assert check.name == "every dispatch settled (committed, rejected or cancelled)"
    assert (check.checked, check.violations, check.examples) == (3, 0, [])


def test_no_decision_is_nothing_checked() -> None:
    check = check_settled(Evidence())
    assert (check.checked, check.violations, check.examples) == (0, 0, [])


def test_an_operation_rejected_by_the_fold_is_settled() -> None:
    c = Conversation("r", _ids=itertools.count(301))
    c.user("hi")
    c.request(max_output_tokens=10**9)  # TOKEN_BUDGET_EXCEEDED
    check = check_settled(evidence_of(c))
    assert last_decision(evidence_of(c), "r", "op-1").state == S.REJECTED
    assert (check.checked, check.violations, check.examples) == (1, 0, [])


def test_an_operation_left_streaming_is_counted() -> None:
    c = Conversation("d", _ids=itertools.count(401))
    c.user("hi")
    c.dispatch_to_streaming()
    check = check_settled(evidence_of(c))
    assert (check.checked, check.violations, check.examples) == (1, 1, ["d/op-1: left STREAMING ( )"])


def test_an_operation_left_unknown_is_counted_with_its_reason_and_detail() -> None:
    c = Conversation("d", _ids=itertools.count(401))
    c.user("hi")
    c.dispatch_to_streaming()
    c.recovered()  # an Anthropic stream is gone with its worker: UNKNOWN
    check = check_settled(evidence_of(c))
    assert (check.checked, check.violations) == (1, 1)
    assert check.examples == ["d/op-1: left UNKNOWN (WORKER_RECOVERED worker w1)"]


@pytest.mark.parametrize("state", OPEN)
def test_an_operation_whose_last_decision_is_open_is_counted(state: DispatchState) -> None:
    evidence = workload()
    add(evidence, last_decision(evidence, "a", "op-2").model_copy(update={"state": state}))
    check = check_settled(evidence)
    assert (check.checked, check.violations, check.examples) == (3, 1, [f"a/op-2: left {state.value} ( )"])


@pytest.mark.parametrize("state", sorted(SETTLED))
def test_an_operation_whose_last_decision_is_final_is_settled(state: DispatchState) -> None:
    evidence = workload()
    add(evidence, last_decision(evidence, "a", "op-2").model_copy(update={"state": state}))
    check = check_settled(evidence)
    assert (check.checked, check.violations, check.examples) == (3, 0, [])


def test_the_settled_states_are_committed_rejected_and_cancelled() -> None:
    assert {S.COMMITTED, S.REJECTED, S.CANCELLED} == SETTLED


def test_only_the_last_decision_of_an_operation_counts() -> None:
    """b's op-1 cancelled, then (on the topic after it) a decision that reopens it; every operation of the
    workload had open decisions before its final one."""
    evidence = workload()
    reopened = last_decision(evidence, "b", "op-1").model_copy(
        update={"state": S.PREPARED, "reason": ReasonCode.SUPERSEDED, "detail": "again"}
    )
    add(evidence, reopened)
    check = check_settled(evidence)
    assert (check.checked, check.violations, check.examples) == (
        3,
        1,
        ["b/op-1: left PREPARED (SUPERSEDED again)"],
    )


def test_operations_of_one_id_in_two_conversations_are_settled_apart() -> None:
    evidence = workload()
    add(
        evidence,
        last_decision(evidence, "a", "op-1").model_copy(update={"conversation_id": "c", "state": S.SENT}),
    )
    check = check_settled(evidence)
    assert (check.checked, check.violations, check.examples) == (4, 1, ["c/op-1: left SENT ( )"])


# ------------------------------------------------------------------ nothing after a cancel


def test_a_cancelled_operation_without_commit_or_call_and_its_late_blocks_quarantined_are_not_counted() -> (
    None
):
    """b's op-1 cancelled (one operation checked) and its late deltas quarantined AFTER_CANCEL (one more);
    a's op-1 of the same id committed with a tool call."""
    check = check_cancel(workload())
    assert check.name == "no commit or tool call of a cancelled operation"
    assert (check.checked, check.violations, check.examples) == (2, 0, [])


def test_no_cancel_is_nothing_checked() -> None:
    check = check_cancel(Evidence())
    assert (check.checked, check.violations, check.examples) == (0, 0, [])


def _of_b(record: CommittedTurn | ToolCallReady) -> CommittedTurn | ToolCallReady:
    return record.model_copy(update={"conversation_id": "b"})


def test_a_cancelled_operation_committed_is_counted() -> None:
    evidence = workload()
    add(evidence, _of_b(one(evidence, CommittedTurn, conversation_id="a", operation_id="op-1")))
    check = check_cancel(evidence)
    assert (check.checked, check.violations, check.examples) == (2, 1, ["b/op-1: committed and cancelled"])


def test_a_tool_call_of_a_cancelled_operation_is_counted() -> None:
    evidence = workload()
    add(evidence, _of_b(one(evidence, ToolCallReady)))
    check = check_cancel(evidence)
    assert (check.checked, check.violations) == (2, 1)
    assert check.examples == ["b/op-1: tool call of a cancelled operation"]


def test_a_cancelled_operation_committed_with_a_tool_call_is_counted_twice() -> None:
    evidence = workload()
    add(
        evidence,
        _of_b(one(evidence, CommittedTurn, conversation_id="a", operation_id="op-1")),
        _of_b(one(evidence, ToolCallReady)),
    )
    check = check_cancel(evidence)
    assert (check.checked, check.violations) == (2, 2)
    assert check.examples == ["b/op-1: committed and cancelled", "b/op-1: tool call of a cancelled operation"]


def test_cancelled_operations_are_checked_in_order_of_conversation_and_operation() -> None:
    """a's op-2 cancelled after its commit (on the topic after b's): still reported first."""
    evidence = workload()
    add(
        evidence,
        _of_b(one(evidence, CommittedTurn, conversation_id="a", operation_id="op-1")),
        last_decision(evidence, "a", "op-2").model_copy(update={"state": S.CANCELLED}),
    )
    check = check_cancel(evidence)
    assert (check.checked, check.violations) == (3, 2)
    assert check.examples == ["a/op-2: committed and cancelled", "b/op-1: committed and cancelled"]


def test_a_block_quarantined_after_a_cancel_of_an_operation_never_cancelled_is_counted() -> None:
    evidence = workload()
    late = one(evidence, Quarantined)
    add(
        evidence,
        late.model_copy(update={"operation_id": "op-7"}),
        late.model_copy(update={"conversation_id": "a"}),
    )
    check = check_cancel(evidence)
    assert (check.checked, check.violations) == (4, 2)
    assert check.examples == [
        "op-7: quarantined AFTER_CANCEL but never cancelled",
        "op-1: quarantined AFTER_CANCEL but never cancelled",
    ]


@pytest.mark.parametrize("reason", [ReasonCode.STALE_GENERATION, ReasonCode.AFTER_COMMIT])
def test_a_block_quarantined_for_another_reason_is_not_checked(reason: ReasonCode) -> None:
    evidence = workload()
    add(evidence, one(evidence, Quarantined).model_copy(update={"operation_id": "op-7", "reason": reason}))
    check = check_cancel(evidence)
    assert (check.checked, check.violations, check.examples) == (2, 0, [])


def test_an_operation_is_cancelled_by_a_cancelled_decision_only() -> None:
    """a's op-2 with a refused decision that names a cancel reason but is COMMITTED: not cancelled."""
    evidence = workload()
    decision: DispatchDecision = last_decision(evidence, "a", "op-2").model_copy(
        update={"accepted": False, "reason": ReasonCode.AFTER_CANCEL}
    )
    add(evidence, decision)
    check = check_cancel(evidence)
    assert (check.checked, check.violations, check.examples) == (2, 0, [])
