"""`turnledger process`: run the partition processors of this process.

Registered by the top-level CLI with `app.command("process")(process)`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from turnledger import cli_checks, cli_logging
from turnledger.cli_refusals import EXIT_REFUSED, PROCESS_REFUSALS, REFUSALS
from turnledger.dispatch.cache_sizes import STATE_CACHE_SIZE
from turnledger.kafka.clients import kafka_outage
from turnledger.kafka.connection import kafka_options
from turnledger.observability.server import MetricsPort
from turnledger.processors.app import ProcessorApp
from turnledger.processors.config import GroupSettings, ProcessorConfig, ProcessorExit
from turnledger.processors.errors import (
    EXIT_FAILED,
    EXIT_FENCED,
    EXIT_USAGE,
    ChildRefusedError,
    ProcessesFailedError,
    ProcessorError,
)
from turnledger.processors.fold_spec import DEFAULT_FOLD_SPEC, FoldSpecError, load_fold_factory
from turnledger.processors.health import serve_processor_metrics
from turnledger.processors.limits_config import (
    MaxBlockBytes,
    MaxBlocksPerTurn,
    MaxDeltasPerBlock,
    MaxHeldDeltas,
    MaxRecordBytes,
    MaxTurnBytes,
    describe,
    export_limits,
    limits_of,
)
from turnledger.processors.model_registry import load_model_registry
from turnledger.processors.multiproc import ProcessGroup
from turnledger.processors.ownership import owned_partitions
from turnledger.processors.state_cache_config import STATE_CACHE_ENV
from turnledger.processors.topics import ensure_topics
from turnledger.retry import Backoff, ride_out
from turnledger.topology import Topics

log = logging.getLogger(__name__)


MAX_PARTITION = 99_999
"""The highest partition number `--partitions` takes: far above any topic's count, and a range is
expanded into a list before the topic is asked."""


def parse_partitions(value: str) -> list[int] | None:
    """`all` → None (every partition of the ingress topic); `0,1,2` or `0-3,7` → that list."""
    if value.strip().lower() == "all":
        return None
    result: set[int] = set()
    try:
        for part in value.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if not 0 <= lo <= hi <= MAX_PARTITION:
                    raise ValueError(part)
                result.update(range(lo, hi + 1))
            elif part:
                result.add(int(part))
    except ValueError as exc:
        raise typer.BadParameter(
            f"expected 'all' or e.g. '0,1,2' / '0-3' (ranges low to high, at most {MAX_PARTITION}), "
            f"got {value!r}"
        ) from exc
    if not result or min(result) < 0 or max(result) > MAX_PARTITION:
        raise typer.BadParameter(
            f"expected 'all' or partition numbers from 0 to {MAX_PARTITION}, got {value!r}"
        )
    return sorted(result)


def process(
    bootstrap: Annotated[
        str | None,
        typer.Option(
            envvar="KAFKA_BOOTSTRAP_SERVERS",
            help="Kafka bootstrap servers host:port[,host:port].",
            callback=cli_checks.bootstrap,
        ),
    ] = None,
    partitions: Annotated[
        str | None,
        typer.Option(
            help="Own these ingress partitions statically ('all', or e.g. '0,1,2' / '0-3') instead of "
            "joining the processor's consumer group. Static partitions never move: when this process dies "
            "nobody takes them over until it is restarted. Unset: group ownership (the default), where "
            "every `turnledger process` with the same --app-id shares the partitions and takes over "
            "those of a member that dies."
        ),
    ] = None,
    topic_prefix: Annotated[
        str, typer.Option(callback=cli_checks.topic_prefix, help="Prefix of every topic name.")
    ] = "",
    batch_max_records: Annotated[int, typer.Option(min=1, help="Records per transaction, at most.")] = 500,
    batch_max_ms: Annotated[
        int, typer.Option(min=1, help="Milliseconds a batch stays open after its first record.")
    ] = 100,
    pipelined_commits: Annotated[
        bool,
        typer.Option(
            help="Fold the next batch while the previous one's transaction commits (its transaction "
            "begins only after that commit; a failed commit folds both again)."
        ),
    ] = True,
    group_commit: Annotated[
        bool,
        typer.Option(
            help="With pipelined commits, close a batch as soon as the previous commit has ended "
            "(at the latest --batch-max-ms after its first record) instead of always waiting "
            "--batch-max-ms: lower latency under light load, larger batches under heavy load, at "
            'more CPU per record (docs/architecture.md, "Group commit").'
        ),
    ] = False,
    state_dir: Annotated[
        Path | None, typer.Option(help="Directory for on-disk (SQLite) state; in memory when unset.")
    ] = None,
    state_cache_size: Annotated[
        int | None,
        typer.Option(
            min=0,
            envvar=STATE_CACHE_ENV,
            help="Decoded conversation states each partition keeps in memory (default "
            f"{STATE_CACHE_SIZE:,}; each costs ~20 KB). Fewer: less memory, but a partition with more "
            "conversations active at once decodes their states again on every event. No output depends "
            "on it.",
        ),
    ] = None,
    app_id: Annotated[
        str,
        typer.Option(
            help="Prefix of the per-partition transactional ids, and the consumer group (its members share "
            "the partitions; its committed offsets are the processor's). Same value = same processor."
        ),
    ] = "turnledger",
    fold: Annotated[
        str, typer.Option(help="module:attr of the fold factory, called as factory(topics, partition).")
    ] = DEFAULT_FOLD_SPEC,
    create_topics: Annotated[
        int, typer.Option(min=0, help="Create missing topics with this many partitions first (0: don't).")
    ] = 0,
    processes: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="TURNLEDGER_PROCESSES",
            help="Child processes to run, one per core (the fold is CPU-bound): with group ownership each "
            "child is one more member of the group; with --partitions the partitions are dealt over them "
            "round-robin, at most one process per partition. The transactional ids stay per partition, so "
            "fencing and exactly-once are unchanged. 1: everything in this process.",
        ),
    ] = 1,
    session_timeout_ms: cli_checks.SessionTimeoutMs = 10_000,
    heartbeat_interval_ms: Annotated[
        int,
        typer.Option(
            min=1,
            help="Group ownership: how often a member heartbeats; must be below --session-timeout-ms (a "
            "third of it at most is usual).",
        ),
    ] = 3_000,
    max_outage: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds one Kafka outage may last before the processor gives up and exits 2. Unset: ride "
            "out any outage, retrying with backoff and logging what it waits for (what a service under "
            "no supervisor should do).",
        ),
    ] = None,
    metrics_port: MetricsPort = 0,
    log_level: cli_checks.LogLevel = "INFO",
    max_block_bytes: MaxBlockBytes = None,
    max_deltas_per_block: MaxDeltasPerBlock = None,
    max_blocks_per_turn: MaxBlocksPerTurn = None,
    max_record_bytes: MaxRecordBytes = None,
    max_turn_bytes: MaxTurnBytes = None,
    max_held_deltas: MaxHeldDeltas = None,
) -> None:
    """Fold the ingress topic exactly once: one transactional processor per partition.

    By default the process joins the consumer group --app-id and processes what the group assigns
    it; partitions move between processes as they come and go (docs/architecture.md, "The exactly-
    once runtime", says why that is exactly once). Kafka outages, at start or later, are waited out
    with backoff.

    SIGTERM or Ctrl-C commits the open batches, then exits 0; a second signal stops at once.
    With --processes N the signals go to every child; a child that fails stops the others.

    --metrics-port P serves /metrics, /healthz and /readyz (ready: an assignment arrived and every
    owned partition restored its state); with --processes N, child k serves on P + k instead.

    The size limits (--max-block-bytes ..., or their TURNLEDGER_MAX_* variables) are what the fold
    refuses past; the processor logs them at start. `turnledger replay audit` must be given the same
    (docs/architecture.md, "Size limits").

    Exit codes: 1 a partition failed (or a child process died), 2 bad usage, a refusal or Kafka
    unreachable for longer than --max-outage, 3 fenced by another processor (static partitions); with
    --processes, the worst of the children's (children that all ended on a 2 of the same kind end
    with the one line of one process).
    """
    cli_logging.configure(log_level)
    if not bootstrap:
        typer.echo(
            "turnledger process: no Kafka bootstrap servers. Start the local stack with `turnledger dev up` "
            "and export KAFKA_BOOTSTRAP_SERVERS, or pass --bootstrap host:port.",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    owned = parse_partitions(partitions) if partitions is not None else None
    limits = limits_of(
        max_block_bytes,
        max_deltas_per_block,
        max_blocks_per_turn,
        max_record_bytes,
        max_turn_bytes,
        max_held_deltas,
    )
    export_limits(limits)  # the default fold and the children of --processes read them from there
    if state_cache_size is not None:
        os.environ[STATE_CACHE_ENV] = str(state_cache_size)  # read by the default fold, as the limits
    log.info("size limits: %s", describe(limits))
    load_model_registry()  # an override that cannot be read stops the command now, not each partition
    kafka_options()  # so does a KAFKA_* setting that cannot work: once, not in each child of --processes
    topics = Topics(prefix=topic_prefix)
    try:
        factory = load_fold_factory(fold)
    except FoldSpecError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fold") from exc
    if state_dir is not None:
        cli_checks.made_directory(state_dir, "--state-dir")
    try:
        config = ProcessorConfig(
            bootstrap=bootstrap,
            app_id=app_id,
            topics=topics,
            batch_max_records=batch_max_records,
            batch_max_ms=batch_max_ms,
            pipelined_commits=pipelined_commits,
            group_commit=group_commit,
            state_dir=state_dir,
            group=GroupSettings(
                session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms
            ),
            outage=Backoff(max_outage_s=max_outage),
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    static = partitions is not None

    async def main() -> dict[int, ProcessorExit]:
        if create_topics:
            await ride_out(
                lambda: ensure_topics(bootstrap, topics, create_topics),
                waiting_for=f"Kafka at {bootstrap} to create the topics",
                classify=kafka_outage(bootstrap, "create the topics"),
                backoff=config.outage,
            )
        if processes > 1:
            group = await _process_group(
                config, fold, owned, processes, log_level, static=static, metrics_port=metrics_port
            )
            if group is not None:
                return await group.run()
        app = ProcessorApp(config, lambda p: factory(topics, p), partitions=owned, group=not static)
        async with serve_processor_metrics(metrics_port, app):
            return await app.run()

    try:
        results = asyncio.run(main())
    except ProcessesFailedError as exc:
        typer.echo(f"turnledger process: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from exc
    except ChildRefusedError as exc:  # the children's, said as one process says them
        typer.echo(exc.line, err=True)
        raise typer.Exit(EXIT_REFUSED) from exc
    except PROCESS_REFUSALS.families as exc:
        typer.echo(PROCESS_REFUSALS.line(exc), err=True)
        raise typer.Exit(EXIT_REFUSED) from exc
    except REFUSALS.families:  # LimitsConfigError is a ProcessorError, yet a refusal: the entry point says it
        raise
    except ProcessorError as exc:
        typer.echo(f"turnledger process: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from exc
    fenced = sorted(p for p, how in results.items() if how is ProcessorExit.FENCED)
    if fenced and static:
        typer.echo(f"turnledger process: partitions {fenced} were fenced by another processor", err=True)
        raise typer.Exit(EXIT_FENCED)


async def _process_group(
    config: ProcessorConfig,
    fold: str,
    requested: list[int] | None,
    processes: int,
    log_level: str,
    *,
    static: bool,
    metrics_port: int = 0,
) -> ProcessGroup | None:
    """The children for `--processes N`: group members, or (static) the owned partitions dealt over at
    most one process per partition; None when that leaves one."""
    if not static:
        log.info("%d processes, each a member of consumer group %r", processes, config.offsets_group)
        return ProcessGroup(config, fold, None, processes, log_level=log_level, metrics_port=metrics_port)
    owned = await owned_partitions(config, requested)
    group = ProcessGroup(config, fold, owned, processes, log_level=log_level, metrics_port=metrics_port)
    if len(group.groups) < processes:
        log.warning(
            "--processes %d capped to %d: %d owned partitions (%s), at most one process each",
            processes,
            len(group.groups),
            len(owned),
            owned,
        )
    if len(group.groups) == 1:
        log.info("one process: running every partition in this one, as without --processes")
        return None
    log.info("partitions %s over %d processes: %s", owned, len(group.groups), group.groups)
    return group
