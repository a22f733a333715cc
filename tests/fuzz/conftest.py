"""Prints, after the fuzz tests, how many inputs each target received and how they ended.

With FUZZ_REPORT=path the same counts and each test's duration are written there as JSON.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

import tests.strategies  # noqa: F401  (registers and loads the hypothesis profiles, `fuzz` among them)
from tests.fuzz.support import INPUTS, OUTCOMES

_DURATIONS: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    start = time.monotonic()
    yield
    _DURATIONS[item.nodeid] = round(time.monotonic() - start, 1)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not INPUTS:
        return
    write = terminalreporter.write_line
    write("fuzz inputs per target:")
    for target, n in sorted(INPUTS.items()):
        outcomes = ", ".join(f"{o} {c}" for (t, o), c in sorted(OUTCOMES.items()) if t == target)
        write(f"  {target}: {n}  ({outcomes})")
    path = os.environ.get("FUZZ_REPORT")
    if path:
        report = {
            "inputs": dict(INPUTS),
            "outcomes": {f"{t}: {o}": c for (t, o), c in sorted(OUTCOMES.items())},
            "seconds": _DURATIONS,
        }
        with open(path, "w") as f:
            json.dump(report, f, indent=2, sort_keys=True)
