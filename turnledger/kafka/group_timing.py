"""The one rule a consumer group's timing must keep: its heartbeat below its session timeout, for the
processors' and the projectors' groups (given both) and the workers' (given the session timeout alone)."""

from __future__ import annotations

from turnledger.errors import KafkaSettingsError


def check_heartbeat(heartbeat_interval_ms: int, session_timeout_ms: int) -> None:
    """A member heartbeats more often than its session times out, or the group declares it dead between
    two heartbeats (Kafka's advice is a third of the session timeout at most)."""
    if heartbeat_interval_ms >= session_timeout_ms:
        raise KafkaSettingsError(
            f"--heartbeat-interval-ms {heartbeat_interval_ms} must be below --session-timeout-ms "
            f"{session_timeout_ms} (a third of it at most is usual)"
        )


WORKER_HEARTBEAT_FLOOR_MS = 500


def worker_heartbeat_ms(session_timeout_ms: int) -> int:
    """The heartbeat of the workers' group, which has no flag of its own: a quarter of the session
    timeout, at least half a second; a session timeout not above it is refused."""
    heartbeat_ms = max(WORKER_HEARTBEAT_FLOOR_MS, session_timeout_ms // 4)
    if heartbeat_ms >= session_timeout_ms:
        raise KafkaSettingsError(
            f"--session-timeout-ms {session_timeout_ms} must be above the worker's heartbeat interval, "
            f"{heartbeat_ms} ms (a quarter of the session timeout, at least {WORKER_HEARTBEAT_FLOOR_MS})"
        )
    return heartbeat_ms
