"""The spec's metrics, live: counted by the projector from the output records its script applied.

Why there (docs/architecture.md, "Live metrics"): the projector applies each output offset exactly
once, atomically with moving its Redis position, and the script says which records of a batch it
applied. Counting exactly those records counts each once across projector restarts, rebalances and
two projectors briefly sharing a partition; summed over the projectors, every counter equals what
`turnledger metrics` computes from the topics (`replay/metrics.py`, whose rules these mirror).
A restarted projector starts its counters at 0 (Prometheus' `increase()` and `rate()` handle the
reset) and never counts again what it applied before.

Two metrics need an operation's history (when it went UNKNOWN; whether its request is resumable):
that history is kept in memory per open operation, so an operation open while its manifests
partition moves to another projector is not sampled for them by either (never counted twice).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from turnledger.model.base import Frozen
from turnledger.model.events import (
    DispatchDecision,
    DispatchState,
    ManifestIssued,
    PreviewRetracted,
    Quarantined,
    Rejected,
)
from turnledger.model.reasons import ReasonCode
from turnledger.observability.server import Readiness, serving
from turnledger.replay.metrics import CAS_REASONS, NOT_TERMINATED, VALIDATOR_REASONS, resumable_request

S = DispatchState
FINAL = frozenset({S.COMMITTED, S.REJECTED, S.CANCELLED})
SETTLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

VALIDATOR_REJECTIONS = Counter(
    "turnledger_validator_rejections",
    "Submitted turns the sequence validator rejected, by reason.",
    ["reason"],
)
REJECTIONS = Counter(
    "turnledger_rejections",
    "Every record on turnledger.rejections, by reason (validator included).",
    ["reason"],
)
ORPHANED_RESULTS = Counter("turnledger_orphaned_tool_results", "Tool results for a call nobody emitted.")
DUPLICATE_RESULTS = Counter("turnledger_duplicate_tool_results", "A second result for the same call.")
UNKNOWN_SETTLE = Histogram(
    "turnledger_unknown_settle_seconds",
    "Time an operation spent UNKNOWN before its next accepted state (age of UNKNOWN dispatches).",
    buckets=SETTLE_BUCKETS,
)
HANDLE_RECOVERY_ATTEMPTS = Counter(
    "turnledger_handle_recovery_attempts",
    "Bound attempts of resumable requests that went UNKNOWN without being terminated (episodes).",
)
HANDLE_RECOVERY_SUCCESSES = Counter(
    "turnledger_handle_recovery_successes",
    "Episodes whose generation streamed again from its handle and committed.",
)
STREAM_DISCONNECTS = Counter(
    "turnledger_stream_disconnects",
    "Disconnects that cannot be recovered from a handle: before a handle, or of a non-resumable request.",
    ["kind"],
)
LATE_BLOCKS = Counter("turnledger_late_blocks", "Records on turnledger.quarantine, by reason.", ["reason"])
PREVIEW_RETRACTIONS = Counter("turnledger_preview_retractions", "PreviewRetracted records.")
CANONICAL_CAS_CONFLICTS = Counter(
    "turnledger_canonical_cas_conflicts", "Complete responses the canonical CAS refused (quarantined)."
)
DISPATCH_CAS_CONFLICTS = Counter(
    "turnledger_dispatch_cas_conflicts", "Send-CAS refusals of a DispatchAttempt, by reason.", ["reason"]
)


@dataclass
class _Open:
    """What the metrics need of one operation that is not final yet."""

    resumable: bool = False
    unknown_since_ms: int | None = None
    episodes: dict[int, list[bool]] = field(default_factory=dict)
    """generation → one flag per open recovery episode: resumed (streamed again) since."""


class SpecMetrics(Collector):
    """Counts applied output records; also a collector of the two UNKNOWN gauges (now - since)."""

    def __init__(self, clock_ms: Iterable[int] | None = None) -> None:
        self.ops: dict[tuple[str, str], _Open] = {}
        self._clock = iter(clock_ms) if clock_ms is not None else None

    def now_ms(self) -> int:
        return next(self._clock) if self._clock is not None else int(time.time() * 1000)

    def observe(self, records: Iterable[Frozen]) -> None:
        for record in records:
            if isinstance(record, DispatchDecision):
                self._decision(record)
            elif isinstance(record, ManifestIssued):
                m = record.manifest
                op = self.ops.setdefault((m.conversation_id, m.operation_id), _Open())
                op.resumable = resumable_request(m.adapter, m.request_body)
            elif isinstance(record, Rejected):
                REJECTIONS.labels(record.reason.value).inc()
                if record.reason in VALIDATOR_REASONS:
                    VALIDATOR_REJECTIONS.labels(record.reason.value).inc()
                if record.reason == ReasonCode.ORPHANED_RESULT:
                    ORPHANED_RESULTS.inc()
                elif record.reason == ReasonCode.DUPLICATE_RESULT:
                    DUPLICATE_RESULTS.inc()
            elif isinstance(record, Quarantined):
                LATE_BLOCKS.labels(record.reason.value).inc()
                if record.reason == ReasonCode.CANONICAL_CAS_CONFLICT:
                    CANONICAL_CAS_CONFLICTS.inc()
            elif isinstance(record, PreviewRetracted):
                PREVIEW_RETRACTIONS.inc()

    def _decision(self, d: DispatchDecision) -> None:
        if not d.accepted and d.reason in CAS_REASONS:
            DISPATCH_CAS_CONFLICTS.labels(d.reason.value).inc()
        key = (d.conversation_id, d.operation_id)
        op = self.ops.get(key)
        if op is None:
            if d.state in FINAL:
                return  # a refusal repeating a final state, or an operation final at once
            op = self.ops[key] = _Open()
        self._episode(op, d)
        if d.accepted:
            if d.state == S.UNKNOWN and op.unknown_since_ms is None:
                op.unknown_since_ms = d.occurred_at_ms
            elif d.state != S.UNKNOWN and op.unknown_since_ms is not None:
                UNKNOWN_SETTLE.observe((d.occurred_at_ms - op.unknown_since_ms) / 1000)
                op.unknown_since_ms = None
            if d.state == S.STREAMING:
                flags = op.episodes.get(d.attempt_generation, [])
                flags[:] = [True] * len(flags)
            elif d.state == S.COMMITTED:
                HANDLE_RECOVERY_SUCCESSES.inc(sum(op.episodes.get(d.attempt_generation, [])))
        if d.accepted and d.state in FINAL:
            del self.ops[key]

    @staticmethod
    def _episode(op: _Open, d: DispatchDecision) -> None:
        """The rule of `replay.metrics._handle_recovery`, one decision at a time."""
        if d.state != S.UNKNOWN or d.reason not in NOT_TERMINATED or d.previous_state == S.UNKNOWN:
            return
        if not d.response_handle or d.previous_state == S.SENT:
            STREAM_DISCONNECTS.labels("without_handle").inc()
        elif not op.resumable:
            STREAM_DISCONNECTS.labels("not_resumable").inc()
        else:
            HANDLE_RECOVERY_ATTEMPTS.inc()
            op.episodes.setdefault(d.attempt_generation, []).append(False)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        since = [op.unknown_since_ms for op in self.ops.values() if op.unknown_since_ms is not None]
        yield GaugeMetricFamily(
            "turnledger_unknown_open", "Operations UNKNOWN now (not settled since).", value=len(since)
        )
        oldest = (self.now_ms() - min(since)) / 1000 if since else 0.0
        yield GaugeMetricFamily(
            "turnledger_unknown_oldest_age_seconds", "Age of the oldest operation UNKNOWN now.", value=oldest
        )


@contextlib.asynccontextmanager
async def serve_spec_metrics(port: int, metrics: SpecMetrics, ready: Readiness) -> AsyncIterator[None]:
    """While the block runs: the UNKNOWN gauges registered and, on `port` (0: off), /metrics and health."""
    if not port:
        yield
        return
    REGISTRY.register(metrics)
    try:
        async with serving(port, ready):
            yield
    finally:
        REGISTRY.unregister(metrics)
