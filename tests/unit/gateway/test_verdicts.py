"""What a worker concludes from one decision: whether the fold ended the attempt, whether a cancel was a
worker's give-up, and how a failure reads in the give-up's reason."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.gateway.decisions import decision
from turnledger.gateway.verdicts import GIVE_UP_PREFIX, describe, fold_terminated, gave_up
from turnledger.model.events import DispatchDecision, DispatchState
from turnledger.model.reasons import ReasonCode

S = DispatchState
R = ReasonCode


def _decision(state: DispatchState, **fields: Any) -> DispatchDecision:
    return decision("op-1", state, attempt_generation=2, **fields)


@pytest.mark.parametrize(
    ("accepted", "reason", "terminated", "expected"),
    [
        (True, R.STREAM_DISCONNECTED, False, False),  # the provider may still be generating
        (True, R.WORKER_RECOVERED, False, False),
        (True, R.LEASE_EXPIRED, False, False),  # a kept response waits to be continued
        (True, R.STREAM_DISCONNECTED, True, True),  # AttemptTerminated
        (True, R.LEASE_EXPIRED, True, True),  # a plain stream died with its worker
        (True, R.MISSING_STOP, True, True),
        (True, R.PROVIDER_ERROR, False, True),  # decisions from before the flag: the reason decides
        (True, None, False, True),
        (False, R.OLD_ATTEMPT_NOT_TERMINATED, False, False),  # a refusal says nothing of the attempt
        (False, R.CONVERSATION_BUSY, False, False),
        (False, R.LEASE_NOT_EXPIRED, False, False),
        (False, R.CAS_STATE_MISMATCH, True, True),
    ],
)
def test_fold_terminated_reads_the_flag_and_the_reason_only_of_an_accepted_decision(
    accepted: bool, reason: ReasonCode | None, terminated: bool, expected: bool
) -> None:
    decision = _decision(S.UNKNOWN, accepted=accepted, reason=reason, attempt_terminated=terminated)
    assert fold_terminated(decision) is expected


def test_a_give_up_is_a_cancel_with_a_give_up_reason_or_the_old_detail_prefix() -> None:
    assert gave_up(_decision(S.CANCELLED, reason=R.WORKER_GAVE_UP))
    assert gave_up(_decision(S.CANCELLED, reason=R.NO_PROVIDER_ENDPOINT))
    assert gave_up(_decision(S.CANCELLED, detail=GIVE_UP_PREFIX + "4 attempts failed"))
    assert not gave_up(_decision(S.CANCELLED, reason=R.SUPERSEDED, detail=GIVE_UP_PREFIX + "x"))
    assert not gave_up(_decision(S.CANCELLED, detail="cancelled by the user"))
    assert not gave_up(_decision(S.UNKNOWN, reason=R.WORKER_GAVE_UP))
    assert not gave_up(_decision(S.COMMITTED, detail=GIVE_UP_PREFIX + "x"))


def test_describe_names_state_reason_detail_and_generation() -> None:
    assert describe(None) == "no decision"
    assert describe(_decision(S.UNKNOWN)) == "UNKNOWN at generation 2"
    assert (
        describe(_decision(S.UNKNOWN, reason=R.MISSING_STOP, detail="no message stop"))
        == "UNKNOWN MISSING_STOP (no message stop) at generation 2"
    )
    assert describe(_decision(S.CANCELLED, detail="by the user")) == "CANCELLED (by the user) at generation 2"
