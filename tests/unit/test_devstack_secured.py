"""The devstack broker's SASL_SSL listener without a broker: its config lines, the StorageTool's SCRAM
options, the passwords and certificates it keeps, and how `stack.json` and `dev status` show it.

The listener itself, logged in to, is tests/integration/test_secured_listener.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import ssl
import stat
import time
from pathlib import Path

import pytest

from turnledger.devstack import cli, jars, kafka, tls
from turnledger.devstack.credentials import stored_password, write_private
from turnledger.devstack.errors import DevstackError, PortInUse
from turnledger.devstack.settings import Settings
from turnledger.devstack.stack import STATE_FILE, LocalStack, StackState
from turnledger.devstack.tls import BrokerTls
from turnledger.kafka.connection import KafkaSecurity

OLD_STATE = {
    "bootstrap": "127.0.0.1:1111",
    "redis_url": "redis://127.0.0.1:2222/0",
    "kafka_version": "4.4.0",
    "kafka_pid": 11,
    "kafka_marker": "/state/kafka/server.properties",
    "redis_pid": 12,
    "redis_marker": "redis-server",
    "kafka_log": None,
    "redis_log": None,
    "prometheus_url": None,
    "prometheus_targets": None,
    "prometheus_pid": None,
    "prometheus_marker": None,
}
"""A stack.json as written before the secured listener existed."""


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def rendered(tmp_path: Path) -> tuple[Path, list[str]]:
    material = BrokerTls(tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "broker.p12", "store-secret")
    props = kafka.render_config(tmp_path / "kafka", 19092, 19093, 19094, "sasl-secret", material)
    return props, props.read_text().splitlines()


def test_the_sasl_ssl_listener_is_a_third_listener_beside_plaintext_and_controller(
    rendered: tuple[Path, list[str]],
) -> None:
    _, lines = rendered
    ports = "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,SASL_SSL://127.0.0.1:19094"
    assert f"listeners={ports}" in lines
    assert f"advertised.listeners={ports}" in lines
    assert (
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL" in lines
    )
    assert "inter.broker.listener.name=PLAINTEXT" in lines
    assert "controller.listener.names=CONTROLLER" in lines
    assert not [line for line in lines if "authorizer" in line and not line.startswith("#")]


def test_the_listener_enables_three_mechanisms_with_their_login_modules(
    rendered: tuple[Path, list[str]],
) -> None:
    _, lines = rendered
    prefix = "listener.name.sasl_ssl."
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_turnledger="sasl-secret";'
    assert {line for line in lines if line.startswith(prefix)} == {
        f"{prefix}sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
        f"{prefix}scram-sha-512.sasl.jaas.config={scram}",
        f"{prefix}scram-sha-256.sasl.jaas.config={scram}",
        f"{prefix}plain.sasl.jaas.config={plain}",
        f"{prefix}ssl.keystore.type=PKCS12",
        f"{prefix}ssl.keystore.location={rendered[0].parent.parent / 'tls' / 'broker.p12'}",
        f"{prefix}ssl.keystore.password=store-secret",
        f"{prefix}ssl.key.password=store-secret",
    }


def test_the_config_holding_passwords_is_private_also_when_rendered_again(
    rendered: tuple[Path, list[str]], tmp_path: Path
) -> None:
    props, _ = rendered
    assert _mode(props) == 0o600
    props.chmod(0o644)
    again = BrokerTls(tmp_path / "ca.pem", tmp_path / "broker.p12", "other-secret")
    kafka.render_config(props.parent, 19092, 19093, 19094, "sasl-secret", again)
    assert _mode(props) == 0o600 and "ssl.key.password=other-secret" in props.read_text()


def test_scram_credentials_are_added_at_format_for_both_scram_mechanisms() -> None:
    assert kafka.scram_arguments("turnledger", "pw-1_x") == [
        "--add-scram",
        "SCRAM-SHA-512=[name=turnledger,password=pw-1_x]",
        "--add-scram",
        "SCRAM-SHA-256=[name=turnledger,password=pw-1_x]",
    ]


def test_three_distinct_ports_and_a_fixed_secure_port_in_use_is_a_typed_error(bound_port: int) -> None:
    for _ in range(20):
        broker, controller, secure = kafka._pick_ports(None, None)
        assert len({broker, controller, secure}) == 3
    assert kafka._pick_ports(None, None, 19094)[2] == 19094
    with pytest.raises(PortInUse, match="SASL_SSL listener"):
        kafka._pick_ports(None, None, bound_port)


def test_a_stored_password_is_private_random_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "kafka" / "sasl.password"
    first = stored_password(path)
    assert _mode(path) == 0o600 and len(first) >= 32
    assert set(first) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert stored_password(path) == first, "a restart from the same data dir logs in with the same one"
    assert stored_password(tmp_path / "other" / "sasl.password") != first
    assert sorted(p.name for p in path.parent.iterdir()) == ["sasl.password"], "no draft left behind"


def test_write_private_never_replaces_a_file(tmp_path: Path) -> None:
    write_private(tmp_path / "secret", "one")
    with pytest.raises(FileExistsError):
        write_private(tmp_path / "secret", "two")
    assert (tmp_path / "secret").read_text() == "one"


def test_a_start_refuses_formatted_data_whose_password_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SCRAM credentials live in the formatted metadata: a new password could not log in there."""
    if shutil.which("java") is None:
        pytest.skip("needs a JVM")
    (tmp_path / "kafka" / "data").mkdir(parents=True)
    (tmp_path / "kafka" / "data" / "meta.properties").write_text("cluster.id=x\n")
    fake_jars = jars.KafkaJars(version="test", libs=tmp_path)
    with pytest.raises(DevstackError, match=r"sasl\.password is gone.*dev down"):
        kafka.start_kafka(fake_jars, tmp_path / "kafka", tmp_path / "kafka.pid")
    assert not (tmp_path / "tls").exists(), "refused before any certificate was made"


@pytest.mark.parametrize(
    ("files", "expires_in_s", "renew"),
    [
        (("ca.pem", "broker.p12", "keystore.password", "not-after"), 2 * 86400, False),
        (("ca.pem", "broker.p12", "keystore.password", "not-after"), 12 * 3600, True),
        (("ca.pem", "broker.p12", "keystore.password", "not-after"), -60, True),
        (("ca.pem", "keystore.password", "not-after"), 2 * 86400, True),
        (("ca.pem", "broker.p12", "keystore.password"), 2 * 86400, True),
    ],
)
def test_certificates_are_made_anew_when_missing_or_expiring_within_a_day(
    tmp_path: Path, files: tuple[str, ...], expires_in_s: float, renew: bool
) -> None:
    now = 1_800_000_000.0
    for name in files:
        (tmp_path / name).write_text(f"{now + expires_in_s:.0f}\n" if name == "not-after" else "x")
    assert tls.needs_renewal(tmp_path, now) is renew


def test_an_unreadable_expiry_means_new_certificates(tmp_path: Path) -> None:
    for name in ("ca.pem", "broker.p12", "keystore.password"):
        (tmp_path / name).write_text("x")
    (tmp_path / "not-after").write_text("soon\n")
    assert tls.needs_renewal(tmp_path, time.time())


@pytest.mark.skipif(shutil.which("keytool") is None, reason="needs keytool (it ships with Java)")
def test_keytool_makes_a_proper_ca_and_a_private_keystore_once(tmp_path: Path) -> None:
    made = tls.ensure_broker_tls(tmp_path / "tls")
    assert (_mode(made.keystore), _mode(tmp_path / "tls" / "keystore.password")) == (0o600, 0o600)
    assert made.password and made.password in (tmp_path / "tls" / "keystore.password").read_text()
    context = ssl.create_default_context(cafile=str(made.ca_file))
    cas = context.get_ca_certs()  # only certificates whose basicConstraints say CA:true
    assert [ca["subject"] for ca in cas] == [((("commonName", "turnledger devstack CA"),),)]
    not_after = ssl.cert_time_to_seconds(str(cas[0]["notAfter"]))
    assert abs(not_after - float((tmp_path / "tls" / "not-after").read_text())) < 120
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls"], "the CA key and drafts are gone"
    before = made.ca_file.read_bytes()
    assert tls.ensure_broker_tls(tmp_path / "tls") == made and made.ca_file.read_bytes() == before


def _state(**secured: str | None) -> StackState:
    return StackState(**{**OLD_STATE, **secured})  # type: ignore[arg-type]


SECURED = {
    "secure_bootstrap": "127.0.0.1:3333",
    "sasl_username": "turnledger",
    "sasl_password_file": "/state/kafka/sasl.password",
    "ssl_ca_file": "/state/tls/ca.pem",
}


def test_a_stack_json_from_before_the_listener_still_loads(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(json.dumps(OLD_STATE))
    state = LocalStack(tmp_path).state()
    assert state is not None and state.bootstrap == "127.0.0.1:1111"
    assert (state.secure_bootstrap, state.sasl_username, state.sasl_password_file, state.ssl_ca_file) == (
        None,
        None,
        None,
        None,
    )
    assert state.secure_client_env() is None and state.secure_export_line is None


def test_the_secured_fields_round_trip_through_stack_json(tmp_path: Path) -> None:
    state = _state(**SECURED)
    (tmp_path / STATE_FILE).write_text(json.dumps(dataclasses.asdict(state)))
    assert LocalStack(tmp_path).state() == state


def test_the_secured_export_line_points_a_client_at_the_listener_without_the_password(
    tmp_path: Path,
) -> None:
    password_file, ca_file = tmp_path / "sasl.password", tmp_path / "ca.pem"
    password_file.write_text("the-real-password\n")
    ca_file.write_text("-----BEGIN CERTIFICATE-----\n")
    state = _state(**{**SECURED, "sasl_password_file": str(password_file), "ssl_ca_file": str(ca_file)})
    assert (
        state.export_line
        == "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1111 REDIS_URL=redis://127.0.0.1:2222/0"
    )
    line = state.secure_export_line
    assert line == (
        "# SASL_SSL: export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:3333 KAFKA_SECURITY_PROTOCOL=SASL_SSL "
        f"KAFKA_SASL_MECHANISM=SCRAM-SHA-512 KAFKA_SASL_USERNAME=turnledger "
        f"KAFKA_SASL_PASSWORD_FILE={password_file} KAFKA_SSL_CA_FILE={ca_file}"
    )
    env = state.secure_client_env("PLAIN")
    assert env is not None
    security = KafkaSecurity.from_env(env)
    assert (security.protocol, security.mechanism, security.username) == ("SASL_SSL", "PLAIN", "turnledger")
    assert security.password is not None and security.password.reveal() == "the-real-password"
    assert security.ca_file == ca_file and security.check_hostname


def test_a_path_with_a_space_is_quoted_in_the_export_line() -> None:
    line = _state(**{**SECURED, "ssl_ca_file": "/my state/tls/ca.pem"}).secure_export_line
    assert line is not None and line.endswith("KAFKA_SSL_CA_FILE='/my state/tls/ca.pem'")


def test_dev_status_prints_the_listener_and_keeps_the_one_line_scripts_grep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path))
    password_file = tmp_path / "sasl.password"
    password_file.write_text("the-real-password\n")
    state = _state(**{**SECURED, "sasl_password_file": str(password_file)})
    cli._print_state(state, Settings.from_env())
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert [line for line in lines if line.startswith("export")] == [state.export_line]
    assert state.secure_export_line in lines
    assert any(line.startswith("Kafka SASL_SSL") and "127.0.0.1:3333" in line for line in lines)
    assert "the-real-password" not in printed


def test_an_external_broker_gets_no_secured_fields() -> None:
    plain = _state()
    assert plain.secure_export_line is None
    assert all(getattr(plain, name) is None for name in SECURED)
