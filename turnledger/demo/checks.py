"""The invariants of DESIGN.md "The promises", checked against the topics of a run.

Each check returns a `Check` with the number of violations and up to a few examples;
the demo exits non-zero if any check has a violation. They read only the topics and
the fake provider's request log, never the services' memory, so they also hold the
services to account.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from turnledger.demo.collect import Evidence
from turnledger.dispatch.engine import BatchEngine, SourceRecord
from turnledger.gateway.fake_provider import ReceivedRequest
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    Rejected,
    ToolCallReady,
    TurnSubmitted,
)
from turnledger.streaming.args import ArgumentError, validate_arguments

S = DispatchState


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
    manifests = {m.manifest.operation_id: m.manifest for m in evidence.of("manifests", ManifestIssued)}
    accepted: dict[str, str] = {}
    bound: set[str] = set()
    for d in evidence.of("manifests", DispatchDecision):
        if d.state == S.DISPATCHING and d.accepted and d.idempotency_key:
            accepted[d.idempotency_key] = d.operation_id
        if d.response_handle:
            bound.add(d.response_handle)
    for req in requests:
        check.checked += 1
        if req.method == "GET":
            handle = req.path.rstrip("/").split("/")[-1]
            if handle not in bound:
                check.fail(f"{req.request_id}: resume of unbound handle {handle}")
            continue
        key = req.headers.get("idempotency-key", "")
        op = accepted.get(key)
        manifest = manifests.get(op or "")
        if manifest is None:
            check.fail(f"{req.request_id}: idempotency key {key[:20]}… of no accepted attempt")
        elif req.body != manifest.request_body.encode("utf-8"):
            check.fail(f"{req.request_id}: body differs from manifest of {op}")
    return check


def check_tool_dispatches(evidence: Evidence) -> Check:
    """Zero partial tool dispatches: every ToolCallReady parses and validates against its tool's schema."""
    check = Check("every dispatched tool call is complete and schema-valid")
    tools: dict[str, dict[str, Any]] = {}
    for req in evidence.of("ingress", DispatchRequested):
        tools[req.operation_id] = {t.name: t.input_schema for t in req.tools}
    for call in evidence.of("tool-calls", ToolCallReady):
        check.checked += 1
        schema = tools.get(call.operation_id, {}).get(call.tool_name)
        if schema is None:
            check.fail(f"{call.call_id}: tool {call.tool_name} was not offered")
            continue
        try:
            validate_arguments(call.arguments, schema)
        except ArgumentError as exc:
            check.fail(f"{call.call_id}: {exc}")
    return check


def partial_tool_dispatches(check: Check) -> int:
    return check.violations


def check_one_canonical(evidence: Evidence) -> Check:
    """At most one canonical assistant turn per (conversation, revision) and per operation."""
    check = Check("at most one canonical assistant turn per conversation revision")
    revision_of = {
        m.manifest.operation_id: m.manifest.conversation_revision
        for m in evidence.of("manifests", ManifestIssued)
    }
    per_revision: Counter[tuple[str, int]] = Counter()
    per_op: Counter[str] = Counter()
    seen_revisions: Counter[tuple[str, int]] = Counter()
    for turn in evidence.of("committed", CommittedTurn):
        seen_revisions[(turn.conversation_id, turn.revision)] += 1
        if turn.operation_id is None:
            continue
        check.checked += 1
        per_op[turn.operation_id] += 1
        per_revision[(turn.conversation_id, revision_of.get(turn.operation_id, -1))] += 1
    for (conv, rev), n in per_revision.items():
        if n > 1:
            check.fail(f"{conv} revision {rev}: {n} assistant turns")
    for op, n in per_op.items():
        if n > 1:
            check.fail(f"operation {op}: {n} commits")
    for (conv, rev), n in seen_revisions.items():
        if n > 1:
            check.fail(f"{conv}: revision {rev} committed {n} times")
    return check


def check_accounted(evidence: Evidence) -> Check:
    """No submitted turn unaccounted for: each TurnSubmitted → exactly one CommittedTurn or Rejected."""
    check = Check("every submitted turn is committed or rejected, exactly once")
    outcomes: Counter[str] = Counter()
    for turn in evidence.of("committed", CommittedTurn):
        if turn.operation_id is None:
            outcomes[turn.source_event_id] += 1
    for rej in evidence.of("rejections", Rejected):
        if rej.event_type == "TurnSubmitted" and rej.event_id:
            outcomes[rej.event_id] += 1
    rejected_ids = {
        r.event_id for r in evidence.of("rejections", Rejected) if r.event_type == "TurnSubmitted"
    }
    for event in evidence.of("ingress", TurnSubmitted):
        check.checked += 1
        n = outcomes.get(event.event_id, 0)
        # one submission may be refused for several reasons (one Rejected per validator finding)
        if n == 0 or (n > 1 and event.event_id not in rejected_ids):
            check.fail(f"turn {event.turn_id} of {event.conversation_id}: {n} outcomes")
    return check


def check_replay(evidence: Evidence, prefix: str) -> Check:
    """Replay reproduces: re-folding the ingress log yields byte-identical records per (topic, key)."""
    check = Check("replay audit: re-fold of the ingress log is byte-identical")
    engine = BatchEngine()
    store: dict[str, bytes] = {}

    class Store:
        def get(self, key: str) -> bytes | None:
            return store.get(key)

        def put(self, key: str, value: bytes) -> None:
            store[key] = value

    expected: dict[tuple[str, bytes | None], list[bytes]] = defaultdict(list)
    by_partition: dict[int, list[SourceRecord]] = defaultdict(list)
    topic = f"{prefix}turnledger.ingress"
    for raw in evidence.raw.get("ingress", []):
        by_partition[raw.partition].append(SourceRecord(topic, raw.partition, raw.offset, raw.key, raw.value))
    for records in by_partition.values():
        for start in range(0, len(records), 500):
            for out in engine.process_batch(records[start : start + 500], Store()):
                expected[(out.stream.value, out.key)].append(out.value)
    actual: dict[tuple[str, bytes | None], list[bytes]] = defaultdict(list)
    for stream in ("committed", "manifests", "tool-calls", "previews", "quarantine", "rejections"):
        for raw in evidence.raw.get(stream, []):
            actual[(stream, raw.key)].append(raw.value)
    for key in sorted(set(expected) | set(actual), key=lambda k: (k[0], k[1] or b"")):
        check.checked += len(expected.get(key, []))
        if expected.get(key, []) != actual.get(key, []):
            got, want = actual.get(key, []), expected.get(key, [])
            check.fail(f"{key[0]} key {key[1]!r}: {len(got)} records, re-fold gives {len(want)}")
    return check


def all_checks(evidence: Evidence, requests: Sequence[ReceivedRequest], prefix: str) -> list[Check]:
    return [
        check_sends(evidence, requests),
        check_tool_dispatches(evidence),
        check_one_canonical(evidence),
        check_accounted(evidence),
        check_replay(evidence, prefix),
    ]


def json_summary(checks: Sequence[Check]) -> str:
    return json.dumps([{"check": c.name, "checked": c.checked, "violations": c.violations} for c in checks])
