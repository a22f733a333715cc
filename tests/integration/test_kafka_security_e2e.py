"""Every service over SASL_SSL on the real broker: a small demo (processor and projector in their own
processes, workers, tool executor, driver, replay audit) reaches Kafka only through the devstack's
secured listener, logged in with SCRAM-SHA-512 over TLS, and again through its OAUTHBEARER listener,
each process with a token of the client-credentials grant, and again through its mutual-TLS
listener with Redis reached over TLS as its ACL user, and keeps every invariant; a wrong
password or an expired token ends the processor's command in one line instead of an outage waited
out for ever."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnledger.demo.run import DemoOptions, run_demo
from turnledger.devstack.identity import SigningKey, TokenEndpoint
from turnledger.devstack.session import Endpoints
from turnledger.kafka import connection, oauth

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def secured_env(devstack: Endpoints, password_file: str | None = None) -> dict[str, str]:
    if devstack.secure_bootstrap is None:
        message = "the devstack has no secured listener (an external or Docker broker)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert devstack.sasl_username and devstack.sasl_password_file and devstack.ssl_ca_file
    return {
        "KAFKA_BOOTSTRAP_SERVERS": devstack.secure_bootstrap,
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KAFKA_SASL_USERNAME": devstack.sasl_username,
        "KAFKA_SASL_PASSWORD_FILE": password_file or devstack.sasl_password_file,
        "KAFKA_SSL_CA_FILE": devstack.ssl_ca_file,
    }


@pytest.fixture
def secured(devstack: Endpoints, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This process and the processes it starts reach Kafka as the secured listener asks; the
    bootstrap of that listener. The settings are read once per process: cleared before and after."""
    for name, value in secured_env(devstack).items():
        monkeypatch.setenv(name, value)
    connection.security.cache_clear()
    try:
        yield os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    finally:
        monkeypatch.undo()
        connection.security.cache_clear()


@pytest.mark.slow
async def test_every_service_works_over_sasl_ssl(secured: str, devstack: Endpoints, redis_url: str) -> None:
    assert connection.security().describe() == (
        f"SASL_SSL, SCRAM-SHA-512 as {devstack.sasl_username!r}, CA {devstack.ssl_ca_file}"
    )
    options = DemoOptions(conversations=12, partitions=2, serve=False, timeout_s=200)
    result = await run_demo(secured, redis_url, options)
    failed = [(c.name, c.examples) for c in result.checks if not c.ok]
    assert not failed
    assert result.settle.not_final == 0 and result.settle.operations == result.driver.dispatches
    assert result.driver.conversations == 12 and result.driver.stalled == 0
    assert result.driver.completed + result.driver.cancelled >= 10


def test_a_wrong_password_ends_the_processor_at_once_with_what_to_fix(
    devstack: Endpoints, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    env = {**os.environ, **secured_env(devstack, str(wrong))}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnledger.cli",
            "process",
            "--create-topics",
            "1",
            "--topic-prefix",
            "sec-wrong-",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines()[-1] == (
        f"turnledger: Kafka at {devstack.secure_bootstrap!r} refused the connection (SASL_SSL, SCRAM-SHA-512 "
        f"as {devstack.sasl_username!r}, CA {devstack.ssl_ca_file}): SaslAuthenticationFailed: [Error 58] "
        "SaslAuthenticationFailed: Authentication failed during authentication due to invalid credentials "
        "with SASL mechanism SCRAM-SHA-512. Check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD (or "
        "KAFKA_SASL_PASSWORD_FILE)."
    )
    assert "not-the-password" not in run.stderr + run.stdout


@pytest.fixture
def bearer(devstack: Endpoints, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, TokenEndpoint]]:
    """This process and the processes it starts reach Kafka through the OAUTHBEARER listener, each
    fetching its token from a client-credentials endpoint served here (signing with the key the broker
    trusts); the bootstrap of that listener and the endpoint."""
    env = devstack.oauth_client_env()
    if env is None or devstack.oauth_signing_key is None:
        message = "the devstack has no OAUTHBEARER listener (an external or Docker broker, or no openssl)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    key = SigningKey(Path(devstack.oauth_signing_key), shutil.which("openssl") or "openssl")
    with TokenEndpoint(key, "svc-turnledger", "grant-secret", lifetime_s=3600) as endpoint:
        env.pop(oauth.ENV_TOKEN_FILE)
        env |= {
            oauth.ENV_TOKEN_ENDPOINT: endpoint.url,
            oauth.ENV_CLIENT_ID: "svc-turnledger",
            oauth.ENV_CLIENT_SECRET: "grant-secret",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        connection.security.cache_clear()
        try:
            yield env["KAFKA_BOOTSTRAP_SERVERS"], endpoint
        finally:
            monkeypatch.undo()
            connection.security.cache_clear()


@pytest.mark.slow
async def test_every_service_works_with_oauthbearer_tokens(
    bearer: tuple[str, TokenEndpoint], redis_url: str
) -> None:
    bootstrap, endpoint = bearer
    assert (
        connection.security()
        .describe()
        .startswith(f"SASL_SSL, OAUTHBEARER from token endpoint {endpoint.url} as client 'svc-turnledger'")
    )
    options = DemoOptions(conversations=12, partitions=2, serve=False, timeout_s=200)
    result = await run_demo(bootstrap, redis_url, options)
    failed = [(c.name, c.examples) for c in result.checks if not c.ok]
    assert not failed
    assert result.settle.not_final == 0 and result.settle.operations == result.driver.dispatches
    assert result.driver.conversations == 12 and result.driver.stalled == 0
    assert result.driver.completed + result.driver.cancelled >= 10
    assert endpoint.refused == 0
    assert endpoint.issued == 3, (
        "one token per process (this one, the processor's, the projector's), not per login"
    )


def test_an_expired_token_ends_the_processor_at_once_with_what_to_fix(
    devstack: Endpoints, tmp_path: Path
) -> None:
    env = devstack.oauth_client_env()
    if env is None or devstack.oauth_signing_key is None:
        pytest.skip("the devstack has no OAUTHBEARER listener")
    key = SigningKey(Path(devstack.oauth_signing_key), shutil.which("openssl") or "openssl")
    expired = tmp_path / "expired.token"
    expired.write_text(key.mint("turnledger", 60, now=time.time() - 3600))
    env[oauth.ENV_TOKEN_FILE] = str(expired)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnledger.cli",
            "process",
            "--create-topics",
            "1",
            "--topic-prefix",
            "oauth-exp-",
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines()[-1] == (
        f"turnledger: Kafka at {devstack.oauth_bootstrap!r} refused the connection (SASL_SSL, OAUTHBEARER "
        f"from token file {expired}, CA {devstack.ssl_ca_file}): SaslAuthenticationFailed: [Error 58] "
        'SaslAuthenticationFailed: {"status":"invalid_token"}. The broker refused the token in '
        f"{expired} (KAFKA_SASL_OAUTHBEARER_TOKEN_FILE): check that whoever writes it keeps it current and "
        "that its issuer and audience are the ones the broker expects."
    )


@pytest.fixture
def client_certificate_and_redis_login(
    devstack: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str]]:
    """This process and the processes it starts reach Kafka through the listener that requires a
    client certificate (mutual TLS), and Redis through its TLS port as its ACL user (the password by
    its file): the bootstrap and the Redis URL, as a managed Aiven Kafka and ElastiCache are reached."""
    kafka_env, redis_env = devstack.mtls_client_env(), devstack.redis_tls_client_env()
    if kafka_env is None or redis_env is None:
        message = "the devstack has no mutual-TLS listener or no Redis TLS port (no openssl, or not its own)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    for name, value in {**kafka_env, **redis_env}.items():
        monkeypatch.setenv(name, value)
    connection.security.cache_clear()
    try:
        yield kafka_env["KAFKA_BOOTSTRAP_SERVERS"], redis_env["REDIS_URL"]
    finally:
        monkeypatch.undo()
        connection.security.cache_clear()


@pytest.mark.slow
async def test_every_service_works_over_mutual_tls_with_redis_over_tls_as_its_acl_user(
    client_certificate_and_redis_login: tuple[str, str], devstack: Endpoints
) -> None:
    bootstrap, redis_url = client_certificate_and_redis_login
    assert redis_url.startswith("rediss://turnledger@") and ":" not in redis_url.split("@")[0][9:]
    assert connection.security().describe() == (
        f"SSL, CA {devstack.ssl_ca_file}, client certificate {devstack.ssl_client_cert_file}"
    )
    options = DemoOptions(conversations=12, partitions=2, serve=False, timeout_s=200)
    result = await run_demo(bootstrap, redis_url, options)
    failed = [(c.name, c.examples) for c in result.checks if not c.ok]
    assert not failed
    assert result.settle.not_final == 0 and result.settle.operations == result.driver.dispatches
    assert result.driver.conversations == 12 and result.driver.stalled == 0
    assert result.driver.completed + result.driver.cancelled >= 10
