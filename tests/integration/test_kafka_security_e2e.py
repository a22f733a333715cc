"""Every service over SASL_SSL on the real broker: a small demo (processor and projector in their own
processes, workers, tool executor, driver, replay audit) reaches Kafka only through the devstack's
secured listener, logged in with SCRAM-SHA-512 over TLS, and keeps every invariant; a wrong password
ends the processor's command in one line instead of an outage waited out for ever."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnledger.demo.run import DemoOptions, run_demo
from turnledger.devstack.session import Endpoints
from turnledger.kafka import connection

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
