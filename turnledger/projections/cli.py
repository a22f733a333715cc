"""CLI: `turnledger project`, `turnledger history CONV`, `turnledger status OP`.

Register in turnledger/cli.py `_register()`:

    from turnledger.projections.cli import history_command, project_command, status_command
    app.command("project")(project_command)
    app.command("history")(history_command)
    app.command("status")(status_command)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Annotated, Any, TypeVar

import orjson
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from turnledger import cli_checks, cli_logging
from turnledger.cli_progress import bars, moved
from turnledger.errors import MissingTopicError, ProjectionError, ServiceUnavailable
from turnledger.observability.server import MetricsPort
from turnledger.processors.errors import TopicMismatchError
from turnledger.projections.keys import DEFAULT_KEY_PREFIX, ProjectionKeys
from turnledger.projections.reader import ProjectionReader
from turnledger.redisconn.client import classified, connect, diagnose, redis_client
from turnledger.redisconn.naming import client_url
from turnledger.shutdown import EXIT_STOPPED_AT_ONCE, StoppedAtOnce, run_until_signalled, stop_on_signals

T = TypeVar("T")
console = Console(markup=False)
err = Console(stderr=True, markup=False)
"""No markup: what they print holds users' and models' text (`[/x]` in an answer is text, not a tag)."""

RedisUrl = Annotated[str | None, typer.Option("--redis-url", envvar="REDIS_URL", help="Redis URL.")]
Bootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        envvar="KAFKA_BOOTSTRAP_SERVERS",
        help="Kafka host:port[,...].",
        callback=cli_checks.bootstrap,
    ),
]
TopicPrefix = Annotated[
    str,
    typer.Option("--topic-prefix", callback=cli_checks.topic_prefix, help="Prepended to every topic name."),
]
KeyPrefix = Annotated[
    str,
    typer.Option(
        "--key-prefix",
        help="Prefix of every projection key in Redis (on a Redis Cluster in braces: {tl:}...).",
        callback=cli_checks.key_prefix,
    ),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Shards = Annotated[
    int | None,
    typer.Option(
        "--shards",
        envvar="TURNLEDGER_PROJECTION_SHARDS",
        min=1,
        help="Redis Cluster only: split the projection in N slot groups, each conversation's keys in "
        "one, so that it spreads over the cluster's shards (default: as the projection in Redis is, "
        "1 for a new one). Fixed for the projection's life: changing it is a rebuild.",
    ),
]


def require(value: str | None, name: str, flag: str, command: str) -> str:
    """`value`, or `turnledger COMMAND:` saying that `name` (`flag`) is not set, exit 2."""
    if value:
        return value
    err.print(
        f"turnledger {command}: {name} is not set. Set {name} or pass {flag}; for a local stack run "
        "`turnledger dev up` and export the variables it prints.",
        soft_wrap=True,
    )
    raise typer.Exit(2)


def run(factory: Callable[[], Awaitable[T]], command: str) -> T:
    """Run a coroutine for `turnledger COMMAND`; typed failures become its one line, `turnledger COMMAND:
    MESSAGE`, as every command says its last (the outage it gave up on, ...), and exit code 2, never a
    traceback."""
    cli_checks.quiet_kafka_client_logs()
    try:
        return run_until_signalled(factory())  # type: ignore[arg-type]
    except StoppedAtOnce as exc:
        err.print(f"turnledger {command}: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_STOPPED_AT_ONCE) from exc
    except (ProjectionError, ServiceUnavailable, MissingTopicError, TopicMismatchError) as exc:
        err.print(f"turnledger {command}: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from exc


def _bars() -> Progress:
    """`project --until-caught-up`'s bar (`cli_progress.py`)."""
    return bars(err)


def project_command(
    redis_url: RedisUrl = None,
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "",
    key_prefix: KeyPrefix = DEFAULT_KEY_PREFIX,
    batch_size: Annotated[int, typer.Option(min=1, help="Records per fetch (one script call each).")] = 1000,
    until_caught_up: Annotated[
        bool, typer.Option(help="Stop at the current end of the topics (reads every partition, alone).")
    ] = False,
    group_id: Annotated[
        str | None,
        typer.Option(
            help="Consumer group of the projectors that share the partitions (default: "
            "'<topic prefix>turnledger-projector'). Every `turnledger project` of the same group takes "
            "its share, and over the partitions of one that dies; exactly once either way, as the "
            "applied offsets live in Redis."
        ),
    ] = None,
    static: Annotated[
        bool, typer.Option("--static", help="Read every partition without a consumer group (one projector).")
    ] = False,
    session_timeout_ms: cli_checks.SessionTimeoutMs = 10_000,
    heartbeat_interval_ms: Annotated[
        int,
        typer.Option(
            min=1,
            help="Group: heartbeat interval; must be below --session-timeout-ms (a third of it at most "
            "is usual).",
        ),
    ] = 3_000,
    max_outage: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds one Kafka or Redis outage may last before the projector gives up and exits 2. "
            "Unset: ride out any outage, retrying with backoff and logging what it waits for.",
        ),
    ] = None,
    metrics_port: MetricsPort = 0,
    shards: Shards = None,
    log_level: cli_checks.LogLevel = "INFO",
) -> None:
    """Project the output topics into Redis, exactly once per partition offset.

    Follows the topics until SIGTERM/Ctrl-C, as a member of a consumer group unless --static;
    Kafka and Redis outages (at start or later, restarts included) are waited out. With
    --until-caught-up, a bar on stderr shows the offsets projected of the lag at start.

    --metrics-port P serves /metrics (the spec's metrics, counted from the records this projector
    applied, and its own), /healthz and /readyz (ready: partitions assigned and positioned, no outage).
    """
    from turnledger.observability.spec_metrics import SpecMetrics, serve_spec_metrics
    from turnledger.projections.projector import Projector, ProjectorStats
    from turnledger.projections.settings import FollowSettings
    from turnledger.retry import Backoff
    from turnledger.topology import Topics

    url, servers = (
        require(redis_url, "REDIS_URL", "--redis-url", "project"),
        require(bootstrap, "KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", "project"),
    )
    cli_logging.configure(log_level)
    try:
        follow = FollowSettings(
            group_id=None if static else (group_id or f"{topic_prefix}turnledger-projector"),
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            outage=Backoff(max_outage_s=max_outage),
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    progress = _bars()
    lag = progress.add_task("catching up", total=None, unit="offsets")

    async def main() -> ProjectorStats:
        # following waits for a Redis that is down, not for one that refuses us; a one-shot run
        # says either at once
        diagnosed = None if until_caught_up else await diagnose(url)
        redis = await connect(url) if until_caught_up else redis_client(url)
        spec = SpecMetrics()
        projector = Projector(
            redis,
            servers,
            Topics(topic_prefix),
            ProjectionKeys.of(key_prefix, redis, shards or 1),
            batch_size=batch_size,
            adopt_layout=shards is None,
            on_applied=lambda applied: spec.observe(d.record for d in applied if d.record is not None),
        )
        try:
            if until_caught_up:
                async with classified(redis):
                    return await projector.run_to_end(progress=moved(progress, lag))
            stop = asyncio.Event()
            stop_on_signals(stop, "turnledger project")
            how = "alone" if follow.group_id is None else f"in consumer group {follow.group_id!r}"
            err.print(
                f"projecting {servers} -> {client_url(redis)} (keys {key_prefix!r}) {how}; Ctrl-C to stop",
                markup=False,
                soft_wrap=True,
            )
            async with serve_spec_metrics(metrics_port, spec, projector.readiness):
                return await projector.run_forever(stop, follow=follow, diagnosed=diagnosed)
        finally:
            await redis.aclose()

    with progress if until_caught_up else nullcontext():
        stats = run(main, "project")
    err.print(
        f"applied {stats.applied}, skipped {stats.skipped} (already applied), "
        f"undecodable {stats.undecodable}, "
        f"{stats.batches} batches in {stats.seconds:.2f}s",
        soft_wrap=True,
    )


def history_command(
    conversation: Annotated[str, typer.Argument(help="Conversation id.")],
    redis_url: RedisUrl = None,
    key_prefix: KeyPrefix = DEFAULT_KEY_PREFIX,
    as_json: JsonOut = False,
    previews: Annotated[bool, typer.Option(help="Also show current (revocable) previews.")] = True,
) -> None:
    """The committed history of a conversation, block by block; exit 1 when the projection does not
    know the conversation (one it knows with no committed turn yet is an empty history)."""
    url = require(redis_url, "REDIS_URL", "--redis-url", "history")

    async def main() -> tuple[list[Any], list[Any], list[Any]] | None:
        redis = await connect(url)
        try:
            async with classified(redis):
                reader = await ProjectionReader.open(redis, key_prefix)
                held = (
                    await reader.history(conversation),
                    await reader.previews(conversation) if previews else [],
                    await reader.quarantine(conversation),
                )
                return held if any(held) or await reader.knows(conversation) else None
        finally:
            await redis.aclose()

    held = run(main, "history")
    if held is None:
        err.print(
            f"conversation {conversation!r} is not in the projection (key prefix {key_prefix!r})",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    blocks, current, quarantined = held
    if as_json:
        data = {
            "conversationId": conversation,
            "blocks": [b.to_json_dict() for b in blocks],
            "previews": [_preview_json(p) for p in current],
            "quarantine": [q.to_json_dict() for q in quarantined],
        }
        console.print_json(orjson.dumps(data).decode())
        return
    if not blocks:
        err.print(
            f"no committed history for {conversation!r} under key prefix {key_prefix!r}", soft_wrap=True
        )
    table = Table(title=f"history of {conversation}")
    for col in ("rev", "#", "role", "kind", "block", "digest", "content"):
        table.add_column(col, overflow="fold")
    for b in blocks:
        table.add_row(str(b.revision), str(b.ordering), b.role, b.kind, b.id, b.digest[:19], _content(b))
    console.print(table)
    if current:
        pt = Table(title="previews (revocable, not history)")
        for col in ("operation", "gen", "block", "text"):
            pt.add_column(col, overflow="fold")
        for p in current:
            pt.add_row(p.operation_id, str(p.attempt_generation), str(p.block_index), p.text)
        console.print(pt)
    if quarantined:
        console.print(f"{len(quarantined)} quarantined late block(s)", style="yellow")


def _preview_json(p: Any) -> dict[str, Any]:
    return {s: getattr(p, s) for s in p.__slots__}


def _content(block: Any) -> str:
    if block.kind == "tool_call":
        return f"{block.tool_name}({block.arguments}) [{block.call_id}]"
    if block.kind == "tool_result":
        return f"[{block.call_id} {block.result_status}] {block.text or ''}"
    return block.text or ""


def status_command(
    operation_id: Annotated[str, typer.Argument(help="Operation id.")],
    conversation: Annotated[
        str | None,
        typer.Option(help="The operation's conversation; needed when several conversations use the id."),
    ] = None,
    redis_url: RedisUrl = None,
    key_prefix: KeyPrefix = DEFAULT_KEY_PREFIX,
    as_json: JsonOut = False,
) -> None:
    """The status of a dispatch operation: state, generation, manifest digest, reason, times."""
    url = require(redis_url, "REDIS_URL", "--redis-url", "status")

    async def main() -> Any:
        redis = await connect(url)
        try:
            async with classified(redis):
                reader = await ProjectionReader.open(redis, key_prefix)
                return await reader.find_operation(operation_id, conversation)
        finally:
            await redis.aclose()

    op = run(main, "status")
    if op is None:
        where = f" of conversation {conversation!r}" if conversation else ""
        err.print(
            f"operation {operation_id!r}{where} is not in the projection (key prefix {key_prefix!r})",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    if as_json:
        console.print_json(orjson.dumps(op.to_json()).decode())
        return
    table = Table(title=f"operation {operation_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in op.fields.items():
        table.add_row(name, value)
    console.print(table)
