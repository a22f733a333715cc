"""The spec's metrics over the records of a real fold (in-memory ledger, fake provider, the worker).

Operation ids are unique per conversation only: two conversations here both use `op-1`,
one commits and one is given up, and the metrics must count two operations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from tests.unit.gateway.ledger import InMemoryLedger
from tests.unit.gateway.test_worker import Harness, _harness
from turnledger.codec import encode
from turnledger.fake_provider import FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.model.events import DispatchState, ToolCallReady
from turnledger.replay.evidence import Evidence, Raw
from turnledger.replay.metrics import compute, partial_tool_calls
from turnledger.replay.metrics_report import metrics_json, metrics_rows
from turnledger.topology import OUTPUT_STREAMS

S = DispatchState
ANTHROPIC = "anthropic-messages@1"


def evidence_of(ledger: InMemoryLedger) -> Evidence:
    evidence = Evidence()
    evidence.raw["ingress"] = [Raw(0, i, None, encode(e), e) for i, e in enumerate(ledger.ingress)]
    for stream in OUTPUT_STREAMS:
        records = ledger.records(stream)
        evidence.raw[stream.value] = [Raw(0, i, None, encode(r), r) for i, r in enumerate(records)]
    return evidence


@pytest.fixture
async def two_ops() -> AsyncIterator[Harness]:
    """`a`/op-1 commits; `b`/op-1 hits a missing stop on its only attempt and is given up."""
    plan = FaultPlan(by_marker={"Oslo": (Fault(FaultKind.MISSING_STOP),)})
    async for h in _harness(plan, max_attempts=1):
        await h.converse("a", ANTHROPIC, text="weather in Paris?")
        await h.wait_state("op-1", S.COMMITTED, conversation="a")
        await h.converse("b", ANTHROPIC, text="weather in Oslo?")
        await h.wait_state("op-1", S.CANCELLED, conversation="b")
        yield h


async def test_metrics_count_operations_by_conversation_and_id(two_ops: Harness) -> None:
    evidence = evidence_of(two_ops.ledger)
    m = compute(evidence, now_ms=0)
    assert (m.operations, m.committed) == (2, 1)
    assert dict(m.final_states) == {"COMMITTED": 1, "CANCELLED (worker gave up)": 1}
    assert list(m.given_up) == ["b/op-1"] and "1 attempts failed" in m.given_up["b/op-1"]
    assert m.partial_tool_dispatches == 0 and m.canonical_cas_conflicts == 0
    assert (m.cancelled, sum(m.dispatch_cas_conflicts.values())) == (0, 0)
    as_json = metrics_json(m)
    assert orjson.loads(orjson.dumps(as_json)) == as_json
    assert as_json["givenUp"] == m.given_up and as_json["finalStates"] == dict(m.final_states)
    rows = dict(metrics_rows(m))
    assert rows["operations the worker gave up"] == "1" and rows["partial tool dispatches"] == "0"


async def test_partial_tool_calls_are_found_by_conversation_and_operation(two_ops: Harness) -> None:
    evidence = evidence_of(two_ops.ledger)
    calls = [r for r in evidence.records("tool-calls") if isinstance(r, ToolCallReady)]
    assert calls and {c.conversation_id for c in calls} == {"a"} and partial_tool_calls(evidence) == []
    call = calls[0]
    cut = call.model_copy(update={"arguments": call.arguments[: len(call.arguments) // 2]})
    other_conversation = call.model_copy(update={"conversation_id": "c"})  # no request offered it there
    evidence.raw["tool-calls"] += [Raw(0, 1, None, b"", cut), Raw(0, 2, None, b"", other_conversation)]
    found = partial_tool_calls(evidence)
    assert len(found) == 2
    assert found[0].startswith(f"a/op-1 {call.call_id}: ")
    assert found[1] == f"c/op-1 {call.call_id}: tool {call.tool_name} was not offered"
    assert compute(evidence, now_ms=0).partial_tool_dispatches == 2
