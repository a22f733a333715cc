"""The one place a service builds a Redis client, and how a client is named in messages.

Every client of every service (projector, readers of `history` / `status`, `serve`, `replay rebuild`,
the demo) comes from `redis_client`, so a `rediss://`, `redis+sentinel://` or `redis+cluster://` URL,
`REDIS_SSL_CA_FILE` and `REDIS_PASSWORD_FILE` work alike everywhere. `connect` also asks once (PING),
so that a command says at its start what is wrong: `RedisAccessError` when waiting cannot help,
`RedisUnavailableError` when it may.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisClusterException, RedisError

from turnledger.errors import (
    RedisAccessError,
    RedisSentinelUnavailableError,
    RedisSettingsError,
    RedisUnavailableError,
    TurnledgerError,
    redact_url,
)
from turnledger.redisconn.cluster import RedisClient, cluster_client, is_cluster_url, seed_address
from turnledger.redisconn.naming import client_url, describe, is_tls
from turnledger.redisconn.probe import certificate_refusal, other_protocol
from turnledger.redisconn.refusals import classify, client_certificate_check
from turnledger.redisconn.sentinel import is_sentinel, sentinel_client
from turnledger.redisconn.sentinel import parse as parse_sentinel_url
from turnledger.redisconn.sentinel_probe import sentinel_refusal
from turnledger.redisconn.settings import client_options, sentinel_password


def redis_client(url: str, **options: Any) -> RedisClient:
    """A client for `url` with this process's settings (`settings.client_options`); `options` are
    redis-py's own (a caller's timeouts). Connects on its first command; a `redis+sentinel://` URL's
    client connects to the primary its sentinels name (`sentinel.py`), a `redis+cluster://` URL's to
    the node of each key's slot (`cluster.py`)."""
    settings = client_options(url) | options
    try:
        if is_cluster_url(url):
            return cluster_client(url, settings)
        if is_sentinel(url):
            return sentinel_client(parse_sentinel_url(url), settings, sentinel_password(url))
        parts = urlsplit(url)
        database = parts.path.lstrip("/")
        if parts.scheme in ("redis", "rediss") and database and not database.isdigit():
            raise RedisSettingsError(
                f"REDIS_URL {redact_url(url)!r}: the database after the host must be a number "
                f"(redis://host:6379/0), not {database!r}"
            )
        return aioredis.from_url(url, **settings)
    except RedisSettingsError:
        raise
    except ValueError as exc:  # redis-py's and urllib's reading of the URL: a port, a query value
        raise RedisSettingsError(f"REDIS_URL {redact_url(url)!r}: {exc}") from exc


async def connect(url: str) -> RedisClient:
    """`redis_client(url)`, after one PING has answered."""
    client = redis_client(url)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        failure = await explain(client, exc)
        if failure is None:
            raise
        raise failure from exc
    return client


@asynccontextmanager
async def classified(client: RedisClient) -> AsyncIterator[RedisClient]:
    """Commands of `client` whose Redis error is raised as what it stands for (`judged`: a
    `RedisAccessError`, a `RedisUnavailableError`), so that a command that was refused after its PING
    (a user's permissions, a cluster's replies, sentinels that stopped taking our login) says so in one
    line, not in a traceback. A cluster client's own errors are no `RedisError` (`RedisClusterException`)
    and are judged alike, as is a sentinel outage that code under it classified already."""
    try:
        yield client
    except (RedisError, RedisClusterException, RedisSentinelUnavailableError) as exc:
        failure = await judged(client, exc)
        if failure is None or failure is exc:
            raise
        raise failure from exc


async def judged(client: RedisClient, exc: BaseException) -> TurnledgerError | None:
    """`refusals.classify`, and sentinels that named no primary asked why (`sentinel_probe`): one that
    refuses us, or all answering without the service, make a refusal of the outage."""
    failure = classify(exc, client)
    if isinstance(failure, RedisSentinelUnavailableError):
        return await sentinel_refusal(client, failure.cause or exc) or failure
    return failure


async def diagnose(url: str) -> RedisUnavailableError | None:
    """Raise `RedisAccessError` when Redis at `url` refuses us (see `explain`); else the outage it met
    (None: Redis answered), for a service that waits out outages to go on to wait. A sentinel outage's
    sentinels were asked why already (`judged`), which that service's next asking may count
    (`sentinel_probe.Rechecks.asked`)."""
    try:
        client = await connect(url)
    except RedisUnavailableError as outage:
        return outage
    await client.aclose()
    return None


async def explain(client: RedisClient, exc: BaseException) -> TurnledgerError | None:
    """What `exc`, raised by one of `client`'s commands, stands for (`refusals.classify`). An outage
    may also be a client speaking TLS to a plaintext port, or plaintext to a TLS port, which look
    like a hang or a reset from inside the connection: the port is asked once in the other protocol
    (`probe.other_protocol`) to tell them apart; or, over TLS, a client certificate refused with an
    alert the reset lost, which one more handshake that only reads finds (`probe.certificate_refusal`).
    Sentinels that named no primary are asked why, each (`judged`)."""
    failure = await judged(client, exc)
    if not isinstance(failure, RedisUnavailableError):
        return failure
    address = seed_address(client)
    if address is None:  # a Unix socket's client, or a Sentinel client's (the sentinels name the node)
        return failure
    host, port = address
    fix = await other_protocol(host, port, tls=is_tls(client))
    if fix is not None:
        return RedisAccessError(client_url(client), describe(client), exc, fix)
    alert = await certificate_refusal(client, host, port)
    if alert is not None:
        return RedisAccessError(client_url(client), describe(client), alert, client_certificate_check(client))
    return failure
