"""The consumer of a consumer group's member whose session timeout is its command's `--session-timeout-ms`
(`turnledger process`, `project`, `worker`, `tool-executor`), and the broker's refusal of that timeout.

A broker takes a member's session timeout only within its group.min.session.timeout.ms ..
group.max.session.timeout.ms, an operator's setting (`cli_checks.SessionTimeoutMs`). Outside it, the
JoinGroup is refused and aiokafka raises `InvalidSessionTimeoutError` from the next `getmany`: not
retriable, so no outage logic waits for it, and it would end the command in a traceback. The member's
consumer raises it as a `SessionTimeoutRefusedError` instead, which names the flag, the value and the
broker settings (the commands' entry point says it in one line, exit 2). Only the consumer knows the
value and the group, and only there can the coordinator's actual range be asked before the refusal is
raised; that read is bounded and never fails the refusal (`broker_session_range`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import InvalidSessionTimeoutError

from turnledger.errors import KafkaSettingsError, described_cause
from turnledger.kafka.broker_config import coordinator_settings
from turnledger.kafka.clients import read_committed_consumer

log = logging.getLogger(__name__)

MIN_SETTING, MAX_SETTING = "group.min.session.timeout.ms", "group.max.session.timeout.ms"
DEFAULT_RANGE_MS = (6_000, 1_800_000)
"""Kafka's defaults of the two settings."""
RANGE_WITHIN_S = 5.0
"""How long the refusal waits for the coordinator's range before it is said without it."""


class SessionTimeoutRefusedError(KafkaSettingsError):
    """The broker refused a group member's `--session-timeout-ms`: outside its group.min.session.timeout.ms
    .. group.max.session.timeout.ms. `broker_range`: those two as the group's coordinator reports them;
    None when they could not be read (the message gives Kafka's defaults then)."""

    def __init__(
        self, bootstrap: str, group_id: str, session_timeout_ms: int, broker_range: tuple[int, int] | None
    ) -> None:
        self.bootstrap, self.group_id = bootstrap, group_id
        self.session_timeout_ms, self.broker_range = session_timeout_ms, broker_range
        if broker_range is None:
            takes = (
                f"the broker takes {MIN_SETTING} to {MAX_SETTING} "
                f"({DEFAULT_RANGE_MS[0]} to {DEFAULT_RANGE_MS[1]} ms unless set otherwise)"
            )
        else:
            low, high = broker_range
            takes = f"the group's coordinator takes {low} to {high} ms ({MIN_SETTING} to {MAX_SETTING})"
        super().__init__(
            f"Kafka at {bootstrap!r} refused --session-timeout-ms {session_timeout_ms} for consumer group "
            f"{group_id!r} ({InvalidSessionTimeoutError.__name__}): {takes}. Pass a --session-timeout-ms in "
            "that range, or change those broker settings."
        )


async def broker_session_range(bootstrap: str, group_id: str) -> tuple[int, int] | None:
    """(group.min.session.timeout.ms, group.max.session.timeout.ms) as the coordinator of `group_id`
    reports them; None when they cannot be read within `RANGE_WITHIN_S`, whatever the reason (Kafka
    down or refusing us, DescribeConfigs refused, a value missing or not a number): the refusal they
    would explain is said without them."""
    try:
        settings = await asyncio.wait_for(
            coordinator_settings(bootstrap, group_id, (MIN_SETTING, MAX_SETTING)), RANGE_WITHIN_S
        )
        return _millis(settings, MIN_SETTING), _millis(settings, MAX_SETTING)
    except Exception as exc:  # any failure only leaves the range out of the message
        log.info("could not read %s and %s of the broker: %s", MIN_SETTING, MAX_SETTING, described_cause(exc))
        return None


def _millis(settings: dict[str, str | None], name: str) -> int:
    value = settings.get(name)
    if value is None:
        raise LookupError(f"the coordinator did not report {name}")
    return int(value)


class GroupMemberConsumer(AIOKafkaConsumer):  # type: ignore[misc]
    """aiokafka's consumer, whose `getmany` raises a refused session timeout as a
    `SessionTimeoutRefusedError`."""

    def __init__(
        self, *, bootstrap_servers: str, group_id: str, session_timeout_ms: int, **options: Any
    ) -> None:
        super().__init__(
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            **options,
        )
        self.member = (bootstrap_servers, group_id, session_timeout_ms)

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        try:
            fetched: dict[TopicPartition, list[Any]] = await super().getmany(
                *partitions, timeout_ms=timeout_ms, max_records=max_records
            )
        except InvalidSessionTimeoutError as exc:
            raise await session_timeout_refusal(*self.member) from exc
        return fetched


async def session_timeout_refusal(
    bootstrap: str, group_id: str, session_timeout_ms: int
) -> SessionTimeoutRefusedError:
    """The refusal of `session_timeout_ms`, with the coordinator's range when it can be read."""
    return SessionTimeoutRefusedError(
        bootstrap, group_id, session_timeout_ms, await broker_session_range(bootstrap, group_id)
    )


def group_member_consumer(
    bootstrap: str, *, group_id: str, session_timeout_ms: int, **options: Any
) -> AIOKafkaConsumer:
    """`read_committed_consumer` for a member of `group_id` whose `session_timeout_ms` is its command's
    `--session-timeout-ms`."""
    return read_committed_consumer(
        bootstrap,
        group_id=group_id,
        session_timeout_ms=session_timeout_ms,
        consumer=GroupMemberConsumer,
        **options,
    )
