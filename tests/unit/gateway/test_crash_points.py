"""The worker's test crash hook (`gateway/crash_points.py`): off unless named, exits at its point after
the passes it is told to let by, and a count that is not one is refused."""

from __future__ import annotations

import pytest

from turnledger.gateway import crash_points
from turnledger.gateway.crash_points import CRASH_EXIT, CrashPointError, crash_hook_from_env


class Exited(Exception):
    pass


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    codes: list[int] = []

    def exit_(code: int) -> None:
        codes.append(code)
        raise Exited

    monkeypatch.setattr(crash_points.os, "_exit", exit_)
    return codes


def test_the_variables_are_named() -> None:
    assert (crash_points.CRASH_AT_ENV, crash_points.CRASH_AFTER_ENV, CRASH_EXIT) == (
        "TURNLEDGER_TEST_CRASH_AT",
        "TURNLEDGER_TEST_CRASH_AFTER",
        86,
    )


@pytest.mark.parametrize("env", [{}, {"TURNLEDGER_TEST_CRASH_AT": ""}])
def test_without_a_point_there_is_no_hook(env: dict[str, str]) -> None:
    assert crash_hook_from_env(env) is None


def test_the_process_environment_is_read_when_none_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLEDGER_TEST_CRASH_AT", "journal-handle")
    assert crash_hook_from_env() is not None
    monkeypatch.delenv("TURNLEDGER_TEST_CRASH_AT")
    assert crash_hook_from_env() is None


def test_the_hook_exits_at_its_point_only(exits: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    hook = crash_hook_from_env({"TURNLEDGER_TEST_CRASH_AT": "journal-handle"})
    assert hook is not None
    hook("elsewhere")
    assert exits == []
    with pytest.raises(Exited):
        hook("journal-handle")
    assert exits == [CRASH_EXIT]
    assert capsys.readouterr().err == (
        "turnledger worker: test crash at journal-handle (TURNLEDGER_TEST_CRASH_AT)\n"
    )


def test_the_point_passes_the_times_it_is_told_first(exits: list[int]) -> None:
    hook = crash_hook_from_env({"TURNLEDGER_TEST_CRASH_AT": "p", "TURNLEDGER_TEST_CRASH_AFTER": "2"})
    assert hook is not None
    hook("p")
    hook("q")
    hook("p")
    assert exits == []
    with pytest.raises(Exited):
        hook("p")
    assert exits == [CRASH_EXIT]


@pytest.mark.parametrize(("raw", "why"), [("x", "is not an integer"), ("-1", "must be at least 0")])
def test_a_count_that_is_not_a_number_of_passes_is_refused(raw: str, why: str) -> None:
    env = {"TURNLEDGER_TEST_CRASH_AT": "p", "TURNLEDGER_TEST_CRASH_AFTER": raw}
    with pytest.raises(CrashPointError) as caught:
        crash_hook_from_env(env)
    assert str(caught.value) == f"TURNLEDGER_TEST_CRASH_AFTER={raw!r} {why}"
