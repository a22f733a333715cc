"""`turnledger ...` run as its own process, for the refusals that only the entry point turns into one line
and exit 2 (`turnledger.cli.main`)."""

from __future__ import annotations

import os
import subprocess
import sys


def turnledger(*args: str, env: dict[str, str], inherit: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `python -m turnledger.cli ARGS` with `env` over this process's environment (`inherit`), or
    with `env` alone."""
    return subprocess.run(
        [sys.executable, "-m", "turnledger.cli", *args],
        env={**os.environ, **env} if inherit else env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
