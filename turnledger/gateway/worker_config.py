"""What a dispatch worker is configured with, and what it counts."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from turnledger.gateway.provider_failures import BackoffPolicy
from turnledger.gateway.pump import UNNAMED_ERROR_GRACE_S
from turnledger.gateway.rollout import RolloutStage

CrashHook = Callable[[str], None]
"""Test hook: called with a point's name (`journal-handle`: the handle is journaled, not yet bound)."""


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: str = "worker-1"
    max_attempts: int = 4
    max_resumes: int = 3
    cas_timeout_s: float = 30.0
    settle_timeout_s: float = 60.0
    max_concurrency: int = 64
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    rollout_stage: RolloutStage = RolloutStage.ALL
    lease_s: float = 30.0
    """How long an accepted attempt stays this worker's without a sign of life from it."""
    flush_s: float = 0.1
    """A stream's deltas are appended at most this often (gateway/pump.py "Coalescing"); 0: per chunk."""
    unnamed_error_grace_s: float = UNNAMED_ERROR_GRACE_S
    """How long a stream whose error came before anything named its response may still name one before
    its read ends on that error (gateway/pump.py)."""
    sweep: bool = True
    """Claim the expired leases and passed deadlines of others and adopt abandoned work."""
    sweep_tick_s: float = 1.0
    claim_grace_s: float = 1.0
    """Claims wait this long past the time the fold would accept them (clock skew between workers)."""
    stop_within_s: float = 5.0
    """How long `release` (a partition moved) and `close` wait for cancelled operation tasks to unwind."""
    crash_hook: CrashHook | None = None
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    """The pause before a new generation when the provider named none (gateway/provider_failures.py)."""
    jitter: Callable[[], float] = random.random
    """Draws the backoff's jitter, in [0, 1)."""

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1000)


@dataclass
class WorkerStats:
    counts: Counter[str] = field(default_factory=Counter)

    def bump(self, name: str, n: int = 1) -> None:
        self.counts[name] += n
