"""`kafka/group_timing.py`: a group member's heartbeat below its session timeout, the workers' derived
from the session timeout alone."""

from __future__ import annotations

import pytest

from turnledger.errors import KafkaSettingsError
from turnledger.kafka.group_timing import check_heartbeat, worker_heartbeat_ms


@pytest.mark.parametrize(
    ("session_ms", "heartbeat_ms"), [(501, 500), (2_000, 500), (2_004, 501), (6_000, 1_500), (10_002, 2_500)]
)
def test_the_workers_heartbeat_is_a_quarter_of_the_session_at_least_half_a_second(
    session_ms: int, heartbeat_ms: int
) -> None:
    assert worker_heartbeat_ms(session_ms) == heartbeat_ms


@pytest.mark.parametrize("session_ms", [1, 499, 500])
def test_a_session_timeout_not_above_the_workers_heartbeat_is_refused(session_ms: int) -> None:
    with pytest.raises(KafkaSettingsError) as refused:
        worker_heartbeat_ms(session_ms)
    assert str(refused.value) == (
        f"--session-timeout-ms {session_ms} must be above the worker's heartbeat interval, 500 ms "
        "(a quarter of the session timeout, at least 500)"
    )


@pytest.mark.parametrize("command", ["process", "project", "tool-executor"])
def test_the_heartbeat_flag_s_help_states_the_rule_the_check_keeps(command: str) -> None:
    """The help said 'below a third of the session timeout', which the check does not refuse (5000 with
    6000 runs): the third is Kafka's advice, the rule is below the session timeout."""
    from typer.testing import CliRunner

    from turnledger.cli import _register, app

    if not app.registered_groups:
        _register()
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
    assert "must be below --session-timeout-ms (a third of it at most is usual)." in " ".join(shown.split())
    check_heartbeat(5_000, 6_000)
    with pytest.raises(KafkaSettingsError):
        check_heartbeat(6_000, 6_000)
