"""`turnledger process`: what it refuses before it connects to anything."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

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
