"""`bench_dispatch_engine`'s workload and runner: what the table's columns are computed from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.bench_dispatch_engine import RUNNER, _run_side_by_side, side_by_side
from bench.dispatch_workload import TOOLS, Mix, build, padding_tool
from bench.engine_runner import BARRIER_ENV
from turnledger.model.events import DispatchRequested

from .test_bench_instructions import ROOT, _rows, _runner


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


def test_runners_side_by_side_are_counted_from_the_first_start_to_the_last_end() -> None:
    results = [
        {"events": 1_000, "cpu_s": 1.5, "wall_s": 2.0, "started_at": 100.0},
        {"events": 1_000, "cpu_s": 1.8, "wall_s": 2.5, "started_at": 100.5},
    ]
    rate, cores = side_by_side(results)
    assert rate == 2_000 / 3.0 and cores == 3.3 / 3.0


def test_a_runner_behind_the_barrier_starts_its_clock_only_on_the_go(tmp_path: Path) -> None:
    records, count = _rows(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), BARRIER_ENV: "1"}
    runner = subprocess.Popen(
        [sys.executable, str(RUNNER), str(records), "500"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert runner.stdout is not None and runner.stdin is not None
    assert runner.stdout.readline() == "ready\n"
    told = time.time()
    runner.stdin.write("go\n")
    runner.stdin.close()
    result = json.loads(runner.stdout.read().strip().splitlines()[-1])
    assert runner.wait() == 0
    assert result["events"] == count and result["started_at"] >= told


def test_the_processes_mode_folds_in_each_runner_the_same_records_to_the_same_outputs(tmp_path: Path) -> None:
    records, count = _rows(tmp_path)
    results = _run_side_by_side(ROOT, records, 500, 2, tune_gc=False)
    assert [r["events"] for r in results] == [count, count]
    assert len({r["digest"] for r in results}) == 1 and len({r["state_digest"] for r in results}) == 1
