"""How every turnledger client reaches the cluster: plain, TLS, SASL, or SASL over TLS.

Managed clusters (Confluent Cloud, MSK with SCRAM, Aiven, Redpanda Cloud) take only TLS and a SASL
login, so every consumer, producer and admin client the services build gets the same settings,
read once per process from the environment (a child process of `--processes N` inherits it):

| variable | meaning | default |
|---|---|---|
| `KAFKA_SECURITY_PROTOCOL` | `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL` | `PLAINTEXT` |
| `KAFKA_SASL_MECHANISM` | `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`, `GSSAPI` (SASL) | — |
| `KAFKA_SASL_USERNAME` | the SASL user | — |
| `KAFKA_SASL_PASSWORD`, `KAFKA_SASL_PASSWORD_FILE` | its password, or a file holding it | — |
| `KAFKA_SSL_CA_FILE` | PEM of the CAs that sign the brokers' certificates (TLS) | the system's |
| `KAFKA_SSL_CERT_FILE`, `KAFKA_SSL_KEY_FILE` | a client certificate and its key (mutual TLS) | — |
| `KAFKA_SSL_CHECK_HOSTNAME` | `false` accepts a certificate for another name (tests only) | `true` |
| `KAFKA_SASL_OAUTHBEARER_*` | where OAUTHBEARER's tokens come from (`kafka/oauth.py`) | — |
| `KAFKA_SASL_KERBEROS_*` | GSSAPI's broker principal (`kafka/kerberos.py`) | `kafka`/the host |

A setting that cannot work (a mechanism without a SASL protocol, a password without a user, a file
that cannot be read) is a `KafkaSettingsError` naming the variable, at start. The password is never
printed: its repr is `Password('***')`.

aiokafka reports a refused login or an unverifiable certificate only as "unable to bootstrap", which
the services would wait out for ever as an outage; `diagnose` connects once by hand to tell the two
apart, so a wrong password ends the service with a `KafkaAccessError` that says what to fix.

A broker that requires a client certificate (mutual TLS) and gets none, or one signed by a CA it does
not trust, says so with a TLS alert. Under TLS 1.3 the client's handshake has already completed by
then, so the alert arrives on the first read, where aiokafka turns it into "Connection at ... closed"
with the `ssl.SSLError` as its cause; `diagnose` finds it there (`tls_alerts.CLIENT_CERTIFICATE_ALERTS`).
A listener that closes with aiokafka's first request unread (a TLS 1.3 proxy in front of the brokers)
sends a reset that can overtake the alert; `diagnose` then reads the alert on a connection that writes
nothing (`tls_alerts.read_alert`).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.conn import create_conn
from aiokafka.helpers import create_ssl_context

from turnledger.errors import KafkaAccessError, KafkaSettingsError
from turnledger.kafka import kerberos, kerberos_refusal, oauth
from turnledger.kafka.reachability import nobody_answered, unreachable, words_for
from turnledger.kafka.secret import Secret, read_secret
from turnledger.tls_alerts import certificate_alert, read_alert

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", kerberos.GSSAPI)
OAUTHBEARER = "OAUTHBEARER"
GSSAPI = kerberos.GSSAPI
_TLS = frozenset({"SSL", "SASL_SSL"})
_SASL = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})

ENV_PROTOCOL = "KAFKA_SECURITY_PROTOCOL"
ENV_MECHANISM = "KAFKA_SASL_MECHANISM"
ENV_USERNAME = "KAFKA_SASL_USERNAME"
ENV_PASSWORD = "KAFKA_SASL_PASSWORD"
ENV_PASSWORD_FILE = "KAFKA_SASL_PASSWORD_FILE"
ENV_CA_FILE = "KAFKA_SSL_CA_FILE"
ENV_CERT_FILE = "KAFKA_SSL_CERT_FILE"
ENV_KEY_FILE = "KAFKA_SSL_KEY_FILE"
ENV_CHECK_HOSTNAME = "KAFKA_SSL_CHECK_HOSTNAME"

ACCESS_ERRORS: tuple[type[BaseException], ...] = (
    kafka_errors.AuthenticationFailedError,
    kafka_errors.SaslAuthenticationFailed,
    kafka_errors.UnsupportedSaslMechanismError,
    kafka_errors.IllegalSaslStateError,
    kafka_errors.AuthenticationMethodNotSupported,
    ssl.SSLError,
)
"""What a connection raises when the broker was reached and refused us: waiting does not help."""


_NOT_THIS_LOGIN = (
    kafka_errors.UnsupportedSaslMechanismError,
    kafka_errors.IllegalSaslStateError,
    kafka_errors.AuthenticationMethodNotSupported,
)
"""The listener does not take this kind of login at all (a plaintext listener asked for SASL, a
mechanism it does not enable), as opposed to refusing these credentials."""


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    check_hostname: bool = True
    oauth: oauth.OAuthTokenProvider | None = field(default=None, compare=False)
    """OAUTHBEARER's tokens (`kafka/oauth.py`): one provider per process, shared by every client."""
    kerberos: kerberos.KerberosSettings | None = None
    """GSSAPI's broker principal and where MIT krb5 finds the client's tickets (`kafka/kerberos.py`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KafkaSecurity:
        """The settings the variables name, checked to make one working setting."""
        protocol = _choice(env, ENV_PROTOCOL, PROTOCOLS) or "PLAINTEXT"
        mechanism = _choice(env, ENV_MECHANISM, MECHANISMS)
        username = env.get(ENV_USERNAME, "").strip() or None
        password = read_secret(env, ENV_PASSWORD, ENV_PASSWORD_FILE, "Password")
        provider = None
        krb = None
        if protocol in _SASL and mechanism in (OAUTHBEARER, GSSAPI):
            given = [n for n, v in ((ENV_USERNAME, username), (ENV_PASSWORD, password)) if v is not None]
            if given:
                how = "with a token" if mechanism == OAUTHBEARER else "with Kerberos (KRB5_* variables)"
                raise KafkaSettingsError(
                    f"{', '.join(given)} set, but {ENV_MECHANISM}={mechanism} logs in {how}: unset them"
                )
            if mechanism == OAUTHBEARER:
                provider = oauth.provider_from_env(env)
            else:
                krb = kerberos.KerberosSettings.from_env(env)
                kerberos_refusal.install()
        elif protocol in _SASL:
            missing = [
                name
                for name, value in (
                    (ENV_MECHANISM, mechanism),
                    (ENV_USERNAME, username),
                    (ENV_PASSWORD, password),
                )
                if value is None
            ]
            if missing:
                raise KafkaSettingsError(
                    f"{ENV_PROTOCOL}={protocol} logs in with SASL: set {', '.join(missing)}"
                    + (f" (or {ENV_PASSWORD_FILE})" if ENV_PASSWORD in missing else "")
                )
        else:
            given = [n for n, v in ((ENV_MECHANISM, mechanism), (ENV_USERNAME, username)) if v is not None]
            if given or password is not None:
                named = given + ([ENV_PASSWORD] if password is not None else [])
                raise KafkaSettingsError(
                    f"{', '.join(named)} set, but {ENV_PROTOCOL} is {protocol}: set it to SASL_SSL "
                    "(or SASL_PLAINTEXT) to log in, or unset them"
                )
        stray = oauth.oauth_variables_set(env) if provider is None else []
        if stray:
            raise KafkaSettingsError(
                f"{', '.join(stray)} set, but {ENV_MECHANISM} is not OAUTHBEARER: set "
                f"{ENV_PROTOCOL}=SASL_SSL and {ENV_MECHANISM}=OAUTHBEARER to log in with a token, or "
                "unset them"
            )
        stray = kerberos.kerberos_variables_set(env) if krb is None else []
        if stray:
            raise KafkaSettingsError(
                f"{', '.join(stray)} set, but {ENV_MECHANISM} is not GSSAPI: set {ENV_PROTOCOL}="
                f"SASL_SSL (or SASL_PLAINTEXT) and {ENV_MECHANISM}=GSSAPI to log in with Kerberos, or "
                "unset them"
            )
        files = {name: _file(env, name) for name in (ENV_CA_FILE, ENV_CERT_FILE, ENV_KEY_FILE)}
        if protocol not in _TLS and any(files.values()):
            named = [name for name, path in files.items() if path is not None]
            raise KafkaSettingsError(
                f"{', '.join(named)} set, but {ENV_PROTOCOL} is {protocol}: TLS needs SSL or SASL_SSL"
            )
        if (files[ENV_CERT_FILE] is None) != (files[ENV_KEY_FILE] is None):
            raise KafkaSettingsError(f"a client certificate needs both {ENV_CERT_FILE} and {ENV_KEY_FILE}")
        check = env.get(ENV_CHECK_HOSTNAME, "true").strip().lower()
        if check not in ("true", "false"):
            raise KafkaSettingsError(f"{ENV_CHECK_HOSTNAME} must be true or false, not {check!r}")
        return cls(
            protocol,
            mechanism,
            username,
            password,
            files[ENV_CA_FILE],
            files[ENV_CERT_FILE],
            files[ENV_KEY_FILE],
            check == "true",
            provider,
            krb,
        )

    @property
    def tls(self) -> bool:
        return self.protocol in _TLS

    @property
    def sasl(self) -> bool:
        return self.protocol in _SASL

    def describe(self) -> str:
        """E.g. `SASL_SSL, SCRAM-SHA-512 as 'gateway', CA /etc/kafka/ca.pem`; never the password."""
        parts = [self.protocol]
        if self.oauth is not None:
            parts.append(f"OAUTHBEARER from {self.oauth.source.describe()}")
        elif self.kerberos is not None:
            parts.append(self.kerberos.describe())
        elif self.sasl:
            parts.append(f"{self.mechanism} as {self.username!r}")
        if self.tls:
            parts.append(f"CA {self.ca_file}" if self.ca_file else "the system's CAs")
            if self.cert_file:
                parts.append(f"client certificate {self.cert_file}")
        return ", ".join(parts)

    def fix(self, refused: BaseException) -> str:
        """What to check, by how the broker refused us."""
        if certificate_alert(refused) is not None:
            if self.cert_file is None:
                return (
                    f"The broker requires a client certificate (mutual TLS): set {ENV_CERT_FILE} and "
                    f"{ENV_KEY_FILE}."
                )
            return (
                f"The broker did not accept the client certificate {self.cert_file}: check {ENV_CERT_FILE} "
                f"and {ENV_KEY_FILE} (a certificate signed by a CA the broker trusts, still valid)."
            )
        if isinstance(refused, ssl.SSLError):
            return (
                f"The broker's certificate could not be verified: check {ENV_CA_FILE} (the CA that signed "
                f"it; else the system's CAs are used) and that the address is a name the certificate holds."
            )
        if isinstance(refused, _NOT_THIS_LOGIN):
            return (
                f"This listener does not take a SASL {self.mechanism} login: check the address (the broker's "
                f"SASL listener, not its plaintext one) and {ENV_MECHANISM}."
            )
        if isinstance(refused, oauth.TokenRefused | kerberos.KerberosRefused):
            return refused.check
        if self.oauth is not None:
            return self.oauth.source.check()
        if self.kerberos is not None:
            return self.kerberos.broker_refused()
        return f"Check {ENV_USERNAME} and {ENV_PASSWORD} (or {ENV_PASSWORD_FILE})."

    @functools.cached_property
    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        try:
            context: ssl.SSLContext = create_ssl_context(cafile=str(self.ca_file) if self.ca_file else None)
        except ssl.SSLError as exc:
            raise KafkaSettingsError(
                f"{ENV_CA_FILE}: cannot load {self.ca_file} as PEM certificates ({exc.reason or exc})"
            ) from exc
        if self.cert_file:
            try:
                context.load_cert_chain(str(self.cert_file), str(self.key_file) if self.key_file else None)
            except ssl.SSLError as exc:
                raise KafkaSettingsError(
                    f"{ENV_CERT_FILE} and {ENV_KEY_FILE}: cannot load {self.cert_file} and "
                    f"{self.key_file or 'the key in it'} as a PEM certificate and its key "
                    f"({exc.reason or exc})"
                ) from exc
        context.check_hostname = self.check_hostname
        return context

    def client_options(self) -> dict[str, Any]:
        """The keyword arguments every aiokafka consumer, producer and admin client takes for it."""
        if self.protocol == "PLAINTEXT":
            return {}
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            options["ssl_context"] = self.ssl_context
        if self.oauth is not None:
            options |= {"sasl_mechanism": OAUTHBEARER, "sasl_oauth_token_provider": self.oauth}
        elif self.kerberos is not None:
            options |= self.kerberos.client_options()
        elif self.sasl:
            assert self.password is not None
            options |= {
                "sasl_mechanism": self.mechanism,
                "sasl_plain_username": self.username,
                "sasl_plain_password": self.password.reveal(),
            }
        return options


def _choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    value = env.get(name, "").strip().upper()
    if not value:
        return None
    if value not in allowed:
        raise KafkaSettingsError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _file(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    path = Path(value)
    if not path.is_file() or not os.access(path, os.R_OK):
        raise KafkaSettingsError(f"{name}: cannot read the file {path}")
    return path


@functools.cache
def security() -> KafkaSecurity:
    """This process's settings, from its environment (read once)."""
    return KafkaSecurity.from_env(os.environ)


def kafka_options() -> dict[str, Any]:
    """`security().client_options()`: what every aiokafka client of this process is built with."""
    return security().client_options()


async def diagnose(
    bootstrap: str, settings: KafkaSecurity | None = None, timeout_s: float = 10.0
) -> kerberos.KdcUnavailable | kafka_errors.KafkaConnectionError | None:
    """Connect to each bootstrap address once, by hand; raise `KafkaAccessError` if one was reached and
    refused us (a login, a mechanism, a certificate). Anything else (nothing listening, a timeout) is an
    outage the caller goes on treating as one; returned, to report as its cause instead of the client's
    "unable to bootstrap": the Kerberos KDC's error when no KDC answered for any address, or what
    stopped a TCP connection to each address (`reachability.unreachable`) when none took one."""
    settings = settings or security()
    if settings.protocol == "PLAINTEXT":
        return await unreachable(bootstrap)
    options = settings.client_options()
    kdc_down: kerberos.KdcUnavailable | None = None
    stopped: list[tuple[str, int, str]] = []  # the addresses no TCP connection reached, and why
    addresses = bootstrap.split(",")
    for address in addresses:
        host, _, port = address.strip().rpartition(":")
        try:
            conn = await create_conn(
                host.strip("[]"), int(port), request_timeout_ms=int(timeout_s * 1000), **options
            )
        except ACCESS_ERRORS as exc:
            raise KafkaAccessError(bootstrap, settings.describe(), exc, settings.fix(exc)) from None
        except kerberos.KdcUnavailable as exc:  # the realm's KDC, not the broker: an outage to wait out
            kdc_down = exc
            continue
        except kafka_errors.KafkaConnectionError as exc:
            alert = certificate_alert(exc.__cause__) or await _alert_a_reset_lost(host, int(port), settings)
            if alert is None:  # closed for another reason: an outage, not ours to judge here
                continue
            raise KafkaAccessError(bootstrap, settings.describe(), alert, settings.fix(alert)) from None
        except OSError as exc:  # no connection (refused, a name that does not resolve, no answer) or TLS
            if not isinstance(exc, ssl.SSLError):
                stopped.append((host.strip("[]"), int(port), words_for(exc, timeout_s)))
            continue
        except Exception:  # some other trouble: not ours to judge here
            continue
        conn.close()
        return None
    if kdc_down is None and len(stopped) == len(addresses):
        return nobody_answered(stopped)
    return kdc_down


async def _alert_a_reset_lost(host: str, port: int, settings: KafkaSecurity) -> ssl.SSLError | None:
    """The certificate alert of a TLS listener whose close came as a reset: read once more on a
    connection that writes nothing (`tls_alerts.read_alert`); None without TLS or without an alert."""
    if settings.ssl_context is None:
        return None
    return await read_alert(host.strip("[]"), port, settings.ssl_context)
