"""The one rule a consumer group's timing must keep, for the processors' and the projectors' groups."""

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
