"""Mutual TLS to Redis: a client certificate (REDIS_SSL_CERT_FILE, REDIS_SSL_KEY_FILE) on a real
redis-server, for a Redis that asks for one, as on-premise Redis and Redis Enterprise can.

Two servers: the devstack's TLS port, which verifies a certificate when one is given
(`tls-auth-clients optional`), and one started here with the devstack's TLS material that requires
one (`tls-auth-clients yes`). A certificate Redis refuses, or none where one is required, is a
`RedisAccessError` that says which, not an outage waited out, and `history` exits 2 in one line.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from tests.integration.projections.checks import round_trip
from turnledger.devstack.ports import free_port
from turnledger.devstack.redis_server import redis_argv, tls_args
from turnledger.devstack.redis_tls import RedisTls
from turnledger.devstack.session import Endpoints, in_ci
from turnledger.errors import RedisAccessError, RedisUnavailableError
from turnledger.redisconn.client import connect, explain, redis_client
from turnledger.redisconn.refusals import CHECK_CLIENT_CERTIFICATE, CHECK_NO_CLIENT_CERTIFICATE
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

STRANGER = Path(__file__).resolve().parents[1] / "fixtures" / "client_tls"
"""A client certificate of a CA neither server trusts."""
VARIABLES = (
    "REDIS_URL",
    "REDIS_PASSWORD_FILE",
    "REDIS_SSL_CA_FILE",
    "REDIS_SSL_CERT_FILE",
    "REDIS_SSL_KEY_FILE",
)


@pytest.fixture(scope="module")
def tls_env(devstack: Endpoints) -> dict[str, str]:
    """The devstack's TLS port as its ACL user (`dev up`'s `# REDIS TLS:` line): failed under CI, whose
    devstack has it, skipped elsewhere without it."""
    env = devstack.redis_tls_client_env()
    if env is None:
        message = f"the Redis at {devstack.redis_url} ({devstack.source}) has no TLS port (unset REDIS_URL)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return env


@pytest.fixture(scope="module")
def material(tls_env: dict[str, str]) -> RedisTls:
    """The devstack's TLS set, beside the CA file dev up names: its client certificate and key too."""
    return RedisTls.at(Path(tls_env["REDIS_SSL_CA_FILE"]).parent)


@pytest.fixture
def as_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, str]], None]:
    def put(env: dict[str, str]) -> None:
        for name in VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return put


def _with_certificate(env: dict[str, str], material: RedisTls) -> dict[str, str]:
    return {
        **env,
        "REDIS_SSL_CERT_FILE": str(material.client_cert_file),
        "REDIS_SSL_KEY_FILE": str(material.client_key_file),
    }


def _shown(url: str) -> str:
    return url.replace("rediss://turnledger@", "rediss://turnledger:***@")


@pytest.fixture(scope="module")
def required_env(material: RedisTls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A redis-server of its own whose TLS port requires a client certificate of the devstack's CA
    (`tls-auth-clients yes`), no login; the variables that reach it without a certificate."""
    binary = shutil.which("redis-server")
    assert binary is not None
    workdir = tmp_path_factory.mktemp("redis-mtls")
    port, tls_port = free_port(), free_port()
    argv = redis_argv(binary, port, workdir, [], tls_args(tls_port, material, clients="yes"))
    with open(workdir / "redis.log", "wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_for_ping(port, server, workdir / "redis.log")
        yield {"REDIS_URL": f"rediss://127.0.0.1:{tls_port}/0", "REDIS_SSL_CA_FILE": str(material.ca_file)}
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_for_ping(port: int, server: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0) -> None:
    """Until the plaintext port answers PING (the TLS port opens with it), or the server exits."""
    deadline = time.monotonic() + timeout_s
    client = redis.Redis(port=port, socket_connect_timeout=1)
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"redis-server on {port} did not answer (exit {server.poll()}): {log.read_text()}"
                )
            time.sleep(0.05)
    finally:
        client.close()


async def _connected(env: dict[str, str], as_env: Callable[[dict[str, str]], None]) -> aioredis.Redis:
    as_env(env)
    return await connect(env["REDIS_URL"])


async def test_the_devstack_port_takes_the_devstack_client_certificate(
    tls_env: dict[str, str], material: RedisTls, as_env: Callable[[dict[str, str]], None]
) -> None:
    client = await _connected(_with_certificate(tls_env, material), as_env)
    try:
        assert await client.acl_whoami() == "turnledger"
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["ssl_certfile"] == str(material.client_cert_file)
    finally:
        await client.aclose()


async def test_a_certificate_of_a_ca_redis_does_not_trust_is_refused_by_name(
    tls_env: dict[str, str], as_env: Callable[[dict[str, str]], None]
) -> None:
    env = {
        **tls_env,
        "REDIS_SSL_CERT_FILE": str(STRANGER / "client.pem"),
        "REDIS_SSL_KEY_FILE": str(STRANGER / "client.key"),
    }
    with pytest.raises(RedisAccessError) as caught:
        await _connected(env, as_env)
    cause = caught.value.cause
    assert isinstance(cause, ssl.SSLError) and cause.reason == "TLSV1_ALERT_UNKNOWN_CA"
    assert str(caught.value) == (
        f"Redis at {_shown(tls_env['REDIS_URL'])!r} refused the connection (TLS, CA "
        f"{tls_env['REDIS_SSL_CA_FILE']}, client certificate {STRANGER / 'client.pem'}, user 'turnledger' "
        f"with a password): SSLError: {cause}. {CHECK_CLIENT_CERTIFICATE}"
    )


async def test_a_redis_that_requires_a_certificate_says_so_when_given_none(
    required_env: dict[str, str], as_env: Callable[[dict[str, str]], None]
) -> None:
    with pytest.raises(RedisAccessError) as caught:
        await _connected(required_env, as_env)
    cause = caught.value.cause
    assert isinstance(cause, ssl.SSLError) and cause.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert str(caught.value) == (
        f"Redis at {required_env['REDIS_URL']!r} refused the connection (TLS, CA "
        f"{required_env['REDIS_SSL_CA_FILE']}, no login): SSLError: {cause}. {CHECK_NO_CLIENT_CERTIFICATE}"
    )


async def test_a_projector_and_the_reader_round_trip_over_mutual_tls(
    required_env: dict[str, str],
    material: RedisTls,
    as_env: Callable[[dict[str, str]], None],
    redis_client: aioredis.Redis,
    kafka_bootstrap: str,
    topic_name: Callable[[str], str],
    redis_prefix: str,
) -> None:
    """The projector writes through the port that requires a certificate; the same records projected
    directly into the devstack's Redis are the reference; the readers agree."""
    mtls = await _connected(_with_certificate(required_env, material), as_env)
    try:
        await round_trip(
            mtls, redis_client, kafka_bootstrap, Topics(prefix=topic_name("") + "."), redis_prefix, 3
        )
    finally:
        await mtls.aclose()


def _reset() -> redis.ConnectionError:
    """What redis-py raises when the server's close after its alert came as a reset (the alert lost)."""
    try:
        raise redis.ConnectionError(
            "Error while reading from 127.0.0.1 : (104, 'Connection reset by peer')"
        ) from (ConnectionResetError(104, "Connection reset by peer"))
    except redis.ConnectionError as exc:
        return exc


async def test_an_alert_lost_to_a_reset_is_found_by_a_handshake_that_only_reads(
    required_env: dict[str, str], material: RedisTls, as_env: Callable[[dict[str, str]], None]
) -> None:
    """redis-py writes its first command before the alert arrives, so the server's close may reset the
    connection and lose it: `explain` asks once more without writing."""
    as_env(required_env)
    failure = await explain(redis_client(required_env["REDIS_URL"]), _reset())
    assert isinstance(failure, RedisAccessError)
    assert (
        isinstance(failure.cause, ssl.SSLError)
        and failure.cause.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    )
    assert str(failure).endswith(f". {CHECK_NO_CLIENT_CERTIFICATE}")
    as_env(_with_certificate(required_env, material))
    taken = await explain(redis_client(required_env["REDIS_URL"]), _reset())
    assert isinstance(taken, RedisUnavailableError), "a certificate the server takes: the reset was an outage"


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {name: value for name, value in os.environ.items() if name not in VARIABLES}
    return subprocess.run(
        [sys.executable, "-m", "turnledger.cli", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_history_reads_with_the_certificate_and_exits_2_in_one_line_without(
    required_env: dict[str, str], material: RedisTls
) -> None:
    ok = _cli("history", "no-such-conversation", "--json", env=_with_certificate(required_env, material))
    assert (ok.returncode, ok.stdout) == (1, ""), ok.stderr  # read over TLS: the projection answered
    assert ok.stderr == "conversation 'no-such-conversation' is not in the projection (key prefix 'tl:')\n"
    run = _cli("history", "no-such-conversation", env=required_env)
    assert (run.returncode, run.stdout) == (2, "")
    [line] = run.stderr.splitlines()
    assert line.startswith(
        f"turnledger: Redis at {required_env['REDIS_URL']!r} refused the connection (TLS, CA "
        f"{required_env['REDIS_SSL_CA_FILE']}, no login): SSLError: "
    )
    assert line.endswith(f". {CHECK_NO_CLIENT_CERTIFICATE}")
