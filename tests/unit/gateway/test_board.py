"""The worker's view of the manifests topic, rule by rule, on hand-made decisions (no ledger, no clock)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.gateway.decisions import decision, manifest_issued
from turnledger.gateway import board as board_module
from turnledger.gateway.board import DecisionBoard, may_produce_output
from turnledger.model.events import DispatchDecision, DispatchState, Rejected
from turnledger.model.reasons import ReasonCode

S = DispatchState
R = ReasonCode


def _decision(op: str, state: DispatchState, source: str = "", **fields: Any) -> DispatchDecision:
    return decision(op, state, **({"source_event_id": source} if source else {}), **fields)


@pytest.mark.parametrize(
    ("state", "generation", "terminated", "expected"),
    [
        (S.DISPATCHING, 1, False, True),
        (S.SENT, 1, True, True),  # active states produce output whatever the flag says
        (S.STREAMING, 1, False, True),
        (S.UNKNOWN, 1, False, True),
        (S.UNKNOWN, 1, True, False),
        (S.UNKNOWN, 0, False, False),  # never attempted
        (S.CANCELLED, 1, False, True),  # cancelled, not yet confirmed terminated
        (S.CANCELLED, 1, True, False),
        (S.CANCELLED, 0, False, False),
        (S.COMMITTED, 1, False, False),
        (S.PREPARED, 0, False, False),
        (S.WAITING, 0, False, False),
    ],
)
def test_may_produce_output(state: DispatchState, generation: int, terminated: bool, expected: bool) -> None:
    decision = _decision("op-1", state, attempt_generation=generation, attempt_terminated=terminated)
    assert may_produce_output(decision) is expected


def test_applying_keeps_manifests_latest_decisions_open_operations_and_a_position() -> None:
    board = DecisionBoard()
    board.apply_nowait(manifest_issued("op-1"))
    assert set(board.manifests) == {("c1", "op-1")} and board.position == 0 and not board.open
    board.apply_nowait(_decision("op-1", S.PREPARED, attempt_generation=0))
    board.apply_nowait(_decision("op-2", S.CANCELLED))  # its attempt not yet confirmed terminated
    board.apply_nowait(_decision("op-3", S.CANCELLED, attempt_terminated=True))
    board.apply_nowait(_decision("op-4", S.STREAMING))
    board.apply_nowait(_decision("op-4", S.COMMITTED, attempt_terminated=True))
    assert board.position == 5
    assert board.open == {("c1", "op-1"), ("c1", "op-2")}
    assert board.latest[("c1", "op-4")].state == S.COMMITTED
    assert board.busy_operations("c1", except_id="op-1") == ["op-2"]
    assert board.busy_operations("c1", except_id="op-2") == []
    assert board.busy_operations("c2", except_id="op-1") == []


def test_busy_operations_are_sorted_and_leave_out_the_asker() -> None:
    board = DecisionBoard()
    for op in ("op-9", "op-3", "op-5"):
        board.apply_nowait(_decision(op, S.STREAMING))
    assert board.busy_operations("c1", except_id="op-5") == ["op-3", "op-9"]


def test_cas_answers_are_refusals_and_first_acceptances_kept_by_source_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(board_module, "CAS_ANSWERS_KEPT", 2)
    board = DecisionBoard()
    board.apply_nowait(_decision("op-1", S.DISPATCHING, "a1", previous_state=S.PREPARED))
    board.apply_nowait(_decision("op-1", S.DISPATCHING, "renewed", previous_state=S.DISPATCHING))
    board.apply_nowait(_decision("op-1", S.SENT, "sent", previous_state=S.DISPATCHING))
    assert list(board._cas) == ["a1"]
    board.apply_nowait(_decision("op-2", S.PREPARED, "a2", accepted=False, reason=R.CONVERSATION_BUSY))
    board.apply_nowait(_decision("op-2", S.PREPARED, "a2", accepted=False, reason=R.CONVERSATION_BUSY))
    assert list(board._cas) == ["a1", "a2"]  # the first answer to an attempt is the one kept
    board.apply_nowait(_decision("op-3", S.PREPARED, "a3", accepted=False, reason=R.CONVERSATION_BUSY))
    assert list(board._cas) == ["a2", "a3"]  # the oldest dropped


async def test_a_cas_answer_is_handed_over_once() -> None:
    board = DecisionBoard()
    await board.apply([_decision("op-1", S.DISPATCHING, "a1", previous_state=S.PREPARED)])
    answer = await board.cas_answer("a1", 0.01)
    assert answer is not None and answer.source_event_id == "a1"
    assert await board.cas_answer("a1", 0.01) is None


async def test_settled_is_the_first_decision_that_ends_the_phase() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    await board.apply([_decision("op-1", S.UNKNOWN, "other", reason=R.STREAM_DISCONNECTED)])
    since = board.position
    assert await board.settled(key, 1, {"ended"}, 0.01, since=since) is None  # not this phase's
    await board.apply([_decision("op-1", S.UNKNOWN, "old", attempt_generation=0, reason=R.LEASE_EXPIRED)])
    assert await board.settled(key, 1, {"old"}, 0.01, since=since) is None  # another generation's
    await board.apply([_decision("op-1", S.UNKNOWN, "ended", reason=R.STREAM_DISCONNECTED)])
    found = await board.settled(key, 1, {"ended"}, 0.01, since=since)
    assert found is not None and found.source_event_id == "ended"


async def test_a_commit_or_a_cancel_from_anyone_ends_the_phase() -> None:
    key = ("c1", "op-1")
    committed = DecisionBoard()
    await committed.apply([_decision("op-1", S.COMMITTED, "someone", attempt_terminated=True)])
    found = await committed.settled(key, 1, {"mine"}, 0.01)
    assert found is not None and found.state == S.COMMITTED
    cancelled = DecisionBoard()
    await cancelled.apply([_decision("op-1", S.CANCELLED, "user", attempt_generation=7)])
    found = await cancelled.settled(key, 1, {"mine"}, 0.01)
    assert found is not None and found.source_event_id == "user"  # a cancel of any generation


async def test_a_lease_expiry_ends_only_the_phases_begun_before_it() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    expired = _decision("op-1", S.UNKNOWN, "claim", reason=R.LEASE_EXPIRED)
    await board.apply([expired])
    assert board._lease_lost_at == {("c1", "op-1", 1): 1}
    assert await board.settled(key, 1, {"mine"}, 0.01, since=1) is None  # the phase began after it
    found = await board.settled(key, 1, {"mine"}, 0.01, since=0)
    assert found is not None and found.source_event_id == "claim"
    assert await board.settled(key, 1, {"mine"}, 0.01) == found  # by default a phase begins at 0
    refused = DecisionBoard()
    await refused.apply([_decision("op-1", S.STREAMING, "claim", accepted=False, reason=R.LEASE_NOT_EXPIRED)])
    assert refused._lease_lost_at == {}


async def test_state_after_waits_for_a_decision_the_event_caused_or_a_cancel_when_asked() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    await board.apply([_decision("op-1", S.SENT, "replay")])
    assert await board.state_after(key, "replay", 0.01)
    assert board.caused(key, "replay") and not board.caused(key, "other")
    await board.apply([_decision("op-1", S.UNKNOWN, "ended", reason=R.STREAM_DISCONNECTED)])
    await board.apply([_decision("op-1", S.STREAMING, "later")])
    assert board.caused(key, "ended")  # not the latest any more, but kept while settling
    await board.apply([_decision("op-1", S.CANCELLED, "user")])
    assert not await board.state_after(key, "refused", 0.01)
    assert await board.state_after(key, "refused", 0.01, or_cancel=True)


async def test_the_answer_to_an_event_is_its_first_decision_whatever_came_after_it() -> None:
    """A worker's replay is answered SENT; another worker's refused CAS right after it is the latest
    decision, in the same batch: the wait still ends, and the answer is still the replay's."""
    key = ("c1", "op-1")
    board = DecisionBoard()
    replayed = _decision("op-1", S.SENT, "replay", previous_state=S.UNKNOWN)
    refusal = _decision("op-1", S.SENT, "stray", accepted=False, reason=R.CAS_STATE_MISMATCH)
    await board.apply([replayed, refusal, _decision("op-1", S.STREAMING, "replay")])
    assert await board.state_after(key, "replay", 0.01)
    assert board.answer(key, "replay") is replayed  # the first it caused, not a later one
    assert board.answer(key, "stray") is refusal and board.latest[key].source_event_id == "replay"
    assert board.answer(key, "other") is None and board.answer(("c1", "op-2"), "replay") is None
    board.forget(key)
    assert board.answer(key, "replay") == board.latest[key] and board.answer(key, "stray") is None


def test_the_answers_of_an_operation_are_dropped_once_it_is_closed() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    board.apply_nowait(_decision("op-1", S.SENT, "sent"))
    board.apply_nowait(_decision("op-1", S.COMMITTED, "ended", attempt_terminated=True))
    assert board.answer(key, "sent") is None and board.answer(key, "ended") is not None
    assert key not in board._answers
    board.apply_nowait(_decision("op-2", S.SENT, "sent"))
    board.drop({("c1", "op-2")})
    assert board._answers == {}


def test_a_closed_operation_still_answers_the_event_that_settled_it_after_a_later_decision() -> None:
    """Its answers are dropped when it closes, but the settling decisions are kept: a stray CAS refused
    after the commit (the latest decision now) does not hide the commit from the event that caused it."""
    key = ("c1", "op-1")
    board = DecisionBoard()
    committed = _decision("op-1", S.COMMITTED, "ended", attempt_terminated=True)
    board.apply_nowait(committed)
    board.apply_nowait(_decision("op-1", S.COMMITTED, "stray", accepted=False, reason=R.CAS_STATE_MISMATCH))
    assert key not in board.open and board.latest[key].source_event_id == "stray"
    assert board.answer(key, "ended") is committed


async def test_a_cancel_signal_is_set_by_the_first_cancel_and_set_at_once_for_a_cancelled_operation() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    signal = board.cancel_signal(key)
    await board.apply([_decision("op-1", S.STREAMING)])
    assert not signal.is_set() and not board.cancelled(key)
    await board.apply([_decision("op-1", S.CANCELLED, "user")])
    assert signal.is_set() and board.cancelled(key)
    board.release_cancel_signal(key)
    assert board.cancel_signal(key).is_set()  # a new one, already set
    await board.apply([_decision("op-1", S.CANCELLED, "terminated", attempt_terminated=True)])
    board.forget(key)
    assert board.cancelled(key)  # the latest decision still says so


def test_forget_keeps_the_latest_decision_and_drop_forgets_everything() -> None:
    board = DecisionBoard()
    for op in ("op-1", "op-2"):
        board.apply_nowait(manifest_issued(op))
        board.apply_nowait(_decision(op, S.UNKNOWN, f"{op}-claim", reason=R.LEASE_EXPIRED))
        board.cancel_signal(("c1", op))
    board.forget(("c1", "op-1"))
    assert set(board.manifests) == {("c1", "op-2")}
    assert set(board._settling) == {("c1", "op-2")}
    assert set(board._lease_lost_at) == {("c1", "op-2", 1)}
    assert set(board._cancel_signals) == {("c1", "op-2")}
    assert set(board.latest) == {("c1", "op-1"), ("c1", "op-2")}
    board.drop({("c1", "op-1")})
    assert set(board.latest) == {("c1", "op-2")} and board.open == {("c1", "op-2")}
    assert board._conversations == {"c1": {"op-2"}}
    assert board.busy_operations("c1", except_id="op-9") == ["op-2"]


async def test_only_an_accepted_lease_expiry_marks_its_generation_lost() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    await board.apply([_decision("op-1", S.STREAMING, "deltas")])
    await board.apply([_decision("op-1", S.UNKNOWN, "bogus", accepted=False, reason=R.LEASE_EXPIRED)])
    assert board._lease_lost_at == {}
    assert await board.settled(key, 1, {"mine"}, 0.01) is None  # a refusal ends no phase
    expired = DecisionBoard()
    await expired.apply([_decision("op-1", S.STREAMING, "deltas")])
    await expired.apply([_decision("op-1", S.UNKNOWN, "claim", reason=R.LEASE_EXPIRED)])
    await expired.apply([_decision("op-1", S.SENT, "replay")])  # accepted, later: the loss stays at 2
    assert expired._lease_lost_at == {("c1", "op-1", 1): 2}
    assert await expired.settled(key, 1, {"mine"}, 0.01, since=2) is None
    found = await expired.settled(key, 1, {"mine"}, 0.01)  # a phase begun at the start
    assert found is not None and found.source_event_id == "claim"


def test_a_cancel_signal_is_one_event_per_operation_until_released() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    board.release_cancel_signal(key)  # none yet: nothing to release
    first = board.cancel_signal(key)
    assert board.cancel_signal(key) is first
    board.apply_nowait(_decision("op-1", S.CANCELLED, "user"))
    assert first.is_set()
    board.release_cancel_signal(key)
    board.release_cancel_signal(key)
    again = board.cancel_signal(key)
    assert again is not first and again.is_set()


def test_dropping_an_operation_forgets_what_forget_would_and_its_latest_decision() -> None:
    board = DecisionBoard()
    board.apply_nowait(manifest_issued("op-1"))
    board.apply_nowait(_decision("op-1", S.UNKNOWN, "claim", reason=R.LEASE_EXPIRED))
    board.cancel_signal(("c1", "op-1"))
    board.drop({("c1", "op-1"), ("c1", "never-seen")})
    assert (board.manifests, board.latest, board._settling) == ({}, {}, {})
    assert (board._lease_lost_at, board._cancel_signals, board.open) == ({}, {}, set())


async def test_wait_until_gives_up_after_its_timeout() -> None:
    board = DecisionBoard()
    assert await board.wait_until(lambda: False, 0.01) is False
    assert await board.wait_until(lambda: True, 0.01) is True


def _rejection(event_id: str, reason: ReasonCode, op: str | None = "op-1", conv: str = "c1") -> Rejected:
    return Rejected(
        conversation_id=conv, operation_id=op, reason=reason, event_type="ReplayStarted", event_id=event_id
    )


def test_only_refusals_of_operations_the_board_follows_are_kept_and_they_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(board_module, "REFUSALS_KEPT", 2)
    board = DecisionBoard()
    board.apply_nowait(_rejection("early", R.LEASE_NOT_HELD))  # no decision of op-1 seen yet
    board.apply_nowait(_decision("op-1", S.UNKNOWN, "ended", reason=R.STREAM_DISCONNECTED))
    for ignored in (
        _rejection("other-op", R.LEASE_NOT_HELD, op="op-2"),
        _rejection("other-conv", R.LEASE_NOT_HELD, conv="c2"),
        _rejection("no-op", R.INVALID_EVENT, op=None),
        Rejected(conversation_id="c1", operation_id="op-1", reason=R.UNDECODABLE_RECORD),  # no event id
    ):
        board.apply_nowait(ignored)
    assert list(board._refusals) == [] and board.position == 1  # refusals are not decisions
    assert board.follows("c1") and not board.follows("c2")
    for event_id in ("r1", "r2", "r2", "r3"):
        board.apply_nowait(_rejection(event_id, R.ILLEGAL_TRANSITION))
    assert list(board._refusals) == ["r2", "r3"]  # the first of each kept, the oldest dropped
    refusal = board.refusal("r3")
    assert refusal is not None and refusal.reason == R.ILLEGAL_TRANSITION and board.refusal("r1") is None


async def test_a_refused_event_ends_the_wait_for_its_answer() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    await board.apply([_decision("op-1", S.SENT, "x-replay", lease_owner="worker-x")])
    assert not await board.state_after(key, "a-replay", 0.01)
    await board.apply([_rejection("a-replay", R.ILLEGAL_TRANSITION)])
    assert await board.state_after(key, "a-replay", 0.01)
    assert board.answer(key, "a-replay") is None  # refused: no decision names it


async def test_a_refused_attempt_is_its_cas_answer() -> None:
    board = DecisionBoard()
    await board.apply([_decision("op-1", S.UNKNOWN, "ended", reason=R.STREAM_DISCONNECTED)])
    await board.apply([_rejection("attempt", R.UNKNOWN_OPERATION)])
    answer = await board.cas_answer("attempt", 0.01)
    assert isinstance(answer, Rejected) and answer.reason == R.UNKNOWN_OPERATION


@pytest.mark.parametrize(
    ("reason", "ends"),
    [
        (R.LEASE_NOT_HELD, True),
        (R.STALE_GENERATION, True),
        (R.ILLEGAL_TRANSITION, False),  # the decision that made it illegal settles the phase
        (R.HANDLE_BOUND_TO_OTHER_MANIFEST, False),  # the stream goes on, unresumable
    ],
)
async def test_a_phase_ends_when_one_of_its_events_is_refused_as_another_workers(
    reason: ReasonCode, ends: bool
) -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    await board.apply([_decision("op-1", S.STREAMING, "sent")])
    await board.apply([_rejection("ended", reason), _rejection("not-mine", R.LEASE_NOT_HELD)])
    assert await board.settled(key, 1, {"not-yours"}, 0.01) is None
    found = await board.settled(key, 1, {"sent", "ended"}, 0.01)
    assert (found.event_id if isinstance(found, Rejected) else found) == ("ended" if ends else None)


def test_a_lease_lost_signal_is_set_by_an_accepted_expiry_of_its_generation_seen_after_it() -> None:
    key = ("c1", "op-1")
    board = DecisionBoard()
    board.apply_nowait(_decision("op-1", S.UNKNOWN, "old-claim", reason=R.LEASE_EXPIRED))  # before the read
    signal = board.lease_lost_signal(key, 1)
    assert not signal.is_set() and board.lease_lost_signal(key, 1) is signal
    board.apply_nowait(_decision("op-1", S.STREAMING, "claim", accepted=False, reason=R.LEASE_NOT_EXPIRED))
    board.apply_nowait(_decision("op-1", S.UNKNOWN, "gen-2", attempt_generation=2, reason=R.LEASE_EXPIRED))
    board.apply_nowait(_decision("op-2", S.UNKNOWN, "other-op", reason=R.LEASE_EXPIRED))
    assert not signal.is_set()  # refused, another generation, another operation
    board.apply_nowait(_decision("op-1", S.UNKNOWN, "claim-2", reason=R.LEASE_EXPIRED))
    assert signal.is_set()
    other = board.lease_lost_signal(key, 2)  # a read of the next generation: a signal of its own
    assert other is not signal and not other.is_set()
    board.release_lease_lost_signal(key)
    board.release_lease_lost_signal(key)  # none left: nothing to release
    board.lease_lost_signal(key, 3)
    board.forget(key)
    assert board._lease_signals == {}
