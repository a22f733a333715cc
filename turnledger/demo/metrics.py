"""The spec's metrics, computed from the output topics of a run (never from a service's memory)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import orjson

from turnledger.demo.collect import Evidence
from turnledger.gateway.worker import gave_up
from turnledger.model.events import (
    DispatchDecision,
    DispatchState,
    ManifestIssued,
    PreviewRetracted,
    Quarantined,
    Rejected,
)
from turnledger.model.reasons import ReasonCode

S = DispatchState
R = ReasonCode

VALIDATOR_REASONS = frozenset(
    {
        R.DUPLICATE_CALL_ID, R.ORPHANED_RESULT, R.DUPLICATE_RESULT, R.RESULT_TOOL_MISMATCH,
        R.RESULT_ARGUMENT_DIGEST_MISMATCH, R.RESULT_GENERATION_MISMATCH, R.NON_TERMINAL_RESULT,
        R.PLANNED_BLOCK, R.UNKNOWN_KIND, R.INCOMPLETE_ARGUMENTS, R.SCOPE_BOUNDARY_CROSSED, R.UNKNOWN_ROLE,
        R.MALFORMED_BLOCK, R.DUPLICATE_BLOCK_ID, R.DIGEST_MISMATCH, R.BLOCK_OUT_OF_SEQUENCE,
    }
)  # fmt: skip
CAS_REASONS = frozenset({R.CAS_REVISION_MISMATCH, R.CAS_CANCEL_GENERATION_MISMATCH, R.CAS_STATE_MISMATCH,
                         R.OLD_ATTEMPT_NOT_TERMINATED})  # fmt: skip
NOT_TERMINATED = frozenset({R.STREAM_DISCONNECTED, R.WORKER_RECOVERED})


def percentile(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Metrics:
    validator_rejections: Counter[str] = field(default_factory=Counter)
    orphaned_results: int = 0
    duplicate_results: int = 0
    unknown_ages_ms: list[int] = field(default_factory=list)
    unknown_open: int = 0
    unknown_open_max_age_ms: int = 0
    handle_episodes: int = 0
    handle_recovered: int = 0
    disconnects_without_handle: int = 0
    disconnects_not_resumable: int = 0
    late_blocks: Counter[str] = field(default_factory=Counter)
    preview_retractions: int = 0
    canonical_cas_conflicts: int = 0
    dispatch_cas_conflicts: Counter[str] = field(default_factory=Counter)
    partial_tool_dispatches: int = 0
    operations: int = 0
    committed: int = 0
    generations: Counter[int] = field(default_factory=Counter)
    final_states: Counter[str] = field(default_factory=Counter)
    other_rejections: Counter[str] = field(default_factory=Counter)
    cancelled: int = 0  # cancelled by a client
    cancelled_in_flight: Counter[str] = field(default_factory=Counter)  # state the cancel found
    given_up: dict[str, str] = field(default_factory=dict)  # operation id → the worker's reason

    @property
    def handle_recovery_rate(self) -> float | None:
        return self.handle_recovered / self.handle_episodes if self.handle_episodes else None


def compute(evidence: Evidence, *, now_ms: int, partial_tool_dispatches: int) -> Metrics:
    m = Metrics(partial_tool_dispatches=partial_tool_dispatches)
    for rej in evidence.of("rejections", Rejected):
        if rej.reason in VALIDATOR_REASONS:
            m.validator_rejections[rej.reason.value] += 1
        else:
            m.other_rejections[rej.reason.value] += 1
        m.orphaned_results += rej.reason == R.ORPHANED_RESULT
        m.duplicate_results += rej.reason == R.DUPLICATE_RESULT
    for q in evidence.of("quarantine", Quarantined):
        m.late_blocks[q.reason.value] += 1
        m.canonical_cas_conflicts += q.reason == R.CANONICAL_CAS_CONFLICT
    m.preview_retractions = len(evidence.of("previews", PreviewRetracted))
    by_op: dict[str, list[DispatchDecision]] = {}
    for d in evidence.of("manifests", DispatchDecision):
        by_op.setdefault(d.operation_id, []).append(d)
        if not d.accepted and d.reason in CAS_REASONS:
            m.dispatch_cas_conflicts[d.reason.value] += 1
    m.operations = len(by_op)
    resumable = {
        i.manifest.operation_id
        for i in evidence.of("manifests", ManifestIssued)
        if i.manifest.adapter.startswith("openai-responses@") and _background_stream(i.manifest.request_body)
    }
    for op, decisions in by_op.items():
        _unknown_ages(m, decisions, now_ms)
        _handle_recovery(m, decisions, op in resumable)
        last = decisions[-1]
        # the accepted transition to CANCELLED (a refused attempt after it repeats the state)
        cancel = next((d for d in decisions if d.state == S.CANCELLED and d.accepted), None)
        m.final_states["CANCELLED (worker gave up)" if cancel and gave_up(cancel) else last.state.value] += 1
        if cancel is not None and gave_up(cancel):
            m.given_up[cancel.operation_id] = cancel.detail
        elif cancel is not None:
            m.cancelled += 1
            m.cancelled_in_flight[(cancel.previous_state or S.CANCELLED).value] += 1
        if last.state == S.COMMITTED:
            m.committed += 1
            m.generations[last.attempt_generation] += 1
    return m


def _unknown_ages(m: Metrics, decisions: list[DispatchDecision], now_ms: int) -> None:
    since: int | None = None
    for d in decisions:
        if not d.accepted:
            continue
        if d.state == S.UNKNOWN and since is None:
            since = d.occurred_at_ms
        elif d.state != S.UNKNOWN and since is not None:
            m.unknown_ages_ms.append(d.occurred_at_ms - since)
            since = None
    if since is not None:
        m.unknown_open += 1
        m.unknown_open_max_age_ms = max(m.unknown_open_max_age_ms, now_ms - since)


def _background_stream(request_body: str) -> bool:
    body = orjson.loads(request_body)
    return isinstance(body, dict) and body.get("background") is True and body.get("stream") is True


def _handle_recovery(m: Metrics, decisions: list[DispatchDecision], resumable: bool) -> None:
    """An episode: a bound attempt of a resumable request (Responses background + stream) goes UNKNOWN
    without being terminated. Recovered: the same generation streams again and commits (resume from the
    handle), with no new generation in between. Other streams are gone with their connection: counted
    apart, they are retried as a new generation by design."""
    for i, d in enumerate(decisions):
        if d.state != S.UNKNOWN or d.reason not in NOT_TERMINATED or d.previous_state == S.UNKNOWN:
            continue
        if not d.response_handle or d.previous_state == S.SENT:
            m.disconnects_without_handle += 1
            continue
        if not resumable:
            m.disconnects_not_resumable += 1
            continue
        m.handle_episodes += 1
        later = [x for x in decisions[i + 1 :] if x.accepted]
        resumed = any(x.state == S.STREAMING and x.attempt_generation == d.attempt_generation for x in later)
        committed = any(
            x.state == S.COMMITTED and x.attempt_generation == d.attempt_generation for x in later
        )
        if resumed and committed:
            m.handle_recovered += 1
