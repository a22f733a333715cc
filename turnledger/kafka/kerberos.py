"""SASL/GSSAPI (Kerberos) settings, and what a Kerberos failure means: a refusal or an outage.

On-prem clusters (Cloudera, many banks) log clients in with Kerberos. aiokafka does it through the
`gssapi` package (MIT krb5's GSS-API), which has no wheel for every platform and builds from source
against `libkrb5-dev`: it is the optional extra `turnledger[kerberos]`, and asking for GSSAPI without
it is a `KafkaSettingsError` at start that says how to install it.

The client's identity is MIT krb5's own business, read by the library from the process environment
as any Kerberos client's is: `KRB5_CONFIG` (the realm and its KDCs), `KRB5_CLIENT_KTNAME` (a keytab
the library gets tickets with, and gets them again when they expire) or `KRB5CCNAME` (a ticket cache
someone keeps current with `kinit`). turnledger only names them when it says what to check. What it
takes itself is the broker's principal: `KAFKA_SASL_KERBEROS_SERVICE_NAME` (default `kafka`) and
`KAFKA_SASL_KERBEROS_DOMAIN_NAME` (default: each broker's host as the cluster gives it), which make
`<service>/<host>@REALM`.

A Kerberos login fails before the broker sees it, in the client's library asking the KDC for
tickets; aiokafka lets that `GSSError` out of its bootstrap untouched (it catches only Kafka's and
socket errors), so a service stopped with a traceback. `kerberos_refusal` turns it into what it
means, by krb5's error code (its "minor status", which was measured against a real MIT KDC for each
case): a KDC that cannot be reached is an outage (`KdcUnavailable`, a connection error aiokafka
retries); anything else, from an unknown principal to a stale keytab, is ours to fix
(`KerberosRefused`, an authentication error `connection.diagnose` reports with what to check).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiokafka import conn
from aiokafka import errors as kafka_errors

from turnledger.errors import KafkaSettingsError, TurnledgerError

GSSAPI = "GSSAPI"
ENV_SERVICE_NAME = "KAFKA_SASL_KERBEROS_SERVICE_NAME"
ENV_DOMAIN_NAME = "KAFKA_SASL_KERBEROS_DOMAIN_NAME"
VARIABLES = (ENV_SERVICE_NAME, ENV_DOMAIN_NAME)
DEFAULT_SERVICE_NAME = "kafka"

ENV_KRB5_CONFIG = "KRB5_CONFIG"
ENV_CLIENT_KEYTAB = "KRB5_CLIENT_KTNAME"
ENV_CCACHE = "KRB5CCNAME"

INSTALL_HINT = (
    "pip install 'turnledger[kerberos]' (it builds against MIT Kerberos: apt-get install -y libkrb5-dev gcc)"
)

# MIT krb5's error codes (com_err table "krb5", base -1765328384), as GSS-API's minor status reports
# them: unsigned 32-bit.
_KRB5_BASE = -1765328384 & 0xFFFFFFFF
KDC_ERR_C_PRINCIPAL_UNKNOWN = _KRB5_BASE + 6
"""Client not found in Kerberos database."""
KDC_ERR_S_PRINCIPAL_UNKNOWN = _KRB5_BASE + 7
"""Server not found in Kerberos database: the broker's principal."""
KDC_ERR_PREAUTH_FAILED = _KRB5_BASE + 24
"""A principal that requires pre-authentication, asked with a wrong key."""
KDC_ERR_SVC_UNAVAILABLE = _KRB5_BASE + 29
"""A service is not available: the KDC cannot answer now."""
AP_ERR_BAD_INTEGRITY = _KRB5_BASE + 31
"""Decrypt integrity check failed: the KDC's answer is sealed with a key the keytab does not hold."""
AP_ERR_SKEW = _KRB5_BASE + 37
"""Clock skew too great."""
KDC_UNREACH = _KRB5_BASE + 156
"""Cannot contact any KDC for realm."""

OUTAGES = frozenset({KDC_UNREACH, KDC_ERR_SVC_UNAVAILABLE})
"""The codes that say the KDC was not there to ask: waiting may help. Every other one is a refusal."""


class KerberosRefused(kafka_errors.AuthenticationFailedError, TurnledgerError):  # type: ignore[misc]
    """The Kerberos login cannot work as configured (an unknown principal, a stale keytab, no
    credentials at all): waiting does not help. An aiokafka authentication error, so a client's
    bootstrap fails and `diagnose` reports it, with `check` as what to fix."""

    def __init__(self, message: str, check: str) -> None:
        super().__init__(message)
        self.check = check

    def __str__(self) -> str:  # aiokafka's errors prefix their class name, which the caller adds
        return str(self.args[0])


class KdcUnavailable(kafka_errors.KafkaConnectionError, TurnledgerError):  # type: ignore[misc]
    """No KDC of the realm answered: an outage, which aiokafka and the services retry. A service that
    gives up on it says `outage_fix` (the KDC, not the broker list, is what to look at)."""

    outage_fix = (
        "No broker could be logged into: start the realm's KDC, or correct its kdc entries in the "
        f"krb5.conf that {ENV_KRB5_CONFIG} names (default /etc/krb5.conf)."
    )

    def __str__(self) -> str:
        return str(self.args[0])


def gssapi_installed() -> bool:
    """Whether aiokafka could import gssapi (its own optional import): a package that is there but
    cannot load (MIT krb5's library gone since it was built) counts as missing, as it does for aiokafka."""
    return conn.gssapi is not None


@dataclass(frozen=True)
class KerberosSettings:
    service_name: str = DEFAULT_SERVICE_NAME
    domain_name: str | None = None
    """The broker principal's host part; None: each broker's own host."""
    identity: str = "the default ticket cache"
    """Where the client's tickets come from, as MIT krb5 will look (for messages only)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KerberosSettings:
        """The settings of a GSSAPI login; `KafkaSettingsError` when the `gssapi` package is missing."""
        if not gssapi_installed():
            raise KafkaSettingsError(
                f"KAFKA_SASL_MECHANISM={GSSAPI} needs the Python package gssapi, which is not installed: "
                + INSTALL_HINT
            )
        service = env.get(ENV_SERVICE_NAME, "").strip() or DEFAULT_SERVICE_NAME
        if "/" in service or "@" in service:
            raise KafkaSettingsError(
                f"{ENV_SERVICE_NAME} is the first part of the broker's principal (e.g. kafka), "
                f"not {service!r}"
            )
        return cls(service, env.get(ENV_DOMAIN_NAME, "").strip() or None, identity_of(env))

    def describe(self) -> str:
        host = self.domain_name or "<broker host>"
        return f"{GSSAPI} with {self.identity}, broker principal {self.service_name}/{host}"

    def client_options(self) -> dict[str, str | None]:
        return {
            "sasl_mechanism": GSSAPI,
            "sasl_kerberos_service_name": self.service_name,
            "sasl_kerberos_domain_name": self.domain_name,
        }

    def broker_refused(self) -> str:
        """What to check when the KDC gave us a ticket and the broker refused it."""
        return (
            f"The broker refused the Kerberos ticket for {self.service_name}/"
            f"{self.domain_name or '<broker host>'}: check {ENV_SERVICE_NAME} and {ENV_DOMAIN_NAME} "
            "(the principal the broker runs as; its keytab must hold that principal's current keys)."
        )


def identity_of(env: Mapping[str, str]) -> str:
    """`keytab FILE:/etc/security/keytabs/svc.keytab`, `ticket cache ...` or the default cache."""
    keytab = env.get(ENV_CLIENT_KEYTAB, "").strip()
    ccache = env.get(ENV_CCACHE, "").strip()
    if keytab:
        return f"keytab {keytab}"
    if ccache:
        return f"ticket cache {ccache}"
    return "the default ticket cache"


def kerberos_variables_set(env: Mapping[str, str]) -> list[str]:
    return [name for name in VARIABLES if env.get(name, "").strip()]


_CREDENTIALS = (
    f"{ENV_CLIENT_KEYTAB} (a keytab of the client's principal, `klist -k` lists it) or {ENV_CCACHE} "
    f"(a ticket cache kept current with kinit), and {ENV_KRB5_CONFIG} (the realm and its KDCs)"
)


CHECKS: dict[int, str] = {
    KDC_ERR_C_PRINCIPAL_UNKNOWN: f"The KDC does not know the client's principal: check {_CREDENTIALS}.",
    AP_ERR_BAD_INTEGRITY: (
        "The client's keys are not its principal's current ones (a keytab exported before its keys "
        f"changed): get a fresh keytab for {ENV_CLIENT_KEYTAB}, or kinit again for {ENV_CCACHE}."
    ),
    KDC_ERR_S_PRINCIPAL_UNKNOWN: (
        "The KDC has no principal {service} for the broker: check "
        f"{ENV_SERVICE_NAME} and {ENV_DOMAIN_NAME} (default: the broker's host as the cluster names it), "
        f"and {ENV_KRB5_CONFIG}."
    ),
    AP_ERR_SKEW: "This machine's clock and the KDC's are too far apart: synchronise the clock (NTP).",
}
"""What to check for each refusal krb5 names (`{service}`: the broker's principal); any other code
asks to check the client's credentials."""
CHECKS[KDC_ERR_PREAUTH_FAILED] = CHECKS[AP_ERR_BAD_INTEGRITY]


def meaning(code: int, detail: str, broker_principal: str) -> KerberosRefused | KdcUnavailable:
    """What krb5's error `code` (GSS-API's minor status; `detail` is its text) means for a login to
    the broker principal `broker_principal` (`kafka@host`)."""
    if code in OUTAGES:
        return KdcUnavailable(f"the Kerberos KDC did not answer: {detail}")
    service = broker_principal.replace("@", "/", 1)
    check = CHECKS.get(code, f"Check {_CREDENTIALS}.").replace("{service}", service)
    return KerberosRefused(f"Kerberos refused the login to {service}: {detail}", check)
