"""The sweeper's rules, one per row of its table, on hand-made decisions (no clock, no ledger)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest

from tests.unit.gateway.decisions import decision as _decision
from turnledger.gateway.board import DecisionBoard
from turnledger.gateway.client import WorkerEvents
from turnledger.gateway.sweeper import Adopt, Claim, ExpirySweeper, claim_due_at
from turnledger.model.events import DispatchDecision, DispatchState, IngressEvent
from turnledger.model.reasons import ReasonCode

S = DispatchState


class _Sink:
    def __init__(self) -> None:
        self.events: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)


def _sweeper(
    decisions: Iterable[DispatchDecision], running: set[tuple[str, str]] | None = None
) -> ExpirySweeper:
    board = DecisionBoard()
    for d in decisions:
        board.apply_nowait(d)
    adopted: list[tuple[str, str]] = []
    sweeper = ExpirySweeper(
        board,
        WorkerEvents(_Sink(), "sweeper"),
        running=(running or set()).__contains__,
        adopt=adopted.append,
        grace_ms=100,
        adopt_after_ms=30_000,
    )
    return sweeper


def test_an_expired_lease_of_an_attempt_run_elsewhere_is_claimed_after_the_grace() -> None:
    streaming = _decision("op-1", S.STREAMING, lease_owner="w1", lease_expires_at_ms=31_000)
    sweeper = _sweeper([streaming])
    assert sweeper.plan(31_050) == []
    assert sweeper.plan(31_100) == [Claim(("c1", "op-1"), 1)]


def test_an_attempt_run_here_is_never_claimed() -> None:
    streaming = _decision("op-1", S.STREAMING, lease_owner="w1", lease_expires_at_ms=31_000)
    assert _sweeper([streaming], running={("c1", "op-1")}).plan(99_999_999) == []


def test_a_passed_deadline_is_claimed_in_any_non_final_state() -> None:
    for state in (S.WAITING, S.PREPARED, S.PAUSED):
        sweeper = _sweeper([_decision("op-1", state, attempt_generation=0, occurred_at_ms=99_000)])
        assert sweeper.plan(99_000) == []
        assert sweeper.plan(100_100) == [Claim(("c1", "op-1"), 0)]


def test_a_cancelled_attempt_not_yet_terminated_is_claimed_when_its_lease_expires() -> None:
    cancelled = _decision("op-1", S.CANCELLED, lease_owner="w1", lease_expires_at_ms=5_000)
    assert _sweeper([cancelled]).plan(5_100) == [Claim(("c1", "op-1"), 1)]
    done = _decision("op-1", S.CANCELLED, attempt_terminated=True)
    assert _sweeper([done]).plan(10**9) == []


def test_final_operations_are_left_alone() -> None:
    decisions = [
        _decision("a", S.COMMITTED, attempt_terminated=True),
        _decision("b", S.REJECTED, attempt_generation=0),
    ]
    assert _sweeper(decisions).plan(10**9) == []


def test_a_freed_attempt_after_a_lease_expiry_is_adopted_at_once() -> None:
    freed = _decision("op-1", S.UNKNOWN, reason=ReasonCode.LEASE_EXPIRED)
    assert _sweeper([freed]).plan(1_001) == [Adopt(("c1", "op-1"))]


def test_quiet_unowned_work_is_adopted_after_a_lease_period() -> None:
    terminated = _decision("op-1", S.UNKNOWN, attempt_terminated=True, reason=ReasonCode.STREAM_DISCONNECTED)
    prepared = _decision("op-2", S.PREPARED, attempt_generation=0)
    sweeper = _sweeper([terminated, prepared])
    assert sweeper.plan(30_999) == []
    assert sweeper.plan(31_000) == [Adopt(("c1", "op-1")), Adopt(("c1", "op-2"))]


def test_a_prepared_operation_whose_cas_was_refused_is_adopted_once_quiet() -> None:
    """A CAS refused while the conversation was busy leaves the operation PREPARED with the refusal as
    its latest decision; if the worker that asked is gone, nobody else would ever attempt it."""
    busy = _decision(
        "op-2",
        S.PREPARED,
        attempt_generation=0,
        accepted=False,
        reason=ReasonCode.CONVERSATION_BUSY,
        previous_state=S.PREPARED,
    )
    sweeper = _sweeper([busy])
    assert sweeper.plan(30_999) == []
    assert sweeper.plan(31_000) == [Adopt(("c1", "op-2"))]
    assert _sweeper([busy], running={("c1", "op-2")}).plan(31_000) == []


async def test_a_claim_is_made_once_per_decision_and_then_again_only_after_a_while() -> None:
    streaming = _decision("op-1", S.STREAMING, lease_owner="w1", lease_expires_at_ms=31_000)
    sweeper = _sweeper([streaming])
    now = 40_000
    sweeper._clock = lambda: now
    assert await sweeper.sweep() == [Claim(("c1", "op-1"), 1)]
    assert await sweeper.sweep() == []
    now += 30_000
    assert await sweeper.sweep() == [Claim(("c1", "op-1"), 1)]
    claims = sweeper.events.sink.events  # type: ignore[attr-defined]
    assert [(e.operation_id, e.attempt_generation, e.worker_id) for e in claims] == [
        ("op-1", 1, "sweeper")
    ] * 2


def test_an_unknown_attempt_whose_lease_another_worker_holds_is_not_adopted_however_quiet() -> None:
    disconnected = _decision(
        "op-1",
        S.UNKNOWN,
        reason=ReasonCode.STREAM_DISCONNECTED,
        lease_owner="w1",
        lease_expires_at_ms=90_000,
    )
    sweeper = _sweeper([disconnected])
    assert sweeper.plan(89_999) == []  # quiet for 89 s, but w1's lease holds: it continues the attempt
    assert sweeper.plan(90_100) == [Claim(("c1", "op-1"), 1)]


def test_when_a_claim_is_due_is_the_earlier_of_the_deadline_of_open_work_and_an_owned_lease() -> None:
    assert claim_due_at(_decision("op-1", S.COMMITTED, attempt_terminated=True)) is None
    assert claim_due_at(_decision("op-1", S.COMMITTED, deadline_at_ms=None, attempt_terminated=True)) is None
    cancelled = _decision("op-1", S.CANCELLED, lease_owner="w1", lease_expires_at_ms=200_000)
    assert claim_due_at(cancelled) == 200_000  # final: its deadline no longer counts
    streaming = _decision("op-1", S.STREAMING, lease_owner="w1", lease_expires_at_ms=50_000)
    assert claim_due_at(streaming) == 50_000
    assert claim_due_at(streaming.model_copy(update={"lease_expires_at_ms": 150_000})) == 100_000
    unowned = _decision("op-1", S.UNKNOWN, lease_owner=None, lease_expires_at_ms=5_000)
    assert claim_due_at(unowned) == 100_000  # a lease nobody holds is nobody's to lose
    no_expiry = _decision("op-1", S.STREAMING, lease_owner="w1", lease_expires_at_ms=None)
    assert claim_due_at(no_expiry) == 100_000


def test_work_run_here_or_acted_on_does_not_stop_the_plan_for_the_operations_after_it() -> None:
    due = [
        _decision(op, S.STREAMING, lease_owner="w1", lease_expires_at_ms=31_000)
        for op in ("op-1", "op-2", "op-3")
    ]
    sweeper = _sweeper(due, running={("c1", "op-1")})
    sweeper._acted[("c1", "op-2")] = (due[1].source_event_id, 31_000)
    assert sweeper.plan(31_100) == [Claim(("c1", "op-3"), 1)]


async def test_a_sweep_says_what_it_claims_and_adopts(caplog: pytest.LogCaptureFixture) -> None:
    streaming = _decision("op-1", S.STREAMING, lease_owner="w1", lease_expires_at_ms=31_000)
    prepared = _decision("op-2", S.PREPARED, attempt_generation=0)
    sweeper = _sweeper([streaming, prepared])
    sweeper._clock = lambda: 40_000
    with caplog.at_level(logging.INFO, logger="turnledger.gateway.sweeper"):
        assert await sweeper.sweep() == [Claim(("c1", "op-1"), 1), Adopt(("c1", "op-2"))]
    assert [r.getMessage() for r in caplog.records] == [
        "c1/op-1: claiming expiry of generation 1",
        "c1/op-2: adopting abandoned work",
    ]


def test_the_defaults_wait_half_a_second_past_a_due_claim_and_a_lease_period_before_adopting() -> None:
    board = DecisionBoard()
    board.apply_nowait(_decision("op-1", S.STREAMING, lease_owner="w1", lease_expires_at_ms=31_000))
    board.apply_nowait(_decision("op-2", S.PREPARED, attempt_generation=0))
    sweeper = ExpirySweeper(board, WorkerEvents(_Sink(), "sweeper"), running=set().__contains__, adopt=print)
    assert (sweeper.grace_ms, sweeper.adopt_after_ms, sweeper.tick_s) == (500, 30_000, 1.0)
    assert sweeper.plan(30_999) == []
    assert sweeper.plan(31_000) == [Adopt(("c1", "op-2"))]
    assert sweeper.plan(31_500) == [Claim(("c1", "op-1"), 1), Adopt(("c1", "op-2"))]
