"""The test watchdog ends a run whose event loop teardown hangs, and says which test and which task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.watchdog import EXIT_HUNG

HANGING = """
import asyncio
import pytest

async def refuse_to_stop():
    while True:  # swallows the cancel and pytest-timeout's exception, as a retry loop can
        try:
            await asyncio.sleep(0.01)
        except (asyncio.CancelledError, pytest.fail.Exception):
            pass

@pytest.mark.timeout(1)
async def test_leaves_a_task_that_ignores_cancel():
    asyncio.create_task(refuse_to_stop())
    await asyncio.sleep(0)
"""

PASSING = """
import pytest

@pytest.mark.timeout(1)
def test_quick():
    assert True
"""

UNMARKED = """
def test_quick():
    assert True
"""


def _run(tmp_path: Path, source: str, *plugins: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_case.py").write_text(source)
    repo = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(tmp_path / "test_case.py"), "-p", "tests.watchdog",
         "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
         "-o", "asyncio_default_fixture_loop_scope=function", "--rootdir", str(tmp_path), "-q", *plugins],
        cwd=repo, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TURNLEDGER_TEST_WATCHDOG_GRACE_S": "3", "PYTHONPATH": str(repo)},
    )  # fmt: skip


def test_a_hung_teardown_ends_the_run_naming_the_test_and_the_task(tmp_path: Path) -> None:
    """Without pytest-timeout (as when its exception is swallowed), the test's own teardown hangs."""
    done = _run(tmp_path, HANGING, "-p", "no:timeout", "-W", "ignore::pytest.PytestUnknownMarkWarning")
    assert done.returncode == EXIT_HUNG, done.stdout + done.stderr
    assert "watchdog: test_case.py::test_leaves_a_task_that_ignores_cancel still running 4 s" in done.stderr
    assert "test_case.py:8 refuse_to_stop" in done.stderr


def test_a_test_within_its_timeout_is_left_alone(tmp_path: Path) -> None:
    done = _run(tmp_path, PASSING)
    assert (done.returncode, "1 passed" in done.stdout) == (0, True), done.stdout + done.stderr


def test_without_pytest_timeout_an_unmarked_test_has_no_limit_and_runs(tmp_path: Path) -> None:
    """`make mutation` runs pytest with `-p no:timeout`: the `timeout` ini option is then unknown."""
    done = _run(tmp_path, UNMARKED, "-p", "no:timeout")
    assert (done.returncode, "1 passed" in done.stdout) == (0, True), done.stdout + done.stderr
