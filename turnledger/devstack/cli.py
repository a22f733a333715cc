"""`turnledger dev up|down|status|fetch|reap`: the local Kafka + Redis stack as background processes."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from turnledger.devstack.errors import DevstackError
from turnledger.devstack.jars import ensure_jars
from turnledger.devstack.kafka import SASL_MECHANISMS
from turnledger.devstack.redis_tls import OPENSSL_MISSING_FOR_REDIS
from turnledger.devstack.settings import ENV_BOOTSTRAP, ENV_REDIS_URL, Settings
from turnledger.devstack.stack import LocalStack, StackState, export_line, reap_stale_sessions
from turnledger.devstack.tls import OPENSSL_MISSING, openssl
from turnledger.errors import redact_url

dev_app = typer.Typer(
    name="dev",
    help="Run a real local Kafka broker (KRaft, from Maven Central jars), Redis and (when Debian's package "
    "is installed) Prometheus in the background.",
    no_args_is_help=True,
)
out = Console()
err = Console(stderr=True)

EXIT_NOT_RUNNING = 1
EXIT_UNAVAILABLE = 2
"""A stack that cannot be started or fetched is "stack unavailable", exit 2 as in every other command
(`turnledger demo`); `dev status` of no stack is an answer, exit 1."""


def _print_state(state: StackState, settings: Settings) -> None:
    out.print(
        f"[bold]Kafka bootstrap[/bold]  {state.bootstrap}"
        + (f"  (Kafka {state.kafka_version}, pid {state.kafka_pid})" if state.kafka_pid else "  (external)")
    )
    if state.secure_bootstrap:
        out.print(
            f"[bold]Kafka SASL_SSL[/bold]   {state.secure_bootstrap}  ({', '.join(SASL_MECHANISMS)} as "
            f"{state.sasl_username}; password in {state.sasl_password_file}; CA {state.ssl_ca_file})"
        )
    _print_mtls_listener(state)
    if state.oauth_bootstrap:
        out.print(
            f"[bold]Kafka OAUTHBEARER[/bold] {state.oauth_bootstrap}  (SASL_SSL; token in "
            f"{state.oauth_token_file}, signed by {state.oauth_signing_key}; CA {state.ssl_ca_file})"
        )
    out.print(
        f"[bold]Redis URL[/bold]        {escape(redact_url(state.redis_url))}"
        + (f"  (pid {state.redis_pid})" if state.redis_pid else "  (external)")
    )
    _print_redis_tls_port(state)
    if state.prometheus_url:
        out.print(f"[bold]Prometheus[/bold]       {state.prometheus_url}  (pid {state.prometheus_pid})")
        out.print(f"[bold]Scrape targets[/bold]   {state.prometheus_targets}/*.json (file_sd)")
    if state.kafka_log or state.redis_log:
        out.print(f"[bold]Logs[/bold]             {state.kafka_log or '-'}  {state.redis_log or '-'}")
    out.print(f"[bold]State dir[/bold]        {settings.state_dir}")
    print(state.export_line)
    for commented in (
        state.secure_export_line,
        state.mtls_export_line,
        state.oauth_export_line,
        state.redis_tls_export_line,
    ):
        if commented:
            print(commented)


def _print_mtls_listener(state: StackState) -> None:
    """The mutual-TLS listener, or why a devstack broker has none (openssl missing)."""
    if state.mtls_bootstrap:
        out.print(
            f"[bold]Kafka SSL[/bold]        {state.mtls_bootstrap}  (mutual TLS: client certificate "
            f"{state.ssl_client_cert_file}, key {state.ssl_client_key_file}; CA {state.ssl_ca_file})"
        )
    elif state.secure_bootstrap and openssl() is None:
        out.print(f"[bold]Kafka SSL[/bold]        none: {OPENSSL_MISSING}")


def _print_redis_tls_port(state: StackState) -> None:
    """Redis's TLS port, or why the devstack's Redis has none (openssl missing)."""
    if state.redis_tls_url:
        out.print(
            f"[bold]Redis TLS[/bold]        {state.redis_tls_url}  (ACL user {state.redis_username}; "
            f"password in {state.redis_password_file}; CA {state.redis_ca_file})",
        )
    elif state.redis_pid and openssl() is None:
        out.print(f"[bold]Redis TLS[/bold]        none: {OPENSSL_MISSING_FOR_REDIS}")


@dev_app.command()
def up(
    kafka_port: Annotated[
        int | None, typer.Option(help="Broker port on 127.0.0.1 (default: a free one).")
    ] = None,
    redis_port: Annotated[
        int | None, typer.Option(help="Redis port on 127.0.0.1 (default: a free one).")
    ] = None,
) -> None:
    """Start Kafka and Redis detached (pid files in the state dir) and print how to reach them.

    A service whose variable (KAFKA_BOOTSTRAP_SERVERS, REDIS_URL) is already set is used, not started.
    Exit 2 when the stack cannot start (the reason and what to do on stderr).
    """
    settings = Settings.from_env()
    stack = LocalStack(settings.state_dir)
    running = stack.running()
    if running is not None:
        out.print("[yellow]Already running.[/yellow]")
        _print_state(running, settings)
        return
    env_bootstrap = os.environ.get(ENV_BOOTSTRAP) or None
    env_redis = os.environ.get(ENV_REDIS_URL) or None
    started = time.monotonic()
    try:
        state = stack.up(settings, env_bootstrap, env_redis, kafka_port=kafka_port, redis_port=redis_port)
    except DevstackError as exc:
        err.print(f"dev up failed: {exc}", markup=False)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    out.print(f"[green]Up in {time.monotonic() - started:.1f}s.[/green]")
    _print_state(state, settings)


@dev_app.command()
def down() -> None:
    """Stop the processes recorded in the state dir (by pid and process group) and delete their data."""
    settings = Settings.from_env()
    stopped = LocalStack(settings.state_dir).down()
    out.print(f"Stopped: {', '.join(stopped)}." if stopped else "Nothing was running.")


@dev_app.command()
def reap() -> None:
    """Stop the stacks of test sessions whose process is gone and delete their data.

    A pytest session ended abruptly (the test watchdog's exit, a kill) leaves its own stack running.
    """
    # Each pytest session (each worker of `make test`'s integration pass) runs a stack under
    # `<state dir>/session-<pid>`; the next session's start reaps the dead ones, and `make test` runs
    # this after its integration pass so that none outlives the run.
    settings = Settings.from_env()
    reaped = reap_stale_sessions(settings.state_dir) if settings.state_dir.is_dir() else []
    for session in reaped:
        print(f"Reaped the stack of a test session that is gone: {session}")
    if not reaped:
        print("No stack of a finished test session was left running.")


@dev_app.command()
def status() -> None:
    """Print the bootstrap address, Redis URL and an `export` line; exit 1 when nothing is running."""
    settings = Settings.from_env()
    state = LocalStack(settings.state_dir).running()
    if state is None:
        env_bootstrap, env_redis = os.environ.get(ENV_BOOTSTRAP), os.environ.get(ENV_REDIS_URL)
        if env_bootstrap and env_redis:
            out.print("No local stack; the environment points at external services:")
            print(export_line(env_bootstrap, env_redis))
            return
        out.print(f"Not running (state dir {settings.state_dir}). Start it with `turnledger dev up`.")
        raise typer.Exit(EXIT_NOT_RUNNING)
    _print_state(state, settings)


@dev_app.command()
def fetch() -> None:
    """Download the pinned Kafka broker jars into the cache (no-op when cached); exit 2 when it cannot."""
    settings = Settings.from_env()
    try:
        jars = ensure_jars(settings)
    except DevstackError as exc:
        err.print(f"dev fetch failed: {exc}", markup=False)
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    out.print(f"Kafka {jars.version} jars: {jars.libs}", markup=False)
