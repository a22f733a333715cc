"""`turnledger worker` and `turnledger tool-executor`.

Register in turnledger/cli.py with:
    from turnledger.gateway.cli import tool_executor, worker
    app.command("worker")(worker)
    app.command("tool-executor")(tool_executor)
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

import typer

from turnledger.gateway.client import BrokerUnavailable
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_tool_executor, run_worker
from turnledger.gateway.worker import WorkerConfig

EXIT_UNAVAILABLE = 2

Bootstrap = Annotated[
    str | None,
    typer.Option(envvar="KAFKA_BOOTSTRAP_SERVERS", help="Kafka bootstrap servers host:port[,host:port]."),
]
Prefix = Annotated[str, typer.Option(help="Prefix of every topic name.")]


def _need_bootstrap(command: str, bootstrap: str | None) -> str:
    if not bootstrap:
        typer.echo(
            f"turnledger {command}: no Kafka bootstrap servers. Start the local stack with "
            "`turnledger dev up` and export KAFKA_BOOTSTRAP_SERVERS, or pass --bootstrap host:port.",
            err=True,
        )
        raise typer.Exit(EXIT_UNAVAILABLE)
    return bootstrap


def _run_until_signal(command: str, body: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await body(stop)

    try:
        asyncio.run(main())
    except BrokerUnavailable as exc:
        typer.echo(f"turnledger {command}: {exc}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc


def worker(
    bootstrap: Bootstrap = None,
    provider_url: Annotated[
        str, typer.Option(help="Base URL of the provider (or of the fake provider) for every SSE adapter.")
    ] = "http://127.0.0.1:8790",
    worker_id: Annotated[str, typer.Option(help="Stable id of this worker; recovery uses it.")] = "worker-1",
    journal_dir: Annotated[
        Path | None, typer.Option(help="Directory of the ownership journal (crash recovery needs it).")
    ] = Path(".turnledger/worker"),
    max_attempts: Annotated[int, typer.Option(min=1, help="Generations per operation, at most.")] = 4,
    topic_prefix: Prefix = "",
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
) -> None:
    """Send accepted manifests to the provider and stream the answers back as ingress events.

    Whether a broken stream is resumed follows from the manifest's bytes (OpenAI Responses with
    background + stream), as with the real APIs."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    servers = _need_bootstrap("worker", bootstrap)
    endpoints = endpoints_for(provider_url)
    config = WorkerConfig(worker_id=worker_id, max_attempts=max_attempts)
    _run_until_signal(
        "worker",
        lambda stop: run_worker(
            servers, endpoints, stop=stop, prefix=topic_prefix, config=config, journal_dir=journal_dir
        ),
    )


def tool_executor(
    bootstrap: Bootstrap = None,
    topic_prefix: Prefix = "",
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
) -> None:
    """Run the demo tools (get_weather, lookup_invoice) for canonical tool calls and submit their results."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    servers = _need_bootstrap("tool-executor", bootstrap)
    _run_until_signal(
        "tool-executor", lambda stop: run_tool_executor(servers, stop=stop, prefix=topic_prefix)
    )
