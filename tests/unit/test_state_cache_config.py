"""TURNLEDGER_STATE_CACHE_SIZE: the decoded states each partition's engine keeps (issue 20's memory/CPU
trade-off, measured at `dispatch.engine.STATE_CACHE_SIZE`)."""

from __future__ import annotations

import pytest

from turnledger.dispatch import cache_sizes
from turnledger.dispatch.engine import STATE_CACHE_SIZE
from turnledger.errors import ProcessorError
from turnledger.processors.dispatch_partition import (
    STATE_CACHE_ENV,
    DispatchPartitionFold,
    StateCacheConfigError,
    load_state_cache_size,
)
from turnledger.topology import Topics


def test_unset_or_blank_is_the_engine_default() -> None:
    assert load_state_cache_size({}) == STATE_CACHE_SIZE
    assert load_state_cache_size({STATE_CACHE_ENV: "  "}) == STATE_CACHE_SIZE


def test_a_size_is_read_with_underscores_and_zero_allowed() -> None:
    assert load_state_cache_size({STATE_CACHE_ENV: "2_000"}) == 2_000
    assert load_state_cache_size({STATE_CACHE_ENV: " 0 "}) == 0


@pytest.mark.parametrize(("raw", "why"), [("many", "is not an integer"), ("-1", "must be at least 0")])
def test_anything_else_is_refused_with_the_variable_named(raw: str, why: str) -> None:
    with pytest.raises(StateCacheConfigError, match=f"TURNLEDGER_STATE_CACHE_SIZE='{raw}' {why}"):
        load_state_cache_size({STATE_CACHE_ENV: raw})


def test_the_dispatch_fold_builds_its_engine_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATE_CACHE_ENV, "1234")
    fold = DispatchPartitionFold(Topics(), 0)
    assert fold._engine._cache_size == 1234
    assert fold._engine._renders._max_entries == 1234
    monkeypatch.delenv(STATE_CACHE_ENV)
    assert DispatchPartitionFold(Topics(), 1)._engine._cache_size == STATE_CACHE_SIZE


def test_process_hands_its_state_cache_size_to_its_fold_and_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--state-cache-size` is written into the environment, where the default fold (and every child of
    `--processes`) reads it; Kafka is unreachable here, so the command exits 2 after that."""
    import os

    import typer
    from typer.testing import CliRunner

    from turnledger.processors.cli import process

    app = typer.Typer()
    app.command()(process)
    monkeypatch.setenv(STATE_CACHE_ENV, "7")  # the flag wins over the variable; undone at teardown
    fold = "tests.unit.test_processors_runtime:_counter_factory"
    args = ["--bootstrap", "127.0.0.1:1", "--fold", fold, "--max-outage", "0.2", "--state-cache-size", "321"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert os.environ[STATE_CACHE_ENV] == "321"
    assert DispatchPartitionFold(Topics(), 0)._engine._cache_size == 321


VAR = "TURNLEDGER_STATE_CACHE_SIZE"  # spelled out: keyed by STATE_CACHE_ENV, a renamed variable goes unseen


def test_the_variable_is_named_turnledger_state_cache_size() -> None:
    assert STATE_CACHE_ENV == VAR


def test_unset_empty_or_blank_is_the_default_of_cache_sizes() -> None:
    assert cache_sizes.STATE_CACHE_SIZE == STATE_CACHE_SIZE == 10_000
    assert load_state_cache_size({}) == 10_000
    assert load_state_cache_size({VAR: ""}) == 10_000
    assert load_state_cache_size({VAR: " \t\n "}) == 10_000
    assert load_state_cache_size({"TURNLEDGER_OTHER": "5"}) == 10_000


def test_the_value_is_read_with_surrounding_whitespace_stripped() -> None:
    assert load_state_cache_size({VAR: "\t2_500\n"}) == 2_500
    assert load_state_cache_size({VAR: "0"}) == 0


def test_minus_one_is_refused_with_the_exact_message() -> None:
    with pytest.raises(StateCacheConfigError) as caught:
        load_state_cache_size({VAR: " -1 "})
    assert str(caught.value) == "TURNLEDGER_STATE_CACHE_SIZE='-1' must be at least 0"


def test_a_word_is_refused_with_the_exact_message_stripped() -> None:
    with pytest.raises(StateCacheConfigError) as caught:
        load_state_cache_size({VAR: " many "})
    assert str(caught.value) == "TURNLEDGER_STATE_CACHE_SIZE='many' is not an integer"
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ is True


def test_the_error_is_a_processor_error_and_a_value_error() -> None:
    assert issubclass(StateCacheConfigError, ProcessorError)
    assert issubclass(StateCacheConfigError, ValueError)
    with pytest.raises(StateCacheConfigError) as caught:
        load_state_cache_size({VAR: "-1"})
    assert type(caught.value) is StateCacheConfigError


def test_without_a_mapping_the_process_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VAR, raising=False)
    assert load_state_cache_size() == 10_000
    assert load_state_cache_size(None) == 10_000
    monkeypatch.setenv(VAR, " 1_234 ")
    assert load_state_cache_size() == 1_234
    assert load_state_cache_size({}) == 10_000  # a mapping given is read instead, even an empty one
    monkeypatch.setenv(VAR, "-1")
    with pytest.raises(StateCacheConfigError) as caught:
        load_state_cache_size()
    assert str(caught.value) == "TURNLEDGER_STATE_CACHE_SIZE='-1' must be at least 0"
