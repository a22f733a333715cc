"""The devstack broker's SASL_SSL and SSL (mutual TLS) listeners without a broker: their config
lines, the StorageTool's SCRAM options, the passwords and certificates they keep, and how `stack.json`
and `dev status` show them.

The listeners themselves, logged in to, are tests/integration/test_secured_listener.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import ssl
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnledger.devstack import cli, jars, kafka, tls
from turnledger.devstack.credentials import stored_password, write_private
from turnledger.devstack.errors import DevstackError, PortInUse
from turnledger.devstack.restartable import RestartableKafka
from turnledger.devstack.session import Endpoints
from turnledger.devstack.settings import Settings
from turnledger.devstack.stack import STATE_FILE, LocalStack, StackState
from turnledger.devstack.tls import BrokerTls, ClientTls
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


def test_the_mutual_tls_listener_is_a_fourth_listener_that_requires_a_client_certificate(
    tmp_path: Path,
) -> None:
    material = BrokerTls(tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "broker.p12", "store-secret")
    props = kafka.render_config(tmp_path / "kafka", 19092, 19093, 19094, "sasl-secret", material, 19095)
    lines = props.read_text().splitlines()
    ports = (
        "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,SASL_SSL://127.0.0.1:19094,"
        "SSL://127.0.0.1:19095"
    )
    assert f"listeners={ports}" in lines and f"advertised.listeners={ports}" in lines
    assert (
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL"
        in lines
    )
    assert "inter.broker.listener.name=PLAINTEXT" in lines
    prefix = "listener.name.ssl."
    assert [line for line in lines if line.startswith(prefix)] == [
        f"{prefix}ssl.client.auth=required",
        f"{prefix}ssl.keystore.type=PKCS12",
        f"{prefix}ssl.keystore.location={tmp_path / 'tls' / 'broker.p12'}",
        f"{prefix}ssl.keystore.password=store-secret",
        f"{prefix}ssl.key.password=store-secret",
        f"{prefix}ssl.truststore.type=PEM",
        f"{prefix}ssl.truststore.location={tmp_path / 'tls' / 'ca.pem'}",
    ]
    assert not [line for line in lines if line.startswith("ssl.")], "nothing broker-wide: SASL_SSL unchanged"
    assert "truststore.password" not in props.read_text(), "Kafka refuses a password for a PEM truststore"


def test_without_a_client_certificate_there_is_no_ssl_listener(rendered: tuple[Path, list[str]]) -> None:
    props, lines = rendered
    assert "SSL://" not in props.read_text().replace("SASL_SSL://", "")
    assert not [line for line in lines if line.startswith("listener.name.ssl.")]
    ca = props.parent / "ca.pem"
    assert kafka._mtls_listener(19095, ca, None) is None
    client = ClientTls(props.parent / "client.pem", props.parent / "client.key")
    assert kafka._mtls_listener(19095, ca, client) == kafka.MutualTlsListener(
        "127.0.0.1:19095", ca, client.cert_file, client.key_file
    )


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


def test_five_distinct_ports_and_a_fixed_secured_port_in_use_is_a_typed_error(bound_port: int) -> None:
    for _ in range(20):
        assert len(set(kafka._pick_ports(None, None))) == 5
    assert kafka._pick_ports(None, None, 19094, 19095, 19096)[2:] == (19094, 19095, 19096)
    with pytest.raises(PortInUse, match="SASL_SSL listener"):
        kafka._pick_ports(None, None, bound_port)
    with pytest.raises(PortInUse, match=r"SSL \(mutual TLS\) listener"):
        kafka._pick_ports(None, None, None, bound_port)
    with pytest.raises(PortInUse, match="OAUTHBEARER listener"):
        kafka._pick_ports(None, None, None, None, bound_port)


def test_a_restartable_broker_keeps_its_mutual_tls_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients given the address before a restart find the listener there again, like the others."""
    started: list[dict[str, object]] = []
    monkeypatch.setattr("turnledger.devstack.restartable.start_kafka", lambda *_, **kw: started.append(kw))
    broker = RestartableKafka(tmp_path, Settings.from_env())
    broker._jars = jars.KafkaJars(version="test", libs=tmp_path)
    broker.start()
    broker.start()
    ports = [
        broker.broker_port,
        broker.controller_port,
        broker.secure_port,
        broker.mtls_port,
        broker.oauth_port,
    ]
    assert len(set(ports)) == 5
    assert [kw["mtls_port"] for kw in started] == [broker.mtls_port, broker.mtls_port]
    assert [kw["oauth_port"] for kw in started] == [broker.oauth_port, broker.oauth_port]


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


needs_keytool = pytest.mark.skipif(
    shutil.which("keytool") is None, reason="needs keytool (it ships with Java)"
)
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def made_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, BrokerTls]]:
    """One set made by keytool and (when installed) openssl in `<root>/tls`, for the tests that only
    read it: each set is six JVM starts."""
    root = tmp_path_factory.mktemp("made")
    yield root, tls.ensure_broker_tls(root / "tls")


@needs_keytool
def test_keytool_makes_a_proper_ca_and_a_private_keystore_once(made_tls: tuple[Path, BrokerTls]) -> None:
    tmp_path, made = made_tls
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


@needs_keytool
@needs_openssl
def test_the_client_certificate_is_the_ca_s_for_turnledger_in_pem_files_with_a_private_key(
    made_tls: tuple[Path, BrokerTls],
) -> None:
    """What KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE take: a PEM certificate of CN=turnledger for
    client authentication, signed by the devstack's CA, and its key, unencrypted PKCS#8, mode 0600."""
    root, made = made_tls
    assert made.client == ClientTls(root / "tls" / "client.pem", root / "tls" / "client.key")
    cert, key = made.client.cert_file, made.client.key_file
    assert _mode(key) == 0o600
    key_text = key.read_text()
    assert key_text.startswith("-----BEGIN PRIVATE KEY-----\n") and "ENCRYPTED" not in key_text
    assert cert.read_text().count("-----BEGIN CERTIFICATE-----") == 1
    ssl.create_default_context(ssl.Purpose.SERVER_AUTH).load_cert_chain(cert, key)  # a pair, no password
    verified = _openssl("verify", "-CAfile", str(made.ca_file), "-purpose", "sslclient", str(cert))
    assert verified == f"{cert}: OK"
    assert _openssl("x509", "-in", str(cert), "-noout", "-subject") == "subject=CN = turnledger"
    ca_key_left = [p for p in root.rglob("*") if p.name in ("ca.p12", "client.csr", "chain.pem")]
    assert ca_key_left == [], "the CA's keystore (its key) is gone with the pass that signed"


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout.strip()


@needs_keytool
def test_without_openssl_the_material_has_no_client_certificate_and_is_made_again_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left out, not a failure: the broker starts without its SSL listener. Once openssl is there,
    a set without the client certificate is incomplete and made anew."""
    monkeypatch.setattr(tls, "openssl", lambda: None)
    made = tls.ensure_broker_tls(tmp_path / "tls")
    assert made.client is None and made.ca_file.is_file()
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == [
        "broker.p12",
        "ca.pem",
        "keystore.password",
        "not-after",
    ]
    assert not tls.needs_renewal(tmp_path / "tls", time.time())
    assert tls.needs_renewal(tmp_path / "tls", time.time(), client=True)


@pytest.mark.parametrize(
    ("files", "client", "renew"),
    [
        (("ca.pem", "broker.p12", "keystore.password", "not-after"), False, False),
        (("ca.pem", "broker.p12", "keystore.password", "not-after"), True, True),
        (("ca.pem", "broker.p12", "keystore.password", "not-after", "client.pem"), True, True),
        (("ca.pem", "broker.p12", "keystore.password", "not-after", "client.pem", "client.key"), True, False),
    ],
)
def test_the_client_certificate_is_part_of_the_set_when_openssl_can_make_it(
    tmp_path: Path, files: tuple[str, ...], client: bool, renew: bool
) -> None:
    now = 1_800_000_000.0
    for name in files:
        (tmp_path / name).write_text(f"{now + 2 * 86400:.0f}\n" if name == "not-after" else "x")
    assert tls.needs_renewal(tmp_path, now, client=client) is renew
    assert (tls.BrokerTls.at(tmp_path).client is not None) is ("client.key" in files)


def _state(**secured: str | None) -> StackState:
    return StackState(**{**OLD_STATE, **secured})  # type: ignore[arg-type]


SECURED = {
    "secure_bootstrap": "127.0.0.1:3333",
    "sasl_username": "turnledger",
    "sasl_password_file": "/state/kafka/sasl.password",
    "ssl_ca_file": "/state/tls/ca.pem",
}


MTLS = {
    "mtls_bootstrap": "127.0.0.1:4444",
    "ssl_client_cert_file": "/state/tls/client.pem",
    "ssl_client_key_file": "/state/tls/client.key",
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
    assert state.mtls_client_env() is None and state.mtls_export_line is None


def test_a_stack_json_from_before_the_mutual_tls_listener_still_loads(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(json.dumps({**OLD_STATE, **SECURED}))
    state = LocalStack(tmp_path).state()
    assert state is not None and state.secure_bootstrap == "127.0.0.1:3333"
    assert all(getattr(state, name) is None for name in MTLS)
    assert state.mtls_client_env() is None and state.mtls_export_line is None


def test_the_secured_fields_round_trip_through_stack_json(tmp_path: Path) -> None:
    state = _state(**SECURED, **MTLS)
    (tmp_path / STATE_FILE).write_text(json.dumps(dataclasses.asdict(state)))
    assert LocalStack(tmp_path).state() == state
    assert json.loads((tmp_path / STATE_FILE).read_text()).items() >= MTLS.items()


def test_the_mutual_tls_export_line_points_a_client_at_the_listener_with_its_certificate(
    tmp_path: Path,
) -> None:
    files = {name: tmp_path / name for name in ("ca.pem", "client.pem", "client.key")}
    for path in files.values():
        path.write_text("-----BEGIN-----\n")
    state = _state(
        **{**SECURED, "ssl_ca_file": str(files["ca.pem"])},
        mtls_bootstrap="127.0.0.1:4444",
        ssl_client_cert_file=str(files["client.pem"]),
        ssl_client_key_file=str(files["client.key"]),
    )
    assert state.mtls_export_line == (
        "# SSL (mutual TLS): export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:4444 KAFKA_SECURITY_PROTOCOL=SSL "
        f"KAFKA_SSL_CA_FILE={files['ca.pem']} KAFKA_SSL_CERT_FILE={files['client.pem']} "
        f"KAFKA_SSL_KEY_FILE={files['client.key']}"
    )
    env = state.mtls_client_env()
    assert env is not None
    security = KafkaSecurity.from_env(env)
    assert (security.protocol, security.sasl, security.check_hostname) == ("SSL", False, True)
    assert (security.ca_file, security.cert_file, security.key_file) == tuple(files.values())


def test_endpoints_take_the_mutual_tls_listener_of_the_devstack_s_broker() -> None:
    state = _state(**SECURED, **MTLS)
    endpoints = Endpoints(state.bootstrap, state.redis_url, "test").with_broker_of(state)
    assert {name: getattr(endpoints, name) for name in MTLS} == MTLS
    assert endpoints.mtls_client_env() == state.mtls_client_env()
    assert Endpoints("elsewhere:9092", state.redis_url, "env").mtls_client_env() is None


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


def test_dev_status_prints_the_mutual_tls_listener_and_its_commented_export_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path))
    state = _state(**SECURED, **MTLS)
    cli._print_state(state, Settings.from_env())
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("export")] == [state.export_line]
    assert state.mtls_export_line is not None and state.mtls_export_line in lines
    assert any(line.startswith("Kafka SSL ") and "127.0.0.1:4444" in line for line in lines)


def test_dev_status_says_why_a_devstack_broker_has_no_mutual_tls_listener(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "openssl", lambda: None)
    cli._print_state(_state(**SECURED), Settings.from_env())
    printed = capsys.readouterr().out
    assert "Kafka SSL        none: openssl was not found on PATH" in printed
    assert "# SSL (mutual TLS)" not in printed


def test_an_external_broker_gets_no_secured_fields() -> None:
    plain = _state()
    assert plain.secure_export_line is None and plain.mtls_export_line is None
    assert all(getattr(plain, name) is None for name in {**SECURED, **MTLS})
