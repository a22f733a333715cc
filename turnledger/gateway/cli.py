"""`turnledger worker`, `turnledger tool-executor` and `turnledger legacy record`.

Register in turnledger/cli.py with:
    from turnledger.gateway.cli import legacy_app, tool_executor, worker
    app.command("worker")(worker)
    app.command("tool-executor")(tool_executor)
    app.add_typer(legacy_app, name="legacy")
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

import typer

from turnledger import cli_checks, cli_logging
from turnledger.errors import KafkaSettingsError, KafkaUnavailableError
from turnledger.gateway.crash_points import CrashPointError, crash_hook_from_env
from turnledger.gateway.credentials import CredentialError
from turnledger.gateway.legacy import (
    RECORDER_ID,
    LegacyExchangeError,
    RecordResult,
    read_exchanges,
    record_legacy,
)
from turnledger.gateway.provider_config import PROVIDERS_ENV, ProviderConfigError, load_routes
from turnledger.gateway.provider_failures import BackoffPolicy
from turnledger.gateway.pump import UNNAMED_ERROR_GRACE_S
from turnledger.gateway.redaction import install_log_redaction
from turnledger.gateway.rollout import RolloutStage
from turnledger.gateway.runner import run_tool_executor, run_worker
from turnledger.gateway.worker import WorkerConfig
from turnledger.kafka.group_timing import check_heartbeat, worker_heartbeat_ms
from turnledger.observability.server import MetricsPort
from turnledger.retry import Backoff
from turnledger.shutdown import EXIT_STOPPED_AT_ONCE, StoppedAtOnce, run_until_signalled, stop_on_signals

EXIT_UNAVAILABLE = 2
LONGEST_LEASE_S = 86_400.0
"""A day: an attempt silent longer than that is lost, and the lease's end must fit the ledger's long."""

Bootstrap = Annotated[
    str | None,
    typer.Option(
        envvar="KAFKA_BOOTSTRAP_SERVERS",
        help="Kafka bootstrap servers host:port[,host:port].",
        callback=cli_checks.bootstrap,
    ),
]
Prefix = Annotated[str, typer.Option(callback=cli_checks.topic_prefix, help="Prefix of every topic name.")]
MaxOutage = Annotated[
    float | None,
    typer.Option(
        min=0,
        help="Seconds one Kafka outage may last before the command gives up and exits 2. Unset: ride out "
        "any outage, retrying with backoff and logging what it waits for.",
    ),
]
Stage = Annotated[
    RolloutStage,
    typer.Option(
        envvar="TURNLEDGER_ROLLOUT_STAGE",
        help="Rollout stage: manifests-only (the legacy gateway sends everything), without-tools "
        "(we send requests without tools), all.",
    ),
]


def _need_bootstrap(command: str, bootstrap: str | None) -> str:
    if not bootstrap:
        typer.echo(
            f"turnledger {command}: no Kafka bootstrap servers. Start the local stack with "
            "`turnledger dev up` and export KAFKA_BOOTSTRAP_SERVERS, or pass --bootstrap host:port.",
            err=True,
        )
        raise typer.Exit(EXIT_UNAVAILABLE)
    return bootstrap


def _backoff(backoff_ms: int, backoff_max_ms: int) -> BackoffPolicy:
    """The worker's pause between generations; a longest pause below the first is a usage error (the
    pause would never double, and the first would be cut to the longest without a word)."""
    if backoff_max_ms < backoff_ms:
        raise typer.BadParameter(
            f"{backoff_max_ms} is below --backoff-ms {backoff_ms}: the longest pause cannot be shorter than "
            "the first",
            param_hint="--backoff-max-ms",
        )
    return BackoffPolicy(initial_s=backoff_ms / 1000, max_s=backoff_max_ms / 1000)


def _run_until_signal(command: str, body: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop, f"turnledger {command}")
        await body(stop)

    try:
        run_until_signalled(main())
    except StoppedAtOnce as exc:
        typer.echo(f"turnledger {command}: {exc}", err=True)
        raise typer.Exit(EXIT_STOPPED_AT_ONCE) from exc
    except KafkaUnavailableError as exc:
        typer.echo(f"turnledger {command}: {exc}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc


def worker(
    bootstrap: Bootstrap = None,
    providers: Annotated[
        Path | None,
        typer.Option(
            envvar=PROVIDERS_ENV,
            dir_okay=False,
            help="Provider routes file (.toml, else JSON): base URL, credential variable or file, "
            "timeouts and concurrency per adapter or model. Wins over --provider-url.",
        ),
    ] = None,
    provider_url: Annotated[
        str,
        typer.Option(
            envvar="TURNLEDGER_PROVIDER_URL",
            help="Without --providers: one base URL (the fake provider, or a proxy) for every API, with "
            "credentials from OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY and AWS_* when set.",
        ),
    ] = "http://127.0.0.1:8790",
    worker_id: Annotated[
        str, typer.Option(help="Stable id of this worker; recovery uses it.", callback=cli_checks.worker_id)
    ] = "worker-1",
    journal_dir: Annotated[
        Path | None, typer.Option(help="Directory of the ownership journal (crash recovery needs it).")
    ] = Path(".turnledger/worker"),
    max_attempts: Annotated[int, typer.Option(min=1, help="Generations per operation, at most.")] = 4,
    backoff_ms: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="TURNLEDGER_BACKOFF_MS",
            help="Pause before a new generation when the provider named none (its Retry-After is "
            "kept): this long after the first failure, doubling after each one.",
        ),
    ] = 500,
    backoff_max_ms: Annotated[
        int,
        typer.Option(min=0, envvar="TURNLEDGER_BACKOFF_MAX_MS", help="The longest such pause."),
    ] = 8000,
    lease_seconds: Annotated[
        float,
        typer.Option(
            min=0.5,
            max=LONGEST_LEASE_S,
            envvar="TURNLEDGER_LEASE_SECONDS",
            help="How long an accepted attempt stays this worker's without a sign of life; then any "
            "worker may take it over (this one renews it every third of it while it runs).",
        ),
    ] = 30.0,
    flush_ms: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="TURNLEDGER_FLUSH_MS",
            help="Append a stream's deltas at most this often (one StreamDeltas record per interval, "
            "a final delta at once); 0 appends one record per network chunk.",
        ),
    ] = 100,
    unnamed_error_grace_ms: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="TURNLEDGER_UNNAMED_ERROR_GRACE_MS",
            help="A stream whose error came before anything named its response may still name one "
            "this long (the error may be an earlier stream's); then the read ends on the error and "
            "the connection is closed, even if the provider keeps it open.",
        ),
    ] = round(UNNAMED_ERROR_GRACE_S * 1000),
    provider_keeps_keys: Annotated[
        bool,
        typer.Option(
            help="With --provider-url: the provider reattaches a request sent again with the same "
            "idempotency key (a keeping gateway, the fake provider), so broken attempts are replayed."
        ),
    ] = False,
    group_id: Annotated[
        str,
        typer.Option(
            help="Consumer group the workers share the manifests topic's partitions in (default "
            "'<topic prefix>turnledger-workers'); a worker restarts from the oldest open operation of "
            "its partitions, and a dead worker's partitions move to the others."
        ),
    ] = "",
    static: Annotated[
        bool, typer.Option(help="Read every manifests partition from the beginning, without a group.")
    ] = False,
    session_timeout_ms: cli_checks.SessionTimeoutMs = 10_000,
    topic_prefix: Prefix = "",
    rollout_stage: Stage = RolloutStage.ALL,
    max_outage: MaxOutage = None,
    metrics_port: MetricsPort = 0,
    log_level: cli_checks.LogLevel = "INFO",
) -> None:
    """Send accepted manifests to the provider and stream the answers back as ingress events.

    Routes come from --providers (or TURNLEDGER_PROVIDERS), else every API goes to --provider-url.
    Credentials are read from the variables or files the routes name and are never printed.
    Whether a broken stream is resumed follows from the manifest's bytes (OpenAI Responses with
    background + stream), as with the real APIs. Before the rollout stage `all`, the manifests
    the stage leaves to the legacy gateway are not sent (record its answers with
    `turnledger legacy record`)."""
    backoff = _backoff(backoff_ms, backoff_max_ms)
    cli_logging.configure(log_level)
    install_log_redaction()
    servers = _need_bootstrap("worker", bootstrap)
    if not static:
        try:
            worker_heartbeat_ms(session_timeout_ms)
        except KafkaSettingsError as exc:
            raise typer.BadParameter(str(exc)) from exc
    if journal_dir is not None:
        cli_checks.made_directory(journal_dir, "--journal-dir")
    try:
        crash_hook = crash_hook_from_env()
    except CrashPointError as exc:
        typer.echo(f"turnledger worker: {exc}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    try:
        keeps = True if provider_keeps_keys else None
        endpoints = load_routes(providers, provider_url, os.environ, keeps_idempotency_keys=keeps)
    except (ProviderConfigError, CredentialError) as exc:
        typer.echo(f"turnledger worker: {exc}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    for line in endpoints.describe():
        logging.getLogger("turnledger.worker").info("route %s", line)
    config = WorkerConfig(
        worker_id=worker_id,
        max_attempts=max_attempts,
        backoff=backoff,
        rollout_stage=rollout_stage,
        lease_s=lease_seconds,
        flush_s=flush_ms / 1000,
        unnamed_error_grace_s=unnamed_error_grace_ms / 1000,
        crash_hook=crash_hook,
    )
    _run_until_signal(
        "worker",
        lambda stop: run_worker(
            servers,
            endpoints,
            stop=stop,
            prefix=topic_prefix,
            config=config,
            journal_dir=journal_dir,
            group_id=None if static else group_id,
            session_timeout_ms=session_timeout_ms,
            metrics_port=metrics_port,
            outage=Backoff(max_outage_s=max_outage),
        ),
    )


def tool_executor(
    bootstrap: Bootstrap = None,
    topic_prefix: Prefix = "",
    rollout_stage: Stage = RolloutStage.ALL,
    session_timeout_ms: cli_checks.SessionTimeoutMs = 10_000,
    heartbeat_interval_ms: Annotated[
        int,
        typer.Option(
            min=1,
            help="Group: heartbeat interval; must be below --session-timeout-ms (a third of it at most "
            "is usual).",
        ),
    ] = 3_000,
    max_outage: MaxOutage = None,
    metrics_port: MetricsPort = 0,
    log_level: cli_checks.LogLevel = "INFO",
) -> None:
    """Run the demo tools (get_weather, lookup_invoice) for canonical tool calls and submit their results.

    Executors share the tool calls as members of the consumer group
    '<topic prefix>turnledger-tool-executor'. Before the rollout stage `all`, tool turns belong to the
    legacy gateway: nothing is run. Kafka outages (at start or later) are waited out."""
    cli_logging.configure(log_level)
    servers = _need_bootstrap("tool-executor", bootstrap)
    try:
        check_heartbeat(heartbeat_interval_ms, session_timeout_ms)
    except KafkaSettingsError as exc:
        raise typer.BadParameter(str(exc)) from exc
    outage = Backoff(max_outage_s=max_outage)
    _run_until_signal(
        "tool-executor",
        lambda stop: run_tool_executor(
            servers,
            stop=stop,
            prefix=topic_prefix,
            rollout_stage=rollout_stage,
            outage=outage,
            metrics_port=metrics_port,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
        ),
    )


legacy_app = typer.Typer(
    help="Rollout: record the answers of requests the legacy gateway sent, through the canonical CAS.",
    no_args_is_help=True,
)


@legacy_app.command("record")
def legacy_record(
    exchanges: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help='JSON lines: {"conversationId", "operationId", "response": the provider\'s SSE body as '
            'the legacy gateway received it, "status"?: its HTTP status (default 200)}.',
        ),
    ],
    bootstrap: Bootstrap = None,
    topic_prefix: Prefix = "",
    recorder_id: Annotated[
        str,
        typer.Option(
            help="Worker id the DispatchAttempts name as their sender.", callback=cli_checks.worker_id
        ),
    ] = RECORDER_ID,
    timeout: Annotated[
        float, typer.Option(min=1, callback=cli_checks.finite, help="Seconds to wait for every verdict.")
    ] = 120.0,
) -> None:
    """Commit legacy answers as their operations' canonical responses (each must be PREPARED).

    Each answer goes through the same CAS, parsers and assembler as ours: a truncated or invalid
    answer commits nothing and cancels the operation. Prints one line per exchange; exits 0 when
    every operation ends with an answer in the history (this one, or one committed before or by another
    sender), 1 otherwise, 2 when the file is unusable or Kafka is unreachable."""
    servers = _need_bootstrap("legacy record", bootstrap)
    try:
        loaded = read_exchanges(exchanges)
    except LegacyExchangeError as exc:
        typer.echo(f"turnledger legacy record: {exc}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    except UnicodeDecodeError as exc:
        said = f"{exchanges}: not UTF-8 (byte {exc.start}: {exc.reason})"
        typer.echo(f"turnledger legacy record: {said}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc

    progress = _ProgressLine()
    try:
        cli_checks.quiet_kafka_client_logs()
        results = asyncio.run(
            record_legacy(
                servers,
                loaded,
                prefix=topic_prefix,
                recorder_id=recorder_id,
                timeout_s=timeout,
                on_progress=progress.show,
            )
        )
    except KafkaUnavailableError as exc:
        progress.end()
        typer.echo(f"turnledger legacy record: {exc}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    progress.end()
    for result in results:
        typer.echo(_result_line(result))
    failed = [r for r in results if not r.ok]
    typer.echo(f"{len(results) - len(failed)} of {len(results)} recorded or already final")
    if failed:
        raise typer.Exit(1)


class _ProgressLine:
    """`recorded N/M` on stderr, rewritten in place; ended with a newline only once it was written, so
    that a line said before any progress (Kafka unreachable) starts stderr."""

    def __init__(self) -> None:
        self.shown = False

    def show(self, done: int, total: int) -> None:
        typer.echo(f"\rrecorded {done}/{total}", err=True, nl=False)
        self.shown = True

    def end(self) -> None:
        if self.shown:
            typer.echo("", err=True)
            self.shown = False


def _result_line(result: RecordResult) -> str:
    state = result.state or "-"
    detail = f"  {result.detail}" if result.detail else ""
    return f"{result.outcome.value:<14} {result.conversation_id}/{result.operation_id}  state {state}{detail}"
