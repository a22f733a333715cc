"""The CLI explains unreachable services instead of printing a traceback."""

from __future__ import annotations

import socket

import typer
from typer.testing import CliRunner

from turnledger.projections.cli import history_command, status_command


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("history")(history_command)
    app.command("status")(status_command)
    return app


def test_unreachable_redis_says_what_was_tried_and_how_to_fix() -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    result = CliRunner().invoke(_app(), ["history", "conv-1", "--redis-url", url])
    assert result.exit_code == 2
    assert url in result.output and "turnledger dev up" in result.output and "REDIS_URL" in result.output


def test_missing_redis_url_is_explained(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("REDIS_URL", raising=False)
    result = CliRunner().invoke(_app(), ["status", "op-1"])
    assert result.exit_code == 2 and "REDIS_URL is not set" in result.output
