"""What the tests of the commands' progress bars (`cli_progress.py`) share: a stand-in for a rich
`Progress` that records what it is told, and real consoles writing to memory, read as a terminal shows
them."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

from rich.console import Console


class FakeProgress:
    """Stands for a rich `Progress`: its tasks (description, total, fields) numbered from 41, and
    every advance and update of them, made while it is open."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, Any, dict[str, Any]]] = []
        self.advanced: list[tuple[int, int]] = []
        self.updated: list[tuple[int, int, int]] = []
        self.open = False

    def __enter__(self) -> FakeProgress:
        self.open = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.open = False

    def add_task(self, description: str, total: Any = "unset", **fields: Any) -> int:
        self.tasks.append((description, total, fields))
        return len(self.tasks) + 40

    def advance(self, task_id: int, advance: int) -> None:
        assert self.open
        self.advanced.append((task_id, advance))

    def update(self, task_id: int, *, completed: int, total: int) -> None:
        assert self.open
        self.updated.append((task_id, completed, total))


def console_on(terminal: bool) -> tuple[Console, StringIO]:
    """A console writing to memory, a terminal or not, 100 columns wide; and what it wrote."""
    written = StringIO()
    return Console(file=written, force_terminal=terminal, width=100, markup=False), written


def seen(written: StringIO) -> str:
    """What a terminal shows of it, without its control codes (colors, cursor moves)."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", written.getvalue())
