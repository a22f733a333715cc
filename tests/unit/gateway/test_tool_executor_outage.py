"""The tool executor started while Kafka is down waits, logging what it waits for, and gives up only
after --max-outage with the clear message."""

from __future__ import annotations

import socket

from typer.testing import CliRunner

from turnledger.cli import _register, app


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tool_executor_waits_for_kafka_then_gives_up_after_max_outage() -> None:
    if not app.registered_groups:
        _register()
    bootstrap = f"127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, ["tool-executor", "--bootstrap", bootstrap, "--max-outage", "0.6"])
    assert result.exit_code == 2, result.output
    assert f"not reachable at '{bootstrap}'" in result.output and "turnledger dev up" in result.output
