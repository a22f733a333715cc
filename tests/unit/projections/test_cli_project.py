"""`turnledger project --until-caught-up` shows its progress: a bar on the error console of the offsets
projected of the lag when the read began (what `Projector.run_to_end` tells, tested with its reads in
`test_projector_run.py`), gone when caught up; stdout stays empty, and following draws no bar. Redis
and the projector are faked."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner, Result

from tests.unit.progress_helpers import FakeProgress, console_on, seen
from turnledger.projections import cli
from turnledger.projections.projector import ProjectorStats

STATS = ProjectorStats(batches=2, applied=4, skipped=1, seconds=1.5)
STATS_LINE = "applied 4, skipped 1 (already applied), undecodable 0, 2 batches in 1.50s"
WAITING = "Redis at r:1 refused the connection; retrying in 0.5s " + "x" * 60  # wider than the console
LOGGED = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO turnledger.projections.projector: " + re.escape(WAITING)
"""The line the command's logging setup writes for it: as it is, not wrapped."""


class FakeRedis:
    closed = 0

    async def aclose(self) -> None:
        self.closed += 1


class FakeProjector:
    """Tells the progress of a lag of 5 offsets, caught up in two steps, logging a line (as the projector
    does when it waits out an outage) between them; following, logs the line too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.followed = False

    async def run_to_end(self, start: Any = None, progress: Any = None) -> ProjectorStats:
        assert start is None
        progress(0, 5)
        progress(4, 5)
        logging.getLogger("turnledger.projections.projector").info(WAITING)
        progress(5, 5)
        return STATS

    async def run_forever(
        self, stop: Any, report: Any = None, *, follow: Any, diagnosed: Any = None
    ) -> ProjectorStats:
        logging.getLogger("turnledger.projections.projector").info(WAITING)
        return STATS

    def readiness(self) -> str | None:
        return None


@pytest.fixture(autouse=True)
def faked(monkeypatch: pytest.MonkeyPatch) -> None:
    async def connect(url: str) -> FakeRedis:
        return FakeRedis()

    async def diagnose(url: str) -> None:
        return None

    monkeypatch.setattr(cli, "connect", connect)
    monkeypatch.setattr(cli, "diagnose", diagnose)
    monkeypatch.setattr(cli, "redis_client", lambda url: FakeRedis())
    monkeypatch.setattr(cli, "client_url", lambda redis: "redis://r:1/0")
    monkeypatch.setattr("turnledger.projections.projector.Projector", FakeProjector)


def project(*args: str) -> Result:
    app = typer.Typer()
    app.command("project")(cli.project_command)
    app.command("noop")(lambda: None)  # two commands, so "project" stays a subcommand
    return CliRunner().invoke(app, ["project", "--redis-url", "redis://r:1/0", "--bootstrap", "k:1", *args])


def test_catching_up_moves_one_bar_to_each_count_the_projector_tells(monkeypatch: pytest.MonkeyPatch) -> None:
    bar = FakeProgress()
    monkeypatch.setattr(cli, "_bars", lambda: bar)
    result = project("--until-caught-up")
    assert result.exit_code == 0, result.output
    assert bar.tasks == [("catching up", None, {"unit": "offsets"})]
    assert (bar.updated, bar.open) == ([(41, 0, 5), (41, 4, 5), (41, 5, 5)], False)


def test_the_bar_is_drawn_on_the_error_console_until_caught_up_and_stdout_stays_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (stdout, printed), (stderr, drawn) = console_on(True), console_on(True)
    monkeypatch.setattr(cli, "console", stdout)
    monkeypatch.setattr(cli, "err", stderr)
    result = project("--until-caught-up")
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in seen(drawn).splitlines() if line.strip()]
    bars = [line for line in lines if line[:2] == ["catching", "up"]]
    assert bars[-1][3:5] == ["5/5", "offsets"]  # as last drawn: caught up
    assert lines[-1] == STATS_LINE.split()  # after the bar went away
    assert printed.getvalue() == ""


def test_following_draws_no_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    (stdout, printed), (stderr, drawn) = console_on(True), console_on(True)
    monkeypatch.setattr(cli, "console", stdout)
    monkeypatch.setattr(cli, "err", stderr)
    result = project("--static")
    assert result.exit_code == 0, result.output
    assert seen(drawn).splitlines() == [
        "projecting k:1 -> redis://r:1/0 (keys 'tl:') alone; Ctrl-C to stop",
        STATS_LINE,
    ]
    assert printed.getvalue() == ""


@contextmanager
def logging_of_a_fresh_process() -> Iterator[None]:
    """The root logger without handlers (pytest's are put back after), so that the command's
    `logging.basicConfig` sets up its own, on the stderr of the command, as in a process of its own."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def project_on_a_terminal(monkeypatch: pytest.MonkeyPatch, *args: str) -> list[str]:
    """`project` with its error console on the command's stderr, taken for a terminal; the lines of its
    stderr as a terminal shows them."""
    monkeypatch.setattr(cli, "err", Console(stderr=True, force_terminal=True, width=100, markup=False))
    with logging_of_a_fresh_process():
        result = project(*args)
    assert result.exit_code == 0, result.output
    return seen(StringIO(result.stderr)).splitlines()


def test_a_line_logged_while_catching_up_is_printed_whole_above_the_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = project_on_a_terminal(monkeypatch, "--until-caught-up")
    [logged] = [n for n, line in enumerate(lines) if WAITING in line]
    assert re.fullmatch(LOGGED, lines[logged]), lines[logged]
    around = [lines[logged - 1].split()[:2], lines[logged + 1].split()[:2]]  # the bar, drawn again below
    assert around == [["catching", "up"], ["catching", "up"]], lines
    assert lines[-1] == STATS_LINE


def test_following_draws_no_bar_and_logs_as_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = project_on_a_terminal(monkeypatch, "--static")
    assert [re.fullmatch(LOGGED, line) is not None for line in lines] == [False, True, False]
    assert (lines[0].split()[0], lines[2]) == ("projecting", STATS_LINE)
