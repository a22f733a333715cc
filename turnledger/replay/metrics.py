"""The spec's metrics, computed from the output topics (never from a service's memory).

`turnledger metrics` prints them for any deployment's topics; `turnledger demo` for its run.
Operations are named by (conversation id, operation id): ids are unique per conversation only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnledger.adapters.profiles import PROFILES, api_of
from turnledger.gateway.worker import gave_up
from turnledger.model.events import (
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    PreviewRetracted,
    Quarantined,
    Rejected,
    ToolCallReady,
)
from turnledger.model.reasons import ReasonCode
from turnledger.replay.evidence import Evidence
from turnledger.streaming.strict_arguments import ArgumentError, validate_arguments

S = DispatchState
R = ReasonCode

VALIDATOR_REASONS = frozenset(
    {
        R.DUPLICATE_CALL_ID, R.ORPHANED_RESULT, R.DUPLICATE_RESULT, R.RESULT_TOOL_MISMATCH,
        R.RESULT_ARGUMENT_DIGEST_MISMATCH, R.RESULT_GENERATION_MISMATCH, R.NON_TERMINAL_RESULT,
        R.PLANNED_BLOCK, R.UNKNOWN_KIND, R.INCOMPLETE_ARGUMENTS, R.SCOPE_BOUNDARY_CROSSED, R.UNKNOWN_ROLE,
        R.MALFORMED_BLOCK, R.DUPLICATE_BLOCK_ID, R.DIGEST_MISMATCH, R.BLOCK_OUT_OF_SEQUENCE,
        R.INVALID_ARGUMENTS_JSON, R.UNENCODABLE_TEXT, R.BLOCK_TOO_LARGE, R.TOO_MANY_BLOCKS, R.TURN_TOO_LARGE,
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
    refused: int = 0  # answers the provider stopped for a refusal (the fold's CANCELLED PROVIDER_REFUSED)
    committed_cut: int = 0  # answers committed as far as they went, cut by the output limit
    output_limited: int = 0  # answers cut at the output limit (the fold's CANCELLED OUTPUT_LIMIT_REACHED)
    cancelled_in_flight: Counter[str] = field(default_factory=Counter)  # state the cancel found
    given_up: dict[str, str] = field(default_factory=dict)  # "conversation/operation" → the worker's reason

    @property
    def handle_recovery_rate(self) -> float | None:
        return self.handle_recovered / self.handle_episodes if self.handle_episodes else None


def compute(evidence: Evidence, *, now_ms: int, partial_tool_dispatches: int | None = None) -> Metrics:
    """`partial_tool_dispatches` defaults to the count of `partial_tool_calls(evidence)`."""
    if partial_tool_dispatches is None:
        partial_tool_dispatches = len(partial_tool_calls(evidence))
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
    by_op: dict[tuple[str, str], list[DispatchDecision]] = {}
    for d in evidence.of("manifests", DispatchDecision):
        by_op.setdefault((d.conversation_id, d.operation_id), []).append(d)
        if not d.accepted and d.reason in CAS_REASONS:
            m.dispatch_cas_conflicts[d.reason.value] += 1
    m.operations = len(by_op)
    resumable = {
        (i.manifest.conversation_id, i.manifest.operation_id)
        for i in evidence.of("manifests", ManifestIssued)
        if resumable_request(i.manifest.adapter, i.manifest.request_body)
    }
    for op, decisions in by_op.items():
        _unknown_ages(m, decisions, now_ms)
        _handle_recovery(m, decisions, op in resumable)
        last = decisions[-1]
        # the accepted transition to CANCELLED (a refused attempt after it repeats the state)
        cancel = next((d for d in decisions if d.state == S.CANCELLED and d.accepted), None)
        ended_by = None if cancel is None else _cancelled_by(cancel)
        m.final_states[last.state.value if ended_by is None else f"CANCELLED ({ended_by})"] += 1
        if cancel is not None and ended_by == "worker gave up":
            m.given_up[f"{cancel.conversation_id}/{cancel.operation_id}"] = cancel.detail
        elif ended_by == "provider refused":
            m.refused += 1
        elif ended_by == "output limit":
            m.output_limited += 1
        elif cancel is not None:
            m.cancelled += 1
            m.cancelled_in_flight[(cancel.previous_state or S.CANCELLED).value] += 1
        if last.state == S.COMMITTED:
            m.committed += 1
            m.generations[last.attempt_generation] += 1
            # the accepted commit (a log may hold only a refusal repeating the state)
            commit = next((d for d in decisions if d.state == S.COMMITTED and d.accepted), last)
            m.committed_cut += commit.reason == R.OUTPUT_LIMIT_REACHED
    return m


ENDED_BY_THE_ANSWER: Mapping[R | None, str] = {
    R.PROVIDER_REFUSED: "provider refused",
    R.OUTPUT_LIMIT_REACHED: "output limit",
}
"""The reasons the fold settles an answer CANCELLED with, no cancel behind it (`lifecycle.SETTLED_BY`):
a refusal stop, a cut at the output limit."""


def _cancelled_by(cancel: DispatchDecision) -> str | None:
    """Who ended a CANCELLED operation, when not a client: the worker giving up, or the answer itself
    (`ENDED_BY_THE_ANSWER`)."""
    if gave_up(cancel):
        return "worker gave up"
    return ENDED_BY_THE_ANSWER.get(cancel.reason)


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


def resumable_request(adapter: str, request_body: str) -> bool:
    """Does the API keep this exact request's response for a resume (its profile's rule)?"""
    profile = PROFILES.get(api_of(adapter))
    body = orjson.loads(request_body)
    return profile is not None and isinstance(body, dict) and profile.resumable(body)


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


def partial_tool_calls(evidence: Evidence) -> list[str]:
    """Tool calls that reached `turnledger.tool-calls` incomplete: arguments that do not parse or do not
    validate against the schema of the tool the dispatch request offered (or a tool it did not offer).
    One line per such call; the spec's "partial tool dispatches" is their number, and must be zero."""
    tools: dict[tuple[str, str], dict[str, Any]] = {}
    for req in evidence.of("ingress", DispatchRequested):
        tools[(req.conversation_id, req.operation_id)] = {t.name: t.input_schema for t in req.tools}
    found: list[str] = []
    for call in evidence.of("tool-calls", ToolCallReady):
        where = f"{call.conversation_id}/{call.operation_id} {call.call_id}"
        schema = tools.get((call.conversation_id, call.operation_id), {}).get(call.tool_name)
        if schema is None:
            found.append(f"{where}: tool {call.tool_name} was not offered")
            continue
        try:
            validate_arguments(call.arguments, schema)
        except ArgumentError as exc:
            found.append(f"{where}: {exc}")
    return found
