"""`turnledger legacy record` and `turnledger metrics` explain bad input and unreachable Kafka, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.unit.cli_entry import said_by_entry_point
from turnledger.cli import _register, app
from turnledger.kafka.group_member import SessionTimeoutRefusedError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    if not app.registered_groups:
        _register()


def test_legacy_record_names_the_bad_line(tmp_path: Path) -> None:
    exchanges = tmp_path / "legacy.jsonl"
    exchanges.write_text('{"conversationId": "c", "operationId": "o", "response": "x"}\n{"oops"\n')
    result = CliRunner().invoke(app, ["legacy", "record", str(exchanges), "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert f"{exchanges}:2: not JSON" in result.output


def test_legacy_record_without_bootstrap_says_how_to_fix(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    exchanges = tmp_path / "legacy.jsonl"
    exchanges.write_text("")
    result = CliRunner().invoke(app, ["legacy", "record", str(exchanges)])
    assert result.exit_code == 2
    assert "no Kafka bootstrap servers" in result.output and "turnledger dev up" in result.output


def test_legacy_record_with_kafka_down_says_what_was_tried(tmp_path: Path) -> None:
    exchanges = tmp_path / "legacy.jsonl"
    exchanges.write_text('{"conversationId": "c", "operationId": "o", "response": "x"}\n')
    bootstrap = f"127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, ["legacy", "record", str(exchanges), "--bootstrap", bootstrap])
    assert result.exit_code == 2
    assert bootstrap in result.output and "turnledger dev up" in result.output


def test_legacy_record_with_kafka_down_starts_stderr_with_its_one_line(tmp_path: Path) -> None:
    """No blank line before it: the progress line it ended is only ended once it was written."""
    exchanges = tmp_path / "legacy.jsonl"
    exchanges.write_text('{"conversationId": "c", "operationId": "o", "response": "x"}\n')
    bootstrap = f"127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, ["legacy", "record", str(exchanges), "--bootstrap", bootstrap])
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"turnledger legacy record: Kafka is not reachable at '{bootstrap}' while trying to "
    )


def test_legacy_record_ends_its_progress_line_once_it_was_written(capsys: pytest.CaptureFixture[str]) -> None:
    from turnledger.gateway.cli import _ProgressLine

    line = _ProgressLine()
    line.end()
    line.show(1, 2)
    line.show(2, 2)
    line.end()
    line.end()
    assert capsys.readouterr().err == "\rrecorded 1/2\rrecorded 2/2\n"


def test_metrics_with_kafka_down_says_what_was_tried() -> None:
    bootstrap = f"127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, ["metrics", "--bootstrap", bootstrap])
    assert result.exit_code == 2
    assert bootstrap in result.output and "turnledger dev up" in result.output


@pytest.mark.parametrize("command", [["legacy", "record"], ["metrics"], ["worker"], ["tool-executor"]])
def test_help(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "240"})  # no option name cut
    assert result.exit_code == 0 and "Usage" in result.output
    if command[0] in ("worker", "tool-executor"):
        assert "--rollout-stage" in result.output and "TURNLEDGER_ROLLOUT_STAGE" in result.output
    if command[0] == "worker":
        assert "--lease-seconds" in result.output and "TURNLEDGER_LEASE_SECONDS" in result.output
        assert (
            "--unnamed-error-grace-ms" in result.output
            and "TURNLEDGER_UNNAMED_ERROR_GRACE_MS" in result.output
        )


def test_the_worker_gives_up_on_an_outage_longer_than_max_outage(tmp_path: Path) -> None:
    port = _closed_port()
    args = [
        "worker",
        "--bootstrap",
        f"127.0.0.1:{port}",
        "--journal-dir",
        str(tmp_path),
        "--max-outage",
        "0.2",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"Kafka is not reachable at '127.0.0.1:{port}' while trying to start the ingress producer" in (
        result.output
    )


@pytest.mark.parametrize(
    ("args", "env", "grace_s"),
    [
        ([], {}, 5.0),
        (["--unnamed-error-grace-ms", "250"], {}, 0.25),
        ([], {"TURNLEDGER_UNNAMED_ERROR_GRACE_MS": "1500"}, 1.5),
        (["--unnamed-error-grace-ms", "0"], {}, 0.0),
    ],
)
def test_the_worker_takes_its_unnamed_error_grace_from_a_flag_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], grace_s: float
) -> None:
    configs: list[Any] = []

    async def run_worker(*_: Any, config: Any, **__: Any) -> None:
        configs.append(config)

    monkeypatch.setattr("turnledger.gateway.cli.run_worker", run_worker)
    command = ["worker", "--bootstrap", "127.0.0.1:1", "--static", "--journal-dir", str(tmp_path), *args]
    result = CliRunner().invoke(app, command, env=env)
    assert result.exit_code == 0, result.output
    assert [c.unnamed_error_grace_s for c in configs] == [grace_s]


@pytest.mark.parametrize(
    ("args", "env", "first", "longest"),
    [
        (["--backoff-ms", "500", "--backoff-max-ms", "499"], {}, 500, 499),
        (["--backoff-max-ms", "100"], {}, 500, 100),
        ([], {"TURNLEDGER_BACKOFF_MS": "2000", "TURNLEDGER_BACKOFF_MAX_MS": "1000"}, 2000, 1000),
    ],
)
def test_a_longest_backoff_below_the_first_is_a_usage_error_naming_both(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    first: int,
    longest: int,
) -> None:
    started: list[Any] = []

    async def run_worker(*_: Any, config: Any, **__: Any) -> None:
        started.append(config)

    monkeypatch.setattr("turnledger.gateway.cli.run_worker", run_worker)
    command = ["worker", "--bootstrap", "127.0.0.1:1", "--static", "--journal-dir", str(tmp_path), *args]
    result = CliRunner().invoke(app, command, env={"COLUMNS": "240", **env})
    assert result.exit_code == 2, result.output
    assert (
        f"Invalid value for --backoff-max-ms: {longest} is below --backoff-ms {first}: the longest pause "
        "cannot be shorter than the first"
    ) in result.output
    assert started == []


@pytest.mark.parametrize(
    ("args", "pauses_s"),
    [
        ([], (0.5, 8.0)),
        (["--backoff-ms", "700", "--backoff-max-ms", "700"], (0.7, 0.7)),
        (["--backoff-ms", "0"], (0.0, 8.0)),
    ],
)
def test_a_longest_backoff_at_or_above_the_first_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], pauses_s: tuple[float, float]
) -> None:
    configs: list[Any] = []

    async def run_worker(*_: Any, config: Any, **__: Any) -> None:
        configs.append(config)

    monkeypatch.setattr("turnledger.gateway.cli.run_worker", run_worker)
    command = ["worker", "--bootstrap", "127.0.0.1:1", "--static", "--journal-dir", str(tmp_path), *args]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert [(c.backoff.initial_s, c.backoff.max_s) for c in configs] == [pauses_s]


def test_a_negative_unnamed_error_grace_is_refused(tmp_path: Path) -> None:
    command = ["worker", "--bootstrap", "127.0.0.1:1", "--static", "--journal-dir", str(tmp_path)]
    result = CliRunner().invoke(app, [*command, "--unnamed-error-grace-ms", "-1"], env={"COLUMNS": "240"})
    assert result.exit_code == 2
    assert "Invalid value for '--unnamed-error-grace-ms'" in result.output
    assert "Input should be greater than or equal to 0" in result.output


def test_legacy_record_names_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    exchanges = tmp_path / "legacy.jsonl"
    exchanges.write_bytes(b'{"conversationId": "caf\x96"}\n')
    result = CliRunner().invoke(app, ["legacy", "record", str(exchanges), "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert f"turnledger legacy record: {exchanges}: not UTF-8 (byte 23: invalid start byte)" in result.output


def test_a_session_timeout_the_broker_refuses_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Raised by the group member's consumer (`kafka/group_member.py`) out of the worker's manifest feed:
    not a `KafkaUnavailableError`, yet one line, exit 2, no traceback."""
    from turnledger.gateway import cli as gateway_cli

    async def refused(bootstrap: str, endpoints: object, *, group_id: str | None, **kwargs: Any) -> None:
        group = group_id or "turnledger-workers"
        raise SessionTimeoutRefusedError(bootstrap, group, kwargs["session_timeout_ms"], (1000, 60_000))

    monkeypatch.setattr(gateway_cli, "run_worker", refused)
    args = ["--bootstrap", "k:1", "--journal-dir", str(tmp_path), "--session-timeout-ms", "900000"]
    code, said = said_by_entry_point(monkeypatch, capsys, "worker", *args)
    assert code == 2
    assert said[-1] == (
        "turnledger: Kafka at 'k:1' refused --session-timeout-ms 900000 for consumer group "
        "'turnledger-workers' (InvalidSessionTimeoutError): the group's coordinator takes 1000 to 60000 ms "
        "(group.min.session.timeout.ms to group.max.session.timeout.ms). Pass a --session-timeout-ms in "
        "that range, or change those broker settings."
    )
    assert not any("Traceback" in line for line in said)


class IngressClient:
    """The tool executor's ingress producer, started and stopped without Kafka."""

    topic = "turnledger.ingress"

    async def stop(self) -> None:
        pass


def test_a_session_timeout_the_broker_refuses_ends_the_tool_executor_in_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the runner and its reader (`kafka/tail.py`) down to aiokafka's `getmany`, which raises the
    broker's refusal of the group member's --session-timeout-ms as it does after a refused JoinGroup."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import InvalidSessionTimeoutError

    from turnledger.gateway import runner
    from turnledger.kafka import group_member

    joined: list[tuple[str, int, int]] = []

    async def start(consumer: AIOKafkaConsumer) -> None:
        joined.append((consumer._group_id, consumer._session_timeout_ms, consumer._heartbeat_interval_ms))

    async def getmany(consumer: AIOKafkaConsumer, *partitions: object, **kwargs: object) -> None:
        raise InvalidSessionTimeoutError()

    async def coordinator_settings(bootstrap: str, group_id: str, names: object) -> dict[str, str]:
        return {group_member.MIN_SETTING: "6000", group_member.MAX_SETTING: "300000"}

    async def start_client(make: object, **kwargs: object) -> IngressClient:
        return IngressClient()

    monkeypatch.setattr(runner, "start_client", start_client)
    monkeypatch.setattr(AIOKafkaConsumer, "start", start)
    monkeypatch.setattr(AIOKafkaConsumer, "getmany", getmany)
    monkeypatch.setattr(group_member, "coordinator_settings", coordinator_settings)
    args = ["--bootstrap", "k:1", "--topic-prefix", "p.", "--session-timeout-ms", "1000"]
    code, said = said_by_entry_point(
        monkeypatch, capsys, "tool-executor", *args, "--heartbeat-interval-ms", "300"
    )
    assert code == 2
    assert said[-1] == (
        "turnledger: Kafka at 'k:1' refused --session-timeout-ms 1000 for consumer group "
        "'p.turnledger-tool-executor' (InvalidSessionTimeoutError): the group's coordinator takes 6000 to "
        "300000 ms (group.min.session.timeout.ms to group.max.session.timeout.ms). Pass a "
        "--session-timeout-ms in that range, or change those broker settings."
    )
    assert not any("Traceback" in line for line in said)
    assert joined == [("p.turnledger-tool-executor", 1000, 300)]


@pytest.mark.parametrize("heartbeat", ["3000", "4000"])
def test_a_tool_executor_heartbeat_not_below_its_session_timeout_is_refused(heartbeat: str) -> None:
    args = ["tool-executor", "--bootstrap", "k:1", "--session-timeout-ms", "3000"]
    result = CliRunner().invoke(app, [*args, "--heartbeat-interval-ms", heartbeat], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert (
        f"Invalid value: --heartbeat-interval-ms {heartbeat} must be below --session-timeout-ms 3000 (a "
        "third of it at most is usual)"
    ) in result.output
