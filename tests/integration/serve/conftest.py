"""`turnledger serve` in this test's event loop: uvicorn on a free loopback port, real Redis and Kafka."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis
import uvicorn

from turnledger.gateway.client import GatewayClient
from turnledger.processors.topics import ensure_topics
from turnledger.serve.app import ServeConfig, create_app
from turnledger.serve.cli import bound_port
from turnledger.topology import Topics


@dataclass
class Served:
    url: str
    topics: Topics
    key_prefix: str
    redis: aioredis.Redis
    token: str | None


@asynccontextmanager
async def serving(
    redis: aioredis.Redis, bootstrap: str, topics: Topics, config: ServeConfig
) -> AsyncIterator[str]:
    async with GatewayClient(bootstrap, topic=topics.ingress) as gateway:
        server = uvicorn.Server(
            uvicorn.Config(create_app(redis, gateway, config), host="127.0.0.1", port=0, log_level="warning")
        )
        task = asyncio.create_task(server.serve())
        async with asyncio.timeout(20):
            while not server.started:
                await asyncio.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{bound_port(server)}"
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 20)


@pytest.fixture
def serve_factory(
    kafka_bootstrap: str,
    redis_url: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> Callable[..., object]:
    @asynccontextmanager
    async def make(token: str | None = None, block_ms: int = 500) -> AsyncIterator[Served]:
        topics = Topics(prefix=topic_name("") + ".")
        await ensure_topics(kafka_bootstrap, topics, partitions=2)
        # its own client: blocking XREADs must not share the test's connection
        redis = aioredis.from_url(redis_url)
        config = ServeConfig(key_prefix=redis_prefix, token=token, block_ms=block_ms)
        try:
            async with serving(redis, kafka_bootstrap, topics, config) as url:
                yield Served(url, topics, redis_prefix, redis_client, token)
        finally:
            await redis.aclose()

    return make
