"""Each live spec metric, counted record by record, against the exact numbers and `replay.metrics.compute`.

`test_spec_metrics.py` checks the sum over a real fold; these tests pin every rule on its own: which
records count under which label, when an operation is kept and dropped, how an UNKNOWN spell and a
recovery episode end, and the two gauges read at scrape time.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence

import httpx
import orjson
import pytest
from prometheus_client import REGISTRY
from prometheus_client.registry import Collector

from tests.unit.observability.test_spec_metrics import evidence_of_records
from turnledger.model.base import Frozen
from turnledger.model.events import (
    DispatchDecision,
    DispatchState,
    ManifestIssued,
    PreviewRetracted,
    Quarantined,
    Rejected,
)
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.observability import spec_metrics as sm
from turnledger.observability.server import always_ready
from turnledger.observability.spec_metrics import SpecMetrics, serve_spec_metrics
from turnledger.replay.metrics import Metrics, compute

S = DispatchState
R = ReasonCode
COLLECTORS: tuple[Collector, ...] = (
    sm.VALIDATOR_REJECTIONS,
    sm.REJECTIONS,
    sm.ORPHANED_RESULTS,
    sm.DUPLICATE_RESULTS,
    sm.UNKNOWN_SETTLE,
    sm.HANDLE_RECOVERY_ATTEMPTS,
    sm.HANDLE_RECOVERY_SUCCESSES,
    sm.STREAM_DISCONNECTS,
    sm.LATE_BLOCKS,
    sm.PREVIEW_RETRACTIONS,
    sm.CANONICAL_CAS_CONFLICTS,
    sm.DISPATCH_CAS_CONFLICTS,
)
RESUMABLE_BODY = {"stream": True, "background": True, "model": "gpt-4.1"}


def samples() -> dict[str, float]:
    """Every sample of the spec's counters and the settle histogram's count and sum, by name{label}."""
    out: dict[str, float] = {}
    for collector in COLLECTORS:
        for family in collector.collect():
            for s in family.samples:
                if s.name.endswith(("_created", "_bucket")):
                    continue
                label = ",".join(v for _, v in sorted(s.labels.items()))
                out[f"{s.name}{{{label}}}" if label else s.name] = s.value
    return out


def counted(live: SpecMetrics, records: Sequence[Frozen]) -> dict[str, float]:
    """What observing `records` adds to the counters (the counters are process-wide: a difference)."""
    before = samples()
    live.observe(records)
    changed = {k: round(v - before.get(k, 0.0), 6) for k, v in samples().items()}
    return {k: v for k, v in changed.items() if v}


def batch(records: dict[str, list[Frozen]]) -> Metrics:
    return compute(evidence_of_records(records), now_ms=0)


def decision(state: DispatchState, at_ms: int, **kw: object) -> DispatchDecision:
    fields: dict[str, object] = {
        "conversation_id": "conv", "operation_id": "op-1", "conversation_revision": 1,
        "cancel_generation": 0, "source_event_id": f"e{at_ms}", "occurred_at_ms": at_ms, "state": state,
    }  # fmt: skip
    return DispatchDecision(**{**fields, **kw})  # type: ignore[arg-type]


def issued(
    adapter: str, body: dict[str, object], op: str = "op-1", conversation: str = "conv"
) -> ManifestIssued:
    manifest = DispatchManifest(
        operation_id=op, conversation_id=conversation, conversation_revision=1, cancel_generation=0,
        sequence_digest="s", blocks=(), adapter=adapter, adapter_digest="a", provider="openai",
        model_revision="openai/gpt-4.1@2025-04", toolset_digest="t", max_output_tokens=16,
        request_digest="r", request_body=orjson.dumps(body).decode(), input_tokens=1,
    )  # fmt: skip
    return ManifestIssued(manifest=manifest, occurred_at_ms=1)


def rejected(reason: ReasonCode) -> Rejected:
    return Rejected(conversation_id="conv", reason=reason)


def quarantined(reason: ReasonCode) -> Quarantined:
    return Quarantined(
        conversation_id="conv", operation_id="op-1", attempt_generation=1, reason=reason,
        event_type="StreamEnded", event_id="e", occurred_at_ms=5,
    )  # fmt: skip


def test_rejections_count_by_reason_and_only_the_validators_count_as_validator_rejections() -> None:
    """Every rejection counts under its reason; the validator's reasons count again apart, and an
    orphaned or duplicate result once more on its own counter."""
    records: list[Frozen] = [
        rejected(R.ORPHANED_RESULT), rejected(R.ORPHANED_RESULT), rejected(R.DUPLICATE_RESULT),
        rejected(R.DUPLICATE_TURN), rejected(R.DUPLICATE_CALL_ID),
    ]  # fmt: skip
    assert counted(SpecMetrics(), records) == {
        "turnledger_rejections_total{ORPHANED_RESULT}": 2,
        "turnledger_rejections_total{DUPLICATE_RESULT}": 1,
        "turnledger_rejections_total{DUPLICATE_TURN}": 1,
        "turnledger_rejections_total{DUPLICATE_CALL_ID}": 1,
        "turnledger_validator_rejections_total{ORPHANED_RESULT}": 2,
        "turnledger_validator_rejections_total{DUPLICATE_RESULT}": 1,
        "turnledger_validator_rejections_total{DUPLICATE_CALL_ID}": 1,
        "turnledger_orphaned_tool_results_total": 2,
        "turnledger_duplicate_tool_results_total": 1,
    }
    m = batch({"rejections": records})
    assert (m.orphaned_results, m.duplicate_results) == (2, 1)
    assert m.validator_rejections == {"ORPHANED_RESULT": 2, "DUPLICATE_RESULT": 1, "DUPLICATE_CALL_ID": 1}


def test_quarantined_records_count_by_reason_and_canonical_cas_conflicts_apart() -> None:
    """Every quarantined record is a late block under its reason; a canonical CAS conflict also counts
    on its own counter, no other reason does."""
    records: list[Frozen] = [
        quarantined(R.CANONICAL_CAS_CONFLICT), quarantined(R.STALE_GENERATION),
        quarantined(R.STALE_GENERATION),
    ]  # fmt: skip
    records.append(PreviewRetracted(conversation_id="conv", operation_id="op-1", attempt_generation=1,
                                    reason=R.STREAM_DISCONNECTED, occurred_at_ms=9))  # fmt: skip
    assert counted(SpecMetrics(), records) == {
        "turnledger_late_blocks_total{CANONICAL_CAS_CONFLICT}": 1,
        "turnledger_late_blocks_total{STALE_GENERATION}": 2,
        "turnledger_canonical_cas_conflicts_total": 1,
        "turnledger_preview_retractions_total": 1,
    }
    m = batch({"quarantine": records[:3], "previews": records[3:]})
    assert (m.late_blocks, m.canonical_cas_conflicts, m.preview_retractions) == (
        {"CANONICAL_CAS_CONFLICT": 1, "STALE_GENERATION": 2}, 1, 1,
    )  # fmt: skip


def test_only_refused_decisions_with_a_cas_reason_are_dispatch_cas_conflicts() -> None:
    """A refused DispatchAttempt counts under its CAS reason, even when it repeats a final state of an
    operation never seen (which keeps nothing); an accepted decision or another reason does not count."""
    live = SpecMetrics()
    records: list[Frozen] = [
        decision(S.COMMITTED, 10, accepted=False, reason=R.CAS_STATE_MISMATCH),
        decision(S.PREPARED, 11, operation_id="op-2", accepted=False, reason=R.CAS_REVISION_MISMATCH),
        decision(S.PREPARED, 12, operation_id="op-3", accepted=False, reason=R.CONVERSATION_BUSY),
        decision(S.DISPATCHING, 13, operation_id="op-4", reason=R.CAS_CANCEL_GENERATION_MISMATCH),
    ]
    assert counted(live, records) == {
        "turnledger_dispatch_cas_conflicts_total{CAS_STATE_MISMATCH}": 1,
        "turnledger_dispatch_cas_conflicts_total{CAS_REVISION_MISMATCH}": 1,
    }
    assert sorted(live.ops) == [("conv", "op-2"), ("conv", "op-3"), ("conv", "op-4")]
    assert batch({"manifests": records}).dispatch_cas_conflicts == {
        "CAS_STATE_MISMATCH": 1,
        "CAS_REVISION_MISMATCH": 1,
    }


def test_an_operation_is_kept_until_its_accepted_final_state() -> None:
    """A refused decision naming a final state leaves the operation open; the accepted final one drops it;
    a refusal after that does not bring it back."""
    live = SpecMetrics()
    live.observe([decision(S.PREPARED, 1)])
    assert live.ops == {("conv", "op-1"): sm._Open()}
    live.observe([decision(S.CANCELLED, 2, accepted=False, reason=R.CAS_STATE_MISMATCH)])
    assert list(live.ops) == [("conv", "op-1")]
    live.observe([decision(S.REJECTED, 3)])
    assert live.ops == {}
    live.observe([decision(S.REJECTED, 4, accepted=False, reason=R.CAS_STATE_MISMATCH)])
    assert live.ops == {}


def test_an_unknown_spell_is_timed_from_its_first_accepted_unknown_to_the_next_accepted_state() -> None:
    """A second UNKNOWN and refused decisions neither restart nor end the spell; it ends once."""
    live = SpecMetrics()
    records: list[Frozen] = [
        decision(S.STREAMING, 500, attempt_generation=1),
        decision(S.UNKNOWN, 1_000, previous_state=S.STREAMING, reason=R.LEASE_EXPIRED, attempt_generation=1),
        decision(S.STREAMING, 1_500, accepted=False, reason=R.CAS_STATE_MISMATCH, attempt_generation=1),
        decision(S.UNKNOWN, 2_000, previous_state=S.UNKNOWN, reason=R.LEASE_EXPIRED, attempt_generation=1),
    ]
    assert counted(live, records) == {"turnledger_dispatch_cas_conflicts_total{CAS_STATE_MISMATCH}": 1}
    assert live.ops[("conv", "op-1")].unknown_since_ms == 1_000
    later: list[Frozen] = [decision(S.STREAMING, 3_500, attempt_generation=1), decision(S.SENT, 4_000)]
    assert counted(live, later) == {
        "turnledger_unknown_settle_seconds_count": 1,
        "turnledger_unknown_settle_seconds_sum": 2.5,
    }
    assert live.ops[("conv", "op-1")].unknown_since_ms is None
    assert batch({"manifests": records + later}).unknown_ages_ms == [2_500]


@pytest.mark.parametrize(
    ("adapter", "body", "handle", "previous", "reason", "expected"),
    [
        ("openai-responses@1", RESUMABLE_BODY, None, S.STREAMING, R.STREAM_DISCONNECTED,
         {"turnledger_stream_disconnects_total{without_handle}": 1}),
        ("openai-responses@1", RESUMABLE_BODY, "resp_1", S.SENT, R.WORKER_RECOVERED,
         {"turnledger_stream_disconnects_total{without_handle}": 1}),
        ("openai-responses@1", {"stream": True}, "resp_1", S.STREAMING, R.STREAM_DISCONNECTED,
         {"turnledger_stream_disconnects_total{not_resumable}": 1}),
        ("openai-chat@1", RESUMABLE_BODY, "resp_1", S.STREAMING, R.WORKER_RECOVERED,
         {"turnledger_stream_disconnects_total{not_resumable}": 1}),
        ("openai-responses@1", RESUMABLE_BODY, "resp_1", S.STREAMING, R.STREAM_DISCONNECTED,
         {"turnledger_handle_recovery_attempts_total": 1}),
        ("openai-responses@1", RESUMABLE_BODY, "resp_1", S.STREAMING, R.LEASE_EXPIRED, {}),
        ("openai-responses@1", RESUMABLE_BODY, "resp_1", S.UNKNOWN, R.STREAM_DISCONNECTED, {}),
    ],
)  # fmt: skip
def test_a_disconnect_is_an_episode_only_with_a_handle_of_a_resumable_request(
    adapter: str, body: dict[str, object], handle: str | None, previous: DispatchState, reason: ReasonCode,
    expected: dict[str, float],
) -> None:  # fmt: skip
    """UNKNOWN for a reason that did not terminate the attempt: before a handle (or from SENT) it is a
    disconnect without handle, of a request its API cannot resume one not resumable, else an episode.
    Another reason, or UNKNOWN again, is none of them."""
    records: list[Frozen] = [
        issued(adapter, body),
        decision(S.UNKNOWN, 10, previous_state=previous, reason=reason, response_handle=handle,
                 attempt_generation=1),
    ]  # fmt: skip
    assert counted(SpecMetrics(), records) == expected
    m = batch({"manifests": records})
    assert {
        "turnledger_stream_disconnects_total{without_handle}": m.disconnects_without_handle,
        "turnledger_stream_disconnects_total{not_resumable}": m.disconnects_not_resumable,
        "turnledger_handle_recovery_attempts_total": m.handle_episodes,
    } == {**dict.fromkeys(("turnledger_stream_disconnects_total{without_handle}",
                          "turnledger_stream_disconnects_total{not_resumable}",
                          "turnledger_handle_recovery_attempts_total"), 0), **expected}  # fmt: skip


def episode(at_ms: int, generation: int = 1) -> DispatchDecision:
    return decision(
        S.UNKNOWN, at_ms, previous_state=S.STREAMING, reason=R.STREAM_DISCONNECTED, response_handle="resp_1",
        attempt_generation=generation,
    )  # fmt: skip


def test_a_manifest_makes_its_own_operation_resumable_and_no_other() -> None:
    """The manifest's operation is found by (conversation, operation): the same operation id in another
    conversation is not resumable, and a later manifest of the operation decides again."""
    live = SpecMetrics()
    live.observe([issued("openai-responses@1", RESUMABLE_BODY, conversation="conv")])
    assert live.ops == {("conv", "op-1"): sm._Open(resumable=True)}
    other = episode(10).model_copy(update={"conversation_id": "other"})
    assert counted(live, [other, episode(11)]) == {
        "turnledger_stream_disconnects_total{not_resumable}": 1,
        "turnledger_handle_recovery_attempts_total": 1,
    }
    live.observe([issued("openai-responses@1", {"stream": True})])
    assert live.ops[("conv", "op-1")].resumable is False


def test_episodes_recover_when_their_generation_streams_again_and_commits() -> None:
    """Every episode of the committed generation that streamed again after it counts once; an episode
    with no STREAMING after it, or of another generation, does not."""
    live = SpecMetrics()
    records: list[Frozen] = [
        issued("openai-responses@1", RESUMABLE_BODY),
        episode(10, generation=1),
        decision(S.STREAMING, 20, attempt_generation=2),  # another generation: not a resume of 1
        decision(S.STREAMING, 25, attempt_generation=1, accepted=False, reason=R.CAS_STATE_MISMATCH),
        episode(30, generation=1),
        decision(S.STREAMING, 40, attempt_generation=1),
        episode(50, generation=1),
        decision(S.COMMITTED, 60, attempt_generation=1),
    ]
    first = counted(live, records[:7])
    assert first == {
        "turnledger_handle_recovery_attempts_total": 3,
        "turnledger_dispatch_cas_conflicts_total{CAS_STATE_MISMATCH}": 1,
        "turnledger_unknown_settle_seconds_count": 2,
        "turnledger_unknown_settle_seconds_sum": 0.02,
    }
    assert live.ops[("conv", "op-1")].episodes == {1: [True, True, False]}
    assert counted(live, records[7:]) == {
        "turnledger_handle_recovery_successes_total": 2,
        "turnledger_unknown_settle_seconds_count": 1,
        "turnledger_unknown_settle_seconds_sum": 0.01,
    }
    assert live.ops == {}
    m = batch({"manifests": records})
    assert (m.handle_episodes, m.handle_recovered, m.unknown_ages_ms) == (3, 2, [10, 10, 10])


def test_a_commit_of_another_generation_recovers_no_episode() -> None:
    """An episode of generation 1 resumed, then generation 2 committed: no success."""
    live = SpecMetrics()
    records: list[Frozen] = [
        issued("openai-responses@1", RESUMABLE_BODY),
        episode(10, generation=1),
        decision(S.STREAMING, 20, attempt_generation=1),
        decision(S.COMMITTED, 30, attempt_generation=2),
    ]
    assert counted(live, records) == {
        "turnledger_handle_recovery_attempts_total": 1,
        "turnledger_unknown_settle_seconds_count": 1,
        "turnledger_unknown_settle_seconds_sum": 0.01,
    }
    assert batch({"manifests": records}).handle_recovered == 0


def test_gauges_count_the_open_unknown_operations_and_age_the_oldest_at_scrape_time() -> None:
    """No UNKNOWN operation: 0 and 0.0 without reading the clock; else their number and now minus the
    earliest start, in seconds, with the gauges' names and help."""
    live = SpecMetrics(clock_ms=[7_250])
    live.observe([decision(S.PREPARED, 1)])
    assert [(f.name, f.documentation, f.samples[0].value) for f in live.collect()] == [
        ("turnledger_unknown_open", "Operations UNKNOWN now (not settled since).", 0),
        ("turnledger_unknown_oldest_age_seconds", "Age of the oldest operation UNKNOWN now.", 0.0),
    ]
    live.observe([episode(3_000), decision(S.UNKNOWN, 2_000, operation_id="op-2", reason=R.LEASE_EXPIRED)])
    assert [f.samples[0].value for f in live.collect()] == [2, 5.25]


def test_without_a_clock_now_is_the_wall_clock_in_milliseconds() -> None:
    """The default clock is `time.time()` in whole milliseconds."""
    before = int(time.time() * 1000)
    now = SpecMetrics().now_ms()
    assert before <= now <= int(time.time() * 1000)


def registered(collector: Collector) -> bool:
    return collector in REGISTRY._collector_to_names


async def test_the_gauges_are_registered_and_served_only_while_served_on_a_port() -> None:
    """Port 0 serves nothing and registers nothing; a port serves the gauges on /metrics for the block
    and unregisters them after (a second block may register them again)."""
    live = SpecMetrics(clock_ms=[])
    async with serve_spec_metrics(0, live, always_ready):
        assert not registered(live)
    port = free_port()
    async with serve_spec_metrics(port, live, always_ready):
        assert registered(live)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            lines = (await http.get("/metrics")).text.splitlines()
        assert [line for line in lines if line.startswith("turnledger_unknown_o")] == [
            "turnledger_unknown_open 0.0",
            "turnledger_unknown_oldest_age_seconds 0.0",
        ]
    assert not registered(live)
    async with serve_spec_metrics(free_port(), live, always_ready):
        assert registered(live)
    assert not registered(live)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
