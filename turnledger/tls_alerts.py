"""The TLS alerts a server sends about the client's certificate, shared by the Kafka and Redis clients.

Under TLS 1.3 the client's side of the handshake completes before the server has checked the client's
certificate, so a refusal arrives as an alert on the first read, inside whatever error the client
library makes of a closed connection. Only a server sends these alerts about ours, so each means the
server refused who we are (none given, or one it does not trust): waiting cannot help.

A client library writes its first request as soon as its handshake is done, so a server that closes
with that request unread (redis-server, a TLS 1.3 proxy) sends a reset, and a reset that overtakes
the alert loses it: the library sees "connection reset", which looks like an outage. `read_alert`
connects once more with the client's own TLS settings and writes nothing, so that the alert arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
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


CONNECT_TIMEOUT_S = 3.0
ALERT_WAIT_S = 1.0
"""How long a completed handshake is read for the server's alert: it follows the handshake within a
round trip; a server that took us sends nothing."""


async def read_alert(
    host: str,
    port: int,
    context: ssl.SSLContext,
    *,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    wait_s: float = ALERT_WAIT_S,
) -> ssl.SSLError | None:
    """The alert `host:port` sends about the client certificate of `context` (or its absence), read on
    a connection that writes nothing; None when none comes (taken, silent, unreachable, another error)."""
    try:
        async with asyncio.timeout(connect_timeout_s):
            reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
        try:
            async with asyncio.timeout(wait_s):
                await reader.read(1)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    except ssl.SSLError as exc:
        return certificate_alert(exc)
    except (OSError, TimeoutError):
        return None
    return None
