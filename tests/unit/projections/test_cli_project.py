"""`turnledger project --until-caught-up` shows its progress: a bar on the error console of the offsets
projected of the lag when the read began (what `Projector.run_to_end` tells, tested with its reads in
`test_projector_run.py`), gone when caught up; stdout stays empty, and following draws no bar. Redis
and the projector are faked."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from tests.unit.progress_helpers import FakeProgress, console_on, seen
from turnledger.projections import cli
from turnledger.projections.projector import ProjectorStats

STATS = ProjectorStats(batches=2, applied=4, skipped=1, seconds=1.5)
STATS_LINE = "applied 4, skipped 1 (already applied), undecodable 0, 2 batches in 1.50s"


class FakeRedis:
    closed = 0

    async def aclose(self) -> None:
        self.closed += 1


class FakeProjector:
    """Tells the progress of a lag of 5 offsets, caught up in two steps."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.followed = False

    async def run_to_end(self, start: Any = None, progress: Any = None) -> ProjectorStats:
        assert start is None
        progress(0, 5)
        progress(4, 5)
        progress(5, 5)
        return STATS

    async def run_forever(self, stop: Any, report: Any = None, *, follow: Any) -> ProjectorStats:
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
