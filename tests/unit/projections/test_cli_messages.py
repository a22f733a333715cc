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


def _project_app() -> typer.Typer:
    from turnledger.projections.cli import project_command

    app = typer.Typer()
    app.command("project")(project_command)
    app.command("noop")(lambda: None)  # two commands, so "project" stays a subcommand
    return app


def test_follow_waits_for_redis_then_gives_up_after_max_outage_with_the_clear_message() -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    bootstrap = f"127.0.0.1:{_closed_port()}"
    args = ["project", "--redis-url", url, "--bootstrap", bootstrap, "--max-outage", "0.5"]
    result = CliRunner().invoke(_project_app(), args)
    assert result.exit_code == 2, result.output
    assert url in result.output and "turnledger dev up" in result.output


def test_follow_rejects_a_heartbeat_not_below_the_session_timeout() -> None:
    args = [
        "project",
        "--redis-url",
        "redis://x:1/0",
        "--bootstrap",
        "x:1",
        "--heartbeat-interval-ms",
        "10000",
    ]
    result = CliRunner().invoke(_project_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert (
        "--heartbeat-interval-ms 10000 must be below --session-timeout-ms 10000 "
        "(a third of it at most is usual)" in result.output
    )


def test_an_unreachable_redis_is_named_without_its_password() -> None:
    port = _closed_port()
    url = f"redis://gateway:s3cret-pw@127.0.0.1:{port}/0"
    for args in (["history", "conv-1"], ["status", "op-1"]):
        result = CliRunner().invoke(_app(), [*args, "--redis-url", url])
        assert result.exit_code == 2
        assert f"redis://gateway:***@127.0.0.1:{port}/0" in result.output.replace("\n", "")
        assert "s3cret" not in result.output
