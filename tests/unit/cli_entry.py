"""`turnledger ...` through its entry point (`turnledger.cli.main`) in this process, for the refusals only the
entry point says in one line with exit 2 (`KafkaSettingsError`, `KafkaAccessError`, ...), with a part of the
command faked by the test."""

from __future__ import annotations

import sys

import pytest


def said_by_entry_point(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int | str | None, list[str]]:
    """The exit status of `turnledger ARGS` and the lines it wrote to stderr."""
    from turnledger import cli

    register = cli._register
    monkeypatch.setattr(cli, "_register", lambda: None if cli.app.registered_groups else register())
    monkeypatch.setattr(sys, "argv", ["turnledger", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli.main()
    return exited.value.code, capsys.readouterr().err.splitlines()
