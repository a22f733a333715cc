"""TURNLEDGER_STATE_CACHE_SIZE: the decoded states each partition's engine keeps (issue 20's memory/CPU
trade-off, measured at `dispatch.engine.STATE_CACHE_SIZE`)."""

from __future__ import annotations

import pytest

from turnledger.dispatch.engine import STATE_CACHE_SIZE
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
