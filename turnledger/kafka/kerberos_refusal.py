"""aiokafka (0.14 and before) lets a Kerberos failure out of a client's `start()` as a bare `GSSError`.

Its GSSAPI authenticator asks MIT krb5 for tickets while the connection logs in; when the KDC refuses
(an unknown principal, a stale keytab) or cannot be reached, gssapi raises `GSSError`, which is
neither a Kafka error nor a socket error, so aiokafka's bootstrap does not catch it: a service
ended with a traceback for a wrong keytab, and with the same traceback for a KDC down for a minute.

`install` gives aiokafka's connections an authenticator that raises what the failure means instead
(`kerberos.meaning`, by krb5's error code): `KdcUnavailable` (a connection error, retried as any
outage) or `KerberosRefused` (an authentication error, which `connection.diagnose` reports as a
`KafkaAccessError` with what to check). It changes nothing when the login works. Installed once, when
GSSAPI settings are read.
"""

from __future__ import annotations

from typing import Any

from aiokafka import conn

from turnledger.kafka.kerberos import KdcUnavailable, KerberosRefused, meaning


def minor_detail(exc: BaseException) -> str:
    """The krb5 part of a GSSError's text (`... Minor (2529638918): Client 'x@R' not found in Kerberos
    database` → after the colon), which names the principal; the whole text if it has none."""
    text = str(exc)
    _, found, detail = text.partition(f"Minor ({getattr(exc, 'min_code', '')}): ")
    return detail.strip() if found and detail.strip() else text


class KerberosAwareAuthenticator(conn.SaslGSSAPIAuthenticator):  # type: ignore[misc]
    """aiokafka's GSSAPI exchange, its Kerberos failures raised as what they mean."""

    async def step(self, payload: bytes | None) -> tuple[bytes, bool] | None:
        try:
            result: tuple[bytes, bool] | None = await super().step(payload)
        except Exception as exc:
            if conn.gssapi is None or not isinstance(exc, conn.gssapi.exceptions.GSSError):
                raise
            failure: KerberosRefused | KdcUnavailable = meaning(
                int(exc.min_code or 0), minor_detail(exc), self._principal
            )
            raise failure from exc
        return result


def _kerberos_aware_authenticator(self: Any) -> KerberosAwareAuthenticator:
    return KerberosAwareAuthenticator(loop=self._loop, principal=self.sasl_principal)


def install() -> None:
    """Make every aiokafka connection use `KerberosAwareAuthenticator` (idempotent). A newer aiokafka
    without `authenticator_gssapi` fails here, loudly, rather than losing the fix."""
    if not callable(getattr(conn.AIOKafkaConnection, "authenticator_gssapi", None)):
        raise RuntimeError(
            "aiokafka changed: AIOKafkaConnection.authenticator_gssapi is gone; see kerberos_refusal.py"
        )
    conn.AIOKafkaConnection.authenticator_gssapi = _kerberos_aware_authenticator


def installed() -> bool:
    return conn.AIOKafkaConnection.authenticator_gssapi is _kerberos_aware_authenticator
