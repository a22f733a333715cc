"""Does a Redis port speak the other protocol than the one we spoke to it?

A TLS client at a plaintext port sends a ClientHello that the server reads as the start of an inline
command and waits for the rest of: the client sees only its connect timeout. A plaintext client at a
TLS port has its bytes taken for a broken handshake and the connection reset. Both look like an outage
from inside redis-py, so after one the port is asked once in the other protocol: a Redis reply to a
plaintext PING, or a completed TLS handshake (nothing verified: only the protocol is in question), says
the URL's scheme is wrong for this port.

A Redis that refuses our client certificate (none given where one is required, or one of a CA it does
not trust) sends its alert after the handshake, under TLS 1.3, and closes. redis-py writes its first
command at once, so the close often comes as a reset that loses the alert: another outage from inside.
`certificate_refusal` connects once more with the client's own TLS settings and only reads, so that
the alert arrives (`tls_alerts.read_alert`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection

from turnledger.redisconn.cluster import RedisClient, connection_kwargs
from turnledger.redisconn.refusals import CHECK_PLAINTEXT_PORT, CHECK_TLS_PORT
from turnledger.tls_alerts import ALERT_WAIT_S, read_alert

PROBE_TIMEOUT_S = 3.0


async def other_protocol(host: str, port: int, *, tls: bool) -> str | None:
    """What to check when `host:port`, spoken to with `tls` (or without) and failing, speaks the other
    protocol; None when it does not answer in it either (then it is an outage)."""
    if tls:
        return CHECK_PLAINTEXT_PORT if await _answers_plaintext(host, port) else None
    return CHECK_TLS_PORT if await _answers_tls(host, port) else None


async def _answers_plaintext(host: str, port: int) -> bool:
    """A Redis answers PING with `+PONG`, or an error (`-NOAUTH ...`) when it wants a login first."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(b"PING\r\n")
                await writer.drain()
                reply = await reader.read(1)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    return reply in (b"+", b"-")


async def _answers_tls(host: str, port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    return True


async def certificate_refusal(client: RedisClient, host: str, port: int) -> ssl.SSLError | None:
    """The TLS alert `host:port` sends about `client`'s certificate (or its absence), read on a
    connection of the client's own TLS settings that writes nothing; None when there is none."""
    if isinstance(client, RedisCluster):
        kwargs = connection_kwargs(client)
        if not issubclass(kwargs.get("connection_class", aioredis.Connection), aioredis.SSLConnection):
            return None
        connection: AbstractConnection = aioredis.SSLConnection(
            **{name: value for name, value in kwargs.items() if name.startswith("ssl_")}
        )
    else:
        pool = client.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
    if not isinstance(connection, aioredis.SSLConnection):
        return None
    return await read_alert(
        host, port, connection.ssl_context.get(), connect_timeout_s=PROBE_TIMEOUT_S, wait_s=ALERT_WAIT_S
    )
