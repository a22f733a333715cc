"""The TLS alerts a server sends about the client's certificate, shared by the Kafka and Redis clients.

Under TLS 1.3 the client's side of the handshake completes before the server has checked the client's
certificate, so a refusal arrives as an alert on the first read, inside whatever error the client
library makes of a closed connection. Only a server sends these alerts about ours, so each means the
server refused who we are (none given, or one it does not trust): waiting cannot help.
"""

from __future__ import annotations

import ssl

CLIENT_CERTIFICATE_ALERTS = frozenset(
    {
        "SSLV3_ALERT_BAD_CERTIFICATE",  # a Java server (Kafka) given no client certificate
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",  # a Java server given one its truststore does not trust
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",  # an OpenSSL server (Redis, a TLS proxy) given none
        "TLSV1_ALERT_UNKNOWN_CA",  # an OpenSSL server given one of a CA it does not know
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    }
)
"""The `ssl.SSLError.reason` of each such alert."""


def certificate_alert(exc: BaseException | None) -> ssl.SSLError | None:
    """`exc` when it is a TLS alert a server sent about our client certificate, else None."""
    if isinstance(exc, ssl.SSLError) and getattr(exc, "reason", None) in CLIENT_CERTIFICATE_ALERTS:
        return exc
    return None
