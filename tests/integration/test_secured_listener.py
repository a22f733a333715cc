"""The devstack broker's SASL_SSL listener, reached as a turnledger client reaches a managed cluster.

Every client here is built from the KAFKA_* variables `turnledger dev up` prints, through
`KafkaSecurity.from_env` and its `client_options()`, which is how the services get theirs: each
enabled mechanism logs in over TLS (hostname checked) and carries records both ways, and what the
broker refuses (a wrong password, a CA that did not sign its certificate) is a `KafkaAccessError`
from `diagnose`, not an outage waited out. It starts nothing: it uses the session's devstack.
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

from turnledger.devstack.kafka import SASL_MECHANISMS
from turnledger.devstack.kafka_admin import create_topic
from turnledger.devstack.session import Endpoints, in_ci
from turnledger.devstack.tls import ensure_broker_tls
from turnledger.errors import KafkaAccessError
from turnledger.kafka.connection import (
    ENV_CA_FILE,
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
    bootstrap, options = secured_env["KAFKA_BOOTSTRAP_SERVERS"], security.client_options()
    await diagnose(bootstrap, security)
    topic = topic_name(mechanism.lower())
    await create_topic(bootstrap, topic, **options)
    sent = [f"{mechanism}-{i}".encode() for i in range(10)]
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
    with pytest.raises(KafkaAccessError, match=f"{mechanism} as 'turnledger'") as refused:
        await diagnose(secured_env["KAFKA_BOOTSTRAP_SERVERS"], security)
    assert "Check KAFKA_SASL_USERNAME" in str(refused.value), "credentials refused, not the listener"
    assert "not-the-password" not in str(refused.value)


async def test_a_ca_that_did_not_sign_the_broker_certificate_is_an_access_error(
    secured_env: dict[str, str], tmp_path: Path
) -> None:
    """A CA made the same way, by the same code, but not the one that signed the broker's certificate."""
    stranger = ensure_broker_tls(tmp_path / "stranger-tls").ca_file
    assert stranger.read_bytes() != Path(secured_env[ENV_CA_FILE]).read_bytes()
    security = KafkaSecurity.from_env({**secured_env, ENV_CA_FILE: str(stranger)})
    with pytest.raises(KafkaAccessError, match=re.escape(f"CA {stranger}")) as refused:
        await diagnose(secured_env["KAFKA_BOOTSTRAP_SERVERS"], security)
    assert isinstance(refused.value.cause, ssl.SSLCertVerificationError)
    assert "certificate could not be verified" in str(refused.value)
