"""`parse_env_int` (processors/env_int.py): an integer setting read from an environment variable, `_`
separators allowed, at least a minimum; else the caller's error type naming the variable."""

from __future__ import annotations

import pytest

from turnledger.processors.env_int import parse_env_int


class _SettingError(Exception):
    """Not a ValueError: the error raised must be the one given, not whatever `int()` raised."""


def test_a_plain_integer_is_read() -> None:
    assert parse_env_int("TURNLEDGER_X", "42", 0, _SettingError) == 42


def test_underscores_are_dropped_wherever_they_are() -> None:
    """Every `_` is removed before `int()`: even doubled, leading or trailing ones, which `int()` itself
    refuses."""
    assert parse_env_int("TURNLEDGER_X", "2_000", 0, _SettingError) == 2_000
    assert parse_env_int("TURNLEDGER_X", "1__000", 0, _SettingError) == 1_000
    assert parse_env_int("TURNLEDGER_X", "_7_", 0, _SettingError) == 7


def test_the_minimum_itself_is_accepted() -> None:
    assert parse_env_int("TURNLEDGER_X", "5", 5, _SettingError) == 5
    assert parse_env_int("TURNLEDGER_X", "0", 0, _SettingError) == 0


def test_one_below_the_minimum_is_refused_with_the_variable_the_raw_value_and_the_minimum() -> None:
    with pytest.raises(_SettingError) as caught:
        parse_env_int("TURNLEDGER_X", "4", 5, _SettingError)
    assert type(caught.value) is _SettingError
    assert str(caught.value) == "TURNLEDGER_X='4' must be at least 5"


def test_a_value_below_the_minimum_is_quoted_as_written_underscores_kept() -> None:
    with pytest.raises(_SettingError) as caught:
        parse_env_int("TURNLEDGER_Y", "-1_0", 0, _SettingError)
    assert str(caught.value) == "TURNLEDGER_Y='-1_0' must be at least 0"


def test_a_value_that_is_not_an_integer_is_refused_with_the_variable_and_the_raw_value() -> None:
    with pytest.raises(_SettingError) as caught:
        parse_env_int("TURNLEDGER_X", "1_k", 0, _SettingError)
    assert type(caught.value) is _SettingError
    assert str(caught.value) == "TURNLEDGER_X='1_k' is not an integer"


def test_the_not_an_integer_error_hides_int_s_value_error() -> None:
    """`from None`: no cause, and the ValueError of `int()` suppressed as the context."""
    with pytest.raises(_SettingError) as caught:
        parse_env_int("TURNLEDGER_X", "many", 0, _SettingError)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ is True


def test_the_error_type_given_is_the_one_raised_for_both_refusals() -> None:
    with pytest.raises(KeyError) as not_integer:
        parse_env_int("V", "x", 1, KeyError)
    with pytest.raises(LookupError) as too_small:
        parse_env_int("V", "0", 1, LookupError)
    assert type(not_integer.value) is KeyError
    assert not_integer.value.args == ("V='x' is not an integer",)
    assert type(too_small.value) is LookupError
    assert too_small.value.args == ("V='0' must be at least 1",)
