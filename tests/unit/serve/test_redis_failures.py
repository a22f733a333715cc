"""What `serve` answers for a Redis command that failed mid-run (`serve/redis_failures.py`): a refusal
(a rotated password, a user without permissions) is a 503 saying what to check, logged once a minute;
an outage a 503 as before; any other Redis error is not judged here. On a real Redis:
tests/integration/serve/test_redis_refusals.py."""

from __future__ import annotations

import logging
from typing import cast

import pytest
import redis.asyncio as aioredis
from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    RedisClusterException,
    RedisClusterUnreachableError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from turnledger.gateway.client import GatewayClient
from turnledger.redisconn.client import redis_client
from turnledger.redisconn.refusals import CHECK_LOGIN, CHECK_PERMISSIONS
from turnledger.serve.app import create_app
from turnledger.serve.redis_failures import LOG_EVERY_S, RedisFailures

URL = "redis://serve:s3cret-pw@cache.example.net:6379/0"
REFUSED = (
    "Redis at 'redis://serve:***@cache.example.net:6379/0' refused the connection (plaintext, user 'serve' "
    "with a password)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def failures(clock: Clock) -> RedisFailures:
    return RedisFailures(aioredis.from_url(URL), clock)


def _records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "turnledger.serve.redis_failures"
    ]


def test_a_refused_login_is_a_503_saying_what_to_check_and_logged_once_a_minute(
    failures: RedisFailures, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    error = AuthenticationError("invalid username-password pair or user is disabled.")
    expected = (
        f"{REFUSED}: AuthenticationError: invalid username-password pair or user is disabled. {CHECK_LOGIN}"
    )
    assert failures.answer(error) == (503, expected)
    clock.now += LOG_EVERY_S - 0.001
    assert failures.answer(error) == (503, expected)
    assert _records(caplog) == [(logging.ERROR, f"serve: {expected}")]
    clock.now += 0.001
    assert failures.answer(error) == (503, expected)
    assert _records(caplog) == [(logging.ERROR, f"serve: {expected}")] * 2
    assert "s3cret-pw" not in caplog.text


def test_each_refusal_is_logged_on_its_own(failures: RedisFailures, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    login = AuthenticationError("invalid username-password pair or user is disabled.")
    permissions = NoPermissionError("this user has no permissions to run the 'zrevrange' command")
    status, error = failures.answer(permissions)
    assert (status, error) == (
        503,
        f"{REFUSED}: NoPermissionError: this user has no permissions to run the 'zrevrange' command. "
        f"{CHECK_PERMISSIONS}",
    )
    failures.answer(login)
    failures.answer(permissions)
    assert [message for _, message in _records(caplog)] == [
        f"serve: {error}",
        f"serve: {failures.answer(login)[1]}",
    ]


def test_an_outage_is_a_503_with_redis_py_s_words_and_not_logged(
    failures: RedisFailures, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    error = RedisConnectionError("Error 111 connecting to cache.example.net:6379. Connection refused.")
    assert failures.answer(error) == (
        503,
        "Error 111 connecting to cache.example.net:6379. Connection refused.",
    )
    assert _records(caplog) == []


def test_any_other_redis_error_is_not_judged_here(failures: RedisFailures) -> None:
    error = ResponseError("ERR wrong number of arguments for 'zrevrange' command")
    with pytest.raises(ResponseError) as caught:
        failures.answer(error)
    assert caught.value is error


def test_a_cluster_no_node_of_which_answers_is_an_outage_not_a_500() -> None:
    """A cluster client's own error is no `RedisError`: `serve` answers it (app.py maps
    `RedisClusterException` too) as the outage it is."""
    cluster = redis_client("redis+cluster://10.0.0.7:7000")
    error = RedisClusterUnreachableError(
        "Redis Cluster cannot be connected. Please provide at least one reachable node"
    )
    assert RedisFailures(cluster).answer(error) == (503, str(error))
    with pytest.raises(RedisClusterException):
        RedisFailures(cluster).answer(
            RedisClusterException("EVALSHA - all keys must map to the same key slot")
        )


def test_the_app_hands_a_cluster_s_own_errors_to_the_same_answer() -> None:
    app = create_app(redis_client("redis+cluster://10.0.0.7:7000"), cast(GatewayClient, None))
    assert app.exception_handlers[RedisClusterException] is app.exception_handlers[RedisError]
