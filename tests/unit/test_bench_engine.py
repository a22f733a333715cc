"""`bench_dispatch_engine`'s workload and runner: what the table's columns are computed from."""

from __future__ import annotations

from pathlib import Path

from bench.dispatch_workload import TOOLS, Mix, build, padding_tool
from turnledger.model.events import DispatchRequested

from .test_bench_instructions import _rows, _runner


def test_extra_tools_are_offered_beside_the_two_the_conversations_call() -> None:
    plain, padded = (
        build(2, Mix(rounds=1), concurrency=2),
        build(2, Mix(rounds=1, extra_tools=3), concurrency=2),
    )
    requests = [e for e in padded.events if isinstance(e, DispatchRequested)]
    assert len(requests) == len([e for e in plain.events if isinstance(e, DispatchRequested)]) >= 2
    names = [t.name for t in TOOLS] + ["internal_tool_0", "internal_tool_1", "internal_tool_2"]
    assert all([t.name for t in r.tools] == names for r in requests)
    assert all(900 <= len(padding_tool(i).model_dump_json()) <= 1300 for i in range(3))
    assert padded.committed_turns == plain.committed_turns > 0  # the same conversations, more offered


def test_the_runner_reads_every_conversation_back_and_reports_the_cpu_it_took(tmp_path: Path) -> None:
    records, _ = _rows(tmp_path)
    result = _runner(records)
    assert result["conversations"] == 2
    cpu = result["restore_cpu_s"]
    assert isinstance(cpu, float) and 0 <= cpu < 60
    assert isinstance(result["state_bytes"], int) and result["state_bytes"] > 0
