"""`python -m bench --quick`: every benchmark runs end to end at a reduced size against the real broker and
Redis, so none of them rots (issue 20). Nothing about speed is asserted; the run must finish, every module
must report, and the capacity and engine benchmarks must show their outputs were checked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import QUICK
from turnledger.devstack.session import Endpoints

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_benchmark_runs_at_a_reduced_size(devstack: Endpoints) -> None:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": devstack.bootstrap,
        "REDIS_URL": devstack.redis_url,
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    finished = re.findall(r"^== (bench_\w+): [\d.]+ s$", done.stdout, re.MULTILINE)
    assert finished == sorted(QUICK)
    capacity = done.stdout.split("== bench_capacity --quick\n", 1)[1].split("\n== bench_capacity:", 1)[0]
    [level] = json.loads(capacity)["levels"]
    for kind in ("raw", "runtime"):
        [run] = level["runs"][kind]
        assert run["answered"] == "100/100", run  # 10 streams x 10 text records, all seen
        assert run["finished"] == "10/10", run
