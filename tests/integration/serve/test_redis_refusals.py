"""`serve` on a real Redis whose ACL user is changed under it mid-run: its password rotated, then its
permissions taken. Each request is answered 503 with what to check, the operator's log says it once,
and once the user is fixed the same process serves again, with no restart."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis.asyncio as aioredis

from tests.integration.serve.conftest import serving
from turnledger.processors.topics import ensure_topics
from turnledger.redisconn.refusals import CHECK_LOGIN, CHECK_PERMISSIONS
from turnledger.serve.app import ServeConfig
from turnledger.topology import Topics

pytestmark = pytest.mark.integration


@pytest.fixture
async def acl_user(redis_client: aioredis.Redis) -> AsyncIterator[tuple[str, str]]:
    """A user of its own with every permission, made through the test's own (default user's) client."""
    name, password = f"serve-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await redis_client.execute_command("ACL", "SETUSER", name, "on", f">{password}", "~*", "&*", "+@all")
    try:
        yield name, password
    finally:
        await redis_client.execute_command("ACL", "DELUSER", name)


def _as(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{parts.hostname}:{parts.port}"))


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "turnledger.serve.redis_failures"]


async def test_a_user_changed_under_serve_is_answered_503_with_what_to_check_then_served_again(
    acl_user: tuple[str, str],
    redis_url: str,
    redis_client: aioredis.Redis,
    kafka_bootstrap: str,
    topic_name: Callable[[str], str],
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="turnledger.serve.redis_failures")
    name, password = acl_user
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=1)
    redis = aioredis.from_url(_as(redis_url, name, password))
    shown = _as(redis_url, name, "***").rsplit("/", 1)[0] + "/0"
    refused = f"Redis at {shown!r} refused the connection (plaintext, user {name!r} with a password)"

    async def changed(*rules: str) -> None:
        await redis_client.execute_command("ACL", "SETUSER", name, *rules)
        await redis_client.execute_command("CLIENT", "KILL", "USER", name)

    try:
        async with (
            serving(redis, kafka_bootstrap, topics, ServeConfig(key_prefix=redis_prefix)) as url,
            httpx.AsyncClient(base_url=url) as http,
        ):
            assert (await http.get("/api/conversations")).status_code == 200
            await changed("resetpass", f">{uuid.uuid4().hex}")
            answers = [await http.get("/api/conversations") for _ in range(2)]
            login = (
                f"{refused}: AuthenticationError: invalid username-password pair or user is disabled. "
                f"{CHECK_LOGIN}"
            )
            assert [(a.status_code, a.json()) for a in answers] == [(503, {"error": login})] * 2
            assert _logged(caplog) == [f"serve: {login}"]

            await changed("resetpass", f">{password}", "-@all")
            answer = await http.get("/api/conversations")
            assert answer.status_code == 503
            assert answer.json()["error"].startswith(f"{refused}: NoPermissionError: ")
            assert answer.json()["error"].endswith(f". {CHECK_PERMISSIONS}")
            assert _logged(caplog) == [f"serve: {login}", f"serve: {answer.json()['error']}"]

            await changed("+@all")
            assert (await http.get("/api/conversations")).status_code == 200
            assert password not in caplog.text
    finally:
        await redis.aclose()
