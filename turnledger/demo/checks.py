"""The invariants of docs/architecture.md "The seven promises", checked against the topics, the projections
and a replay audit.

Each check returns a `Check` with the number of violations and up to a few examples;
the demo exits non-zero if any check has a violation. They read only the topics, the
Redis projections, `turnledger.replay.audit`, the fake provider's request log and which
conversations the driver moved between APIs, never the services' memory, so they also hold
the services to account.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from turnledger.fake_provider import ReceivedRequest
from turnledger.gateway.board import key_of
from turnledger.gateway.verdicts import gave_up
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    Quarantined,
    Rejected,
    ToolCallReady,
    TurnSubmitted,
)
from turnledger.model.reasons import ReasonCode
from turnledger.projections.reader import ProjectionReader
from turnledger.replay.audit import AuditReport
from turnledger.replay.evidence import Evidence
from turnledger.replay.metrics import partial_tool_calls

S = DispatchState
SETTLED = frozenset({S.COMMITTED, S.REJECTED, S.CANCELLED})


@dataclass
class Check:
    name: str
    checked: int = 0
    violations: int = 0
    examples: list[str] = field(default_factory=list)

    def fail(self, example: str) -> None:
        self.violations += 1
        if len(self.examples) < 5:
            self.examples.append(example)

    @property
    def ok(self) -> bool:
        return self.violations == 0


def check_sends(evidence: Evidence, requests: Sequence[ReceivedRequest]) -> Check:
    """Zero sends for invalid sequences: every POST is the exact manifest bytes of a CAS-accepted attempt."""
    check = Check("every provider request = bytes of a CAS-accepted manifest")
    manifests = {key_of(m.manifest): m.manifest for m in evidence.of("manifests", ManifestIssued)}
    accepted: dict[str, tuple[str, str]] = {}
    bound: set[str] = set()
    for d in evidence.of("manifests", DispatchDecision):
        if d.state == S.DISPATCHING and d.accepted and d.idempotency_key:
            accepted[d.idempotency_key] = key_of(d)
        if d.response_handle:
            bound.add(d.response_handle)
    for req in requests:
        check.checked += 1
        if req.method == "GET" or req.path.endswith("/cancel"):  # a resume, or a cancel of a kept response
            parts = req.path.split("?")[0].rstrip("/").split("/")
            handle = parts[-2] if parts[-1] == "cancel" else parts[-1]
            if handle not in bound:
                check.fail(f"{req.request_id}: {req.method} {req.path} of unbound handle {handle}")
            continue
        key = req.headers.get("idempotency-key", "")
        op = accepted.get(key)
        manifest = manifests.get(op) if op is not None else None
        if manifest is None:
            check.fail(f"{req.request_id}: idempotency key {key[:20]}… of no accepted attempt")
        elif req.body != manifest.request_body.encode("utf-8"):
            check.fail(f"{req.request_id}: body differs from manifest of {op}")
    return check


def check_tool_dispatches(evidence: Evidence) -> Check:
    """Zero partial tool dispatches: every ToolCallReady parses and validates against its tool's schema."""
    check = Check("every dispatched tool call is complete and schema-valid")
    check.checked = len(evidence.of("tool-calls", ToolCallReady))
    for found in partial_tool_calls(evidence):
        check.fail(found)
    return check


def partial_tool_dispatches(check: Check) -> int:
    return check.violations


def check_one_canonical(evidence: Evidence) -> Check:
    """At most one canonical assistant turn per (conversation, revision) and per operation; an assistant
    turn commits only through a CAS-accepted attempt of a manifest, so one whose operation has no
    manifest on the topic is a violation too (it has no revision to be counted under)."""
    check = Check("at most one canonical assistant turn per conversation revision")
    revision_of = {
        key_of(m.manifest): m.manifest.conversation_revision for m in evidence.of("manifests", ManifestIssued)
    }
    per_revision: Counter[tuple[str, int]] = Counter()
    per_op: Counter[tuple[str, str]] = Counter()
    seen_revisions: Counter[tuple[str, int]] = Counter()
    for turn in evidence.of("committed", CommittedTurn):
        seen_revisions[(turn.conversation_id, turn.revision)] += 1
        if turn.operation_id is None:
            continue
        check.checked += 1
        key = (turn.conversation_id, turn.operation_id)
        per_op[key] += 1
        revision = revision_of.get(key)
        if revision is None:
            check.fail(f"operation {key[0]}/{key[1]}: committed with no manifest on the topic")
            continue
        per_revision[(turn.conversation_id, revision)] += 1
    for (conv, rev), n in per_revision.items():
        if n > 1:
            check.fail(f"{conv} revision {rev}: {n} assistant turns")
    for (conv, op), n in per_op.items():
        if n > 1:
            check.fail(f"operation {conv}/{op}: {n} commits")
    for (conv, rev), n in seen_revisions.items():
        if n > 1:
            check.fail(f"{conv}: revision {rev} committed {n} times")
    return check


def check_accounted(evidence: Evidence) -> Check:
    """No submitted turn unaccounted for: each TurnSubmitted → exactly one CommittedTurn or Rejected.

    One submission may be refused for several reasons (one Rejected per validator finding), and one
    delivered twice is committed once and refused once more as a duplicate. A submission neither
    committed nor refused, committed twice, or committed and refused though delivered once, is counted."""
    check = Check("every submitted turn is committed or rejected, exactly once")
    commits = Counter(
        t.source_event_id for t in evidence.of("committed", CommittedTurn) if t.operation_id is None
    )
    refusals = Counter(
        r.event_id for r in evidence.of("rejections", Rejected) if r.event_type == "TurnSubmitted"
    )
    submitted = evidence.of("ingress", TurnSubmitted)
    deliveries = Counter(event.event_id for event in submitted)
    for event in submitted:
        check.checked += 1
        committed, refused = commits[event.event_id], refusals[event.event_id]
        twice = committed > 1 or (committed == 1 and refused > 0 and deliveries[event.event_id] == 1)
        if committed + refused == 0 or twice:
            turn = f"turn {event.turn_id} of {event.conversation_id}"
            check.fail(f"{turn}: {committed} commits, {refused} rejections")
    return check


def check_settled(evidence: Evidence) -> Check:
    """Every dispatch reached a final state: committed, rejected or cancelled (a worker that gives
    up cancels with its reason), never left open (WAITING, PREPARED, in flight or UNKNOWN)."""
    check = Check("every dispatch settled (committed, rejected or cancelled)")
    last: dict[tuple[str, str], DispatchDecision] = {}
    for d in evidence.of("manifests", DispatchDecision):
        last[key_of(d)] = d
    for (conv, op), d in last.items():
        check.checked += 1
        if d.state not in SETTLED:
            check.fail(f"{conv}/{op}: left {d.state.value} ({d.reason or ''} {d.detail})")
    return check


def check_cancel(evidence: Evidence) -> Check:
    """No commit and no tool call after a cancel; blocks after a cancel go to quarantine only."""
    check = Check("no commit or tool call of a cancelled operation")
    cancelled = {key_of(d) for d in evidence.of("manifests", DispatchDecision) if d.state == S.CANCELLED}
    committed = {(t.conversation_id, t.operation_id) for t in evidence.of("committed", CommittedTurn)}
    called = {(c.conversation_id, c.operation_id) for c in evidence.of("tool-calls", ToolCallReady)}
    for key in sorted(cancelled):
        check.checked += 1
        if key in committed:
            check.fail(f"{key[0]}/{key[1]}: committed and cancelled")
        if key in called:
            check.fail(f"{key[0]}/{key[1]}: tool call of a cancelled operation")
    for q in evidence.of("quarantine", Quarantined):
        if q.reason == ReasonCode.AFTER_CANCEL:
            check.checked += 1
            if (q.conversation_id, q.operation_id) not in cancelled:
                check.fail(f"{q.operation_id}: quarantined AFTER_CANCEL but never cancelled")
    return check


FAULT_ENDINGS = frozenset(
    {ReasonCode.WORKER_GAVE_UP, ReasonCode.OUTPUT_LIMIT_REACHED, ReasonCode.PROVIDER_REFUSED}
)
"""The CANCELLED reasons the demo's injected faults end a dispatch with, whatever API it went to: its
attempts spent on drawn faults, a scripted `max_tokens_in_call`, a scripted `refusal_after`'s refusal
stop. A PROVIDER_REFUSED that is a worker's give-up is not one: the provider refused the request itself."""


def moving_violation(decision: DispatchDecision | None) -> str | None:
    """What is wrong with how a moving conversation's dispatch ended (its last decision), or None: it
    committed, or an injected fault ended it. The provider refusing the request (a foreign signature, a
    Gemini 3 call without one, a Responses call without its reasoning item: HTTP 400, the worker gives up
    with PROVIDER_REFUSED) is counted, and so is any other end or none."""
    if decision is None:
        return "did not complete: no decision"
    if decision.state == S.COMMITTED:
        return None
    if gave_up(decision) and decision.reason is ReasonCode.PROVIDER_REFUSED:
        return f"refused by the provider: {decision.detail}"
    if decision.state == S.CANCELLED and decision.reason in FAULT_ENDINGS:
        return None
    return f"did not complete: {decision.state.value} ({decision.reason or ''} {decision.detail})"


def check_moving(evidence: Evidence, moving: Collection[str]) -> Check:
    """Every dispatch of a conversation that moves between APIs (`moving`: the ids the driver moved,
    demo/moving.py) completes, none refused by the provider (`moving_violation`)."""
    check = Check("every dispatch of a conversation moving between APIs completes, none refused")
    last: dict[tuple[str, str], DispatchDecision] = {}
    for d in evidence.of("manifests", DispatchDecision):
        last[key_of(d)] = d
    requested = {
        (r.conversation_id, r.operation_id): r.adapter
        for r in evidence.of("ingress", DispatchRequested)
        if r.conversation_id in moving
    }  # a request delivered twice is one dispatch
    for (conv, op), adapter in requested.items():
        check.checked += 1
        violation = moving_violation(last.get((conv, op)))
        if violation is not None:
            check.fail(f"{conv}/{op} ({adapter}): {violation}")
    return check


def check_audit(report: AuditReport) -> Check:
    """Replay reproduces: `turnledger.replay.audit` re-folds the ingress log and compares byte for byte."""
    check = Check("replay audit: re-fold of the ingress log is byte-identical")
    check.checked = report.checked
    for div in report.divergences:
        where = div.actual or div.source
        check.fail(f"{div.kind} {div.stream} key {div.key} #{div.index} at {where}")
    return check


async def check_projections(evidence: Evidence, reader: ProjectionReader) -> list[Check]:
    """The Redis projections against the topics they were built from."""
    history = Check("projected history = blocks of the committed turns on the topic")
    status = Check("projected operation status = last DispatchDecision")
    previews = Check("no preview left for a committed or cancelled operation")
    quarantine = Check("projected quarantine = quarantine topic")
    turns: dict[str, list[CommittedTurn]] = defaultdict(list)
    for turn in evidence.of("committed", CommittedTurn):
        turns[turn.conversation_id].append(turn)
    for conv, committed in turns.items():
        history.checked += 1
        want = [b for t in committed for b in t.blocks]
        got = await reader.history(conv)
        if [(b.id, b.ordering, b.digest) for b in got] != [(b.id, b.ordering, b.digest) for b in want]:
            history.fail(f"{conv}: {len(got)} projected blocks, {len(want)} committed")
        elif got != want:
            history.fail(f"{conv}: projected blocks differ from the committed ones")
        revision = await reader.revision(conv)
        if revision != committed[-1].revision:
            history.fail(f"{conv}: projected revision {revision}, committed {committed[-1].revision}")
    last: dict[tuple[str, str], DispatchDecision] = {}
    for d in evidence.of("manifests", DispatchDecision):
        last[(d.conversation_id, d.operation_id)] = d
    for (conv, op), d in last.items():
        status.checked += 1
        projected = await reader.operation(conv, op)
        if projected is None:
            status.fail(f"{op}: not projected")
        elif (projected.state, projected.generation) != (d.state.value, d.attempt_generation):
            status.fail(
                f"{op}: projected {projected.state} g{projected.generation}, "
                f"decided {d.state.value} g{d.attempt_generation}"
            )
    conversations = {d.conversation_id for d in last.values()}
    for conv in sorted(conversations):
        for preview in await reader.previews(conv):
            previews.checked += 1
            d = last.get((conv, preview.operation_id))
            if d is not None and d.state in (S.COMMITTED, S.CANCELLED):
                previews.fail(f"{preview.operation_id}: preview left after {d.state.value}")
    previews.checked += len(last)
    on_topic: dict[str, list[Quarantined]] = defaultdict(list)
    for q in evidence.of("quarantine", Quarantined):
        on_topic[q.conversation_id].append(q)
    for conv in sorted(conversations | set(on_topic)):
        quarantine.checked += len(on_topic.get(conv, []))
        if await reader.quarantine(conv) != on_topic.get(conv, []):
            quarantine.fail(f"{conv}: projected quarantine differs from the topic")
    return [history, status, previews, quarantine]


def all_checks(
    evidence: Evidence, requests: Sequence[ReceivedRequest], moving: Collection[str] = ()
) -> list[Check]:
    """The checks that need only the topics, the provider's request log and which conversations moved."""
    return [
        check_sends(evidence, requests),
        check_tool_dispatches(evidence),
        check_one_canonical(evidence),
        check_accounted(evidence),
        check_cancel(evidence),
        check_settled(evidence),
        check_moving(evidence, moving),
    ]


def json_summary(checks: Sequence[Check]) -> str:
    return json.dumps([{"check": c.name, "checked": c.checked, "violations": c.violations} for c in checks])
