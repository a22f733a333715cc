"""The devstack broker's SASL_SSL and SSL (mutual TLS) listeners, reached as a turnledger client
reaches a managed cluster.

Every client here is built from the KAFKA_* variables `turnledger dev up` prints, through
`KafkaSecurity.from_env` and its `client_options()`, which is how the services get theirs: each
enabled mechanism logs in over TLS (hostname checked) and carries records both ways, the devstack's
client certificate does the same on the listener that requires one, and what the broker refuses (a
wrong password, a CA that did not sign its certificate, no client certificate or one of another CA)
is a `KafkaAccessError` from `diagnose`, not an outage waited out. It starts nothing: it uses the
session's devstack.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from tests.conftest import skip_unless_installed
from turnledger.devstack.kafka import SASL_MECHANISMS
from turnledger.devstack.kafka_admin import create_topic
from turnledger.devstack.session import Endpoints, in_ci
from turnledger.devstack.tls import BrokerTls, ensure_broker_tls, openssl
from turnledger.errors import KafkaAccessError
from turnledger.kafka.connection import (
    ENV_CA_FILE,
    ENV_CERT_FILE,
    ENV_CHECK_HOSTNAME,
    ENV_KEY_FILE,
    ENV_MECHANISM,
    ENV_PASSWORD_FILE,
    KafkaSecurity,
    diagnose,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured_env(devstack: Endpoints) -> dict[str, str]:
    """The variables for the listener (SCRAM-SHA-512). Only the local devstack's broker has one; a
    broker from KAFKA_BOOTSTRAP_SERVERS or Docker has not: skipped then, but failed under CI, whose
    run starts the local devstack, so that a listener gone missing cannot pass as a skip."""
    env = devstack.secure_client_env()
    if env is None:
        message = (
            f"the broker at {devstack.bootstrap} ({devstack.source}) has no SASL_SSL listener: only "
            "the local devstack's own broker has one (unset KAFKA_BOOTSTRAP_SERVERS)"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return env


@pytest.fixture(scope="module")
def mtls_env(secured_env: dict[str, str], devstack: Endpoints) -> dict[str, str]:
    """The variables for the SSL listener with the devstack's client certificate. A devstack broker
    has it whenever openssl is installed: skipped without, but failed under CI (`make` installs Java,
    which brings openssl on Debian), as the project does for Prometheus and Chromium."""
    env = devstack.mtls_client_env()
    if env is None:
        if openssl() is None:
            skip_unless_installed("openssl", "apt-get install -y openssl")
        pytest.fail(
            f"the devstack's broker ({devstack.source}) has no mutual-TLS listener, openssl installed"
        )
    return env


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> BrokerTls:
    """Material made the same way, by the same code, by another CA: its CA did not sign the broker's
    certificate, and the broker's truststore does not hold it."""
    return ensure_broker_tls(tmp_path_factory.mktemp("stranger") / "tls")


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


@pytest.mark.parametrize("server_name", ["127.0.0.1", "localhost"])
def test_the_broker_certificate_verifies_strictly_for_its_names(
    secured_env: dict[str, str], server_name: str
) -> None:
    """Python's own TLS client, hostname checked and X509_STRICT on (Python 3.13's default), accepts
    the certificate with nothing but the CA file the devstack prints."""
    context = ssl.create_default_context(cafile=secured_env[ENV_CA_FILE])
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    assert context.check_hostname
    with (
        socket.create_connection(_host_port(secured_env["KAFKA_BOOTSTRAP_SERVERS"]), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        certificate = tls.getpeercert()
    assert certificate is not None
    assert certificate["subjectAltName"] == (("IP Address", "127.0.0.1"), ("DNS", "localhost"))


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
async def test_each_mechanism_logs_in_over_tls_and_carries_records(
    secured_env: dict[str, str], mechanism: str, topic_name: Callable[[str], str]
) -> None:
    security = KafkaSecurity.from_env({**secured_env, ENV_MECHANISM: mechanism})
    assert (security.protocol, security.mechanism, security.check_hostname) == ("SASL_SSL", mechanism, True)
    bootstrap = secured_env["KAFKA_BOOTSTRAP_SERVERS"]
    await diagnose(bootstrap, security)
    await _round_trip(bootstrap, security, topic_name(mechanism.lower()))


async def _round_trip(bootstrap: str, security: KafkaSecurity, topic: str) -> None:
    """Create `topic`, produce ten records and read them back, every client with `security`."""
    options = security.client_options()
    await create_topic(bootstrap, topic, **options)
    sent = [f"{topic}-{i}".encode() for i in range(10)]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, **options)
    await producer.start()
    try:
        for value in sent:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    assert await _read(bootstrap, topic, len(sent), options) == sent


async def _read(bootstrap: str, topic: str, count: int, options: dict[str, object]) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **options)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            values.extend(record.value for record in batch.get(tp, []) if record.value is not None)
        return values
    finally:
        await consumer.stop()


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
async def test_a_wrong_password_is_an_access_error(
    secured_env: dict[str, str], mechanism: str, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    security = KafkaSecurity.from_env(
        {**secured_env, ENV_MECHANISM: mechanism, ENV_PASSWORD_FILE: str(wrong)}
    )
    bootstrap = secured_env["KAFKA_BOOTSTRAP_SERVERS"]
    with pytest.raises(KafkaAccessError) as refused:
        await diagnose(bootstrap, security)
    cause = refused.value.cause
    assert (type(cause), refused.value.bootstrap) == (SaslAuthenticationFailed, bootstrap)
    assert str(refused.value) == (  # the credentials refused, not the listener; never the password
        f"Kafka at {bootstrap!r} refused the connection (SASL_SSL, {mechanism} as 'turnledger', CA "
        f"{secured_env[ENV_CA_FILE]}): SaslAuthenticationFailed: {cause}. Check KAFKA_SASL_USERNAME and "
        "KAFKA_SASL_PASSWORD (or KAFKA_SASL_PASSWORD_FILE)."
    )
    assert "not-the-password" not in str(refused.value)


def _ipv6_loopback_reaches(port: int) -> bool:
    try:
        socket.create_connection(("::ffff:127.0.0.1", port), timeout=10).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("form", ["after an address nobody listens on", "as an IPv6 literal"])
async def test_every_bootstrap_address_is_tried_in_its_form_until_one_answers(
    secured_env: dict[str, str], form: str, tmp_path: Path
) -> None:
    """The refusal is found behind a first address that refuses the connection (port 1), and at an
    address in brackets (the listener's own, IPv4-mapped: its certificate names 127.0.0.1, so the
    hostname is not checked there)."""
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    env = {**secured_env, ENV_PASSWORD_FILE: str(wrong)}
    host, port = _host_port(secured_env["KAFKA_BOOTSTRAP_SERVERS"])
    if form == "as an IPv6 literal":
        if not _ipv6_loopback_reaches(port):
            pytest.skip("no IPv6 on this machine's loopback")
        bootstrap, env = f"[::ffff:{host}]:{port}", {**env, ENV_CHECK_HOSTNAME: "false"}
    else:
        bootstrap = f"127.0.0.1:1,{host}:{port}"
    with pytest.raises(KafkaAccessError) as refused:
        await diagnose(bootstrap, KafkaSecurity.from_env(env))
    assert (type(refused.value.cause), refused.value.bootstrap) == (SaslAuthenticationFailed, bootstrap)


async def test_a_ca_that_did_not_sign_the_broker_certificate_is_an_access_error(
    secured_env: dict[str, str], stranger: BrokerTls
) -> None:
    """A CA made the same way, by the same code, but not the one that signed the broker's certificate."""
    assert stranger.ca_file.read_bytes() != Path(secured_env[ENV_CA_FILE]).read_bytes()
    security = KafkaSecurity.from_env({**secured_env, ENV_CA_FILE: str(stranger.ca_file)})
    with pytest.raises(KafkaAccessError, match=re.escape(f"CA {stranger.ca_file}")) as refused:
        await diagnose(secured_env["KAFKA_BOOTSTRAP_SERVERS"], security)
    assert isinstance(refused.value.cause, ssl.SSLCertVerificationError)
    assert "certificate could not be verified" in str(refused.value)


async def test_the_client_certificate_carries_records_both_ways_over_mutual_tls(
    mtls_env: dict[str, str], topic_name: Callable[[str], str]
) -> None:
    """The settings of a cluster that takes a client certificate (Aiven's default), from the variables
    `dev up` prints: KAFKA_SECURITY_PROTOCOL=SSL with the CA, certificate and key files."""
    security = KafkaSecurity.from_env(mtls_env)
    assert (security.protocol, security.sasl, security.check_hostname) == ("SSL", False, True)
    assert (str(security.cert_file), str(security.key_file)) == (
        mtls_env[ENV_CERT_FILE],
        mtls_env[ENV_KEY_FILE],
    )
    bootstrap = mtls_env["KAFKA_BOOTSTRAP_SERVERS"]
    await diagnose(bootstrap, security)
    await _round_trip(bootstrap, security, topic_name("mtls"))


async def test_no_client_certificate_is_refused_and_diagnose_says_to_set_one(
    mtls_env: dict[str, str],
) -> None:
    """The broker's handshake half accepts (TLS 1.3: the client's handshake is over before the broker
    has checked its certificate), then its alert ends the connection under aiokafka's first request:
    "unable to bootstrap" to the producer, a KafkaAccessError from `diagnose`."""
    without = {k: v for k, v in mtls_env.items() if k not in (ENV_CERT_FILE, ENV_KEY_FILE)}
    security = KafkaSecurity.from_env(without)
    bootstrap = without["KAFKA_BOOTSTRAP_SERVERS"]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **security.client_options())
    with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
        await producer.start()
    await producer.stop()
    with pytest.raises(KafkaAccessError, match="requires a client certificate") as refused:
        await diagnose(bootstrap, security)
    assert isinstance(refused.value.cause, ssl.SSLError)
    assert refused.value.cause.reason == "SSLV3_ALERT_BAD_CERTIFICATE"
    assert "set KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE" in str(refused.value)


async def test_a_client_certificate_of_another_ca_is_refused(
    mtls_env: dict[str, str], stranger: BrokerTls
) -> None:
    if stranger.client is None:
        pytest.fail("openssl made the devstack's client certificate but not the stranger's")
    cert, key = stranger.client.cert_file, stranger.client.key_file
    security = KafkaSecurity.from_env({**mtls_env, ENV_CERT_FILE: str(cert), ENV_KEY_FILE: str(key)})
    with pytest.raises(
        KafkaAccessError, match=re.escape(f"did not accept the client certificate {cert}")
    ) as refused:
        await diagnose(mtls_env["KAFKA_BOOTSTRAP_SERVERS"], security)
    assert isinstance(refused.value.cause, ssl.SSLError)
    assert refused.value.cause.reason == "SSLV3_ALERT_CERTIFICATE_UNKNOWN"
