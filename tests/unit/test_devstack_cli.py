"""`turnledger dev up|status|down` as a user runs it: detached processes, then nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from turnledger.devstack import procs

pytestmark = pytest.mark.integration


def _dev(args: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnledger.cli", "dev", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _env(state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")}
    env.update(TURNLEDGER_DEVSTACK_DIR=str(state), COLUMNS="200", **extra)
    return env


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if (
            entry.name.isdigit()
            and procs.is_alive(int(entry.name))
            and text in procs.cmdline(int(entry.name))
        ):
            found.append(int(entry.name))
    return found


def test_up_status_down_leaves_no_process_behind(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    env = _env(state_dir)
    try:
        up = _dev(["up"], env)
        assert up.returncode == 0, up.stdout + up.stderr
        recorded = json.loads((state_dir / "stack.json").read_text())
        kafka_pid, redis_pid = recorded["kafka_pid"], recorded["redis_pid"]
        assert procs.owns(kafka_pid, recorded["kafka_marker"]), "broker must outlive `dev up`"
        assert procs.owns(redis_pid, recorded["redis_marker"])
        assert (state_dir / "kafka.pid").read_text().strip() == str(kafka_pid)

        status = _dev(["status"], env)
        assert status.returncode == 0
        export = f"export KAFKA_BOOTSTRAP_SERVERS={recorded['bootstrap']} REDIS_URL={recorded['redis_url']}"
        assert export in status.stdout
        assert recorded["bootstrap"].startswith("127.0.0.1:")
        # the SASL_SSL listener: its own line, a `# SASL_SSL: export` line apart from the one scripts grep
        assert (
            recorded["secure_bootstrap"].startswith("127.0.0.1:")
            and recorded["sasl_username"] == "turnledger"
        )
        lines = status.stdout.splitlines()
        assert [line for line in lines if line.startswith("export")] == [export]
        assert f"# SASL_SSL: export KAFKA_BOOTSTRAP_SERVERS={recorded['secure_bootstrap']} " in status.stdout
        password = Path(recorded["sasl_password_file"]).read_text().strip()
        assert password and password not in up.stdout + status.stdout
        # the SSL listener (mutual TLS), when openssl could make the client certificate
        if shutil.which("openssl") is not None:
            assert recorded["mtls_bootstrap"].startswith("127.0.0.1:")
            assert (
                f"# SSL (mutual TLS): export KAFKA_BOOTSTRAP_SERVERS={recorded['mtls_bootstrap']} "
                f"KAFKA_SECURITY_PROTOCOL=SSL KAFKA_SSL_CA_FILE={recorded['ssl_ca_file']} "
                f"KAFKA_SSL_CERT_FILE={recorded['ssl_client_cert_file']} "
                f"KAFKA_SSL_KEY_FILE={recorded['ssl_client_key_file']}"
            ) in lines
    finally:
        down = _dev(["down"], env)
    assert down.returncode == 0 and "kafka" in down.stdout and "redis" in down.stdout
    assert not procs.is_alive(kafka_pid) and not procs.is_alive(redis_pid)
    assert _processes_mentioning(str(state_dir)) == []
    assert not (state_dir / "kafka.pid").exists() and not (state_dir / "redis.pid").exists()
    assert not Path(recorded["sasl_password_file"]).exists(), "the password goes with the data"
    assert Path(recorded["ssl_ca_file"]).exists(), "the certificates are kept for the next `dev up`"
    assert recorded["ssl_client_key_file"] is None or Path(recorded["ssl_client_key_file"]).exists()
    assert _dev(["status"], env).returncode == 1


def test_broker_not_ready_in_time_reports_log_tail_and_stops_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    env = _env(state_dir, TURNLEDGER_KAFKA_READY_TIMEOUT="0.5", REDIS_URL="redis://127.0.0.1:1/0")
    up = _dev(["up"], env)
    assert up.returncode == 2
    log = state_dir / "kafka" / "kafka.log"
    assert "Kafka did not become ready within" in up.stderr
    assert str(log) in up.stderr.replace("\n", "") and log.exists()
    assert _processes_mentioning(str(state_dir)) == []
    assert not (state_dir / "kafka.pid").exists()
