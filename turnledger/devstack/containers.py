"""Docker backend: testcontainers' Kafka (KRaft) and Redis, used only when Docker answers.

This path cannot be exercised on machines without a Docker daemon (ours), so it is deliberately thin and is
only chosen when asked for (TURNLEDGER_DEVSTACK_BACKEND=docker) or when the local prerequisites are missing.
Containers live as long as the Python process that started them (testcontainers' reaper removes them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from turnledger.devstack.errors import DockerUnavailable

KAFKA_IMAGE = os.environ.get("TURNLEDGER_KAFKA_IMAGE", "confluentinc/cp-kafka:8.0.0")
REDIS_IMAGE = os.environ.get("TURNLEDGER_REDIS_IMAGE", "redis:7")


def docker_error() -> str | None:
    """None when the Docker daemon answers a ping, else a one-line reason."""
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def docker_available() -> bool:
    return docker_error() is None


@contextmanager
def container_stack(
    need_kafka: bool = True, need_redis: bool = True
) -> Iterator[tuple[str | None, str | None]]:
    """Yield (bootstrap, redis_url) from containers; each is None when not requested."""
    reason = docker_error()
    if reason is not None:
        raise DockerUnavailable(reason)
    from testcontainers.core.container import DockerContainer
    from testcontainers.kafka import KafkaContainer
    from testcontainers.redis import RedisContainer

    started: list[DockerContainer] = []
    try:
        bootstrap = redis_url = None
        if need_kafka:
            kafka: Any = KafkaContainer(KAFKA_IMAGE).with_kraft()
            kafka.start()
            started.append(kafka)
            bootstrap = kafka.get_bootstrap_server()
        if need_redis:
            redis_c = RedisContainer(REDIS_IMAGE)
            redis_c.start()
            started.append(redis_c)
            host = redis_c.get_container_host_ip()
            redis_url = f"redis://{host}:{redis_c.get_exposed_port(6379)}/0"
        yield bootstrap, redis_url
    finally:
        for container in reversed(started):
            container.stop()
