"""Which Redis client errors end a service (`RedisAccessError`) and which it waits out
(`RedisUnavailableError`): `redisconn.refusals.RULES`, and how `ride_out` and the projector act on it.

The same refusals on a real redis-server: tests/integration/test_redis_tls.py.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    BusyLoadingError,
    ClusterCrossSlotError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from turnledger.errors import RedisAccessError, RedisFailoverError, RedisUnavailableError
from turnledger.projections.projector import redis_outage
from turnledger.redisconn import refusals
from turnledger.redisconn.refusals import (
    CHECK_CERTIFICATE,
    CHECK_CLIENT_CERTIFICATE,
    CHECK_CLUSTER,
    CHECK_LOGIN,
    CHECK_NO_CLIENT_CERTIFICATE,
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


def _alert(reason: str) -> ssl.SSLError:
    """A TLS alert as `ssl` raises it: the reason code is an attribute, not only text."""
    error = ssl.SSLError(1, f"[SSL: {reason}] {reason.lower().replace('_', ' ')} (_ssl.c:2580)")
    error.reason = reason
    return error


def _read_failed(cause: BaseException) -> RedisConnectionError:
    """As redis-py raises a failed first read (TLS 1.3: the server's alert comes after the handshake)."""
    try:
        raise RedisConnectionError(f"Error while reading from cache.example.net:6380 : {cause}") from cause
    except RedisConnectionError as exc:
        return exc


REQUIRED = _alert("TLSV13_ALERT_CERTIFICATE_REQUIRED")
UNKNOWN_CA = _alert("TLSV1_ALERT_UNKNOWN_CA")

ACCESS = [
    (AuthenticationError("invalid username-password pair or user is disabled."), CHECK_LOGIN),
    (AuthenticationError("Authentication required."), CHECK_LOGIN),  # NOAUTH, as redis-py maps it
    (AuthenticationWrongNumberOfArgsError("wrong number of arguments for 'auth' command"), CHECK_LOGIN),
    (ResponseError("WRONGPASS invalid username-password pair or user is disabled."), CHECK_LOGIN),
    (ResponseError("NOAUTH Authentication required."), CHECK_LOGIN),
    (NoPermissionError("this user has no permissions to run the 'evalsha' command"), CHECK_PERMISSIONS),
    (ClusterCrossSlotError("Keys in request don't hash to the same slot"), CHECK_CLUSTER),
    (MovedError("3999 127.0.0.1:6381"), CHECK_CLUSTER),
    (ClusterDownError("CLUSTERDOWN Hash slot not served"), CHECK_CLUSTER),
    (_wrapped(CERT), CHECK_CERTIFICATE),
    (CERT, CHECK_CERTIFICATE),
    (_wrapped(VERSION), CHECK_TLS),
    (_read_failed(REQUIRED), CHECK_NO_CLIENT_CERTIFICATE),
    (_read_failed(UNKNOWN_CA), CHECK_NO_CLIENT_CERTIFICATE),
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
        CHECK_CLUSTER,
        CHECK_CERTIFICATE,
        refusals.client_certificate_check,
        CHECK_TLS,
        None,
        None,
        None,
        None,
    ]
    assert [rule.outage for rule in refusals.RULES[-4:]] == [
        refusals.failover,
        refusals.failover,
        refusals.sentinels_unavailable,
        refusals.unavailable,
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


@pytest.mark.parametrize("alert", [REQUIRED, UNKNOWN_CA, _alert("SSLV3_ALERT_CERTIFICATE_EXPIRED")])
def test_an_alert_about_a_certificate_we_gave_names_it(alert: ssl.SSLError) -> None:
    """With a client certificate set, the same alerts say Redis refused that certificate, named in
    what was tried, rather than that it wants one."""
    client = aioredis.from_url(
        URL, ssl_ca_certs="/etc/redis/ca.pem", ssl_certfile="/etc/redis/client.pem", ssl_keyfile="/k.pem"
    )
    failure = classify(_read_failed(alert), client)
    assert isinstance(failure, RedisAccessError)
    assert failure.__class__ is RedisAccessError and not failure.retriable
    assert str(failure) == (
        f"Redis at {SHOWN!r} refused the connection (TLS, CA /etc/redis/ca.pem, client certificate "
        f"/etc/redis/client.pem, user 'gateway' with a password): SSLError: {alert}. "
        f"{CHECK_CLIENT_CERTIFICATE}"
    )


@pytest.mark.parametrize(
    "error",
    [
        ReadOnlyError("You can't write against a read only replica."),
        MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
        ResponseError("NOREPLICAS Not enough good replicas to write."),
    ],
    ids=lambda v: type(v).__name__,
)
def test_a_node_that_takes_no_writes_is_a_failover_waited_out(
    client: aioredis.Redis, error: BaseException
) -> None:
    """A primary demoted to a replica answers writes with READONLY: an outage, not a bug to crash on."""
    failure = classify(error, client)
    assert type(failure) is RedisFailoverError and failure.retriable and failure.cause is error
    assert str(failure) == (
        f"Redis at {SHOWN!r} takes no writes ({type(error).__name__}: {str(error).rstrip('.')}): a failover "
        "is under way; waiting for the primary. REDIS_URL must name the primary wherever it moves (a managed "
        "primary endpoint, a proxy, or its sentinels: redis+sentinel://), not one node."
    )


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


# `RULES` is built when the module loads, before mutmut switches a mutant on: the rules' makers are
# also read here, each on what it matches and what it reports, and the table on the exact rule that
# decides.


def _deciding(error: BaseException) -> int | None:
    """The index of the first rule of `RULES` that matches `error`."""
    return next((i for i, rule in enumerate(refusals.RULES) if rule.match(error) is not None), None)


@pytest.mark.parametrize(
    ("error", "rule"),
    [
        (AuthenticationError("invalid password"), 0),
        (AuthenticationWrongNumberOfArgsError("wrong number of arguments for 'auth'"), 0),
        (ResponseError("WRONGPASS invalid username-password pair"), 1),
        (ResponseError("NOAUTH Authentication required."), 1),
        (NoPermissionError("no permissions"), 2),
        (MovedError("3999 127.0.0.1:6381"), 3),
        (AskError("3999 127.0.0.1:6381"), 3),
        (ClusterCrossSlotError("Keys in request don't hash to the same slot"), 3),
        (TryAgainError("Multiple keys request during rehashing of slot"), 3),
        (ClusterDownError("CLUSTERDOWN Hash slot not served"), 3),
        (_wrapped(CERT), 4),
        (_read_failed(REQUIRED), 5),
        (_read_failed(_alert("SSLV3_ALERT_BAD_CERTIFICATE")), 5),
        (_wrapped(VERSION), 6),
        (_read_failed(_alert("SSLV3_ALERT_HANDSHAKE_FAILURE")), 6),
        (REQUIRED, 5),
        (ReadOnlyError("You can't write against a read only replica."), 7),
        (MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."), 7),
        (ResponseError("NOREPLICAS Not enough good replicas to write."), 8),
        (ResponseError("ERR NOREPLICAS is not at the start"), None),
        (MasterNotFoundError("No master found for 'mymaster'"), 9),
        (_wrapped(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")), 10),
        (_wrapped(ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed (EOF)")), 10),
        (ConnectionResetError(104, "Connection reset by peer"), 10),
        (ResponseError("ERR WRONGPASS is not at the start"), None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_the_first_rule_that_matches_decides(error: BaseException, rule: int | None) -> None:
    assert _deciding(error) == rule


def test_of_type_reports_the_error_itself() -> None:
    match = refusals.of_type(KeyError, NoPermissionError)
    error = NoPermissionError("no permissions")
    assert match(error) is error
    assert match(ValueError("x")) is None


def test_response_starting_reads_the_code_at_the_start_of_a_response_error_only() -> None:
    match = refusals.response_starting("WRONGPASS", "NOAUTH")
    wrongpass, noauth = ResponseError("WRONGPASS x"), ResponseError("NOAUTH x")
    assert match(wrongpass) is wrongpass and match(noauth) is noauth
    assert match(ResponseError("ERR x")) is None
    assert match(ResponseError("ERR WRONGPASS x")) is None
    assert match(RedisConnectionError("WRONGPASS x")) is None


def test_caused_by_reports_the_first_error_of_the_kind_in_the_chain() -> None:
    match = refusals.caused_by(ssl.SSLError, ssl.SSLEOFError)
    assert match(VERSION) is VERSION
    assert match(_wrapped(VERSION)) is VERSION
    assert match(_wrapped(ssl.SSLEOFError(8, "EOF"))) is None
    assert match(_wrapped(ConnectionRefusedError(111, "refused"))) is None
    assert match(RedisConnectionError("no cause")) is None


def test_caused_by_reads_an_error_raised_while_handling_another() -> None:
    """redis-py raises some of its `ConnectionError`s inside the `except` of the `ssl` error: the
    `ssl` error is then only the context."""
    try:
        try:
            raise CERT
        except ssl.SSLError:
            raise RedisConnectionError("Error connecting")  # noqa: B904 - the context alone
    except RedisConnectionError as exc:
        handled = exc
    assert handled.__cause__ is None and handled.__context__ is CERT
    assert refusals.caused_by(ssl.SSLCertVerificationError)(handled) is CERT


def test_caused_by_reads_only_a_connection_s_error() -> None:
    """An error that is not a connection's is not the table's, whatever caused it."""
    try:
        raise ResponseError("ERR from a script") from CERT
    except ResponseError as exc:
        caused = exc
    assert refusals.caused_by(ssl.SSLCertVerificationError)(caused) is None
    assert refusals.caused_by(ssl.SSLCertVerificationError)(CERT) is CERT  # an OSError itself


def test_caused_by_ends_on_a_chain_that_loops() -> None:
    first, second = RedisConnectionError("first"), ConnectionResetError(104, "reset")
    first.__context__, second.__context__ = second, first
    found: list[BaseException | None] = []
    worker = threading.Thread(
        target=lambda: found.append(refusals.caused_by(ssl.SSLError)(first)), daemon=True
    )
    worker.start()
    worker.join(timeout=2)
    assert found == [None]
