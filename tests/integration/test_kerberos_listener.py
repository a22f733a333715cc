"""Kafka with Kerberos (SASL/GSSAPI) on real parts: an MIT KDC and a broker of this module's own.

The shared devstack has no Kerberos: this module makes a realm with MIT's tools (`devstack/kerberos.py`:
`kdb5_util`, `kadmin.local`, `krb5kdc -n` on a free loopback port) and starts the devstack's broker code
(`RestartableKafka`) with one more listener, SASL_PLAINTEXT with GSSAPI, logging in with Java's
`Krb5LoginModule` and the broker's keytab. Clients are built from the KAFKA_* variables and MIT krb5's
own (`KRB5_CONFIG`, `KRB5_CLIENT_KTNAME`, `KRB5CCNAME`), as a service's are; each test has a fresh
ticket cache, so that tickets of an earlier test never stand in for the KDC.

The client's keytab logs in and carries transactional records read back read_committed; what the KDC
refuses (a principal it does not know, a keytab of stale keys, a broker principal it lacks) is a
`KafkaAccessError` naming what to check, and ends `turnledger process` in one line; so is a ticket the
broker cannot read (its keytab lacks the principal's keys); a stopped KDC is an outage, waited out until it
is back, and named as the cause when a service gives up on it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from tests.conftest import skip_unless_installed
from tests.integration.test_secured_listener import _read
from tests.integration.worker_ports import RESTART_PORTS
from turnledger.devstack.kafka_admin import create_topic
from turnledger.devstack.kerberos import PACKAGES, Kdc, missing_tools
from turnledger.devstack.ports import free_port
from turnledger.devstack.restartable import RestartableKafka
from turnledger.errors import KafkaAccessError
from turnledger.kafka import connection, kerberos
from turnledger.kafka.clients import start_client, transactional_producer
from turnledger.kafka.connection import KafkaSecurity, diagnose
from turnledger.kafka.kerberos import KerberosRefused
from turnledger.retry import Backoff

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CLIENT = "turnledger"
DEPARTED = "departed"
"""A principal whose keytab was exported, then deleted from the KDC (a decommissioned service)."""
REKEYED = "rekeyed"
"""A principal whose keytab was exported, then its keys drawn again (a keytab gone stale)."""


@dataclass(frozen=True)
class Realm:
    kdc: Kdc
    bootstrap: str
    keytabs: dict[str, Path]


@pytest.fixture(scope="module")
def realm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Realm]:
    """The KDC, its principals and keytabs, and a broker with a GSSAPI listener, for the module."""
    missing = missing_tools()
    if missing:
        skip_unless_installed(f"MIT Kerberos's {', '.join(missing)}", f"apt-get install -y {PACKAGES}")
    if not kerberos.gssapi_installed():
        skip_unless_installed("the Python package gssapi", kerberos.INSTALL_HINT)
    work = tmp_path_factory.mktemp("kerberos")
    kdc = Kdc(work / "kdc")
    kdc.start()
    try:
        keytabs = {
            name: kdc.add_principal(name, work / f"{name.replace('/', '_')}.keytab")
            for name in ("kafka/127.0.0.1", CLIENT, DEPARTED, REKEYED)
        }
        kdc.delete_principal(DEPARTED)
        kdc.export_keytab(REKEYED, work / "rekeyed-now.keytab")
        listener = kdc.kafka_listener("KERBEROS", free_port(), keytabs["kafka/127.0.0.1"])
        with RestartableKafka(work / "broker", extra_listeners=[listener], port=RESTART_PORTS.take) as broker:
            broker.start()
            yield Realm(kdc, listener.bootstrap, keytabs)
    finally:
        kdc.stop()


def client_env(realm: Realm, keytab: Path, ccache: Path, **kafka: str) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP_SERVERS": realm.bootstrap,
        connection.ENV_PROTOCOL: "SASL_PLAINTEXT",
        connection.ENV_MECHANISM: "GSSAPI",
        **kafka,
        **realm.kdc.client_env(keytab, ccache),
    }


@pytest.fixture
def as_client(
    realm: Realm, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Callable[..., KafkaSecurity]]:
    """Make this process a client of the realm with a keytab: MIT krb5 reads its variables from the
    process's environment (a fresh ticket cache per test), turnledger its own from the same; the
    settings of `connection.security()`, read again."""

    def become(keytab: Path, **kafka: str) -> KafkaSecurity:
        for name, value in client_env(realm, keytab, tmp_path / "ccache", **kafka).items():
            monkeypatch.setenv(name, value)
        connection.security.cache_clear()
        return connection.security()

    try:
        yield become
    finally:
        monkeypatch.undo()
        connection.security.cache_clear()


async def test_a_keytab_logs_in_and_carries_transactional_records(
    realm: Realm, as_client: Callable[..., KafkaSecurity], topic_name: Callable[[str], str]
) -> None:
    keytab = realm.keytabs[CLIENT]
    security = as_client(keytab)
    assert security.describe() == (
        f"SASL_PLAINTEXT, GSSAPI with keytab FILE:{keytab}, broker principal kafka/<broker host>"
    )
    await diagnose(realm.bootstrap, security)
    options = security.client_options()
    topic = topic_name("krb")
    await create_topic(realm.bootstrap, topic, **options)
    producer = transactional_producer(realm.bootstrap, f"{topic}-tx", transaction_timeout_ms=30000)
    await producer.start()  # the services' own producer, built from `connection.security()`
    sent = [f"{topic}-{i}".encode() for i in range(5)]
    try:
        async with producer.transaction():
            for value in sent:
                await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    assert (
        await _read(realm.bootstrap, topic, len(sent), {**options, "isolation_level": "read_committed"})
        == sent
    )


def _refusals(realm: Realm) -> dict[str, tuple[Path, dict[str, str], str, str]]:
    """Per case: the keytab, the KAFKA_* additions, krb5's words, and what to check."""
    creds = (
        "KRB5_CLIENT_KTNAME (a keytab of the client's principal, `klist -k` lists it) or KRB5CCNAME (a "
        "ticket cache kept current with kinit), and KRB5_CONFIG (the realm and its KDCs)"
    )
    host = realm.bootstrap.rpartition(":")[0]
    return {
        "an unknown principal": (
            realm.keytabs[DEPARTED],
            {},
            f"Kerberos refused the login to kafka/{host}: Client '{DEPARTED}@{realm.kdc.realm}' not found "
            "in Kerberos database",
            f"The KDC does not know the client's principal: check {creds}.",
        ),
        "a stale keytab": (
            realm.keytabs[REKEYED],
            {},
            f"Kerberos refused the login to kafka/{host}: Decrypt integrity check failed",
            "The client's keys are not its principal's current ones (a keytab exported before its keys "
            "changed): get a fresh keytab for KRB5_CLIENT_KTNAME, or kinit again for KRB5CCNAME.",
        ),
        "a broker principal the KDC lacks": (
            realm.keytabs[CLIENT],
            {kerberos.ENV_DOMAIN_NAME: "kafka-elsewhere"},
            f"Kerberos refused the login to kafka/kafka-elsewhere: Server kafka/kafka-elsewhere@"
            f"{realm.kdc.realm} not found in Kerberos database",
            "The KDC has no principal kafka/kafka-elsewhere for the broker: check "
            "KAFKA_SASL_KERBEROS_SERVICE_NAME and KAFKA_SASL_KERBEROS_DOMAIN_NAME (default: the broker's "
            "host as the cluster names it), and KRB5_CONFIG.",
        ),
    }


@pytest.mark.parametrize(
    "case", ["an unknown principal", "a stale keytab", "a broker principal the KDC lacks"]
)
async def test_what_the_kdc_refuses_is_an_access_error_naming_what_to_check(
    realm: Realm, as_client: Callable[..., KafkaSecurity], case: str
) -> None:
    keytab, kafka, said, check = _refusals(realm)[case]
    security = as_client(keytab, **kafka)
    producer = AIOKafkaProducer(bootstrap_servers=realm.bootstrap, **security.client_options())
    with pytest.raises(KafkaConnectionError):  # aiokafka's bootstrap fails, no GSSError escapes it
        await producer.start()
    await producer.stop()
    with pytest.raises(KafkaAccessError) as refused:
        await diagnose(realm.bootstrap, security)
    assert type(refused.value.cause) is KerberosRefused
    assert str(refused.value) == (
        f"Kafka at {realm.bootstrap!r} refused the connection ({security.describe()}): KerberosRefused: "
        f"{said}. {check}"
    )


def test_an_unknown_principal_ends_the_processor_at_once_in_one_line(realm: Realm, tmp_path: Path) -> None:
    keytab = realm.keytabs[DEPARTED]
    env = client_env(realm, keytab, tmp_path / "ccache")
    run = subprocess.run(
        [sys.executable, "-m", "turnledger.cli", "process", "--create-topics", "1", "--topic-prefix", "krb-"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    host = realm.bootstrap.rpartition(":")[0]
    assert run.stderr.splitlines()[-1] == (
        f"turnledger: Kafka at {realm.bootstrap!r} refused the connection (SASL_PLAINTEXT, GSSAPI with "
        f"keytab FILE:{keytab}, broker principal kafka/<broker host>): KerberosRefused: Kerberos refused "
        f"the login to kafka/{host}: Client '{DEPARTED}@{realm.kdc.realm}' not found in Kerberos database. "
        "The KDC does not know the client's principal: check KRB5_CLIENT_KTNAME (a keytab of the client's "
        "principal, `klist -k` lists it) or KRB5CCNAME (a ticket cache kept current with kinit), and "
        "KRB5_CONFIG (the realm and its KDCs)."
    )
    assert "Traceback" not in run.stderr


async def test_a_stopped_kdc_is_an_outage_waited_out_until_it_is_back(
    realm: Realm, as_client: Callable[..., KafkaSecurity]
) -> None:
    security = as_client(realm.keytabs[CLIENT])
    realm.kdc.stop()
    try:
        await diagnose(realm.bootstrap, security)  # returns: no refusal to report
        attempts = 0

        def make() -> AIOKafkaProducer:
            nonlocal attempts
            attempts += 1
            return AIOKafkaProducer(bootstrap_servers=realm.bootstrap, **security.client_options())

        waiting = asyncio.create_task(
            start_client(
                make,
                bootstrap=realm.bootstrap,
                action="start a producer",
                backoff=Backoff(initial_s=0.1, max_s=0.5, max_outage_s=60),
            )
        )
        while attempts < 3 and not waiting.done():  # failed twice, and tried again
            await asyncio.sleep(0.05)
        assert not waiting.done()
    finally:
        realm.kdc.start()
    producer = await waiting
    await producer.stop()
    assert attempts >= 3


async def test_a_stopped_kdc_the_processor_gives_up_on_as_an_outage(realm: Realm, tmp_path: Path) -> None:
    """`--max-outage`: an outage, not a refusal, is what the processor gives up on after that long."""
    env = client_env(realm, realm.keytabs[CLIENT], tmp_path / "ccache")
    realm.kdc.stop()
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "turnledger.cli",
                "process",
                "--create-topics",
                "1",
                "--topic-prefix",
                "krb-down-",
                "--max-outage",
                "2",
            ],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        realm.kdc.start()
    assert run.returncode == 2, run.stderr
    said = f"the Kerberos KDC did not answer: Cannot contact any KDC for realm '{realm.kdc.realm}'"
    assert run.stderr.splitlines()[-1] == (  # the KDC named, not the broker list
        f"turnledger process: Kafka is not reachable at {realm.bootstrap!r} (KdcUnavailable: {said}). "
        "No broker could be logged into: start the realm's KDC, or correct its kdc entries in the "
        "krb5.conf that KRB5_CONFIG names (default /etc/krb5.conf)."
    )
    # aiokafka's own line for the connection (`Unable connect to ...: {said}`) is DEBUG (`cli_logging`):
    # the command's line above says it, with what to do
    assert "aiokafka" not in run.stderr
    assert "Traceback" not in run.stderr


async def test_a_ticket_the_broker_cannot_read_is_an_access_error_naming_the_broker_principal(
    realm: Realm, as_client: Callable[..., KafkaSecurity], tmp_path: Path
) -> None:
    """The KDC knows kafka/localhost and gives the client a ticket for it, but the broker's keytab holds
    only kafka/127.0.0.1's keys (as a broker whose keytab is not its principal's current one): the
    broker, not the KDC, refuses the login, and says so in Kafka's own SaslAuthenticate answer."""
    realm.kdc.add_principal("kafka/localhost", tmp_path / "never-given-to-the-broker.keytab")
    security = as_client(realm.keytabs[CLIENT], KAFKA_SASL_KERBEROS_DOMAIN_NAME="localhost")
    producer = AIOKafkaProducer(bootstrap_servers=realm.bootstrap, **security.client_options())
    with pytest.raises(KafkaConnectionError):
        await producer.start()
    await producer.stop()
    with pytest.raises(KafkaAccessError) as refused:
        await diagnose(realm.bootstrap, security)
    assert type(refused.value.cause) is SaslAuthenticationFailed
    assert str(refused.value) == (
        f"Kafka at {realm.bootstrap!r} refused the connection ({security.describe()}): "
        "SaslAuthenticationFailed: [Error 58] SaslAuthenticationFailed: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism GSSAPI. The broker refused the "
        "Kerberos ticket for kafka/localhost: check KAFKA_SASL_KERBEROS_SERVICE_NAME and "
        "KAFKA_SASL_KERBEROS_DOMAIN_NAME (the principal the broker runs as; its keytab must hold that "
        "principal's current keys)."
    )
