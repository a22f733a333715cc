"""`bench_dispatch_engine --instructions`: engines compared by the instructions valgrind counts, the
start-up subtracted, over `engine_runner.py --loop-only` (the fold and nothing else in the loop)."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_dispatch_engine import RUNNER, instructions_executed, main, per_event
from bench.dispatch_workload import Mix, build
from turnledger.codec import encode

ROOT = Path(__file__).resolve().parents[2]


def test_the_count_is_read_from_cachegrinds_summary() -> None:
    summary = "==4242== \n==4242== I   refs:      13,755,509,295\n"
    assert instructions_executed(summary) == 13_755_509_295
    assert instructions_executed("==1== I refs: 987\n") == 987
    with pytest.raises(RuntimeError, match="no instruction count"):
        instructions_executed("valgrind: command not found")


def test_an_event_costs_the_workloads_count_less_the_first_record_alone_over_the_other_events() -> None:
    assert per_event(5_700_000_000 + 9 * 700_000, 5_700_000_000, 10) == 700_000
    assert per_event(1_000, 400, 1) == 600  # one record: nothing to divide by


def _rows(tmp_path: Path) -> tuple[Path, int]:
    workload = build(2, Mix(rounds=1), concurrency=2)
    rows = [(e.conversation_id.encode(), encode(e)) for e in workload.events]
    path = tmp_path / "records.pickle"
    path.write_bytes(pickle.dumps(rows))
    return path, len(rows)


def _runner(records: Path, *flags: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(records), "500", *flags],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_loop_only_runner_folds_every_record_and_takes_no_digest(tmp_path: Path) -> None:
    records, count = _rows(tmp_path)
    whole, loop = _runner(records), _runner(records, "--loop-only")
    assert loop["events"] == whole["events"] == count
    assert (
        loop["outputs"] == whole["outputs"] and isinstance(loop["outputs"], int) and loop["outputs"] > count
    )
    assert set(loop) == {"turnledger", "events", "outputs", "cpu_s", "wall_s"}
    assert {"digest", "state_digest", "decoded_digest"} <= set(whole)


@pytest.mark.slow  # two processes under valgrind: ~20 s
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (make system-deps)")
def test_the_instructions_mode_counts_the_current_engine_with_valgrind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--conversations", "2", "--concurrency", "2", "--rounds", "1", "--instructions"])
    out = capsys.readouterr().out
    found = re.search(r"\| current \| ([\d,]+) \|", out)
    assert found is not None, out
    assert 100_000 < int(found.group(1).replace(",", "")) < 20_000_000, out  # an event, not the start-up
