"""One tiny asyncio HTTP server per service: `/metrics` (Prometheus text format), `/healthz`, `/readyz`.

It runs on the service's own event loop, so `/healthz` answering is itself the liveness signal: a loop
that is blocked or dead does not answer. `/readyz` asks the service (`Readiness`): None means ready,
a string says what it still waits for (answered with 503). Port 0 or unset: no server at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Annotated

import typer
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from turnledger.errors import MetricsServeError

log = logging.getLogger(__name__)

METRICS_PORT_ENV = "TURNLEDGER_METRICS_PORT"
METRICS_HOST_ENV = "TURNLEDGER_METRICS_HOST"
DEFAULT_METRICS_HOST = "127.0.0.1"

Readiness = Callable[[], str | None]
"""None: ready; otherwise what the service still waits for (the body of the 503)."""

MetricsPort = Annotated[
    int,
    typer.Option(
        "--metrics-port",
        envvar=METRICS_PORT_ENV,
        min=0,
        max=65535,
        help="Serve Prometheus metrics on /metrics, liveness on /healthz and readiness on /readyz on this "
        f"port (0: off). Binds {DEFAULT_METRICS_HOST}, or ${METRICS_HOST_ENV} (e.g. 0.0.0.0 in a container).",
    ),
]


def always_ready() -> str | None:
    return None


class MetricsServer:
    def __init__(
        self,
        port: int,
        ready: Readiness = always_ready,
        *,
        host: str | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.host = host or os.environ.get(METRICS_HOST_ENV) or DEFAULT_METRICS_HOST
        self.port = port
        self.ready = ready
        self.registry = registry
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host the resolver cannot encode (`a..b`)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise MetricsServeError(
                f"cannot serve metrics on {self.host}:{self.port} ({reason}): pick another "
                f"--metrics-port (${METRICS_PORT_ENV}, 0: off) or host (${METRICS_HOST_ENV})"
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics on http://%s:%d/metrics (health: /healthz, /readyz)", self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`."""
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/healthz":
            return 200, "text/plain; charset=utf-8", b"ok\n"
        if path == "/readyz":
            waiting = self.ready()
            if waiting is None:
                return 200, "text/plain; charset=utf-8", b"ready\n"
            return 503, "text/plain; charset=utf-8", f"not ready: {waiting}\n".encode()
        return 404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz or /readyz\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=10)
            while (await asyncio.wait_for(reader.readline(), timeout=10)) not in (b"\r\n", b"\n", b""):
                pass  # headers: nothing in them changes the answer
            parts = request.decode("latin-1").split()
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain; charset=utf-8", b"only GET\n"
            else:
                status, ctype, body = self.respond(parts[1])
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
            head = (
                f"HTTP/1.1 {status} {reason.get(status, '')}\r\ncontent-type: {ctype}\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if parts[:1] == ["HEAD"] else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def serving(port: int | None, ready: Readiness = always_ready) -> AsyncIterator[MetricsServer | None]:
    """Serve metrics and health on `port` while the block runs; nothing when `port` is 0 or None."""
    if not port:
        yield None
        return
    server = MetricsServer(port, ready)
    await server.start()
    try:
        yield server
    finally:
        await server.close()
