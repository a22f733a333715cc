"""The bars of `cli_progress.py` and logging: while they draw, a record for the root logger's handler on
their console's stream is printed by the console, a whole line above the bars (written to the stream
as it is, it landed at the end of a bar's line); the handler is back when they stop, and without a
terminal nothing of logging changes. On consoles writing to memory, read as a terminal shows them."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from io import StringIO
from typing import IO

import pytest
from rich.console import Console

from tests.unit.progress_helpers import console_on, seen
from turnledger.cli_progress import PrintedOnConsole, bars, moved_by_name

FORMAT = logging.Formatter("%(levelname)s %(name)s: %(message)s")
LOG = logging.getLogger("turnledger.test")
LONG = "waiting for Kafka at k:1 " + "x" * 100  # wider than the console: printed whole, not wrapped
BAR = "catching up ━━━━━━━━╺━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 1/5 offsets"


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> Iterator[logging.Logger]:
    """The root logger with no handler set up, at INFO."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    level = root.level
    root.setLevel(logging.INFO)
    yield root
    root.setLevel(level)


def stream_handler(stream: IO[str], level: int = logging.NOTSET) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(FORMAT)
    handler.setLevel(level)
    return handler


def ours(handlers: list[logging.Handler]) -> list[logging.Handler]:
    """The handlers but those pytest adds to capture the test's logs."""
    return [h for h in handlers if not type(h).__module__.startswith("_pytest.")]


def logged_during_bars(console: Console, *records: tuple[int, str]) -> list[logging.Handler]:
    """Draws a bar at 1/5, logs `records`, draws it at 5/5; the root's handlers (ours) while it drew."""
    with bars(console) as progress:
        task = progress.add_task("catching up", total=None, unit="offsets")
        progress.update(task, completed=1, total=5)
        progress.refresh()
        during = ours(logging.getLogger().handlers)
        for level, message in records:
            LOG.log(level, message)
        progress.update(task, completed=5, total=5)
        progress.refresh()
    return during


def test_a_record_logged_while_the_bars_draw_is_a_whole_line_above_them(root: logging.Logger) -> None:
    console, written = console_on(True)
    handler = stream_handler(console.file)
    root.addHandler(handler)
    during = logged_during_bars(console, (logging.INFO, LONG))
    lines = [re.sub(r" \d+:\d\d:\d\d$", "", line) for line in seen(written).splitlines()]  # the time taken
    assert lines.count(f"INFO turnledger.test: {LONG}") == 1
    logged = lines.index(f"INFO turnledger.test: {LONG}")
    assert lines[logged - 1 : logged + 2] == [BAR, f"INFO turnledger.test: {LONG}", BAR]  # drawn again below
    assert [type(h) for h in during] == [PrintedOnConsole] and ours(root.handlers) == [handler]
    LOG.info("after the bars")
    assert written.getvalue().endswith("\x1b[2KINFO turnledger.test: after the bars\n")  # the handler's own


def test_the_handler_s_level_and_filters_still_choose_what_is_printed(root: logging.Logger) -> None:
    console, written = console_on(True)
    handler = stream_handler(console.file, logging.WARNING)
    handler.addFilter(lambda record: "secret" not in record.getMessage())
    root.addHandler(handler)
    logged_during_bars(
        console, (logging.INFO, "below the level"), (logging.WARNING, "a secret"), (logging.WARNING, "shown")
    )
    logged = [line for line in seen(written).splitlines() if "turnledger.test" in line]
    assert logged == ["WARNING turnledger.test: shown"]


def test_handlers_writing_elsewhere_are_left_as_they_are(root: logging.Logger) -> None:
    console, written = console_on(True)
    elsewhere = StringIO()
    other = stream_handler(elsewhere)
    root.addHandler(other)
    during = logged_during_bars(console, (logging.INFO, "to the other stream"))
    assert during == [other] and ours(root.handlers) == [other]
    assert elsewhere.getvalue() == "INFO turnledger.test: to the other stream\n"
    assert "to the other stream" not in written.getvalue()


def test_without_a_terminal_there_is_no_bar_and_logging_is_unchanged(root: logging.Logger) -> None:
    console, written = console_on(False)
    handler = stream_handler(console.file)
    root.addHandler(handler)
    during = logged_during_bars(console, (logging.INFO, LONG))
    assert during == [handler] and ours(root.handlers) == [handler]
    assert written.getvalue() == f"INFO turnledger.test: {LONG}\n"


def test_the_handler_is_put_back_when_the_work_under_the_bars_fails(root: logging.Logger) -> None:
    console, _ = console_on(True)
    handler = stream_handler(console.file)
    root.addHandler(handler)
    with pytest.raises(RuntimeError, match="broker gone"), bars(console):
        assert [type(h) for h in ours(root.handlers)] == [PrintedOnConsole]
        raise RuntimeError("broker gone")
    assert ours(root.handlers) == [handler]


def test_a_record_is_printed_as_formatted_whatever_the_console_reads_in_text(root: logging.Logger) -> None:
    """The commands' consoles read no markup, but the line is the handler's on any console: no markup,
    emoji code or highlighting of rich's defaults is read in it."""
    written = StringIO()
    console = Console(file=written, force_terminal=True, width=100)
    root.addHandler(stream_handler(console.file))
    message = "[bold]kept[/bold] :smile: at 10.0.0.1:9092 'a' True"
    logged_during_bars(console, (logging.INFO, message))
    assert f"\x1b[2KINFO turnledger.test: {message}\n" in written.getvalue()


def test_a_record_that_does_not_format_is_reported_as_logging_reports_it(root: logging.Logger) -> None:
    console, written = console_on(True)
    handler = stream_handler(console.file)
    handler.setFormatter(logging.Formatter("%(message)s of %(offsets)d offsets"))
    root.addHandler(handler)
    logged_during_bars(console, (logging.INFO, "caught up"))
    lines = seen(written).splitlines()
    assert lines.count("--- Logging error ---") == 1
    assert "ValueError: Formatting field not found in record: 'offsets'" in lines
    assert lines[lines.index("Message: 'caught up'") + 1] == "Arguments: ()"


def test_the_handler_is_back_once_the_bars_stop_and_stopping_again_changes_nothing(
    root: logging.Logger,
) -> None:
    console, _ = console_on(True)
    handler = stream_handler(console.file)
    root.addHandler(handler)
    with bars(console) as progress:
        progress.stop()
        assert ours(root.handlers) == [handler]
    assert ours(root.handlers) == [handler]


def test_a_named_progress_told_no_total_draws_what_is_done_of_an_unknown_total() -> None:
    """A phase that learns its total only at its end (`replay rebuild`'s drop: SCAN finds the keys as it
    walks) draws `done/?` until told the total."""
    console, written = console_on(True)
    with bars(console) as progress:
        tasks = {"dropping": progress.add_task("dropping the projection tl:", total=None, unit="keys")}
        told = moved_by_name(progress, tasks)
        told("dropping", 500, None)
        progress.refresh()
        drawn = [line.split() for line in seen(written).splitlines() if line.startswith("dropping")]
        assert drawn[-1][-3:-1] == ["500/?", "keys"]
        told("dropping", 1200, 1200)
        progress.refresh()
    drawn = [line.split() for line in seen(written).splitlines() if line.startswith("dropping")]
    assert drawn[-1][-3:-1] == ["1200/1200", "keys"]
