"""What a worker concludes about an operation, and how a give-up reads in the ledger."""

from __future__ import annotations

from enum import StrEnum

from turnledger.model.events import DispatchDecision, DispatchState
from turnledger.model.reasons import ReasonCode

S = DispatchState

NOT_TERMINATED_REASONS = frozenset({ReasonCode.STREAM_DISCONNECTED, ReasonCode.WORKER_RECOVERED})
GIVE_UP_PREFIX = "worker gave up: "
"""Start of the reason of the CancelRequested a worker appends when it abandons an operation."""


GIVE_UP_REASONS = frozenset({ReasonCode.WORKER_GAVE_UP, ReasonCode.NO_PROVIDER_ENDPOINT})
"""The reasons of a worker's give-up (a CancelRequested marked `workerGaveUp`)."""


def gave_up(decision: DispatchDecision) -> bool:
    """Is this the CANCELLED decision of an operation a worker abandoned? Decisions written before the
    typed give-up (reason WORKER_GAVE_UP) are recognized by the detail's prefix."""
    if decision.state != S.CANCELLED:
        return False
    return decision.reason in GIVE_UP_REASONS or (
        decision.reason is None and decision.detail.startswith(GIVE_UP_PREFIX)
    )


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
