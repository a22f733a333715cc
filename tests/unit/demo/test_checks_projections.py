"""The demo's checks of the Redis projections against the topics they were built from: history, operation
status, previews (promise 4) and quarantine. The projection is a stand-in that answers the five reads the
checks make (`workload.Projection`), holding what a faithful projector would; each test changes one thing
in it or on the topics."""

from __future__ import annotations

import pytest

from tests.unit.demo.workload import (
    Projection,
    add,
    last_decision,
    one,
    preview,
    projection_of,
    status,
    workload,
)
from turnledger.demo.checks import Check, check_projections
from turnledger.model.events import CommittedTurn, DispatchState, Quarantined
from turnledger.replay.evidence import Evidence

S = DispatchState
NAMES = [
    "projected history = blocks of the committed turns on the topic",
    "projected operation status = last DispatchDecision",
    "no preview left for a committed or cancelled operation",
    "projected quarantine = quarantine topic",
]


async def _checks(evidence: Evidence, projection: Projection) -> dict[str, Check]:
    checks = await check_projections(evidence, projection)  # type: ignore[arg-type]
    assert [c.name for c in checks] == NAMES
    return dict(zip(["history", "status", "previews", "quarantine"], checks, strict=True))


def _counts(check: Check) -> tuple[int, int, list[str]]:
    return check.checked, check.violations, check.examples


async def test_a_faithful_projection_is_not_counted() -> None:
    """History of a, b and c; the three operations; no preview, three operations; b's quarantined block."""
    evidence = workload()
    checks = await _checks(evidence, projection_of(evidence))
    assert {name: _counts(c) for name, c in checks.items()} == {
        "history": (3, 0, []),
        "status": (3, 0, []),
        "previews": (3, 0, []),
        "quarantine": (1, 0, []),
    }


async def test_nothing_on_the_topics_is_nothing_checked() -> None:
    projection = Projection()
    checks = await _checks(Evidence(), projection)
    assert [_counts(c) for c in checks.values()] == [(0, 0, [])] * 4
    assert projection.asked == []


# ------------------------------------------------------------------ history


async def test_a_projected_history_missing_a_block_is_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.blocks["a"] = projection.blocks["a"][:-1]
    checks = await _checks(evidence, projection)
    assert _counts(checks["history"]) == (3, 1, ["a: 3 projected blocks, 4 committed"])


async def test_a_history_not_projected_is_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    del projection.blocks["b"], projection.revisions["b"]
    checks = await _checks(evidence, projection)
    assert _counts(checks["history"]) == (
        3,
        2,
        ["b: 0 projected blocks, 1 committed", "b: projected revision None, committed 1"],
    )


async def test_projected_blocks_in_another_order_are_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.blocks["a"] = projection.blocks["a"][::-1]
    checks = await _checks(evidence, projection)
    assert _counts(checks["history"]) == (3, 1, ["a: 4 projected blocks, 4 committed"])


@pytest.mark.parametrize(
    ("update", "example"),
    [
        ({"id": "u1-bX"}, "a: 4 projected blocks, 4 committed"),
        ({"ordering": 9}, "a: 4 projected blocks, 4 committed"),
        ({"digest": "sha256:" + "0" * 64}, "a: 4 projected blocks, 4 committed"),
        ({"text": "weather in Oslo?"}, "a: projected blocks differ from the committed ones"),
        ({"trust_label": "model"}, "a: projected blocks differ from the committed ones"),
    ],
    ids=["id", "ordering", "digest", "text", "trust-label"],
)
async def test_a_projected_block_that_differs_is_counted(update: dict[str, object], example: str) -> None:
    evidence = workload()
    projection = projection_of(evidence)
    first, *rest = projection.blocks["a"]
    projection.blocks["a"] = [first.model_copy(update=update), *rest]
    checks = await _checks(evidence, projection)
    assert _counts(checks["history"]) == (3, 1, [example])


async def test_a_projected_revision_that_is_not_the_last_committed_is_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.revisions["a"] = 3
    checks = await _checks(evidence, projection)
    assert _counts(checks["history"]) == (3, 1, ["a: projected revision 3, committed 4"])


async def test_the_revision_is_checked_when_the_blocks_differ_too() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.blocks["a"] = [b.model_copy(update={"text": "x"}) for b in projection.blocks["a"]]
    projection.revisions["a"] = 5
    checks = await _checks(evidence, projection)
    assert _counts(checks["history"]) == (
        3,
        2,
        ["a: projected blocks differ from the committed ones", "a: projected revision 5, committed 4"],
    )


async def test_the_history_of_each_conversation_is_its_own() -> None:
    """c's u1 projected into b's history as well: b's history is checked against b's commits only."""
    evidence = workload()
    projection = projection_of(evidence)
    c_block = one(evidence, CommittedTurn, conversation_id="c").blocks[0]
    projection.blocks["b"] = [*projection.blocks["b"], c_block]
    checks = await _checks(evidence, projection)
    assert _counts(checks["history"]) == (3, 1, ["b: 2 projected blocks, 1 committed"])


# ------------------------------------------------------------------ operation status


async def test_an_operation_not_projected_is_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    del projection.operations[("a", "op-2")]
    checks = await _checks(evidence, projection)
    assert _counts(checks["status"]) == (3, 1, ["op-2: not projected"])


@pytest.mark.parametrize(
    ("state", "generation", "example"),
    [
        ("STREAMING", 1, "op-2: projected STREAMING g1, decided COMMITTED g1"),
        ("COMMITTED", 2, "op-2: projected COMMITTED g2, decided COMMITTED g1"),
        ("COMMITTED", 0, "op-2: projected COMMITTED g0, decided COMMITTED g1"),
        (None, 1, "op-2: projected None g1, decided COMMITTED g1"),
    ],
    ids=["state", "later-generation", "earlier-generation", "no-state"],
)
async def test_an_operation_projected_in_another_state_or_generation_is_counted(
    state: str | None, generation: int, example: str
) -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.operations[("a", "op-2")] = status("a", "op-2", state, generation)  # type: ignore[arg-type]
    checks = await _checks(evidence, projection)
    assert _counts(checks["status"]) == (3, 1, [example])


async def test_operations_of_one_id_are_held_to_their_own_conversations_last_decision() -> None:
    """b's op-1 projected as a's op-1 is (COMMITTED): b's was cancelled."""
    evidence = workload()
    projection = projection_of(evidence)
    projection.operations[("b", "op-1")] = projection.operations[("a", "op-1")]
    checks = await _checks(evidence, projection)
    assert _counts(checks["status"]) == (3, 1, ["op-1: projected COMMITTED g1, decided CANCELLED g1"])


async def test_the_projected_status_is_held_to_the_last_decision() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    add(evidence, last_decision(evidence, "a", "op-2").model_copy(update={"attempt_generation": 2}))
    checks = await _checks(evidence, projection)
    assert _counts(checks["status"]) == (3, 1, ["op-2: projected COMMITTED g1, decided COMMITTED g2"])


# ------------------------------------------------------------------ previews (promise 4)


@pytest.mark.parametrize(
    ("conversation", "op", "example"),
    [
        ("a", "op-2", "op-2: preview left after COMMITTED"),
        ("b", "op-1", "op-1: preview left after CANCELLED"),
    ],
    ids=["committed", "cancelled"],
)
async def test_a_preview_left_for_a_committed_or_cancelled_operation_is_counted(
    conversation: str, op: str, example: str
) -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.current_previews[conversation] = [preview(conversation, op)]
    checks = await _checks(evidence, projection)
    assert _counts(checks["previews"]) == (4, 1, [example])


@pytest.mark.parametrize("state", [S.STREAMING, S.UNKNOWN, S.REJECTED])
async def test_a_preview_of_an_operation_not_committed_or_cancelled_is_not_counted(
    state: DispatchState,
) -> None:
    evidence = workload()
    add(
        evidence,
        last_decision(evidence, "a", "op-2").model_copy(update={"operation_id": "op-3", "state": state}),
    )
    projection = projection_of(evidence)
    projection.current_previews["a"] = [preview("a", "op-3")]
    checks = await _checks(evidence, projection)
    assert _counts(checks["previews"]) == (5, 0, [])


async def test_a_preview_of_an_operation_without_decision_is_not_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.current_previews["a"] = [preview("a", "op-9")]
    checks = await _checks(evidence, projection)
    assert _counts(checks["previews"]) == (4, 0, [])


async def test_previews_are_read_for_the_conversations_with_decisions_only() -> None:
    """c has no operation: its previews are not read (the projection keeps them per operation)."""
    evidence = workload()
    projection = projection_of(evidence)
    projection.current_previews["c"] = [preview("c", "op-1")]
    checks = await _checks(evidence, projection)
    assert _counts(checks["previews"]) == (3, 0, [])
    assert [c for read, c in projection.asked if read == "previews"] == ["a", "b"]


async def test_previews_left_are_counted_in_order_of_conversation() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.current_previews["a"] = [preview("a", "op-1"), preview("a", "op-2", text="sun")]
    projection.current_previews["b"] = [preview("b", "op-1")]
    checks = await _checks(evidence, projection)
    assert _counts(checks["previews"]) == (
        6,
        3,
        [
            "op-1: preview left after COMMITTED",
            "op-2: preview left after COMMITTED",
            "op-1: preview left after CANCELLED",
        ],
    )


# ------------------------------------------------------------------ quarantine


async def test_a_quarantined_block_not_projected_is_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.quarantined = {}
    checks = await _checks(evidence, projection)
    assert _counts(checks["quarantine"]) == (1, 1, ["b: projected quarantine differs from the topic"])


async def test_a_projected_quarantine_not_on_the_topic_is_counted() -> None:
    evidence = workload()
    projection = projection_of(evidence)
    projection.quarantined["a"] = list(projection.quarantined["b"])
    checks = await _checks(evidence, projection)
    assert _counts(checks["quarantine"]) == (1, 1, ["a: projected quarantine differs from the topic"])


async def test_a_quarantine_of_a_conversation_without_decisions_is_checked() -> None:
    evidence = workload()
    add(evidence, one(evidence, Quarantined).model_copy(update={"conversation_id": "z"}))
    projection = projection_of(evidence)
    del projection.quarantined["z"]
    checks = await _checks(evidence, projection)
    assert _counts(checks["quarantine"]) == (2, 1, ["z: projected quarantine differs from the topic"])


async def test_a_quarantine_in_another_order_is_counted_and_conversations_in_order() -> None:
    evidence = workload()
    late = one(evidence, Quarantined)
    add(
        evidence,
        late.model_copy(update={"event_id": "e199"}),
        late.model_copy(update={"conversation_id": "a"}),
    )
    projection = projection_of(evidence)
    projection.quarantined["b"] = projection.quarantined["b"][::-1]
    projection.quarantined["a"] = []
    checks = await _checks(evidence, projection)
    assert _counts(checks["quarantine"]) == (
        3,
        2,
        ["a: projected quarantine differs from the topic", "b: projected quarantine differs from the topic"],
    )
