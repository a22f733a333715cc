"""The commands' consoles print text as it is: a model's answer, an id or a detail holding `[/x]` or
`[bold]` is text, not Rich markup (it crashed `history` with a MarkupError, or lost the brackets)."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.table import Table

from turnledger.projections import cli as projections_cli
from turnledger.replay import cli as replay_cli
from turnledger.serve import cli as serve_cli

CONSOLES = {
    "projections console": projections_cli.console,
    "projections err": projections_cli.err,
    "replay console": replay_cli.console,
    "replay err": replay_cli.err,
    "serve err": serve_cli.err,
}
TEXT = "see [/x] and [bold]this[/bold] [red]"


@pytest.mark.parametrize("console", CONSOLES.values(), ids=CONSOLES.keys())
def test_text_with_brackets_is_printed_as_it_is(console: Console) -> None:
    with console.capture() as captured:
        console.print(TEXT, soft_wrap=True)
    assert captured.get() == TEXT + "\n"


@pytest.mark.parametrize("console", CONSOLES.values(), ids=CONSOLES.keys())
def test_a_table_of_such_text_keeps_it_in_its_title_and_cells(console: Console) -> None:
    table = Table(title=f"history of {TEXT}")
    table.add_column("content", overflow="fold")
    table.add_row(TEXT)
    with console.capture() as captured:
        console.print(table, width=200)
    printed = captured.get()
    assert f"│ {TEXT} │" in printed
    assert "history of see [/x] and" in printed
