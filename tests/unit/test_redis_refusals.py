"""Which Redis client errors end a service (`RedisAccessError`) and which it waits out
(`RedisUnavailableError`): `redisconn.refusals.RULES`, and how `ride_out` and the projector act on it.

The same refusals on a real redis-server: tests/integration/test_redis_tls.py.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    BusyLoadingError,
    NoPermissionError,
    NoScriptError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from turnledger.errors import RedisAccessError, RedisUnavailableError
from turnledger.projections.projector import redis_outage
from turnledger.redisconn import refusals
from turnledger.redisconn.refusals import (
    CHECK_CERTIFICATE,
    CHECK_LOGIN,
    CHECK_PERMISSIONS,
    CHECK_TLS,
    classify,
)
from turnledger.retry import Backoff, ride_out

URL = "rediss://gateway:s3cret-pw@cache.example.net:6380/0"
SHOWN = "rediss://gateway:***@cache.example.net:6380/0"
TRIED = "TLS, CA /etc/redis/ca.pem, user 'gateway' with a password"


@pytest.fixture
def client() -> Iterator[aioredis.Redis]:
    """A client that never connects: classifying reads only its settings."""
    yield aioredis.from_url(URL, ssl_ca_certs="/etc/redis/ca.pem")


def _wrapped(cause: BaseException) -> RedisConnectionError:
    """As redis-py raises a failed connect: its ConnectionError from the socket's error."""
    try:
        raise RedisConnectionError(f"Error 1 connecting to cache.example.net:6380. {cause}.") from cause
    except RedisConnectionError as exc:
        return exc


CERT = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
VERSION = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")

ACCESS = [
    (AuthenticationError("invalid username-password pair or user is disabled."), CHECK_LOGIN),
    (AuthenticationError("Authentication required."), CHECK_LOGIN),  # NOAUTH, as redis-py maps it
    (AuthenticationWrongNumberOfArgsError("wrong number of arguments for 'auth' command"), CHECK_LOGIN),
    (ResponseError("WRONGPASS invalid username-password pair or user is disabled."), CHECK_LOGIN),
    (ResponseError("NOAUTH Authentication required."), CHECK_LOGIN),
    (NoPermissionError("this user has no permissions to run the 'evalsha' command"), CHECK_PERMISSIONS),
    (_wrapped(CERT), CHECK_CERTIFICATE),
    (CERT, CHECK_CERTIFICATE),
    (_wrapped(VERSION), CHECK_TLS),
]
OUTAGES = [
    RedisConnectionError("Error 111 connecting to cache.example.net:6380. Connection refused."),
    _wrapped(ConnectionRefusedError(111, "Connection refused")),
    _wrapped(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")),
    RedisTimeoutError("Timeout connecting to server"),
    BusyLoadingError("Redis is loading the dataset in memory"),
    ConnectionResetError(104, "Connection reset by peer"),
]
NEITHER = [
    ResponseError("ERR unknown command 'FOO'"),
    NoScriptError("No matching script."),
    ValueError("not a Redis connection's failure"),
]


def test_the_table_has_one_rule_per_kind_and_the_outage_rule_last() -> None:
    assert [rule.check for rule in refusals.RULES] == [
        CHECK_LOGIN,
        CHECK_LOGIN,
        CHECK_PERMISSIONS,
        CHECK_CERTIFICATE,
        CHECK_TLS,
        None,
    ]


@pytest.mark.parametrize(("error", "check"), ACCESS, ids=[type(error).__name__ for error, _ in ACCESS])
def test_a_refusal_is_an_access_error_with_what_to_check(
    client: aioredis.Redis, error: BaseException, check: str
) -> None:
    failure = classify(error, client)
    assert isinstance(failure, RedisAccessError)
    assert not failure.retriable
    assert str(failure).startswith(f"Redis at {SHOWN!r} refused the connection ({TRIED}): ")
    assert str(failure).endswith(f". {check}")
    assert "s3cret-pw" not in str(failure)


@pytest.mark.parametrize("error", OUTAGES, ids=lambda v: type(v).__name__)
def test_an_outage_stays_an_unavailable_error(client: aioredis.Redis, error: BaseException) -> None:
    failure = classify(error, client)
    assert isinstance(failure, RedisUnavailableError) and failure.retriable
    assert failure.url == SHOWN and failure.cause is error


@pytest.mark.parametrize("error", NEITHER, ids=lambda v: type(v).__name__)
def test_other_errors_are_not_the_table_s_to_name(client: aioredis.Redis, error: BaseException) -> None:
    assert classify(error, client) is None


def test_a_refused_login_s_exact_message(client: aioredis.Redis) -> None:
    failure = classify(AuthenticationError("invalid username-password pair or user is disabled."), client)
    assert str(failure) == (
        f"Redis at {SHOWN!r} refused the connection ({TRIED}): AuthenticationError: invalid "
        "username-password pair or user is disabled. Check the user and password: the user in REDIS_URL "
        "(rediss://USER@host:port/0) and the password in REDIS_PASSWORD_FILE (or in REDIS_URL); a Redis "
        "with ACL users (ElastiCache RBAC, Redis Cloud) needs both, one with only a default-user password "
        "needs the password alone."
    )


def test_a_certificate_error_is_reported_by_the_ssl_error_inside(client: aioredis.Redis) -> None:
    failure = classify(_wrapped(CERT), client)
    assert isinstance(failure, RedisAccessError) and failure.cause is CERT
    assert str(failure) == (
        f"Redis at {SHOWN!r} refused the connection ({TRIED}): SSLCertVerificationError: [SSL: "
        f"CERTIFICATE_VERIFY_FAILED] certificate verify failed. {CHECK_CERTIFICATE}"
    )


def test_an_error_already_typed_is_kept(client: aioredis.Redis) -> None:
    down = RedisUnavailableError(URL)
    refused = RedisAccessError(URL, TRIED, AuthenticationError("x"), CHECK_LOGIN)
    assert classify(down, client) is down and classify(refused, client) is refused


async def test_ride_out_raises_a_refusal_at_once_and_waits_out_an_outage(client: aioredis.Redis) -> None:
    """Before, a wrong password (an AuthenticationError is a ConnectionError) was retried for ever."""
    raised = [RedisConnectionError("Connection refused"), AuthenticationError("invalid password")]
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        raise raised[attempts - 1]

    with pytest.raises(RedisAccessError) as caught:
        await ride_out(
            attempt,
            waiting_for="Redis",
            classify=redis_outage(client),
            backoff=Backoff(initial_s=0.01, max_s=0.01),
        )
    assert attempts == 2
    assert isinstance(caught.value.__cause__, AuthenticationError)


async def test_ride_out_re_raises_a_typed_refusal_as_it_is(client: aioredis.Redis) -> None:
    refused = RedisAccessError(URL, TRIED, AuthenticationError("x"), CHECK_LOGIN)

    async def attempt() -> None:
        raise refused

    with pytest.raises(RedisAccessError) as caught:
        await ride_out(attempt, waiting_for="Redis", classify=redis_outage(client))
    assert caught.value is refused and caught.value.__cause__ is None
