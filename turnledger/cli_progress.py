"""The progress bars of the commands that work for long (`project --until-caught-up`, `replay audit`,
`replay manifest`, `replay rebuild`, `shadow diff`, `metrics`): on the error console, so that stdout
stays the command's output (tables, JSON), and transient: gone when the work is done, and not drawn at
all on a console that is no terminal (a pipe, a file, a CI log).

While the bars show, a log line for the same console goes through the console, which prints it above
the bars: written to the stream as it is, it would land at the end of a bar's line, and the next redraw
would wipe or split it."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from turnledger.kafka.reading import NamedProgress, ReadProgress


class PrintedOnConsole(logging.Handler):
    """Stands for a handler that writes to `console`'s stream: each record it would write, as it would
    format it, printed by `console` as one line (not wrapped: the terminal wraps it)."""

    def __init__(self, console: Console, replaced: logging.Handler) -> None:
        super().__init__(replaced.level)
        self.console, self.replaced = console, replaced
        for kept in replaced.filters:
            self.addFilter(kept)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.replaced.format(record)
            self.console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)
        except Exception:
            self.handleError(record)


class LogsAboveBars(Progress):
    """A `Progress` that, while it draws, has the root logger's handlers writing to its console's stream
    (what `logging.basicConfig` sets up) print through the console, and puts them back when it stops.
    Disabled (no terminal), it draws nothing and leaves logging alone."""

    _stand_ins: Mapping[logging.Handler, logging.Handler] = {}
    """Each handler replaced while the bars draw, and what stands for it."""

    def start(self) -> None:
        root, stream = logging.getLogger(), self.console.file  # before the bars redirect sys.stderr
        self._stand_ins = {
            handler: PrintedOnConsole(self.console, handler)
            for handler in root.handlers
            if not self.disable and isinstance(handler, logging.StreamHandler) and handler.stream is stream
        }
        root.handlers = [self._stand_ins.get(h, h) for h in root.handlers]
        super().start()

    def stop(self) -> None:
        super().stop()
        replaced = {stand_in: handler for handler, stand_in in self._stand_ins.items()}
        root = logging.getLogger()
        root.handlers = [replaced.get(h, h) for h in root.handlers]
        self._stand_ins = {}


def bars(console: Console) -> Progress:
    """A bar a task: its description, the bar, `done/total` (`?` while the total is not known) and the
    task's `unit`, the time elapsed. Add tasks as `add_task(description, total=None, unit="offsets")`."""
    return LogsAboveBars(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # else rich ends with a blank line there
    )


def moved(progress: Progress, task: TaskID) -> ReadProgress:
    """A `(done, total)` callback that sets `task` to it."""
    return lambda done, total: progress.update(task, completed=done, total=total)


def moved_by_name(progress: Progress, tasks: Mapping[str, TaskID]) -> NamedProgress:
    """A `(name, done, total)` callback that sets the task of that name to it."""
    return lambda name, done, total: progress.update(tasks[name], completed=done, total=total)
