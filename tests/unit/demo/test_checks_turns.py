"""The demo's checks of the committed turns: at most one canonical assistant turn per conversation revision
(promise 3), and every submitted turn committed or rejected, exactly once (promise 6). Clean workload,
then each kind of violation seeded into it (`workload.py`)."""

from __future__ import annotations

import pytest

from tests.unit.demo.workload import add, manifest_issued, one, without, workload
from turnledger.demo.checks import check_accounted, check_one_canonical
from turnledger.model.events import CommittedTurn, ManifestIssued, Rejected, TurnSubmitted
from turnledger.model.reasons import ReasonCode
from turnledger.replay.evidence import Evidence


def _commit(evidence: Evidence, conversation: str, turn_id: str) -> CommittedTurn:
    turn: CommittedTurn = one(evidence, CommittedTurn, conversation_id=conversation, turn_id=turn_id)
    return turn


def _manifest_for(
    evidence: Evidence, op: str, of: str = "op-2", revision: int | None = None
) -> ManifestIssued:
    """a/`of`'s manifest, issued again for another operation (at another revision if given)."""
    issued = manifest_issued(evidence, "a", of)
    update: dict[str, object] = {"operation_id": op}
    if revision is not None:
        update["conversation_revision"] = revision
    return ManifestIssued(
        manifest=issued.manifest.model_copy(update=update), occurred_at_ms=issued.occurred_at_ms
    )


def _answer(evidence: Evidence, op: str, revision: int, conversation: str = "a") -> CommittedTurn:
    """a/op-2's committed answer, as committed for `op` at `revision` of `conversation`."""
    return _commit(evidence, "a", "op-2#1").model_copy(
        update={
            "operation_id": op,
            "revision": revision,
            "turn_id": f"{op}#1",
            "conversation_id": conversation,
        }
    )


# ------------------------------------------------------------------ one canonical turn (promise 3)


def test_one_assistant_turn_per_revision_and_operation_is_not_counted() -> None:
    check = check_one_canonical(workload())
    assert check.name == "at most one canonical assistant turn per conversation revision"
    assert (check.checked, check.violations, check.examples) == (2, 0, [])


def test_no_commit_is_nothing_checked() -> None:
    check = check_one_canonical(Evidence())
    assert (check.checked, check.violations, check.examples) == (0, 0, [])


def test_two_operations_of_one_manifest_revision_both_committed_are_counted() -> None:
    """op-3 was prepared at revision 3 as op-2 was; both answers committed (at revisions 4 and 5)."""
    evidence = workload()
    add(evidence, _manifest_for(evidence, "op-3"), _answer(evidence, "op-3", 5))
    check = check_one_canonical(evidence)
    assert (check.checked, check.violations, check.examples) == (3, 1, ["a revision 3: 2 assistant turns"])


def test_one_operation_committed_twice_is_counted_by_operation_and_by_revision() -> None:
    evidence = workload()
    add(evidence, _answer(evidence, "op-2", 5))
    check = check_one_canonical(evidence)
    assert (check.checked, check.violations) == (3, 2)
    assert check.examples == ["a revision 3: 2 assistant turns", "operation a/op-2: 2 commits"]


@pytest.mark.parametrize("turn_id", ["u1", "op-1#1"], ids=["user", "assistant"])
def test_a_revision_committed_twice_is_counted(turn_id: str) -> None:
    evidence = workload()
    again = _commit(evidence, "a", turn_id).model_copy(update={"turn_id": "x9", "source_event_id": "e99"})
    add(evidence, again)
    check = check_one_canonical(evidence)
    revision = again.revision
    assistant = again.operation_id is not None
    assert (check.checked, check.violations) == (2 + assistant, 1 + 2 * assistant)
    assert check.examples[-1] == f"a: revision {revision} committed 2 times"


def test_an_answer_committed_at_a_revision_taken_is_counted_once() -> None:
    """op-3 (prepared at revision 5) committed at revision 4, which op-2's answer holds."""
    evidence = workload()
    add(evidence, _manifest_for(evidence, "op-3", revision=5), _answer(evidence, "op-3", 4))
    check = check_one_canonical(evidence)
    assert (check.checked, check.violations, check.examples) == (3, 1, ["a: revision 4 committed 2 times"])


def test_turns_of_two_conversations_are_counted_apart() -> None:
    """b's op-1 (prepared at revision 1, as a's op-1 was) committed at revision 2, as a's op-1 was."""
    evidence = workload()
    add(evidence, _answer(evidence, "op-1", 2, conversation="b"))
    check = check_one_canonical(evidence)
    assert (check.checked, check.violations, check.examples) == (3, 0, [])


def test_an_answer_whose_manifest_is_not_on_the_topic_is_a_violation_of_its_own() -> None:
    """Before, such answers were counted together under revision -1: one passed, two read as "a revision
    -1: 2 assistant turns", two answers to one revision that no manifest names."""
    evidence = workload()
    add(evidence, _answer(evidence, "op-8", 5))
    one_answer = check_one_canonical(evidence)
    assert (one_answer.checked, one_answer.violations, one_answer.examples) == (
        3,
        1,
        ["operation a/op-8: committed with no manifest on the topic"],
    )
    add(evidence, _answer(evidence, "op-9", 6))
    check = check_one_canonical(evidence)
    assert (check.checked, check.violations, check.examples) == (
        4,
        2,
        [
            "operation a/op-8: committed with no manifest on the topic",
            "operation a/op-9: committed with no manifest on the topic",
        ],
    )


def test_every_kind_is_counted_in_order() -> None:
    evidence = workload()
    add(
        evidence,
        _answer(evidence, "op-2", 5),
        _commit(evidence, "b", "u1").model_copy(update={"turn_id": "u2", "source_event_id": "e199"}),
    )
    check = check_one_canonical(evidence)
    assert (check.checked, check.violations) == (3, 3)
    assert check.examples == [
        "a revision 3: 2 assistant turns",
        "operation a/op-2: 2 commits",
        "b: revision 1 committed 2 times",
    ]


# ------------------------------------------------------------------ every turn accounted for (promise 6)


def test_turns_committed_refused_for_two_reasons_or_delivered_twice_are_not_counted() -> None:
    """a: u1 and the tool results committed; b: u1 committed; c: u1 delivered twice (committed, then
    refused as a duplicate: both deliveries checked), t2 refused for two orphaned results."""
    check = check_accounted(workload())
    assert check.name == "every submitted turn is committed or rejected, exactly once"
    assert (check.checked, check.violations, check.examples) == (6, 0, [])


def test_no_submission_is_nothing_checked() -> None:
    check = check_accounted(Evidence())
    assert (check.checked, check.violations, check.examples) == (0, 0, [])


def test_a_turn_neither_committed_nor_refused_is_counted() -> None:
    evidence = workload()
    without(evidence, _commit(evidence, "a", "t3"))
    check = check_accounted(evidence)
    assert (check.checked, check.violations, check.examples) == (
        6,
        1,
        ["turn t3 of a: 0 commits, 0 rejections"],
    )


def test_a_turn_committed_twice_is_counted() -> None:
    evidence = workload()
    turn = _commit(evidence, "a", "t3")
    add(evidence, turn.model_copy(update={"revision": 5}))
    check = check_accounted(evidence)
    assert (check.checked, check.violations, check.examples) == (
        6,
        1,
        ["turn t3 of a: 2 commits, 0 rejections"],
    )


def test_a_turn_committed_twice_is_counted_even_when_also_refused_as_a_duplicate() -> None:
    """c's u1, delivered twice: committed once and refused once is right; committed twice is not."""
    evidence = workload()
    add(evidence, _commit(evidence, "c", "u1").model_copy(update={"revision": 3}))
    check = check_accounted(evidence)
    assert (check.checked, check.violations) == (6, 2)
    assert check.examples == ["turn u1 of c: 2 commits, 1 rejections"] * 2


def test_a_turn_delivered_once_committed_and_refused_is_counted() -> None:
    evidence = workload()
    turn = one(evidence, TurnSubmitted, conversation_id="a", turn_id="t3")
    add(
        evidence,
        Rejected(
            conversation_id="a",
            reason=ReasonCode.DUPLICATE_TURN,
            detail="turn t3 is already committed",
            event_type="TurnSubmitted",
            event_id=turn.event_id,
        ),
    )
    check = check_accounted(evidence)
    assert (check.checked, check.violations, check.examples) == (
        6,
        1,
        ["turn t3 of a: 1 commits, 1 rejections"],
    )


def test_a_refusal_of_another_event_type_or_of_no_event_accounts_for_no_turn() -> None:
    evidence = workload()
    without(evidence, _commit(evidence, "a", "t3"))
    event_id = one(evidence, TurnSubmitted, conversation_id="a", turn_id="t3").event_id
    add(
        evidence,
        Rejected(
            conversation_id="a",
            reason=ReasonCode.INVALID_EVENT,
            event_type="DispatchRequested",
            event_id=event_id,
        ),
        Rejected(conversation_id="a", reason=ReasonCode.UNDECODABLE_RECORD, event_type="TurnSubmitted"),
    )
    check = check_accounted(evidence)
    assert (check.checked, check.violations, check.examples) == (
        6,
        1,
        ["turn t3 of a: 0 commits, 0 rejections"],
    )


def test_an_answer_accounts_for_no_submitted_turn() -> None:
    """An assistant turn's source is a StreamDeltas event: an answer whose source id were a submission's
    would still not account for it."""
    evidence = workload()
    turn = _commit(evidence, "a", "t3")
    without(evidence, turn)
    add(
        evidence,
        _commit(evidence, "a", "op-2#1").model_copy(update={"source_event_id": turn.source_event_id}),
    )
    check = check_accounted(evidence)
    assert (check.checked, check.violations, check.examples) == (
        6,
        1,
        ["turn t3 of a: 0 commits, 0 rejections"],
    )


def test_a_refused_turn_is_accounted_for() -> None:
    evidence = workload()
    turn = _commit(evidence, "a", "t3")
    without(evidence, turn)
    add(
        evidence,
        Rejected(
            conversation_id="a",
            reason=ReasonCode.ORPHANED_RESULT,
            event_type="TurnSubmitted",
            event_id=turn.source_event_id,
        ),
    )
    check = check_accounted(evidence)
    assert (check.checked, check.violations, check.examples) == (6, 0, [])
