"""`python -m turnledger ...` is the `turnledger` script: the same commands, and the refusals its entry
point says in one line (`turnledger.cli.main`), not only typer's own usage errors."""

from __future__ import annotations

import os
import subprocess
import sys


def _python_m_turnledger(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnledger", *args],
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_python_m_turnledger_lists_the_commands() -> None:
    done = _python_m_turnledger("--help")
    assert done.returncode == 0, done.stderr
    assert "Usage: python -m turnledger [OPTIONS] COMMAND [ARGS]..." in done.stdout
    assert "tool-executor" in done.stdout


def test_python_m_turnledger_says_a_refusal_in_the_entry_points_one_line() -> None:
    done = _python_m_turnledger("history", "c-1", "--redis-url", "http://127.0.0.1:1/0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "turnledger: REDIS_URL (or --redis-url) must start with redis://, rediss:// (TLS), unix://, "
        "redis+sentinel:// (rediss+sentinel://) or redis+cluster:// (rediss+cluster://), not http://"
    ]
