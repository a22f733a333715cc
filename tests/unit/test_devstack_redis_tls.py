"""The devstack Redis's ACL user and TLS port without a running Redis: its argv, the certificate
openssl makes (once), how `stack.json`, `Endpoints` and `dev status` show them.

The port itself, logged in to: tests/integration/test_redis_tls.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import ssl
import stat
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from turnledger.devstack import cli, redis_tls, tls
from turnledger.devstack.redis_server import acl_user_args, redis_argv, redis_tls_client_env, tls_args
from turnledger.devstack.redis_tls import RedisTls, ensure_redis_tls
from turnledger.devstack.session import Endpoints
from turnledger.devstack.settings import Settings
from turnledger.devstack.stack import STATE_FILE, LocalStack, StackState
from turnledger.devstack.tls import openssl
from turnledger.redisconn.settings import client_options

FIXTURE_CA = Path(__file__).resolve().parents[1] / "fixtures" / "client_tls" / "ca.pem"
"""A CA file that loads (the client TLS fixtures' own)."""

OLD_STATE = {
    "bootstrap": "127.0.0.1:1111",
    "redis_url": "redis://127.0.0.1:2222/0",
    "kafka_version": "4.4.0",
    "kafka_pid": 11,
    "kafka_marker": "/state/kafka/server.properties",
    "redis_pid": 12,
    "redis_marker": "127.0.0.1:2222",
    "kafka_log": None,
    "redis_log": None,
}
"""A stack.json as written before Redis had a user and a TLS port."""

REDIS_TLS = {
    "redis_username": "turnledger",
    "redis_password_file": "/state/redis/turnledger.password",
    "redis_tls_url": "rediss://turnledger@127.0.0.1:5555/0",
    "redis_ca_file": "/state/redis-tls/ca.pem",
}


def _state(**fields: str | None) -> StackState:
    return StackState(**{**OLD_STATE, **fields})  # type: ignore[arg-type]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_acl_user_is_given_by_the_sha256_of_its_password_one_rule_an_argument() -> None:
    digest = hashlib.sha256(b"the-real-password").hexdigest()
    assert acl_user_args("turnledger", "the-real-password") == [
        "--user", "turnledger", "on", f"#{digest}", "~*", "&*", "+@all",
    ]  # fmt: skip


def test_the_argv_adds_the_user_and_the_tls_port_to_the_plaintext_port(tmp_path: Path) -> None:
    material = RedisTls.at(tmp_path)
    argv = redis_argv("redis-server", 6379, tmp_path, ["--user", "u", "on"], tls_args(6380, material))
    assert argv == [
        "redis-server",
        "--port", "6379",
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--dir", str(tmp_path),
        "--user", "u", "on",
        "--tls-port", "6380",
        "--tls-cert-file", str(tmp_path / "server.pem"),
        "--tls-key-file", str(tmp_path / "server.key"),
        "--tls-ca-cert-file", str(tmp_path / "ca.pem"),
        "--tls-auth-clients", "optional",
    ]  # fmt: skip
    assert "the-real-password" not in " ".join(acl_user_args("turnledger", "the-real-password"))


def test_without_openssl_there_is_no_tls_port_in_the_argv(tmp_path: Path) -> None:
    argv = redis_argv("redis-server", 6379, tmp_path, [])
    assert not [arg for arg in argv if arg.startswith("--tls")]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RedisTls]:
    tool = openssl()
    if tool is None:
        pytest.skip("openssl is not installed")
    directory = tmp_path_factory.mktemp("state") / "redis-tls"
    return directory, ensure_redis_tls(directory, tool)


def test_openssl_makes_a_ca_and_a_server_certificate_with_a_private_key(made: tuple[Path, RedisTls]) -> None:
    directory, material = made
    assert sorted(p.name for p in directory.iterdir()) == [
        "ca.pem", "client.key", "client.pem", "not-after", "server.key", "server.pem",
    ]  # fmt: skip
    assert (_mode(material.key_file), _mode(material.client_key_file), _mode(directory)) == (
        0o600,
        0o600,
        0o755,
    )
    assert not list(directory.parent.glob(".redis-tls-*")), "the staging directory (and the CA's key) is gone"
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-text", "-in", str(material.cert_file)],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert "IP Address:127.0.0.1, DNS:localhost" in text
    assert "Issuer: CN = turnledger devstack Redis CA" in text
    verified = subprocess.run(
        ["openssl", "verify", "-x509_strict", "-CAfile", str(material.ca_file), str(material.cert_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.stdout.strip() == f"{material.cert_file}: OK", verified.stderr
    context = ssl.create_default_context(cafile=str(material.ca_file))
    context.load_cert_chain(material.cert_file, material.key_file)  # the key is the certificate's


def test_openssl_makes_a_client_certificate_of_the_same_ca(made: tuple[Path, RedisTls]) -> None:
    """The client's certificate is for clients only (clientAuth) and the CA signed it, so the TLS port,
    which trusts that CA, takes it."""
    _, material = made
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-text", "-in", str(material.client_cert_file)],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert "Subject: CN = turnledger\n" in text
    assert "TLS Web Client Authentication" in text and "TLS Web Server Authentication" not in text
    verified = subprocess.run(
        ["openssl", "verify", "-x509_strict", "-purpose", "sslclient", "-CAfile", str(material.ca_file),
         str(material.client_cert_file)],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert verified.stdout.strip() == f"{material.client_cert_file}: OK", verified.stderr
    ssl.create_default_context().load_cert_chain(material.client_cert_file, material.client_key_file)


def test_the_material_is_made_once_and_again_when_expiring(made: tuple[Path, RedisTls]) -> None:
    directory, material = made
    tool = openssl()
    assert tool is not None
    before = material.cert_file.read_bytes()
    assert ensure_redis_tls(directory, tool) == material
    assert material.cert_file.read_bytes() == before
    assert not redis_tls.needs_renewal(directory, time.time())
    assert redis_tls.needs_renewal(directory, time.time() + (tls.VALIDITY_DAYS - 0.5) * 86400)


def test_incomplete_or_unreadable_material_is_made_anew(tmp_path: Path) -> None:
    for name in redis_tls.MATERIAL:
        (tmp_path / name).write_text("x")
    assert redis_tls.needs_renewal(tmp_path, time.time()), "an unreadable not-after"
    (tmp_path / "not-after").write_text(f"{time.time() + 7 * 86400:.0f}\n")
    assert not redis_tls.needs_renewal(tmp_path, time.time())
    (tmp_path / "server.key").unlink()
    assert redis_tls.needs_renewal(tmp_path, time.time())


def test_the_tls_material_lives_beside_the_broker_s_not_in_it(tmp_path: Path) -> None:
    """tls.ensure_broker_tls replaces `tls/` whole; a session's stack shares its state dir's."""
    assert LocalStack(tmp_path).redis_tls_dir == tmp_path / "redis-tls"
    session = LocalStack(tmp_path / "session-1", tls_dir=tmp_path / "tls")
    assert session.redis_tls_dir == tmp_path / "redis-tls"


def test_the_export_line_points_a_client_at_the_tls_port_by_the_password_s_file(tmp_path: Path) -> None:
    password_file, ca_file = tmp_path / "turnledger.password", tmp_path / "ca.pem"
    password_file.write_text("the-real-password\n")
    ca_file.write_bytes(FIXTURE_CA.read_bytes())
    state = _state(**{**REDIS_TLS, "redis_password_file": str(password_file), "redis_ca_file": str(ca_file)})
    assert state.redis_tls_export_line == (
        "# REDIS TLS: export REDIS_URL=rediss://turnledger@127.0.0.1:5555/0 "
        f"REDIS_PASSWORD_FILE={password_file} REDIS_SSL_CA_FILE={ca_file}"
    )
    env = state.redis_tls_client_env()
    assert env is not None
    assert client_options(env["REDIS_URL"], env) == {
        "socket_connect_timeout": 5.0,
        "ssl_ca_certs": str(ca_file),
        "password": "the-real-password",
    }


def test_a_stack_json_from_before_the_tls_port_still_loads(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(json.dumps(OLD_STATE))
    state = LocalStack(tmp_path).state()
    assert state is not None and state.redis_url == "redis://127.0.0.1:2222/0"
    assert all(getattr(state, name) is None for name in REDIS_TLS)
    assert state.redis_tls_client_env() is None and state.redis_tls_export_line is None


def test_the_redis_fields_round_trip_through_stack_json(tmp_path: Path) -> None:
    state = _state(**REDIS_TLS)
    (tmp_path / STATE_FILE).write_text(json.dumps(dataclasses.asdict(state)))
    assert LocalStack(tmp_path).state() == state
    assert json.loads((tmp_path / STATE_FILE).read_text()).items() >= REDIS_TLS.items()


def test_without_openssl_only_the_tls_port_is_missing() -> None:
    state = _state(**{**REDIS_TLS, "redis_tls_url": None, "redis_ca_file": None})
    assert state.redis_username == "turnledger" and state.redis_tls_export_line is None
    assert redis_tls_client_env(None, "/p", "/c") is None


def test_endpoints_take_the_devstack_redis_s_user_and_tls_port() -> None:
    state = _state(**REDIS_TLS)
    endpoints = Endpoints(state.bootstrap, state.redis_url, "test").with_redis_of(state)
    assert {name: getattr(endpoints, name) for name in REDIS_TLS} == REDIS_TLS
    assert endpoints.redis_tls_client_env() == state.redis_tls_client_env()
    assert Endpoints(state.bootstrap, "redis://elsewhere:6379/0", "env").redis_tls_client_env() is None
    assert Endpoints(state.bootstrap, state.redis_url, "test").with_redis_of(None).redis_tls_url is None


def test_dev_status_prints_the_tls_port_and_its_commented_export_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "out", Console(width=400))  # one line per item, whatever the terminal's width
    password_file = tmp_path / "turnledger.password"
    password_file.write_text("the-real-password\n")
    state = _state(**{**REDIS_TLS, "redis_password_file": str(password_file)})
    cli._print_state(state, Settings.from_env())
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert [line for line in lines if line.startswith("export")] == [state.export_line]
    assert [line for line in lines if line.startswith("# REDIS TLS: ")] == [state.redis_tls_export_line]
    assert [line for line in lines if line.startswith("Redis TLS ")] == [
        "Redis TLS        rediss://turnledger@127.0.0.1:5555/0  (ACL user turnledger; password in "
        f"{password_file}; CA /state/redis-tls/ca.pem)"
    ]
    assert "the-real-password" not in printed


def test_dev_status_says_why_the_devstack_redis_has_no_tls_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "openssl", lambda: None)
    cli._print_state(_state(redis_username="turnledger"), Settings.from_env())
    printed = capsys.readouterr().out
    assert "Redis TLS        none: openssl was not found on PATH" in printed
    assert "# REDIS TLS" not in printed
