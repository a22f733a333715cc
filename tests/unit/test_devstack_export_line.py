"""`turnledger dev status`'s `export` line (`devstack/stack.py` `export_line`): something a shell can `eval`,
never a password."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnledger.devstack import cli
from turnledger.devstack.stack import export_line


def test_the_devstacks_own_endpoints_are_printed_as_they_are() -> None:
    assert export_line("127.0.0.1:1111", "redis://127.0.0.1:2222/0") == (
        "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1111 REDIS_URL=redis://127.0.0.1:2222/0"
    )


def test_values_are_quoted_for_the_shell_that_evals_them() -> None:
    url = "rediss://127.0.0.1:1/0?ssl_cert_reqs=none&ssl_check_hostname=false"
    line = export_line("k1:9092,k2:9092", url)
    assert line == f"export KAFKA_BOOTSTRAP_SERVERS=k1:9092,k2:9092 REDIS_URL={shlex.quote(url)}"
    echoed = subprocess.run(
        ["bash", "-c", f'{line}; printf "%s|%s" "$KAFKA_BOOTSTRAP_SERVERS" "$REDIS_URL"'],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert echoed == f"k1:9092,k2:9092|{url}"


@pytest.mark.parametrize(
    "url",
    ["redis://u:S3CRET@127.0.0.1:1/0", "redis://:S3CRET@127.0.0.1:1/0", "redis://h:1/0?password=S3CRET"],
)
def test_a_redis_url_with_a_password_is_not_printed(url: str) -> None:
    assert export_line("k:9092", url) == (
        "export KAFKA_BOOTSTRAP_SERVERS=k:9092  # REDIS_URL holds a password, not printed: export it yourself"
    )


def test_status_without_a_stack_names_the_external_services_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path))
    env = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://u:S3CRET@127.0.0.1:1/0"}
    result = CliRunner().invoke(cli.dev_app, ["status"], env=env)
    assert result.exit_code == 0, result.output
    assert "S3CRET" not in result.output
    assert "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1  # REDIS_URL holds a password" in result.output
