"""`turnledger process`: what it refuses before it connects to anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from tests.unit.cli_entry import said_by_entry_point
from turnledger.errors import KafkaUnavailableError, ProcessorError
from turnledger.kafka.group_member import SessionTimeoutRefusedError
from turnledger.processors.config import ProcessorConfig, ProcessorExit

FOLD = "tests.unit.test_processors_runtime:_counter_factory"


def _process_app() -> typer.Typer:
    from turnledger.processors.cli import process

    app = typer.Typer()
    app.command()(process)
    return app


def test_a_state_dir_that_cannot_be_a_directory_is_refused_before_kafka_is_tried(tmp_path: Path) -> None:
    """Unrefused, the first partition's term would fail on it only once Kafka answered and the group
    assigned partitions; the port 1 bootstrap shows nothing was tried (that would take --max-outage)."""
    taken = tmp_path / "state"
    taken.write_text("a file")
    args = ["--bootstrap", "127.0.0.1:1", "--fold", FOLD, "--state-dir", str(taken)]
    result = CliRunner().invoke(_process_app(), args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "Invalid value for --state-dir: cannot make" in result.output
    assert "File exists" in result.output and "Kafka" not in result.output


def test_a_state_dir_that_does_not_exist_yet_is_made(tmp_path: Path) -> None:
    made = tmp_path / "a" / "b"
    args = ["--bootstrap", "127.0.0.1:1", "--fold", FOLD, "--state-dir", str(made), "--max-outage", "0.2"]
    result = CliRunner().invoke(_process_app(), args)
    assert result.exit_code == 2, result.output
    assert made.is_dir()


class App:
    """`ProcessorApp` as the command builds and runs it: `run` answers `outcome` (results, or raises)."""

    outcome: dict[int, ProcessorExit] | BaseException = {}
    built: list[dict[str, object]] = []

    def __init__(self, config: ProcessorConfig, fold_factory: object, **kwargs: object) -> None:
        App.built.append({"config": config, **kwargs})

    async def run(self) -> dict[int, ProcessorExit]:
        if isinstance(App.outcome, BaseException):
            raise App.outcome
        return App.outcome

    def readiness(self) -> str | None:
        return None


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> type[App]:
    from turnledger.processors import cli

    App.built = []
    monkeypatch.setattr(cli, "ProcessorApp", App)
    return App


def _run(*args: str) -> Result:
    return CliRunner().invoke(
        _process_app(), ["--bootstrap", "k:1", "--fold", FOLD, *args], env={"COLUMNS": "300"}
    )


@pytest.mark.parametrize(
    ("outcome", "code", "said"),
    [
        ({0: ProcessorExit.STOPPED}, 0, ""),
        (
            {0: ProcessorExit.FENCED, 1: ProcessorExit.STOPPED},
            3,
            "partitions [0] were fenced by another processor",
        ),
        (ProcessorError("partition 1: the store is corrupt"), 1, "partition 1: the store is corrupt"),
        (
            KafkaUnavailableError("k:1", action="start the processor's consumer"),
            2,
            "Kafka is not reachable at 'k:1'",
        ),
    ],
    ids=["stopped", "fenced", "failed", "unreachable"],
)
def test_a_static_process_exits_as_its_partitions_ended(
    app: type[App], outcome: dict[int, ProcessorExit] | BaseException, code: int, said: str
) -> None:
    app.outcome = outcome
    result = _run("--partitions", "0,1")
    assert result.exit_code == code, result.output
    assert (
        (f"turnledger process: {said}" in result.output)
        if said
        else ("turnledger process" not in result.output)
    )
    [built] = app.built
    assert (built["partitions"], built["group"]) == ([0, 1], False)


def test_a_group_member_is_never_an_exit_for_fencing(app: type[App]) -> None:
    """In a group, a fenced partition moved to another member: no failure of this process."""
    app.outcome = {0: ProcessorExit.FENCED}
    result = _run()
    assert result.exit_code == 0, result.output
    [built] = app.built
    assert (built["partitions"], built["group"]) == (None, True)


def test_no_bootstrap_says_how_to_get_one() -> None:
    result = CliRunner().invoke(_process_app(), ["--fold", FOLD], env={"KAFKA_BOOTSTRAP_SERVERS": ""})
    assert result.exit_code == 2
    assert (
        "turnledger process: no Kafka bootstrap servers. Start the local stack with `turnledger dev up`"
        in result.output
    )


def test_a_session_timeout_the_broker_refuses_is_one_line_exit_2(
    app: type[App], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Raised by the group member's consumer (`kafka/group_member.py`) out of `ProcessorApp.run`: no
    ProcessorError (exit 1), no traceback."""

    class Refused(App):
        async def run(self) -> dict[int, ProcessorExit]:
            [built] = App.built
            config = built["config"]
            assert isinstance(config, ProcessorConfig)
            group = (config.offsets_group, config.group.session_timeout_ms)
            raise SessionTimeoutRefusedError(config.bootstrap, *group, (6000, 1_800_000))

    from turnledger.processors import cli

    monkeypatch.setattr(cli, "ProcessorApp", Refused)
    args = [
        "--bootstrap",
        "k:1",
        "--fold",
        FOLD,
        "--session-timeout-ms",
        "1000",
        "--heartbeat-interval-ms",
        "300",
    ]
    code, said = said_by_entry_point(monkeypatch, capsys, "process", *args)
    assert code == 2
    assert said[-1] == (
        "turnledger: Kafka at 'k:1' refused --session-timeout-ms 1000 for consumer group 'turnledger' "
        "(InvalidSessionTimeoutError): the group's coordinator takes 6000 to 1800000 ms "
        "(group.min.session.timeout.ms to group.max.session.timeout.ms). Pass a --session-timeout-ms in "
        "that range, or change those broker settings."
    )
    assert not any("Traceback" in line for line in said)
