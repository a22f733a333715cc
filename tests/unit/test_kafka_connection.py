"""The KAFKA_* security variables: one working setting or a KafkaSettingsError naming the variable;
the aiokafka options every client gets; the password never printed. (Logins on a real SASL_SSL
listener: tests/integration/test_secured_listener.py.)"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.errors import IllegalSaslStateError, KafkaConnectionError, SaslAuthenticationFailed

from tests.unit.tls_servers import CERT, HOST, KEY, TLS, FakeTlsPort, closed_port, server_context, serving
from turnledger.errors import KafkaAccessError, KafkaSettingsError
from turnledger.kafka.connection import KafkaSecurity, diagnose
from turnledger.kafka.msk_iam import MskIam
from turnledger.kafka.oauth import OAuthTokenProvider

SCRAM = {
    "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
    "KAFKA_SASL_MECHANISM": "scram-sha-512",
    "KAFKA_SASL_USERNAME": "gateway",
    "KAFKA_SASL_PASSWORD": "pa55-w0rd-secret",
}


def test_nothing_set_is_plaintext_with_no_options() -> None:
    settings = KafkaSecurity.from_env({})
    assert settings == KafkaSecurity()
    assert (settings.client_options(), settings.describe(), settings.ssl_context) == ({}, "PLAINTEXT", None)


def test_sasl_over_tls_gives_every_option_and_names_never_the_password() -> None:
    settings = KafkaSecurity.from_env(SCRAM)
    options = settings.client_options()
    context = options.pop("ssl_context")
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert options == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "gateway",
        "sasl_plain_password": "pa55-w0rd-secret",
    }
    assert settings.describe() == "SASL_SSL, SCRAM-SHA-512 as 'gateway', the system's CAs"
    assert "pa55" not in repr(settings) and repr(settings.password) == "Password('***')"
    assert settings.fix(SaslAuthenticationFailed("nope")) == (
        "Check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD (or KAFKA_SASL_PASSWORD_FILE)."
    )
    assert settings.fix(IllegalSaslStateError()) == (
        "This listener does not take a SASL SCRAM-SHA-512 login: check the address (the broker's SASL "
        "listener, not its plaintext one) and KAFKA_SASL_MECHANISM."
    )
    assert settings.fix(ssl.SSLCertVerificationError("self-signed")) == (
        "The broker's certificate could not be verified: check KAFKA_SSL_CA_FILE (the CA that signed it; "
        "else the system's CAs are used) and that the address is a name the certificate holds."
    )


def test_sasl_in_the_clear_has_no_tls_context() -> None:
    env = {**SCRAM, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN"}
    options = KafkaSecurity.from_env(env).client_options()
    assert options == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "gateway",
        "sasl_plain_password": "pa55-w0rd-secret",
    }


def test_oauthbearer_from_aws_msk_iam() -> None:
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
        "KAFKA_SASL_OAUTHBEARER_AWS_REGION": "eu-west-1",
    }
    settings = KafkaSecurity.from_env(env)
    options = settings.client_options()
    assert (options["security_protocol"], options["sasl_mechanism"]) == ("SASL_SSL", "OAUTHBEARER")
    provider = options["sasl_oauth_token_provider"]
    assert isinstance(provider, OAuthTokenProvider) and provider is settings.oauth
    assert provider.source == MskIam("eu-west-1")
    assert settings.describe() == (
        "SASL_SSL, OAUTHBEARER from AWS MSK IAM in eu-west-1 (botocore's default credentials), "
        "the system's CAs"
    )
    assert settings.fix(SaslAuthenticationFailed("nope")) == provider.source.check()


def test_the_password_may_be_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    env = {**SCRAM, "KAFKA_SASL_PASSWORD": "", "KAFKA_SASL_PASSWORD_FILE": str(secret)}
    assert KafkaSecurity.from_env(env).client_options()["sasl_plain_password"] == "from-a-file"


def _ca(tmp_path: Path) -> Path:
    """A CA file Python's ssl can load: the certifi-free way is to reuse the system's bundle."""
    bundle = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        pytest.skip("no system CA bundle to stand for a CA file")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(bundle.read_bytes())
    return ca


def test_a_password_file_is_utf_8_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    secret = tmp_path / "password"
    secret.write_bytes("pässwört-秘密\n".encode())
    env = {**SCRAM, "KAFKA_SASL_PASSWORD": "", "KAFKA_SASL_PASSWORD_FILE": str(secret)}
    assert KafkaSecurity.from_env(env).client_options()["sasl_plain_password"] == "pässwört-秘密"


def test_tls_with_a_ca_file_and_without_a_hostname_check(tmp_path: Path) -> None:
    ca = _ca(tmp_path)
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SSL_CA_FILE": str(ca),
        "KAFKA_SSL_CHECK_HOSTNAME": "FALSE",
    }
    settings = KafkaSecurity.from_env(env)
    options = settings.client_options()
    assert options["security_protocol"] == "SSL" and set(options) == {"security_protocol", "ssl_context"}
    assert options["ssl_context"].check_hostname is False
    assert settings.describe() == f"SSL, CA {ca}"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL must be one of PLAINTEXT, SSL, "
         "SASL_PLAINTEXT, SASL_SSL, not 'TLS'"),
        ({**SCRAM, "KAFKA_SASL_MECHANISM": "KERBEROS"}, "KAFKA_SASL_MECHANISM must be one of PLAIN, "
         "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI, not 'KERBEROS'"),
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "KAFKA_SECURITY_PROTOCOL=SASL_SSL logs in with SASL: set "
         "KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD (or KAFKA_SASL_PASSWORD_FILE)"),
        ({**SCRAM, "KAFKA_SASL_USERNAME": " "}, "KAFKA_SECURITY_PROTOCOL=SASL_SSL logs in with SASL: set "
         "KAFKA_SASL_USERNAME"),
        ({**SCRAM, "KAFKA_SECURITY_PROTOCOL": "SSL"}, "KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, "
         "KAFKA_SASL_PASSWORD set, but KAFKA_SECURITY_PROTOCOL is SSL: set it to SASL_SSL (or "
         "SASL_PLAINTEXT) to log in, or unset them"),
        ({"KAFKA_SASL_USERNAME": "u"}, "KAFKA_SASL_USERNAME set, but KAFKA_SECURITY_PROTOCOL is "
         "PLAINTEXT: set it to SASL_SSL (or SASL_PLAINTEXT) to log in, or unset them"),
        ({"KAFKA_SASL_PASSWORD": "x"}, "KAFKA_SASL_PASSWORD set, but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: "
         "set it to SASL_SSL (or SASL_PLAINTEXT) to log in, or unset them"),
        ({"KAFKA_SASL_OAUTHBEARER_AWS_REGION": "eu-west-1"}, "KAFKA_SASL_OAUTHBEARER_AWS_REGION set, but "
         "KAFKA_SASL_MECHANISM is not OAUTHBEARER: set KAFKA_SECURITY_PROTOCOL=SASL_SSL and "
         "KAFKA_SASL_MECHANISM=OAUTHBEARER to log in with a token, or unset them"),
        ({**SCRAM, "KAFKA_SASL_PASSWORD_FILE": "/p"}, "set KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE, "
         "not both"),
        ({**SCRAM, "KAFKA_SSL_CHECK_HOSTNAME": "no"}, "KAFKA_SSL_CHECK_HOSTNAME must be true or false, "
         "not 'no'"),
        ({**SCRAM, "KAFKA_SSL_CA_FILE": "/nonexistent/ca.pem"}, "KAFKA_SSL_CA_FILE: cannot read the file "
         "/nonexistent/ca.pem"),
    ],
)  # fmt: skip
def test_settings_that_cannot_work_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSettingsError) as caught:
        KafkaSecurity.from_env(env)
    assert str(caught.value) == message


def test_files_that_cannot_work(tmp_path: Path) -> None:
    ca, empty, utf_16 = _ca(tmp_path), tmp_path / "empty", tmp_path / "utf-16"
    empty.write_text("\n")
    utf_16.write_text("password", encoding="utf-16")
    cases = {
        "KAFKA_SSL_CA_FILE set, but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: TLS needs SSL or SASL_SSL": {
            "KAFKA_SSL_CA_FILE": str(ca)
        },
        "a client certificate needs both KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE": {
            "KAFKA_SECURITY_PROTOCOL": "SSL",
            "KAFKA_SSL_CERT_FILE": str(ca),
        },
        "KAFKA_SSL_CA_FILE, KAFKA_SSL_CERT_FILE set, but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: TLS needs SSL "
        "or SASL_SSL": {"KAFKA_SSL_CA_FILE": str(ca), "KAFKA_SSL_CERT_FILE": str(ca)},
        f"KAFKA_SSL_CA_FILE: cannot read the file {tmp_path}": {
            "KAFKA_SECURITY_PROTOCOL": "SSL",
            "KAFKA_SSL_CA_FILE": str(tmp_path),  # a directory, readable but no file
        },
        f"KAFKA_SASL_PASSWORD_FILE: {empty} is empty": {
            **SCRAM,
            "KAFKA_SASL_PASSWORD": "",
            "KAFKA_SASL_PASSWORD_FILE": str(empty),
        },
        f"KAFKA_SASL_PASSWORD_FILE: {utf_16} is not UTF-8": {
            **SCRAM,
            "KAFKA_SASL_PASSWORD": "",
            "KAFKA_SASL_PASSWORD_FILE": str(utf_16),
        },
        f"KAFKA_SASL_PASSWORD_FILE: cannot read {tmp_path / 'none'} (No such file or directory)": {
            **SCRAM,
            "KAFKA_SASL_PASSWORD": "",
            "KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "none"),
        },
    }
    for message, env in cases.items():
        with pytest.raises(KafkaSettingsError) as caught:
            KafkaSecurity.from_env(env)
        assert str(caught.value) == message


def test_a_client_certificate_is_kept_and_named(tmp_path: Path) -> None:
    ca, cert, key = _ca(tmp_path), tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("certificate\n")
    key.write_text("key\n")
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SSL_CA_FILE": str(ca),
        "KAFKA_SSL_CERT_FILE": str(cert),
        "KAFKA_SSL_KEY_FILE": str(key),
    }
    settings = KafkaSecurity.from_env(env)
    assert settings == KafkaSecurity("SSL", ca_file=ca, cert_file=cert, key_file=key)
    assert settings.describe() == f"SSL, CA {ca}, client certificate {cert}"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port with a listening socket nobody accepts on: a connection to it completes all the same."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def _connections(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            connection, _ = server.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


async def test_diagnose_of_plaintext_connects_once_and_says_nothing_when_the_broker_took_it(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    assert await diagnose(f"127.0.0.1:{port}", KafkaSecurity(), timeout_s=0.5) is None
    assert _connections(listener) == 1


async def test_diagnose_says_why_no_address_took_a_connection_plain_or_secured() -> None:
    """aiokafka's error says only "Unable to bootstrap from [...]" (`reachability`)."""
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    refused = f"no broker answered: 127.0.0.1:{port}: refused the connection (nothing listens on that port)"
    sasl = KafkaSecurity.from_env({**SCRAM, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
    for settings in (KafkaSecurity(), sasl):
        found = await diagnose(f"127.0.0.1:{port}", settings)
        assert isinstance(found, KafkaConnectionError)
        assert str(found) == f"KafkaConnectionError: {refused}"


async def test_diagnose_of_a_secured_list_says_why_for_every_address_an_ipv6_one_bracketed() -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as v4,
        socket.create_server(("::1", 0), family=socket.AF_INET6) as v6,
    ):
        ports = v4.getsockname()[1], v6.getsockname()[1]
    sasl = KafkaSecurity.from_env({**SCRAM, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
    found = await diagnose(f"127.0.0.1:{ports[0]},[::1]:{ports[1]}", sasl)
    refused = "refused the connection (nothing listens on that port)"
    assert str(found) == (
        f"KafkaConnectionError: no broker answered: 127.0.0.1:{ports[0]}: {refused}; "
        f"[::1]:{ports[1]}: {refused}"
    )


def _alert(reason: str) -> ssl.SSLError:
    """An `ssl.SSLError` as Python's ssl raises it for a TLS alert the peer sent (its `reason`)."""
    error = ssl.SSLError(1, f"[SSL: {reason}] {reason.lower()} (_ssl.c:2580)")
    error.reason = reason
    return error


MTLS = {"KAFKA_SECURITY_PROTOCOL": "SSL"}


@pytest.mark.parametrize(
    "reason",
    ["SSLV3_ALERT_BAD_CERTIFICATE", "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV13_ALERT_CERTIFICATE_REQUIRED"],
)
def test_a_certificate_alert_from_the_broker_names_the_client_certificate(
    reason: str, tmp_path: Path
) -> None:
    """Not "the broker's certificate could not be verified": the broker refused ours (or its absence)."""
    assert KafkaSecurity.from_env(MTLS).fix(_alert(reason)) == (
        "The broker requires a client certificate (mutual TLS): set KAFKA_SSL_CERT_FILE and "
        "KAFKA_SSL_KEY_FILE."
    )
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("certificate")
    key.write_text("key")
    given = KafkaSecurity.from_env({**MTLS, "KAFKA_SSL_CERT_FILE": str(cert), "KAFKA_SSL_KEY_FILE": str(key)})
    assert given.fix(_alert(reason)) == (
        f"The broker did not accept the client certificate {cert}: check KAFKA_SSL_CERT_FILE and "
        "KAFKA_SSL_KEY_FILE (a certificate signed by a CA the broker trusts, still valid)."
    )
    assert given.fix(ssl.SSLCertVerificationError("self-signed")).startswith(
        "The broker's certificate could not be verified"
    ), "our own verification of the broker's certificate keeps its advice"


def _closed_because(cause: BaseException | None) -> KafkaConnectionError:
    """What aiokafka's `create_conn` raises when the connection ends under its first request (the
    ApiVersions lookup): "Connection at ... closed", the read's error as its cause."""
    error = KafkaConnectionError("Connection at 127.0.0.1:9093 closed")
    error.__cause__ = cause
    return error


async def test_diagnose_finds_the_certificate_alert_behind_a_closed_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under TLS 1.3 the client's handshake completes before the broker has checked its certificate:
    the broker's alert ends the connection under aiokafka's first request, not the handshake."""
    alert = _alert("SSLV3_ALERT_BAD_CERTIFICATE")

    async def refused(*_: object, **__: object) -> None:
        raise _closed_because(alert)

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", refused)
    with pytest.raises(KafkaAccessError) as caught:
        await diagnose("127.0.0.1:9093", KafkaSecurity.from_env(MTLS))
    assert (caught.value.cause, caught.value.bootstrap) == (alert, "127.0.0.1:9093")
    assert str(caught.value) == (
        f"Kafka at '127.0.0.1:9093' refused the connection (SSL, the system's CAs): SSLError: {alert}. The "
        "broker requires a client certificate (mutual TLS): set KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE."
    )


@pytest.mark.parametrize(
    "cause",
    [
        None,
        ConnectionResetError(104, "Connection reset by peer"),
        ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
        _alert("SSLV3_ALERT_HANDSHAKE_FAILURE"),
    ],
    ids=["no cause", "reset", "tls eof", "other alert"],
)
async def test_diagnose_leaves_any_other_closed_connection_to_be_waited_out(
    cause: BaseException | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker going away mid-connection (a reset, an EOF without close_notify) is an outage."""

    async def closed(*_: object, **__: object) -> None:
        raise _closed_because(cause)

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", closed)
    await diagnose(f"127.0.0.1:{await closed_port()}", KafkaSecurity.from_env(MTLS))


async def test_diagnose_asks_the_next_address_after_one_closed_without_a_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bootstrap list is asked address by address: the first closing for no reason of ours (a broker
    going away) says nothing, the second's refusal of the login is the verdict."""
    asked: list[str] = []
    gone, refusing = await closed_port(), await closed_port()
    refusal = SaslAuthenticationFailed("Authentication failed: invalid credentials")

    async def connect(host: str, port: int, **_: object) -> None:
        asked.append(f"{host}:{port}")
        if port == gone:
            raise _closed_because(ConnectionResetError(104, "Connection reset by peer"))
        raise refusal

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", connect)
    with pytest.raises(KafkaAccessError) as caught:
        await diagnose(f"127.0.0.1:{gone},127.0.0.1:{refusing}", KafkaSecurity.from_env(SCRAM))
    assert asked == [f"127.0.0.1:{gone}", f"127.0.0.1:{refusing}"]
    assert caught.value.cause is refusal


async def test_diagnose_gives_up_on_a_listener_that_never_answers_after_its_timeout(
    listener: socket.socket,
) -> None:
    """A broker that takes the connection and never answers is an outage, not a refusal: one connection,
    given up after `timeout_s` (not aiokafka's 40 s, nor never), and said as the cause."""
    settings = KafkaSecurity.from_env({**SCRAM, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
    port = listener.getsockname()[1]
    async with asyncio.timeout(5):
        found = await diagnose(f"127.0.0.1:{port}", settings, timeout_s=0.2)
    assert _connections(listener) == 1
    assert str(found) == f"KafkaConnectionError: no broker answered: 127.0.0.1:{port}: no answer within 0.2 s"


def _unverified(settings: KafkaSecurity) -> KafkaSecurity:
    """`settings` whose TLS context verifies nothing of the server (the fixtures' certificate is a
    client's); aiokafka's connection and the alert's probe share that one context."""
    assert settings.ssl_context is not None
    settings.ssl_context.check_hostname = False
    settings.ssl_context.verify_mode = ssl.CERT_NONE
    return settings


@pytest.mark.parametrize(
    ("certificate", "alert", "fix"),
    [
        (
            False,
            "TLSV13_ALERT_CERTIFICATE_REQUIRED",
            "The broker requires a client certificate (mutual TLS): set KAFKA_SSL_CERT_FILE and "
            "KAFKA_SSL_KEY_FILE.",
        ),
        (
            True,
            "TLSV1_ALERT_UNKNOWN_CA",
            f"The broker did not accept the client certificate {CERT}: check KAFKA_SSL_CERT_FILE and "
            "KAFKA_SSL_KEY_FILE (a certificate signed by a CA the broker trusts, still valid).",
        ),
    ],
    ids=["none given", "of an unknown CA"],
)
async def test_diagnose_reads_the_certificate_alert_a_reset_lost(
    certificate: bool, alert: str, fix: str
) -> None:
    """A listener that closes with aiokafka's first request unread (a TLS 1.3 proxy) resets the
    connection, and the reset loses the alert: aiokafka sees "connection reset". One more connection
    that writes nothing reads the alert, so the refusal is said instead of waited out as an outage."""
    files = {"KAFKA_SSL_CERT_FILE": CERT, "KAFKA_SSL_KEY_FILE": KEY} if certificate else {}
    settings = _unverified(KafkaSecurity.from_env({**MTLS, **files}))
    trusted = None if certificate else str(TLS / "ca.pem")
    server = FakeTlsPort(server_context(trusted=trusted, require=True), lose_alerts=1)
    async with serving(server) as port, asyncio.timeout(5):
        with pytest.raises(KafkaAccessError) as caught:
            await diagnose(f"{HOST}:{port}", settings)
    assert isinstance(caught.value.cause, ssl.SSLError)
    assert caught.value.cause.reason == alert
    assert str(caught.value).endswith(fix)
    assert server.accepted == 2, "aiokafka's connection, whose alert the reset lost, and the probe's"


async def test_diagnose_leaves_a_reset_with_no_alert_behind_it_to_be_waited_out() -> None:
    """A TLS listener that resets every connection after its handshake (a broker going away) sends no
    alert to the probe either: an outage, after exactly one more connection."""
    server = FakeTlsPort(server_context(), reset_after_handshake=True)
    async with serving(server) as port, asyncio.timeout(5):
        await diagnose(f"{HOST}:{port}", _unverified(KafkaSecurity.from_env(MTLS)))
    assert (server.accepted, server.failures) == (2, [])


async def test_diagnose_does_not_probe_a_plaintext_listener_that_closed() -> None:
    """Without TLS there is no certificate to refuse: a SASL_PLAINTEXT connection that closed is an
    outage, and nothing connects again."""
    server = FakeTlsPort(server_context(), reset_after_handshake=True)
    settings = KafkaSecurity.from_env({**SCRAM, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
    async with serving(server) as port, asyncio.timeout(5):
        await diagnose(f"{HOST}:{port}", settings)
    assert server.accepted == 1


async def test_diagnose_connects_to_the_host_named_with_only_its_brackets_removed_and_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An IPv6 literal's brackets go, and nothing else of a host name (an `X` at either end included):
    aiokafka's connection and the alert's probe (with the settings' own TLS context) reach the same host,
    and aiokafka waits `timeout_s` for an answer, 10 s unless told."""
    settings = KafkaSecurity.from_env(MTLS)
    connected: list[tuple[str, int, dict[str, object]]] = []
    probed: list[tuple[str, int, ssl.SSLContext]] = []

    async def closed(host: str, port: int, **options: object) -> None:
        connected.append((host, port, options))
        raise _closed_because(ConnectionResetError(104, "Connection reset by peer"))

    async def probe(host: str, port: int, context: ssl.SSLContext) -> None:
        probed.append((host, port, context))

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", closed)
    monkeypatch.setattr("turnledger.kafka.connection.read_alert", probe)
    await diagnose("[::1]:9093, Xkafka-0.internalX:9094", settings)
    await diagnose("[::1]:9093", settings, timeout_s=0.25)
    options = {"security_protocol": "SSL", "ssl_context": settings.ssl_context}
    assert connected == [
        ("::1", 9093, {"request_timeout_ms": 10_000, **options}),
        ("Xkafka-0.internalX", 9094, {"request_timeout_ms": 10_000, **options}),
        ("::1", 9093, {"request_timeout_ms": 250, **options}),
    ]
    assert probed == [(host, port, settings.ssl_context) for host, port, _ in connected]


@pytest.mark.parametrize(
    ("refusal", "fix"),
    [
        (
            SaslAuthenticationFailed("Authentication failed: invalid credentials"),
            "Check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD (or KAFKA_SASL_PASSWORD_FILE).",
        ),
        (
            IllegalSaslStateError("Unexpected handshake request with client mechanism SCRAM-SHA-512"),
            "This listener does not take a SASL SCRAM-SHA-512 login: check the address (the broker's SASL "
            "listener, not its plaintext one) and KAFKA_SASL_MECHANISM.",
        ),
    ],
    ids=["credentials", "mechanism"],
)
async def test_a_refusal_after_an_unreachable_address_is_said_whole(
    refusal: Exception, fix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An address that cannot be reached says nothing and the next is asked; the refusal there is a
    `KafkaAccessError` naming the whole bootstrap, the settings, the cause and what to check for it."""
    asked: list[int] = []

    async def connect(host: str, port: int, **_: object) -> None:
        asked.append(port)
        if port == 9092:
            raise ConnectionRefusedError(111, "Connection refused")
        raise refusal

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", connect)
    with pytest.raises(KafkaAccessError) as caught:
        await diagnose("127.0.0.1:9092,127.0.0.1:9093", KafkaSecurity.from_env(SCRAM))
    assert asked == [9092, 9093]
    assert (caught.value.bootstrap, caught.value.cause) == ("127.0.0.1:9092,127.0.0.1:9093", refusal)
    assert str(caught.value) == (
        "Kafka at '127.0.0.1:9092,127.0.0.1:9093' refused the connection (SASL_SSL, SCRAM-SHA-512 as "
        f"'gateway', the system's CAs): {type(refusal).__name__}: {refusal}. {fix}"
    )


def test_a_ca_file_that_holds_no_pem_certificate_is_a_settings_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    settings = KafkaSecurity.from_env({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CA_FILE": str(bad)})
    with pytest.raises(KafkaSettingsError) as refused:
        settings.client_options()
    assert str(refused.value) == (
        f"KAFKA_SSL_CA_FILE: cannot load {bad} as PEM certificates (NO_CERTIFICATE_OR_CRL_FOUND)"
    )
    assert isinstance(refused.value.__cause__, ssl.SSLError)


def test_a_client_certificate_and_key_that_do_not_load_are_a_settings_error_naming_both(
    tmp_path: Path,
) -> None:
    ca, bad_key = _ca(tmp_path), tmp_path / "client.key"
    bad_key.write_text("not a key\n")
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SSL_CA_FILE": str(ca),
        "KAFKA_SSL_CERT_FILE": CERT,
        "KAFKA_SSL_KEY_FILE": str(bad_key),
    }
    with pytest.raises(KafkaSettingsError) as refused:
        KafkaSecurity.from_env(env).client_options()
    assert str(refused.value).startswith(
        f"KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE: cannot load {CERT} and {bad_key} as a PEM certificate "
        "and its key ("
    )
    good = {**env, "KAFKA_SSL_KEY_FILE": KEY}
    assert KafkaSecurity.from_env(good).client_options()["ssl_context"].check_hostname is True
