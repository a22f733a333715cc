"""Loopback servers that stand for a TLS port in unit tests: one that resets every connection, and a TLS
server on the test-only certificate of tests/fixtures/client_tls/ (a client's: the clients here verify
nothing) that may require a client certificate and then sends the alert OpenSSL sends when it has none
(`TLSV13_ALERT_CERTIFICATE_REQUIRED`) or one of a CA it does not know (`TLSV1_ALERT_UNKNOWN_CA`)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

TLS = Path(__file__).resolve().parents[1] / "fixtures" / "client_tls"
CERT, KEY = str(TLS / "client.pem"), str(TLS / "client.key")
HOST = "127.0.0.2"
"""A loopback address that is not localhost's own: a probe that lost its host (asyncio connects to
localhost, 127.0.0.1 and ::1, then) finds nothing at the port."""

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[int]:
    """`handler` on a loopback port, for the block; the port."""
    server = await asyncio.start_server(handler, HOST, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def resetting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accepts, and resets the connection (SO_LINGER 0: an RST, no FIN)."""
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    async with serving(resetting) as port:
        pass
    return port


def server_context(*, trusted: str | None = None, require: bool = False) -> ssl.SSLContext:
    """The fixtures' certificate as a server's (no client here verifies it); with `require`, a client
    certificate signed by `trusted` (None: by no CA at all) is required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CERT, KEY)
    if require:
        context.verify_mode = ssl.CERT_REQUIRED
        if trusted is not None:
            context.load_verify_locations(trusted)
    return context


@dataclass
class FakeTlsPort:
    """A TLS server, as OpenSSL is in a Redis or a TLS proxy: the handshake on the socket itself, so that
    the alert of a failed handshake is sent before the close (asyncio's own TLS server drops it). After a
    handshake it reads until the client closes and sends nothing (or, `reset_after_handshake`, resets the
    connection once its handshake completed). Its first `lose_alerts` failed handshakes end in a reset
    that loses the alert, as when the server closes with a client's first request unread. `failures` are
    its failed handshakes' reasons, `accepted` its connections."""

    context: ssl.SSLContext
    reset_after_handshake: bool = False
    lose_alerts: int = 0
    failures: list[str] = field(default_factory=list)
    accepted: int = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        try:
            while data := await reader.read(65536):
                incoming.write(data)
                try:
                    tls.do_handshake()
                    if self.reset_after_handshake:
                        await resetting(reader, writer)
                        return
                    while tls.read(65536):
                        pass
                    tls.unwrap()  # read returns b"" at the client's close_notify: answer it
                    return
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError as exc:
                    self.failures.append(str(exc.reason))
                    if len(self.failures) <= self.lose_alerts:
                        await resetting(reader, writer)
                    return
                finally:
                    if not writer.is_closing():
                        writer.write(outgoing.read())
                        await writer.drain()
        finally:
            writer.close()
