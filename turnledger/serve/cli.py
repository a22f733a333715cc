"""`turnledger serve`: the client API, the resumable SSE stream and the web page (uvicorn)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, cast

import typer
import uvicorn
from rich.console import Console

from turnledger import cli_checks, cli_logging
from turnledger.errors import (
    DispatchDefaultError,
    ServiceUnavailable,
    TokenRequiredError,
    TurnledgerError,
    redact_url,
)
from turnledger.gateway.client import GatewayClient
from turnledger.kafka.clients import start_client
from turnledger.observability.server import MetricsPort, serving
from turnledger.processors.limits_config import load_limits  # the processor's TURNLEDGER_MAX_*
from turnledger.processors.model_registry import load_model_registry  # the processor's, as it admits
from turnledger.projections.cli import Bootstrap, KeyPrefix, RedisUrl, TopicPrefix, require
from turnledger.projections.keys import DEFAULT_KEY_PREFIX
from turnledger.redisconn.client import connect
from turnledger.redisconn.cluster import RedisClient
from turnledger.retry import FOREVER, Backoff, StopRequested, ride_out
from turnledger.serve.app import ServeConfig, block_within, create_app, is_loopback, read_timeout_s
from turnledger.serve.dispatch_defaults import DispatchDefaults, check_dispatch_defaults
from turnledger.shutdown import (
    EXIT_STOPPED_AT_ONCE,
    SIGNALS,
    StoppedAtOnce,
    run_until_signalled,
    stop_on_signals,
)
from turnledger.topology import Topics

err = Console(stderr=True, markup=False)
TOKEN_ENV = "TURNLEDGER_SERVE_TOKEN"


def serve_command(
    redis_url: RedisUrl = None,
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "",
    key_prefix: KeyPrefix = DEFAULT_KEY_PREFIX,
    host: Annotated[
        str, typer.Option(help="Address to bind. Anything but loopback requires a bearer token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to bind (0: any free port).")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            help="Bearer token every endpoint requires (header `Authorization: Bearer`, or `?token=` for the "
            "page and its event stream). Required to bind a non-loopback address.",
        ),
    ] = None,
    adapter: Annotated[
        str,
        typer.Option(
            help="Adapter of the dispatches the page requests (a registered api@version; the default is the "
            "registry's latest anthropic-messages)."
        ),
    ] = DispatchDefaults.adapter,
    provider: Annotated[
        str, typer.Option(help="Provider of the dispatches the page requests: the adapter's.")
    ] = DispatchDefaults.provider,
    model_revision: Annotated[
        str,
        typer.Option(
            help="Model of the dispatches the page requests: provider/model@revision, its provider/model "
            "in the model registry (with TURNLEDGER_MODEL_REGISTRY's override, as the processor's) and of "
            "the adapter's provider; the revision is free text."
        ),
    ] = DispatchDefaults.model_revision,
    metrics_port: MetricsPort = 0,
    max_outage: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds Redis or Kafka may stay unreachable at start before serve gives up and exits 2. "
            "Unset: wait for them, retrying with backoff and logging what it waits for.",
        ),
    ] = None,
    log_level: cli_checks.LogLevel = "INFO",
) -> None:
    """Serve the client API (a conversation's committed history; POST a user turn, a dispatch request or a
    cancel), a resumable SSE stream per conversation (Last-Event-ID) and the web page, at http://HOST:PORT/.

    Redis and Kafka unreachable at start are waited for (SIGTERM/Ctrl-C stops the wait, exit 0); later,
    a request that meets either one down is answered 503 with the error."""
    url = require(redis_url, "REDIS_URL", "--redis-url", "serve")
    servers = require(bootstrap, "KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", "serve")
    if not is_loopback(host) and not token:
        err.print(f"turnledger serve: {TokenRequiredError(host)}", style="red", soft_wrap=True)
        raise typer.Exit(2)
    dispatch = DispatchDefaults(adapter=adapter, provider=provider, model_revision=model_revision)
    models = load_model_registry()
    try:
        check_dispatch_defaults(dispatch, models)
    except DispatchDefaultError as exc:
        err.print(f"turnledger serve: {exc}", style="red", soft_wrap=True)
        raise typer.Exit(2) from exc
    config = ServeConfig(key_prefix=key_prefix, token=token or None, dispatch=dispatch, models=models)
    sockets = listening_sockets(host, port)
    cli_logging.configure(log_level)
    ingress = Topics(prefix=topic_prefix).ingress
    outage = Backoff(max_outage_s=max_outage)
    try:
        run_until_signalled(
            _serve(ServeRun(url, servers, ingress, host, sockets, config, metrics_port, outage))
        )
    except StoppedAtOnce as exc:
        err.print(f"turnledger serve: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_STOPPED_AT_ONCE) from exc
    except ServiceUnavailable as exc:
        err.print(f"turnledger serve: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from exc


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """The sockets uvicorn serves on, bound here to every address `host` resolves to, as asyncio's
    `create_server` binds them when given a host: an address that cannot be listened on (a port taken, a
    name that does not resolve or that the `idna` codec refuses) is a usage error naming the options,
    before anything connects. uvicorn logged it and ended its task with `SystemExit(3)` (a
    `UnicodeError` for the name), a traceback either way."""
    bound: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _name, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            port = port or sock.getsockname()[1]  # port 0: one free port for every address
    except (OSError, UnicodeError) as exc:
        for sock in bound:
            sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        said = f"cannot listen on {host}:{port}: {reason}"
        raise typer.BadParameter(said, param_hint="--host / --port") from exc
    return bound


@dataclass(frozen=True)
class ServeRun:
    """What one `turnledger serve` run serves, from where, and how long it waits for Redis and Kafka."""

    redis_url: str
    bootstrap: str
    ingress: str
    host: str
    sockets: list[socket.socket]
    config: ServeConfig
    metrics_port: int = 0
    outage: Backoff = FOREVER


async def _serve(run: ServeRun) -> None:
    """Wait for Redis and Kafka as `run.outage` says (a first SIGTERM or SIGINT meanwhile returns), then
    serve until uvicorn's own signal handling ends it."""
    stop = asyncio.Event()
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    stop_on_signals(stop, "turnledger serve")
    try:
        await _serve_on(run, stop, before)
    except StopRequested:
        return
    finally:
        # uvicorn's servers close them once they served; not when Redis or Kafka failed
        for sock in run.sockets:
            sock.close()


async def wait_for_redis(url: str, outage: Backoff, stop: asyncio.Event) -> RedisClient:
    """A client of Redis at `url` once it answered a PING; an outage is waited out (`ride_out`), a
    refusal (`RedisAccessError`, a setting that cannot work) raised at once."""
    return await ride_out(
        lambda: connect(url),
        waiting_for=f"Redis at {redact_url(url)} to serve the API",
        classify=_typed,
        backoff=outage,
        stop=stop,
    )


def _typed(exc: BaseException) -> TurnledgerError | None:
    """`connect` raises what a Redis error stands for already: an outage is `retriable`."""
    return exc if isinstance(exc, TurnledgerError) else None


def _hand_signals_to_uvicorn(before: Mapping[signal.Signals, object]) -> None:
    """uvicorn's `serve` installs its own SIGTERM/SIGINT handlers (a graceful shutdown, then a forced one)
    and, once stopped, raises the signal it caught again for the handlers it found. The wait's handlers
    go and those found `before` them are put back (`asyncio.run`'s for SIGINT), so that a signal while
    serving ends serve as it did before serve waited (Ctrl-C: 130, SIGTERM: 143)."""
    loop = asyncio.get_running_loop()
    for sig, handler in before.items():
        loop.remove_signal_handler(sig)
        signal.signal(sig, cast(Any, handler))


async def _serve_on(run: ServeRun, stop: asyncio.Event, before: Mapping[signal.Signals, object]) -> None:
    server: uvicorn.Server | None = None
    waiting = ["waiting for Redis"]

    def ready() -> str | None:
        if waiting:
            return waiting[0]
        return None if server is not None and server.started else "the HTTP server is starting"

    async with serving(run.metrics_port, ready):
        redis = await wait_for_redis(run.redis_url, run.outage, stop)
        try:
            waiting[0] = "waiting for Kafka"
            gateway = await start_client(
                lambda: GatewayClient(
                    run.bootstrap, topic=run.ingress, client_id="turnledger-serve", limits=load_limits()
                ),
                bootstrap=run.bootstrap,
                action="start serve's ingress producer",
                backoff=run.outage,
                stop=stop,
            )
            try:
                waiting.clear()
                if stop.is_set():
                    return
                _hand_signals_to_uvicorn(before)
                level = os.environ.get("TURNLEDGER_SERVE_LOG", "warning")
                block_ms = block_within(run.config.block_ms, read_timeout_s(redis))
                config = replace(run.config, block_ms=block_ms)
                server = uvicorn.Server(uvicorn.Config(create_app(redis, gateway, config), log_level=level))
                redact_access_log()  # after Config: it configures uvicorn's loggers
                task = asyncio.create_task(server.serve(sockets=run.sockets))
                while not server.started and not task.done():
                    await asyncio.sleep(0.05)
                if server.started:
                    print(f"serving {page_url(server, run.host, run.config.token)}", flush=True)
                await task
            finally:
                await gateway.stop()
        finally:
            await redis.aclose()


def bound_port(server: uvicorn.Server) -> int:
    """The port uvicorn bound (the one asked for, or the free one it picked for 0)."""
    return int(server.servers[0].sockets[0].getsockname()[1])


def page_url(server: uvicorn.Server, host: str, token: str | None) -> str:
    """The page's address as printed: never the token itself (stdout ends up in logs), only where it goes."""
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{bound_port(server)}/"
    return address + (" (open it with ?token= and the token, or send Authorization: Bearer)" if token else "")


_QUERY_TOKEN = re.compile(r"([?&]token=)[^&#\s]*", re.IGNORECASE)


class TokenRedactingFilter(logging.Filter):
    """uvicorn's access log writes each request line with its query: the page and its event stream
    carry the token there (`?token=`, EventSource sets no headers). The line keeps `token=***`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _QUERY_TOKEN.sub(r"\1***", arg) if isinstance(arg, str) else arg for arg in record.args
            )
        if isinstance(record.msg, str):
            record.msg = _QUERY_TOKEN.sub(r"\1***", record.msg)
        return True


def redact_access_log() -> None:
    """Install the filter on uvicorn's access logger once."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, TokenRedactingFilter) for f in access.filters):
        access.addFilter(TokenRedactingFilter())
