"""The size limits from flags and TURNLEDGER_MAX_* variables (processors/limits_config.py): what
`turnledger process` folds under, what it hands its fold and children, and what a replay reads."""

from __future__ import annotations

import os

import pytest
import typer
from typer.testing import CliRunner

from turnledger.codec import encode
from turnledger.model.events import Rejected, SubmittedBlock, TurnSubmitted
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.reasons import ReasonCode
from turnledger.processors.dispatch_partition import DispatchPartitionFold
from turnledger.processors.limits_config import (
    LIMIT_ENV,
    LimitsConfigError,
    MaxBlockBytes,
    MaxHeldDeltas,
    MaxTurnBytes,
    describe,
    export_limits,
    limits_of,
    load_limits,
)
from turnledger.records import SourceRecord
from turnledger.topology import Topics

ALL_VARS = {
    "TURNLEDGER_MAX_BLOCK_BYTES",
    "TURNLEDGER_MAX_DELTAS_PER_BLOCK",
    "TURNLEDGER_MAX_BLOCKS_PER_TURN",
    "TURNLEDGER_MAX_RECORD_BYTES",
    "TURNLEDGER_MAX_TURN_BYTES",
    "TURNLEDGER_MAX_HELD_DELTAS",
}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ALL_VARS:  # set first, so that whatever a test exports is undone after it
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)


def test_every_limit_has_its_variable() -> None:
    assert set(LIMIT_ENV.values()) == ALL_VARS


def test_the_variables_replace_the_defaults_one_by_one() -> None:
    assert load_limits({}) == DEFAULT_LIMITS
    assert load_limits(
        {"TURNLEDGER_MAX_TURN_BYTES": "2_000_000", "TURNLEDGER_MAX_HELD_DELTAS": " 8 "}
    ) == Limits(max_turn_bytes=2_000_000, max_held_deltas=8)
    assert load_limits({"TURNLEDGER_MAX_BLOCK_BYTES": ""}) == DEFAULT_LIMITS


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("1k", "TURNLEDGER_MAX_BLOCK_BYTES='1k' is not an integer"),
        ("0", "TURNLEDGER_MAX_BLOCK_BYTES='0' must be at least 1"),
    ],
)
def test_a_bad_variable_is_a_typed_error(raw: str, message: str) -> None:
    with pytest.raises(LimitsConfigError) as caught:
        load_limits({"TURNLEDGER_MAX_BLOCK_BYTES": raw})
    assert str(caught.value) == message


def test_exported_limits_read_back_equal() -> None:
    limits = Limits(max_block_bytes=10, max_record_bytes=20, max_held_deltas=3)
    env: dict[str, str] = {}
    export_limits(limits, env)
    assert set(env) == ALL_VARS and env["TURNLEDGER_MAX_BLOCK_BYTES"] == "10"
    assert load_limits(env) == limits
    assert describe(DEFAULT_LIMITS).endswith("(defaults)")
    assert describe(limits).startswith("max_block_bytes=10 max_deltas_per_block=65536 ")


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def show(block: MaxBlockBytes = None, turn: MaxTurnBytes = None, held: MaxHeldDeltas = None) -> None:
        typer.echo(repr(limits_of(max_block_bytes=block, max_turn_bytes=turn, max_held_deltas=held)))

    return app


def test_a_flag_wins_over_its_variable_and_a_variable_over_the_default() -> None:
    runner = CliRunner()
    env = {"TURNLEDGER_MAX_BLOCK_BYTES": "7", "TURNLEDGER_MAX_TURN_BYTES": "9"}
    result = runner.invoke(_app(), ["--max-turn-bytes", "11"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == repr(Limits(max_block_bytes=7, max_turn_bytes=11))
    refused = runner.invoke(_app(), ["--max-held-deltas", "0"], env={"COLUMNS": "200"})
    assert refused.exit_code == 2 and "greater than or equal to 1" in refused.output


def _turn(text: str) -> TurnSubmitted:
    block = SubmittedBlock(id="b0", role="user", kind="text", trust_label="user", text=text)
    return TurnSubmitted(conversation_id="c", event_id="e1", occurred_at_ms=1, turn_id="u1", blocks=(block,))


class _Store(dict[str, bytes]):
    def put(self, key: str, value: bytes) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        del self[key]


def test_the_default_fold_runs_under_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    value = encode(_turn("hello"))
    record = SourceRecord("turnledger.ingress", 0, 3, b"c", value)
    monkeypatch.setenv("TURNLEDGER_MAX_RECORD_BYTES", str(len(value) - 1))
    [out] = DispatchPartitionFold(Topics(), 0).process_batch([record], _Store())
    rejected = _decode(out.value)
    assert isinstance(rejected, Rejected) and rejected.reason is ReasonCode.RECORD_TOO_LARGE
    assert rejected.detail == f"record of {len(value)} bytes, at most {len(value) - 1}"


def _decode(value: bytes) -> object:
    from turnledger.codec import decode

    return decode(value)


def test_process_hands_its_limits_to_its_fold_and_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """`turnledger process` writes the limits it resolved into its environment (spawned children
    inherit it, the default fold reads it); Kafka is unreachable here, so it exits 2 after that."""
    from turnledger.processors.cli import process

    app = typer.Typer()
    app.command()(process)
    monkeypatch.setenv("TURNLEDGER_MAX_HELD_DELTAS", "5")
    fold = "tests.unit.test_processors_runtime:_counter_factory"
    args = ["--bootstrap", "127.0.0.1:1", "--fold", fold, "--max-outage", "0.2", "--max-turn-bytes", "4242"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert load_limits(os.environ) == Limits(max_turn_bytes=4242, max_held_deltas=5)


@pytest.mark.parametrize(
    "command", [["process"], ["replay", "audit"], ["replay", "rebuild"], ["replay", "manifest"]]
)
def test_the_process_and_replay_commands_document_every_limit(command: list[str]) -> None:
    from turnledger.cli import _register, app

    _register()
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name, var in LIMIT_ENV.items():
        assert f"--{name.replace('_', '-')}" in result.output
        assert var in result.output
