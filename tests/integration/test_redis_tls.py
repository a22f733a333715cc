"""The devstack Redis's TLS port and ACL user, reached as a turnledger service reaches a managed Redis.

Every client here is built from the REDIS_* variables `turnledger dev up` prints (`# REDIS TLS:`),
through `redisconn.client`, which is how the services get theirs: the projector writes and the reader
`serve` and `history` use reads over rediss:// as the ACL user, and what Redis refuses (a wrong
password, a CA that did not sign its certificate, TLS to its plaintext port, plaintext to its TLS port)
is a `RedisAccessError` that names what to check and never the password, not an outage waited out.
It starts nothing: it uses the session's devstack.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.conftest import skip_unless_installed
from tests.integration.projections.checks import round_trip
from turnledger.devstack.redis_tls import ensure_redis_tls
from turnledger.devstack.session import Endpoints, in_ci
from turnledger.devstack.tls import openssl
from turnledger.errors import RedisAccessError, RedisUnavailableError
from turnledger.redisconn.client import connect
from turnledger.redisconn.refusals import CHECK_CERTIFICATE, CHECK_LOGIN, CHECK_PLAINTEXT_PORT, CHECK_TLS_PORT
from turnledger.topology import Topics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_env(devstack: Endpoints) -> dict[str, str]:
    """The variables for the TLS port as the ACL user. Only the local devstack's own Redis has it, and
    only with openssl: skipped otherwise, but failed under CI, whose run starts the local devstack with
    openssl installed, so that a port gone missing cannot pass as a skip."""
    env = devstack.redis_tls_client_env()
    if env is None:
        if devstack.redis_username is not None and openssl() is None:
            skip_unless_installed("openssl", "apt-get install -y openssl")
        message = (
            f"the Redis at {devstack.redis_url} ({devstack.source}) has no TLS port: only the local "
            "devstack's own Redis has one (unset REDIS_URL)"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return env


@pytest.fixture
def as_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, str]], None]:
    """Put variables in this process's environment, as a service started with them has them."""

    def put(env: dict[str, str]) -> None:
        for name in ("REDIS_URL", "REDIS_PASSWORD_FILE", "REDIS_SSL_CA_FILE"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return put


@pytest.fixture
def wrong_password(tmp_path: Path) -> Path:
    path = tmp_path / "wrong.password"
    path.write_text("not-the-password\n")
    return path


@pytest.fixture(scope="module")
def stranger_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA made the same way, by the same code, that did not sign the server's certificate."""
    tool = openssl()
    if tool is None:
        pytest.skip("openssl is not installed")
    return ensure_redis_tls(tmp_path_factory.mktemp("stranger") / "redis-tls", tool).ca_file


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def _tried(env: dict[str, str]) -> str:
    return f"TLS, CA {env['REDIS_SSL_CA_FILE']}, user 'turnledger' with a password"


def _shown(url: str) -> str:
    return url.replace("rediss://turnledger@", "rediss://turnledger:***@")


@pytest.fixture
async def tls_client(
    tls_env: dict[str, str], as_env: Callable[[dict[str, str]], None]
) -> AsyncIterator[aioredis.Redis]:
    as_env(tls_env)
    client = await connect(tls_env["REDIS_URL"])
    yield client
    await client.aclose()


async def test_the_client_logs_in_over_verified_tls_as_the_acl_user(
    tls_env: dict[str, str], tls_client: aioredis.Redis
) -> None:
    assert tls_env["REDIS_URL"].startswith("rediss://turnledger@127.0.0.1:")
    assert await tls_client.acl_whoami() == "turnledger"
    kwargs = tls_client.connection_pool.connection_kwargs
    assert (kwargs["ssl_ca_certs"], kwargs.get("ssl_check_hostname", True)) == (
        tls_env["REDIS_SSL_CA_FILE"],
        True,
    )
    connection = await tls_client.connection_pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        assert connection._writer is not None
        tls = connection._writer.get_extra_info("ssl_object")
        assert isinstance(tls, ssl.SSLObject) and tls.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        await tls_client.connection_pool.release(connection)


async def test_a_projector_and_the_reader_round_trip_over_tls(
    tls_env: dict[str, str],
    tls_client: aioredis.Redis,
    redis_client: aioredis.Redis,
    kafka_bootstrap: str,
    topic_name: Callable[[str], str],
    redis_prefix: str,
) -> None:
    """The projector writes through the TLS port as the user; the same records projected directly
    through the plaintext port are the reference; the reader `serve` and `history` use agrees."""
    await round_trip(
        tls_client, redis_client, kafka_bootstrap, Topics(prefix=topic_name("") + "."), redis_prefix, 4
    )


async def test_a_wrong_password_is_an_access_error_without_the_password(
    tls_env: dict[str, str], as_env: Callable[[dict[str, str]], None], wrong_password: Path
) -> None:
    env = {**tls_env, "REDIS_PASSWORD_FILE": str(wrong_password)}
    as_env(env)
    with pytest.raises(RedisAccessError) as caught:
        await connect(env["REDIS_URL"])
    assert str(caught.value) == (
        f"Redis at {_shown(env['REDIS_URL'])!r} refused the connection ({_tried(env)}): AuthenticationError: "
        f"invalid username-password pair or user is disabled. {CHECK_LOGIN}"
    )
    assert "not-the-password" not in str(caught.value)


async def test_a_ca_that_did_not_sign_the_certificate_is_an_access_error(
    tls_env: dict[str, str], as_env: Callable[[dict[str, str]], None], stranger_ca: Path
) -> None:
    env = {**tls_env, "REDIS_SSL_CA_FILE": str(stranger_ca)}
    as_env(env)
    with pytest.raises(RedisAccessError) as caught:
        await connect(env["REDIS_URL"])
    cause = caught.value.cause
    assert isinstance(cause, ssl.SSLCertVerificationError)
    assert cause.verify_message == "self-signed certificate in certificate chain"
    assert str(caught.value) == (
        f"Redis at {_shown(env['REDIS_URL'])!r} refused the connection ({_tried(env)}): "
        f"SSLCertVerificationError: {cause}. {CHECK_CERTIFICATE}"
    )
    password = Path(tls_env["REDIS_PASSWORD_FILE"]).read_text().strip()
    assert password not in str(caught.value)


async def test_tls_to_the_plaintext_port_is_an_access_error(
    devstack: Endpoints, tls_env: dict[str, str], as_env: Callable[[dict[str, str]], None]
) -> None:
    url = tls_env["REDIS_URL"].replace(f":{_port(tls_env['REDIS_URL'])}/", f":{_port(devstack.redis_url)}/")
    as_env({**tls_env, "REDIS_URL": url})
    with pytest.raises(RedisAccessError) as caught:
        await connect(url)
    assert str(caught.value) == (
        f"Redis at {_shown(url)!r} refused the connection ({_tried(tls_env)}): TimeoutError: Timeout "
        f"connecting to server. {CHECK_PLAINTEXT_PORT}"
    )


async def test_plaintext_to_the_tls_port_is_an_access_error(
    tls_env: dict[str, str], as_env: Callable[[dict[str, str]], None]
) -> None:
    url = tls_env["REDIS_URL"].replace("rediss://", "redis://")
    as_env({"REDIS_URL": url, "REDIS_PASSWORD_FILE": tls_env["REDIS_PASSWORD_FILE"]})
    with pytest.raises(RedisAccessError) as caught:
        await connect(url)
    assert isinstance(caught.value.cause, RedisConnectionError)
    shown = url.replace("redis://turnledger@", "redis://turnledger:***@")
    assert str(caught.value) == (
        f"Redis at {shown!r} refused the connection (plaintext, user 'turnledger' with a password): "
        f"ConnectionError: {str(caught.value.cause).rstrip('.')}. {CHECK_TLS_PORT}"
    )


async def test_a_redis_that_is_down_stays_an_outage(
    tls_env: dict[str, str], as_env: Callable[[dict[str, str]], None], bound_port: int
) -> None:
    """A port that accepts and never answers (nothing speaks there) times out: an outage, waited out."""
    url = tls_env["REDIS_URL"].replace(f":{_port(tls_env['REDIS_URL'])}/", f":{bound_port}/")
    as_env({**tls_env, "REDIS_URL": url})
    with pytest.raises(RedisUnavailableError) as caught:
        await connect(url)
    assert caught.value.retriable and caught.value.url == _shown(url)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnledger.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_history_over_tls_reads_and_with_a_wrong_password_exits_2_in_one_line(
    tls_env: dict[str, str], wrong_password: Path
) -> None:
    ok = _cli("history", "no-such-conversation", "--json", env=tls_env)
    assert (ok.returncode, ok.stdout) == (1, ""), ok.stderr  # read over TLS: the projection answered
    assert ok.stderr == "conversation 'no-such-conversation' is not in the projection (key prefix 'tl:')\n"
    env = {**tls_env, "REDIS_PASSWORD_FILE": str(wrong_password)}
    run = _cli("history", "no-such-conversation", env=env)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        f"turnledger: Redis at {_shown(env['REDIS_URL'])!r} refused the connection ({_tried(env)}): "
        f"AuthenticationError: invalid username-password pair or user is disabled. {CHECK_LOGIN}"
    ]
    assert "not-the-password" not in run.stderr


def test_a_following_projector_with_a_wrong_password_ends_at_once(
    tls_env: dict[str, str], wrong_password: Path, kafka_bootstrap: str
) -> None:
    """It used to wait out the refusal for ever: an AuthenticationError is a redis-py ConnectionError."""
    env = {**tls_env, "REDIS_PASSWORD_FILE": str(wrong_password)}
    run = _cli("project", "--bootstrap", kafka_bootstrap, "--topic-prefix", "redis-tls-wrong-", env=env)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1].startswith(
        f"turnledger: Redis at {_shown(env['REDIS_URL'])!r} refused the connection ({_tried(env)}): "
        "AuthenticationError: "
    )
