"""SASL/GSSAPI settings (kafka/kerberos.py), what a Kerberos failure means (refusal or outage, by krb5's
error code), and aiokafka's GSSAPI authenticator raising that instead of a bare GSSError
(kafka/kerberos_refusal.py). No KDC, no broker, no gssapi package needed: whether it is installed is
decided per test. Logins against a real MIT KDC and broker: tests/integration/test_kerberos_listener.py."""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator
from types import SimpleNamespace

import pytest
from aiokafka import conn
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from turnledger.errors import KafkaAccessError, KafkaSettingsError, KafkaUnavailableError
from turnledger.kafka import kerberos, kerberos_refusal
from turnledger.kafka.clients import start_client
from turnledger.kafka.connection import KafkaSecurity, diagnose
from turnledger.kafka.kerberos import (
    AP_ERR_BAD_INTEGRITY,
    AP_ERR_SKEW,
    KDC_ERR_C_PRINCIPAL_UNKNOWN,
    KDC_ERR_PREAUTH_FAILED,
    KDC_ERR_S_PRINCIPAL_UNKNOWN,
    KDC_ERR_SVC_UNAVAILABLE,
    KDC_UNREACH,
    KdcUnavailable,
    KerberosRefused,
    KerberosSettings,
    meaning,
)
from turnledger.kafka.kerberos_refusal import KerberosAwareAuthenticator, minor_detail

GSSAPI = {
    "KAFKA_SECURITY_PROTOCOL": "sasl_plaintext",
    "KAFKA_SASL_MECHANISM": "gssapi",
    "KRB5_CLIENT_KTNAME": "FILE:/etc/security/keytabs/turnledger.keytab",
}
STALE = (
    "The client's keys are not its principal's current ones (a keytab exported before its keys changed): "
    "get a fresh keytab for KRB5_CLIENT_KTNAME, or kinit again for KRB5CCNAME."
)
CREDENTIALS = (
    "KRB5_CLIENT_KTNAME (a keytab of the client's principal, `klist -k` lists it) or KRB5CCNAME (a ticket "
    "cache kept current with kinit), and KRB5_CONFIG (the realm and its KDCs)"
)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kerberos, "gssapi_installed", lambda: True)


@pytest.fixture
def restore_authenticator() -> Iterator[None]:
    before = conn.AIOKafkaConnection.authenticator_gssapi
    yield
    conn.AIOKafkaConnection.authenticator_gssapi = before


def test_gssapi_takes_the_broker_principal_from_its_variables_and_the_identity_from_mit_krb5s(
    installed: None, restore_authenticator: None
) -> None:
    settings = KafkaSecurity.from_env(GSSAPI)
    assert settings.client_options() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "GSSAPI",
        "sasl_kerberos_service_name": "kafka",
        "sasl_kerberos_domain_name": None,
    }
    assert settings.describe() == (
        "SASL_PLAINTEXT, GSSAPI with keytab FILE:/etc/security/keytabs/turnledger.keytab, "
        "broker principal kafka/<broker host>"
    )
    assert kerberos_refusal.installed()
    named = KafkaSecurity.from_env(
        {
            **GSSAPI,
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_KERBEROS_SERVICE_NAME": " kafka-prod ",
            "KAFKA_SASL_KERBEROS_DOMAIN_NAME": "broker.corp.example",
        }
    )
    assert named.kerberos == KerberosSettings(
        "kafka-prod", "broker.corp.example", "keytab FILE:/etc/security/keytabs/turnledger.keytab"
    )
    options = named.client_options()
    assert (options["sasl_kerberos_service_name"], options["sasl_kerberos_domain_name"]) == (
        "kafka-prod",
        "broker.corp.example",
    )
    assert options["ssl_context"] is not None
    assert named.describe() == (
        "SASL_SSL, GSSAPI with keytab FILE:/etc/security/keytabs/turnledger.keytab, broker principal "
        "kafka-prod/broker.corp.example, the system's CAs"
    )


@pytest.mark.parametrize(
    ("env", "identity"),
    [
        ({"KRB5_CLIENT_KTNAME": "/k.keytab", "KRB5CCNAME": "FILE:/tmp/cc"}, "keytab /k.keytab"),
        ({"KRB5CCNAME": "KEYRING:persistent:1000"}, "ticket cache KEYRING:persistent:1000"),
        ({"KRB5CCNAME": " "}, "the default ticket cache"),
        ({}, "the default ticket cache"),
    ],
)
def test_the_identity_named_is_where_mit_krb5_looks_first(env: dict[str, str], identity: str) -> None:
    assert kerberos.identity_of(env) == identity


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**GSSAPI, "KAFKA_SASL_USERNAME": "svc", "KAFKA_SASL_PASSWORD": "pw-secret"}, "KAFKA_SASL_USERNAME, "
         "KAFKA_SASL_PASSWORD set, but KAFKA_SASL_MECHANISM=GSSAPI logs in with Kerberos (KRB5_* "
         "variables): unset them"),
        ({**GSSAPI, "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, "KAFKA_SASL_MECHANISM set, but "
         "KAFKA_SECURITY_PROTOCOL is PLAINTEXT: set it to SASL_SSL (or SASL_PLAINTEXT) to log in, or unset "
         "them"),
        ({**GSSAPI, "KAFKA_SECURITY_PROTOCOL": "SSL"}, "KAFKA_SASL_MECHANISM set, but "
         "KAFKA_SECURITY_PROTOCOL is SSL: set it to SASL_SSL (or SASL_PLAINTEXT) to log in, or unset them"),
        ({"KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka"}, "KAFKA_SASL_KERBEROS_SERVICE_NAME set, but "
         "KAFKA_SASL_MECHANISM is not GSSAPI: set KAFKA_SECURITY_PROTOCOL=SASL_SSL (or SASL_PLAINTEXT) and "
         "KAFKA_SASL_MECHANISM=GSSAPI to log in with Kerberos, or unset them"),
        ({"KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka", "KAFKA_SASL_KERBEROS_DOMAIN_NAME": "h"},
         "KAFKA_SASL_KERBEROS_SERVICE_NAME, KAFKA_SASL_KERBEROS_DOMAIN_NAME set, but KAFKA_SASL_MECHANISM is "
         "not GSSAPI: set KAFKA_SECURITY_PROTOCOL=SASL_SSL (or SASL_PLAINTEXT) and "
         "KAFKA_SASL_MECHANISM=GSSAPI to log in with Kerberos, or unset them"),
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "u",
          "KAFKA_SASL_PASSWORD": "p", "KAFKA_SASL_KERBEROS_DOMAIN_NAME": "h"},
         "KAFKA_SASL_KERBEROS_DOMAIN_NAME set, but KAFKA_SASL_MECHANISM is not GSSAPI: set "
         "KAFKA_SECURITY_PROTOCOL=SASL_SSL (or SASL_PLAINTEXT) and KAFKA_SASL_MECHANISM=GSSAPI to log in "
         "with Kerberos, or unset them"),
        ({**GSSAPI, "KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka/broker1@REALM"},
         "KAFKA_SASL_KERBEROS_SERVICE_NAME is the first part of the broker's principal (e.g. kafka), not "
         "'kafka/broker1@REALM'"),
        ({**GSSAPI, "KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka/broker1"},
         "KAFKA_SASL_KERBEROS_SERVICE_NAME is the first part of the broker's principal (e.g. kafka), not "
         "'kafka/broker1'"),
        ({**GSSAPI, "KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka@REALM"},
         "KAFKA_SASL_KERBEROS_SERVICE_NAME is the first part of the broker's principal (e.g. kafka), not "
         "'kafka@REALM'"),
        ({**GSSAPI, "KAFKA_SASL_MECHANISM": "KERBEROS"}, "KAFKA_SASL_MECHANISM must be one of PLAIN, "
         "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI, not 'KERBEROS'"),
    ],
)  # fmt: skip
def test_gssapi_settings_that_cannot_work_name_the_variable(
    installed: None, restore_authenticator: None, env: dict[str, str], message: str
) -> None:
    with pytest.raises(KafkaSettingsError) as caught:
        KafkaSecurity.from_env(env)
    assert str(caught.value) == message
    assert "pw-secret" not in str(caught.value)


def test_gssapi_without_the_gssapi_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conn, "gssapi", None)
    with pytest.raises(KafkaSettingsError) as caught:
        KafkaSecurity.from_env(GSSAPI)
    assert str(caught.value) == (
        "KAFKA_SASL_MECHANISM=GSSAPI needs the Python package gssapi, which is not installed: pip install "
        "'turnledger[kerberos]' (it builds against MIT Kerberos: apt-get install -y libkrb5-dev gcc)"
    )


def test_gssapi_is_installed_when_aiokafka_could_import_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conn, "gssapi", None)
    assert kerberos.gssapi_installed() is False
    monkeypatch.setattr(conn, "gssapi", SimpleNamespace())
    assert kerberos.gssapi_installed() is True


@pytest.mark.parametrize("code", [KDC_UNREACH, KDC_ERR_SVC_UNAVAILABLE])
def test_a_kdc_that_does_not_answer_is_an_outage(code: int) -> None:
    failure = meaning(code, "Cannot contact any KDC for realm 'CORP.EXAMPLE'", "kafka@broker1")
    assert type(failure) is KdcUnavailable and isinstance(failure, KafkaConnectionError)
    assert str(failure) == "the Kerberos KDC did not answer: Cannot contact any KDC for realm 'CORP.EXAMPLE'"


@pytest.mark.parametrize(
    ("code", "check"),
    [
        (KDC_ERR_C_PRINCIPAL_UNKNOWN, f"The KDC does not know the client's principal: check {CREDENTIALS}."),
        (AP_ERR_BAD_INTEGRITY, STALE),
        (KDC_ERR_PREAUTH_FAILED, STALE),
        (KDC_ERR_S_PRINCIPAL_UNKNOWN, "The KDC has no principal kafka/broker1 for the broker: check "
         "KAFKA_SASL_KERBEROS_SERVICE_NAME and KAFKA_SASL_KERBEROS_DOMAIN_NAME (default: the broker's host "
         "as the cluster names it), and KRB5_CONFIG."),
        (AP_ERR_SKEW, "This machine's clock and the KDC's are too far apart: synchronise the clock (NTP)."),
        (0, f"Check {CREDENTIALS}."),
        (KDC_UNREACH + 1, f"Check {CREDENTIALS}."),
    ],
)  # fmt: skip
def test_anything_else_kerberos_says_is_a_refusal_naming_what_to_check(code: int, check: str) -> None:
    failure = meaning(code, "krb5's words", "kafka@broker1")
    assert type(failure) is KerberosRefused and isinstance(
        failure, kerberos.kafka_errors.AuthenticationFailedError
    )
    assert (str(failure), failure.check) == (
        "Kerberos refused the login to kafka/broker1: krb5's words",
        check,
    )


def test_krb5s_codes_are_its_com_err_tables_as_gss_api_reports_them() -> None:
    """The values measured against MIT krb5 1.20 (the integration test's cases)."""
    assert (KDC_ERR_C_PRINCIPAL_UNKNOWN, KDC_ERR_S_PRINCIPAL_UNKNOWN) == (2529638918, 2529638919)
    assert (AP_ERR_BAD_INTEGRITY, KDC_UNREACH) == (2529638943, 2529639068)


class FakeGSSError(Exception):
    def __init__(self, min_code: int | None, text: str) -> None:
        super().__init__(text)
        self.min_code = min_code


def test_the_krb5_part_of_a_gss_error_is_what_is_said() -> None:
    text = "Major (458752): No credentials were supplied, Minor (2529638918): Client 'x@R' not found"
    assert minor_detail(FakeGSSError(2529638918, text)) == "Client 'x@R' not found"
    assert minor_detail(FakeGSSError(7, text)) == text  # another code's text: the whole of it
    assert minor_detail(FakeGSSError(None, "odd")) == "odd"
    assert minor_detail(FakeGSSError(5, "Major (1): a, Minor (5):  ")) == "Major (1): a, Minor (5):  "


@pytest.fixture
def fake_gssapi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conn, "gssapi", SimpleNamespace(exceptions=SimpleNamespace(GSSError=FakeGSSError)))


def _authenticator(*steps: BaseException | tuple[bytes, bool]) -> KerberosAwareAuthenticator:
    authenticator = KerberosAwareAuthenticator(loop=asyncio.get_running_loop(), principal="kafka@broker1")

    def exchange() -> Iterator[tuple[bytes, bool]]:
        for step in steps:
            if isinstance(step, BaseException):
                raise step
            yield step

    authenticator._authenticator = exchange()
    return authenticator


async def test_a_gss_error_of_the_exchange_is_raised_as_what_it_means(fake_gssapi: None) -> None:
    refused = FakeGSSError(
        KDC_ERR_C_PRINCIPAL_UNKNOWN, "Major (1): x, Minor (2529638918): Client 'a@R' not found"
    )
    with pytest.raises(KerberosRefused) as caught:
        await _authenticator(refused).step(None)
    assert str(caught.value) == "Kerberos refused the login to kafka/broker1: Client 'a@R' not found"
    assert caught.value.__cause__ is refused
    down = FakeGSSError(KDC_UNREACH, "Major (1): x, Minor (2529639068): Cannot contact any KDC")
    with pytest.raises(KdcUnavailable) as unreachable:
        await _authenticator(down).step(None)
    assert str(unreachable.value) == "the Kerberos KDC did not answer: Cannot contact any KDC"
    nameless = FakeGSSError(None, "Major (1): odd")
    with pytest.raises(KerberosRefused) as odd:
        await _authenticator(nameless).step(None)
    assert odd.value.check == f"Check {CREDENTIALS}."


async def test_the_exchange_is_aiokafkas_when_it_works_and_other_errors_pass_through(
    fake_gssapi: None,
) -> None:
    authenticator = _authenticator((b"token", True), (b"wrapped", False))
    assert await authenticator.step(None) == (b"token", True)
    assert await authenticator.step(b"challenge") == (b"wrapped", False)
    assert await authenticator.step(b"done") is None
    with pytest.raises(ValueError, match="not kerberos"):
        await _authenticator(ValueError("not kerberos")).step(None)


async def test_without_gssapi_no_error_is_taken_for_a_kerberos_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conn, "gssapi", None)
    with pytest.raises(FakeGSSError):
        await _authenticator(FakeGSSError(KDC_UNREACH, "x")).step(None)


def test_install_makes_every_connection_use_it(restore_authenticator: None) -> None:
    kerberos_refusal.install()
    kerberos_refusal.install()
    assert kerberos_refusal.installed()
    loop = object()
    fake = SimpleNamespace(_loop=loop, sasl_principal="kafka@broker1")
    made = conn.AIOKafkaConnection.authenticator_gssapi(fake)
    assert type(made) is KerberosAwareAuthenticator and made._principal == "kafka@broker1"
    assert made._loop is loop  # its steps run in the connection's loop's executor


def test_install_fails_loudly_when_aiokafka_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(conn.AIOKafkaConnection, "authenticator_gssapi")
    with pytest.raises(RuntimeError) as caught:
        kerberos_refusal.install()
    assert str(caught.value) == (
        "aiokafka changed: AIOKafkaConnection.authenticator_gssapi is gone; see kerberos_refusal.py"
    )


async def test_diagnose_reports_a_kerberos_refusal_with_what_to_check(
    installed: None, restore_authenticator: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = meaning(KDC_ERR_C_PRINCIPAL_UNKNOWN, "Client 'a@R' not found", "kafka@127.0.0.1")

    async def refused(*_: object, **__: object) -> None:
        raise refusal

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", refused)
    settings = KafkaSecurity.from_env(GSSAPI)
    with pytest.raises(KafkaAccessError) as caught:
        await diagnose("127.0.0.1:9092", settings)
    assert caught.value.cause is refusal
    assert str(caught.value) == (
        "Kafka at '127.0.0.1:9092' refused the connection (SASL_PLAINTEXT, GSSAPI with keytab "
        "FILE:/etc/security/keytabs/turnledger.keytab, broker principal kafka/<broker host>): "
        "KerberosRefused: Kerberos refused the login to kafka/127.0.0.1: Client 'a@R' not found. The KDC "
        f"does not know the client's principal: check {CREDENTIALS}."
    )


async def test_diagnose_leaves_a_kdc_that_does_not_answer_to_be_waited_out(
    installed: None, restore_authenticator: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TLS too, without reading for a certificate alert: the KDC, not the broker, is away."""
    tried: list[str] = []

    outages: list[KdcUnavailable] = []

    async def unreachable(host: str, port: int, **_: object) -> None:
        tried.append(f"{host}:{port}")
        outages.append(meaning(KDC_UNREACH, f"Cannot contact any KDC ({host})", "kafka@h"))  # type: ignore[arg-type]
        raise outages[-1]

    async def no_alert_read(*_: object) -> None:
        raise AssertionError("a KDC outage is no TLS alert to look for")

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", unreachable)
    monkeypatch.setattr("turnledger.kafka.connection.read_alert", no_alert_read)
    found = await diagnose(
        "b1:9092,b2:9092", KafkaSecurity.from_env({**GSSAPI, "KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    )
    assert tried == ["b1:9092", "b2:9092"]
    assert found is outages[-1]  # the cause to report: the client's own error says only "bootstrap"


async def test_diagnose_names_no_kdc_outage_when_an_address_logged_in(
    installed: None, restore_authenticator: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []

    async def first_kdc_down(host: str, port: int, **_: object) -> SimpleNamespace:
        if host == "b1":
            raise meaning(KDC_UNREACH, "Cannot contact any KDC", "kafka@b1")
        return SimpleNamespace(close=lambda: closed.append(host))

    async def no_connection(host: str, port: int, **_: object) -> None:
        raise KafkaConnectionError("Connection refused")

    monkeypatch.setattr("turnledger.kafka.connection.create_conn", first_kdc_down)
    assert await diagnose("b1:9092,b2:9092", KafkaSecurity.from_env(GSSAPI)) is None
    assert closed == ["b2"]
    monkeypatch.setattr("turnledger.kafka.connection.create_conn", no_connection)
    assert await diagnose("b1:9092", KafkaSecurity.from_env(GSSAPI)) is None  # nothing to name


def test_giving_up_on_a_kdc_outage_sends_the_reader_to_the_kdc_not_the_broker_list() -> None:
    outage = meaning(KDC_UNREACH, "Cannot contact any KDC for realm 'CORP.EXAMPLE'", "kafka@b1")
    gave_up = KafkaUnavailableError("b1:9092", outage, action="start the processor's consumer")
    assert str(gave_up) == (
        "Kafka is not reachable at 'b1:9092' while trying to start the processor's consumer "
        "(KdcUnavailable: the Kerberos KDC did not answer: Cannot contact any KDC for realm "
        "'CORP.EXAMPLE'). No broker could be logged into: start the realm's KDC, or correct its kdc "
        "entries in the krb5.conf that KRB5_CONFIG names (default /etc/krb5.conf)."
    )
    assert "turnledger dev up" in str(KafkaUnavailableError("b1:9092", KafkaConnectionError("refused")))


async def test_a_client_that_cannot_start_for_the_kdc_is_an_outage_caused_by_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outage = meaning(KDC_UNREACH, "Cannot contact any KDC for realm 'R'", "kafka@b1")

    async def kdc_down(bootstrap: str) -> KdcUnavailable:
        return outage  # type: ignore[return-value]

    class Client:
        async def start(self) -> None:
            raise KafkaConnectionError("Unable to bootstrap from [('b1', 9092)]")

        async def stop(self) -> None:
            return None

    monkeypatch.setattr("turnledger.kafka.clients.diagnose", kdc_down)
    with pytest.raises(KafkaUnavailableError) as caught:
        await start_client(Client, bootstrap="b1:9092", action="start the processor's consumer")
    assert caught.value.cause is outage
    assert "start the realm's KDC" in str(caught.value)


def test_a_broker_refusing_the_ticket_names_the_broker_principal(
    installed: None, restore_authenticator: None
) -> None:
    settings = KafkaSecurity.from_env({**GSSAPI, "KAFKA_SASL_KERBEROS_DOMAIN_NAME": "broker1.corp"})
    assert settings.fix(SaslAuthenticationFailed("Authentication failed")) == (
        "The broker refused the Kerberos ticket for kafka/broker1.corp: check "
        "KAFKA_SASL_KERBEROS_SERVICE_NAME and KAFKA_SASL_KERBEROS_DOMAIN_NAME (the principal the broker "
        "runs as; its keytab must hold that principal's current keys)."
    )


def test_a_broker_refusing_the_ticket_without_a_domain_names_each_broker_s_host(
    installed: None, restore_authenticator: None
) -> None:
    settings = KafkaSecurity.from_env(GSSAPI)
    assert settings.fix(SaslAuthenticationFailed("Authentication failed")) == (
        "The broker refused the Kerberos ticket for kafka/<broker host>: check "
        "KAFKA_SASL_KERBEROS_SERVICE_NAME and KAFKA_SASL_KERBEROS_DOMAIN_NAME (the principal the broker "
        "runs as; its keytab must hold that principal's current keys)."
    )


def test_only_the_first_at_of_the_broker_principal_parts_service_and_host() -> None:
    """aiokafka names the broker principal `service@host`; the message writes it `service/host` as
    Kerberos does, whatever else the host part holds."""
    failure = meaning(KDC_ERR_C_PRINCIPAL_UNKNOWN, "words", "kafka@odd@host")
    assert str(failure) == "Kerberos refused the login to kafka/odd@host: words"


async def test_each_step_hands_the_broker_s_token_to_the_exchange(fake_gssapi: None) -> None:
    """The server's token is what the GSS-API context steps with: the wrapper passes it on."""
    authenticator = KerberosAwareAuthenticator(loop=asyncio.get_running_loop(), principal="kafka@broker1")

    def echo() -> Generator[tuple[bytes, bool], bytes | None, None]:
        received = yield b"first", True
        yield b"got:" + (received or b"nothing"), False

    authenticator._authenticator = echo()
    assert await authenticator.step(None) == (b"first", True)
    assert await authenticator.step(b"server-token") == (b"got:server-token", False)


def test_an_error_without_gss_api_s_codes_is_said_whole() -> None:
    assert minor_detail(ValueError("no codes here")) == "no codes here"
