"""How the projector follows the topics (alone, or in a consumer group) and rides out outages."""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.kafka.group_timing import check_heartbeat
from turnledger.retry import FOREVER, Backoff


@dataclass(frozen=True, slots=True)
class FollowSettings:
    group_id: str | None = None
    """None: read every partition of the projected topics (one projector). Else join this consumer
    group, whose members share the partitions and take over those of a member that dies."""
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    outage: Backoff = FOREVER
    """How outages of Kafka and of Redis are ridden out; `max_outage_s` bounds one (None: any length)."""
    fetch_ms: int = 500
    verify_every_s: float = 5.0
    """While no record arrives, how often the applied offsets in Redis are compared with those this
    projector applied: offsets that went back (a failover lost the last writes, Redis came back
    empty) are found without waiting for the next record (`follow.py`, "Failover")."""

    def __post_init__(self) -> None:
        check_heartbeat(self.heartbeat_interval_ms, self.session_timeout_ms)
