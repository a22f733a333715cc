"""The size limits from flags and TURNLEDGER_MAX_* variables (processors/limits_config.py): what
`turnledger process` folds under, what it hands its fold and children, and what a replay reads."""

from __future__ import annotations

import os
from typing import Any

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
    MaxBlocksPerTurn,
    MaxDeltasPerBlock,
    MaxHeldDeltas,
    MaxRecordBytes,
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


# ------------------------------------------------------------------------------ every limit exactly


def test_load_limits_reads_the_process_environment_when_given_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLEDGER_MAX_BLOCKS_PER_TURN", "12")
    assert load_limits() == Limits(max_blocks_per_turn=12)


def test_every_variable_replaces_its_own_limit() -> None:
    env = {
        "TURNLEDGER_MAX_BLOCK_BYTES": "1",
        "TURNLEDGER_MAX_DELTAS_PER_BLOCK": "2",
        "TURNLEDGER_MAX_BLOCKS_PER_TURN": "3",
        "TURNLEDGER_MAX_RECORD_BYTES": "4",
        "TURNLEDGER_MAX_TURN_BYTES": "5",
        "TURNLEDGER_MAX_HELD_DELTAS": "6",
    }
    assert load_limits(env) == Limits(1, 2, 3, 4, 5, 6)


def test_a_blank_or_unset_variable_before_a_set_one_keeps_its_default() -> None:
    assert load_limits({"TURNLEDGER_MAX_BLOCK_BYTES": "   ", "TURNLEDGER_MAX_HELD_DELTAS": "9"}) == Limits(
        max_held_deltas=9
    )
    assert load_limits({"TURNLEDGER_MAX_DELTAS_PER_BLOCK": "9"}) == Limits(max_deltas_per_block=9)


def test_one_is_the_smallest_limit_a_variable_may_set() -> None:
    assert load_limits({"TURNLEDGER_MAX_RECORD_BYTES": "1"}) == Limits(max_record_bytes=1)
    with pytest.raises(LimitsConfigError) as caught:
        load_limits({"TURNLEDGER_MAX_RECORD_BYTES": "-5"})
    assert str(caught.value) == "TURNLEDGER_MAX_RECORD_BYTES='-5' must be at least 1"


def test_export_limits_writes_every_limit_into_the_process_environment_when_given_none() -> None:
    export_limits(Limits(1, 2, 3, 4, 5, 6))
    assert {var: os.environ[var] for var in ALL_VARS} == {
        "TURNLEDGER_MAX_BLOCK_BYTES": "1",
        "TURNLEDGER_MAX_DELTAS_PER_BLOCK": "2",
        "TURNLEDGER_MAX_BLOCKS_PER_TURN": "3",
        "TURNLEDGER_MAX_RECORD_BYTES": "4",
        "TURNLEDGER_MAX_TURN_BYTES": "5",
        "TURNLEDGER_MAX_HELD_DELTAS": "6",
    }


def test_describe_names_every_limit_in_one_line_and_says_when_they_are_the_defaults() -> None:
    assert describe(DEFAULT_LIMITS) == (
        "max_block_bytes=262144 max_deltas_per_block=65536 max_blocks_per_turn=256 "
        "max_record_bytes=1048576 max_turn_bytes=1048576 max_held_deltas=4096 (defaults)"
    )
    assert describe(Limits(1, 2, 3, 4, 5, 6)) == (
        "max_block_bytes=1 max_deltas_per_block=2 max_blocks_per_turn=3 "
        "max_record_bytes=4 max_turn_bytes=5 max_held_deltas=6"
    )


def test_limits_of_takes_each_option_given_and_the_defaults_for_the_rest() -> None:
    assert limits_of() == DEFAULT_LIMITS
    assert limits_of(1, 2, 3, 4, 5, 6) == Limits(1, 2, 3, 4, 5, 6)
    assert limits_of(max_deltas_per_block=2, max_record_bytes=4) == Limits(
        max_deltas_per_block=2, max_record_bytes=4
    )
    assert limits_of(max_blocks_per_turn=3) == Limits(max_blocks_per_turn=3)


@pytest.mark.parametrize(
    ("option", "flag", "var", "help_text"),
    [
        (
            MaxBlockBytes,
            "--max-block-bytes",
            "TURNLEDGER_MAX_BLOCK_BYTES",
            "UTF-8 bytes of one block's text, arguments and signature (BLOCK_TOO_LARGE). Default 262,144.",
        ),
        (
            MaxDeltasPerBlock,
            "--max-deltas-per-block",
            "TURNLEDGER_MAX_DELTAS_PER_BLOCK",
            "Content deltas one streamed block may receive (TOO_MANY_DELTAS). Default 65,536.",
        ),
        (
            MaxBlocksPerTurn,
            "--max-blocks-per-turn",
            "TURNLEDGER_MAX_BLOCKS_PER_TURN",
            "Blocks of one turn or one streamed response (TOO_MANY_BLOCKS). Default 256.",
        ),
        (
            MaxRecordBytes,
            "--max-record-bytes",
            "TURNLEDGER_MAX_RECORD_BYTES",
            "Bytes of one encoded ingress record, refused before decoding (RECORD_TOO_LARGE)."
            " Default 1,048,576.",
        ),
        (
            MaxTurnBytes,
            "--max-turn-bytes",
            "TURNLEDGER_MAX_TURN_BYTES",
            "Bytes of the CommittedTurn record a turn is written as, checked before it commits"
            " (TURN_TOO_LARGE). Default 1,048,576.",
        ),
        (
            MaxHeldDeltas,
            "--max-held-deltas",
            "TURNLEDGER_MAX_HELD_DELTAS",
            "Deltas the assembler holds ahead of a sequence gap (TOO_MANY_HELD_DELTAS). Default 4,096.",
        ),
    ],
    ids=["block-bytes", "deltas", "blocks", "record-bytes", "turn-bytes", "held-deltas"],
)
def test_each_limits_option_has_its_flag_variable_bound_panel_and_help(
    option: Any, flag: str, var: str, help_text: str
) -> None:
    info = option.__metadata__[0]
    assert (info.default, *info.param_decls) == (flag,)  # under Annotated, typer reads `default` as a flag
    assert info.envvar == var
    assert info.min == 1
    assert info.show_default is False
    assert info.rich_help_panel == "Size limits (a replay must be given the processor's)"
    assert info.help == help_text
