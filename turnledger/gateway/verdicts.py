"""What a worker concludes about an operation, and how a give-up reads in the ledger."""

from __future__ import annotations

from enum import StrEnum

from turnledger.model.events import DispatchDecision, DispatchState
from turnledger.model.reasons import ReasonCode

S = DispatchState

NOT_TERMINATED_REASONS = frozenset({ReasonCode.STREAM_DISCONNECTED, ReasonCode.WORKER_RECOVERED})
STILL_OPEN_REASONS = NOT_TERMINATED_REASONS | {ReasonCode.LEASE_EXPIRED}
"""Reasons of an accepted UNKNOWN decision whose attempt the provider may still be producing."""
GIVE_UP_PREFIX = "worker gave up: "
"""Start of the reason of the CancelRequested a worker appends when it abandons an operation."""


GIVE_UP_REASONS = frozenset(
    {ReasonCode.WORKER_GAVE_UP, ReasonCode.NO_PROVIDER_ENDPOINT, ReasonCode.PROVIDER_REFUSED}
)
"""The reasons of a worker's give-up (a CancelRequested marked `workerGaveUp`)."""


def gave_up(decision: DispatchDecision) -> bool:
    """Is this the CANCELLED decision of an operation a worker abandoned? Decisions written before the
    typed give-up (reason WORKER_GAVE_UP) are recognized by the detail's prefix. PROVIDER_REFUSED is
    also how the fold settles an answer the provider stopped for a refusal (no worker gave up on it):
    only a detail with the give-up prefix makes that reason a give-up."""
    if decision.state != S.CANCELLED:
        return False
    if decision.reason is ReasonCode.PROVIDER_REFUSED:
        return decision.detail.startswith(GIVE_UP_PREFIX)
    return decision.reason in GIVE_UP_REASONS or (
        decision.reason is None and decision.detail.startswith(GIVE_UP_PREFIX)
    )


def fold_terminated(decision: DispatchDecision) -> bool:
    """Did the fold end the attempt this decision shows (incomplete, invalid, an error), so that only a
    new generation may follow? A refused decision leaves the operation as it was: its reason says why the
    request was refused (e.g. OLD_ATTEMPT_NOT_TERMINATED for a stray DispatchAttempt), not what became of
    the attempt, so for a refusal the attempt's flag alone decides."""
    if decision.attempt_terminated:
        return True
    return decision.accepted and decision.reason not in STILL_OPEN_REASONS


def describe(decision: DispatchDecision | None) -> str:
    if decision is None:
        return "no decision"
    reason = f" {decision.reason.value}" if decision.reason else ""
    detail = f" ({decision.detail})" if decision.detail else ""
    return f"{decision.state.value}{reason}{detail} at generation {decision.attempt_generation}"


class Verdict(StrEnum):
    COMMITTED = "committed"
    CANCELLED = "cancelled"
    RETRY = "retry"  # the attempt is terminated: a new generation may start
    GIVE_UP = "give_up"
    LOST_CAS = "lost_cas"  # the CAS refused our attempt (another sender's, a newer revision, a cancel)
    LOST_LEASE = "lost_lease"  # the attempt's lease expired or is another worker's: it continues there
