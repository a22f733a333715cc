"""`turnledger fake-provider` as an operator meets it: a port no socket takes, a port taken and a request
log that cannot be written are usage errors naming the option (exit 2), before anything listens."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from turnledger.cli import _register, app
from turnledger.fake_provider.cli import fault_plan
from turnledger.fake_provider.faults import DRAWN_KINDS, Fault, FaultKind, FaultPlan


def _fake_provider_command(*args: str) -> Result:
    if not app.registered_groups:
        _register()
    return CliRunner().invoke(app, ["fake-provider", *args], env={"COLUMNS": "300"})


@pytest.mark.parametrize(
    ("port", "said"),
    [("-1", "greater than or equal to 0"), ("65536", "less than or equal to 65535")],
)
def test_a_port_no_socket_takes_is_refused_naming_the_option(port: str, said: str) -> None:
    """It was an OverflowError traceback out of bind(), exit 1."""
    result = _fake_provider_command("--port", port)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--port': Input should be {said}" in result.output


def test_a_port_taken_is_refused_naming_the_option() -> None:
    """It was an OSError traceback (address already in use), exit 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _fake_provider_command("--port", str(port))
    assert result.exit_code == 2, result.output
    assert (
        f"Invalid value for --port: cannot listen on 127.0.0.1:{port}: error while attempting to bind on "
        f"address ('127.0.0.1', {port}): address already in use (0 picks a free port)"
    ) in result.output
    assert not isinstance(result.exception, OSError)


def test_a_request_log_that_cannot_be_appended_to_is_refused_before_listening(tmp_path: Path) -> None:
    """It was a FileNotFoundError traceback, exit 1, after the port was bound."""
    missing = tmp_path / "no-such-dir" / "requests.jsonl"
    result = _fake_provider_command("--port", "0", "--request-log", str(missing))
    assert result.exit_code == 2, result.output
    assert (
        f"Invalid value for --request-log: cannot append to {missing}: No such file or directory"
    ) in result.output
    assert "listening" not in result.output


def test_slow_answers_for_a_marker_and_drawn_faults_make_one_plan() -> None:
    """`--slow TEXT=MS` gives a client (the chaos test's driver) slow answers to cancel or speak over."""
    plan = fault_plan(0.02, ["[demo: slow stream]=300", "a=b=0"])
    assert plan.rates == dict.fromkeys(DRAWN_KINDS, 0.02)
    assert plan.by_last_user_marker == {
        "[demo: slow stream]": (Fault(FaultKind.SLOW, 300),),
        "a=b": (Fault(FaultKind.SLOW, 0),),
    }
    assert fault_plan(0.0, []) == FaultPlan()


@pytest.mark.parametrize("value", ["slow", "=300", "marker=", "marker=-5", "marker=1.5"])
def test_a_slow_value_that_is_not_text_and_milliseconds_is_refused_naming_the_option(value: str) -> None:
    result = _fake_provider_command("--port", "0", "--slow", value)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for --slow: '{value}': expected TEXT=MS, some text and a whole number of" in (
        result.output
    )
