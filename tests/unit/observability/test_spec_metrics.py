"""The live spec metrics equal the batch computation (`replay/metrics.py`) over the same records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY

from tests.unit.gateway.test_worker import _harness
from turnledger.fake_provider import FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchDecision, DispatchState, Quarantined, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.observability.spec_metrics import SpecMetrics
from turnledger.replay.metrics import compute
from turnledger.topology import OUTPUT_STREAMS

S = DispatchState
R = ReasonCode

COUNTERS = (
    "turnledger_orphaned_tool_results_total",
    "turnledger_duplicate_tool_results_total",
    "turnledger_handle_recovery_attempts_total",
    "turnledger_handle_recovery_successes_total",
    "turnledger_preview_retractions_total",
    "turnledger_canonical_cas_conflicts_total",
    "turnledger_unknown_settle_seconds_count",
    "turnledger_unknown_settle_seconds_sum",
)
LABELLED = (
    ("turnledger_validator_rejections_total", "reason"),
    ("turnledger_late_blocks_total", "reason"),
    ("turnledger_dispatch_cas_conflicts_total", "reason"),
    ("turnledger_stream_disconnects_total", "kind"),
)


def snapshot() -> dict[tuple[str, str], float]:
    """Every sample of the spec's counters now, by (name, label value)."""
    values: dict[tuple[str, str], float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name in COUNTERS:
                values[(sample.name, "")] = sample.value
            for name, label in LABELLED:
                if sample.name == name:
                    values[(name, sample.labels[label])] = sample.value
    return values


def delta(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[str, float]:
    out = {}
    for key, value in after.items():
        change = value - before.get(key, 0.0)
        if change:
            out[f"{key[0]}{{{key[1]}}}" if key[1] else key[0]] = round(change, 6)
    return out


def expected_from_batch(records: dict[str, list[Frozen]]) -> dict[str, float]:
    evidence = evidence_of_records(records)
    m = compute(evidence, now_ms=0)
    out: dict[str, float] = {
        "turnledger_orphaned_tool_results_total": m.orphaned_results,
        "turnledger_duplicate_tool_results_total": m.duplicate_results,
        "turnledger_handle_recovery_attempts_total": m.handle_episodes,
        "turnledger_handle_recovery_successes_total": m.handle_recovered,
        "turnledger_preview_retractions_total": m.preview_retractions,
        "turnledger_canonical_cas_conflicts_total": m.canonical_cas_conflicts,
        "turnledger_unknown_settle_seconds_count": len(m.unknown_ages_ms),
        "turnledger_unknown_settle_seconds_sum": round(sum(m.unknown_ages_ms) / 1000, 6),
        "turnledger_stream_disconnects_total{without_handle}": m.disconnects_without_handle,
        "turnledger_stream_disconnects_total{not_resumable}": m.disconnects_not_resumable,
    }
    for name, counter in (
        ("turnledger_validator_rejections_total", m.validator_rejections),
        ("turnledger_late_blocks_total", m.late_blocks),
        ("turnledger_dispatch_cas_conflicts_total", m.dispatch_cas_conflicts),
    ):
        out.update({f"{name}{{{reason}}}": n for reason, n in counter.items()})
    return {k: v for k, v in out.items() if v}


def evidence_of_records(records: dict[str, list[Frozen]]):  # type: ignore[no-untyped-def]
    from turnledger.codec import encode
    from turnledger.replay.evidence import Evidence, Raw

    evidence = Evidence()
    for stream, recs in records.items():
        evidence.raw[stream] = [Raw(0, i, None, encode(r), r) for i, r in enumerate(recs)]
    return evidence


def _synthetic() -> Iterator[tuple[str, Frozen]]:
    """Refusals the worker harness does not provoke, to cover the labelled counters."""
    yield "rejections", Rejected(conversation_id="c9", reason=R.ORPHANED_RESULT, detail="no such call")
    yield "rejections", Rejected(conversation_id="c9", reason=R.DUPLICATE_RESULT)
    yield "rejections", Rejected(conversation_id="c9", reason=R.DUPLICATE_TURN)
    q: dict[str, Any] = {
        "conversation_id": "c9",
        "operation_id": "op-1",
        "attempt_generation": 1,
        "event_id": "e",
        "occurred_at_ms": 5,
    }
    yield "quarantine", Quarantined(**q, reason=R.CANONICAL_CAS_CONFLICT, event_type="StreamEnded")
    yield "quarantine", Quarantined(**q, reason=R.STALE_GENERATION, event_type="StreamDeltas")


async def test_live_counts_equal_the_batch_metrics_over_a_real_fold() -> None:
    # request 0: a resumable Responses stream cut after its handle (recovered from the handle);
    # request 2: an OpenAI Chat stream cut mid-text (previews retracted, a new generation)
    plan = FaultPlan(
        by_request={0: (Fault(FaultKind.DISCONNECT, 3000),), 2: (Fault(FaultKind.DISCONNECT, 1200),)}
    )
    async for h in _harness(plan):
        await h.converse("c1", "openai-responses@1")
        await h.wait_state("op-1", S.COMMITTED, conversation="c1")
        await h.converse("c2", "openai-chat@1", text="tell me something", tools=False)
        await h.wait_state("op-1", S.COMMITTED, conversation="c2")
        records: dict[str, list[Frozen]] = {s.value: list(h.ledger.records(s)) for s in OUTPUT_STREAMS}
        records["ingress"] = list(h.ledger.ingress)
        for stream, record in _synthetic():
            records[stream].append(record)
        live = SpecMetrics()
        before = snapshot()
        for stream in ("manifests", "rejections", "quarantine", "previews", "committed"):
            live.observe(records[stream])
        got = delta(before, snapshot())
        expected = expected_from_batch(records)
        assert got == expected
        assert expected["turnledger_handle_recovery_successes_total"] == 1
        assert expected["turnledger_unknown_settle_seconds_count"] == 2
        assert expected["turnledger_preview_retractions_total"] >= 1
        assert live.ops == {}  # every operation final: nothing kept


def _decision(state: DispatchState, at_ms: int, op: str = "op-1", **kw: object) -> DispatchDecision:
    return DispatchDecision(
        conversation_id="c1", operation_id=op, state=state, conversation_revision=1, cancel_generation=0,
        source_event_id=f"e{at_ms}", occurred_at_ms=at_ms, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_open_unknown_gauges_are_read_at_scrape_time() -> None:
    live = SpecMetrics(clock_ms=iter([10_000, 12_500, 20_000]))
    live.observe([_decision(S.PREPARED, 1_000), _decision(S.DISPATCHING, 1_500)])
    live.observe([_decision(S.UNKNOWN, 2_000, reason=R.LEASE_EXPIRED), _decision(S.UNKNOWN, 3_000, "op-2")])
    gauges = {f.name: f.samples[0].value for f in live.collect()}
    assert gauges == {"turnledger_unknown_open": 2, "turnledger_unknown_oldest_age_seconds": 8.0}
    live.observe([_decision(S.CANCELLED, 4_000, reason=R.DEADLINE_EXCEEDED)])
    gauges = {f.name: f.samples[0].value for f in live.collect()}
    assert gauges == {"turnledger_unknown_open": 1, "turnledger_unknown_oldest_age_seconds": 9.5}
    assert set(live.ops) == {("c1", "op-2")}
