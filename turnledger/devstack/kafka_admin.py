"""Small async helpers over aiokafka's admin client that raise on per-topic errors.

aiokafka returns CreateTopics errors inside the response instead of raising; callers here want an exception.
"""

from __future__ import annotations

from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

TOPIC_ALREADY_EXISTS = 36


async def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    configs: dict[str, str] | None = None,
    exist_ok: bool = False,
    **client_options: Any,
) -> None:
    """`client_options`: how to reach a secured listener (`KafkaSecurity.client_options()`)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000, **client_options)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {})], timeout_ms=15000
        )
    finally:
        await admin.close()
    for entry in response.topic_errors:
        code = entry[1]
        if code == 0 or (exist_ok and code == TOPIC_ALREADY_EXISTS):
            continue
        message = entry[2] if len(entry) > 2 else ""
        raise for_code(code)(f"create topic {entry[0]!r}: {message}")
