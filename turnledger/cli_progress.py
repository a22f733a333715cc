"""The progress bars of the commands that work for long (`project --until-caught-up`, `replay audit`,
`replay manifest`, `replay rebuild`, `shadow diff`): on the error console, so that stdout stays the
command's output (tables, JSON), and transient: gone when the work is done, and not drawn at all on a
console that is no terminal (a pipe, a file, a CI log)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from turnledger.kafka.reading import NamedProgress, ReadProgress


def bars(console: Console) -> Progress:
    """A bar a task: its description, the bar, `done/total` (`?` while the total is not known) and the
    task's `unit`, the time elapsed. Add tasks as `add_task(description, total=None, unit="offsets")`."""
    return Progress(
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
