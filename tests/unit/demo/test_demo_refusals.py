"""`turnledger demo` says a run that cannot start in one line on stderr, exit 2, and leaves stdout to the
report: with Kafka unreachable it printed its refusal on stdout, cut at the console's width.

The command runs in a subprocess with the stack's variables naming 127.0.0.1:1, where nothing listens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOWN = "127.0.0.1:1"
KAFKA_FIX = (
    "Start the local stack with `turnledger dev up` and export KAFKA_BOOTSTRAP_SERVERS, or set "
    "KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) to a reachable broker list host:port[,host:port]."
)


def test_kafka_unreachable_is_one_line_on_stderr_exit_2(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "COLUMNS": "80",
        "KAFKA_BOOTSTRAP_SERVERS": DOWN,
        "REDIS_URL": f"redis://{DOWN}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "turnledger", "demo", "--conversations", "2", "--no-serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"turnledger demo: Kafka is not reachable at '{DOWN}' (KafkaConnectionError: ")
    assert line.endswith(KAFKA_FIX)
    assert "turnledger demo:" not in done.stdout
    assert done.stdout.startswith(f"stack: Kafka {DOWN}, Redis redis://{DOWN} (env)\n")
