"""`turnledger demo`: the local stack, every service, N conversations with faults, a report, invariants."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from turnledger.demo.report import render
from turnledger.demo.run import DemoOptions, run_demo
from turnledger.errors import KafkaUnavailableError, redact_url

EXIT_VIOLATED = 1
EXIT_UNAVAILABLE = 2


def demo(
    conversations: Annotated[int, typer.Option(min=1, help="Conversations to drive.")] = 240,
    turns: Annotated[int, typer.Option(min=1, help="User turns per conversation.")] = 2,
    fault_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Probability of each provider fault kind per request.")
    ] = 0.04,
    invalid_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of conversations that submit invalid tool results.")
    ] = 0.08,
    cancel_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of conversations cancelling mid-stream.")
    ] = 0.05,
    interject_rate: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Share of conversations whose user speaks again mid-stream."),
    ] = 0.05,
    throttle_rate: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Share of conversations whose first provider request is refused with a 429 that "
            "asks for a second's wait (the worker waits it out, and so does the route).",
        ),
    ] = 0.03,
    move_rate: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Share of conversations that move between APIs: each dispatch (a tool loop's too) goes "
            "to the next API's current adapter, asking it to think where the adapter can.",
        ),
    ] = 0.1,
    crash_worker: Annotated[
        bool, typer.Option(help="Kill one of the two workers a third of the way through.")
    ] = True,
    seed: Annotated[int, typer.Option(help="Seed of the fake provider and the driver.")] = 7,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of every topic.")] = 4,
    concurrency: Annotated[int, typer.Option(min=1, help="Conversations in flight at once.")] = 48,
    serve: Annotated[
        bool, typer.Option(help="Run `turnledger serve` on the run's projection and print the page's URL.")
    ] = True,
    log_file: Annotated[
        Path | None,
        typer.Option(
            help="Also write the INFO logs of the services in this process (workers, tool executor, "
            "driver) to this file: what to read when an operation is left not final.",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Run the whole system on the local stack (started if none is configured) and check its promises.

    The report goes to stdout; a run that could not start (Kafka unreachable, the local stack not
    started) says why in one line on stderr, exit 2."""
    configure_logging(log_file)
    from turnledger.devstack.errors import DevstackError
    from turnledger.devstack.session import session_endpoints

    console = Console()
    refusals = Console(stderr=True, markup=False, soft_wrap=True)
    options = DemoOptions(
        conversations=conversations,
        turns=turns,
        fault_rate=fault_rate,
        invalid_rate=invalid_rate,
        cancel_rate=cancel_rate,
        interject_rate=interject_rate,
        throttle_rate=throttle_rate,
        move_rate=move_rate,
        crash_worker_at=1 / 3 if crash_worker else None,
        seed=seed,
        partitions=partitions,
        concurrency=concurrency,
        serve=serve,
    )
    try:
        with session_endpoints() as endpoints:
            redis = redact_url(endpoints.redis_url)
            stack = f"stack: Kafka {endpoints.bootstrap}, Redis {redis} ({endpoints.source})"
            console.print(stack, markup=False)
            with Progress(
                TextColumn("conversations"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as bar:
                task = bar.add_task("conversations", total=conversations)
                result = asyncio.run(
                    run_demo(
                        endpoints.bootstrap,
                        endpoints.redis_url,
                        options,
                        lambda done, total: bar.update(task, completed=done),
                        announce=console.print,
                    )
                )
    except KafkaUnavailableError as exc:
        refusals.print(f"turnledger demo: {exc}", style="red")
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    except DevstackError as exc:
        refusals.print(f"turnledger demo: could not start the local stack: {exc}", style="red")
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    render(result, console)
    if not result.ok:
        if log_file is None:
            console.print("run again with --log-file PATH to keep the services' logs of the run")
        raise typer.Exit(EXIT_VIOLATED)


FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(log_file: Path | None) -> None:
    """Warnings to stderr; with `log_file`, INFO and up to that file as well."""
    logging.basicConfig(level=logging.WARNING, format=FORMAT)
    # fresh topics: aiokafka logs the retried NotLeaderForPartition of their first fetches as errors;
    # a real broker failure still surfaces as KafkaUnavailableError
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    if log_file is None:
        return
    root = logging.getLogger()
    for handler in root.handlers:
        handler.setLevel(logging.WARNING)
    try:
        to_file = logging.FileHandler(log_file, encoding="utf-8")
    except OSError as exc:
        said = f"cannot write {log_file}: {exc.strerror or exc}"
        raise typer.BadParameter(said, param_hint="--log-file") from exc
    to_file.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(to_file)
    root.setLevel(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per provider request
