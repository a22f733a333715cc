"""`kafka/group_timing.py`: a group member's heartbeat below its session timeout, the workers' derived
from the session timeout alone."""

from __future__ import annotations

import pytest

from turnledger.errors import KafkaSettingsError
from turnledger.kafka.group_timing import worker_heartbeat_ms


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
