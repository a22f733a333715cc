"""CLI: `turnledger replay audit|manifest|rebuild`, `turnledger shadow diff` and `turnledger metrics`.

Register in turnledger/cli.py `_register()`:

    from turnledger.replay.cli import metrics_command, replay_app, shadow_app
    app.add_typer(replay_app, name="replay")
    app.add_typer(shadow_app, name="shadow")
    app.command("metrics")(metrics_command)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from turnledger import cli_checks
from turnledger.cli_progress import bars, moved, moved_by_name
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
from turnledger.projections.cli import Bootstrap, KeyPrefix, RedisUrl, TopicPrefix, require, run
from turnledger.projections.keys import DEFAULT_KEY_PREFIX, ProjectionKeys
from turnledger.redisconn.client import classified, connect
from turnledger.replay.shadow import ShadowResult

replay_app = typer.Typer(
    help="Re-fold the ingress log, reproduce manifests, rebuild projections.", no_args_is_help=True
)
shadow_app = typer.Typer(help="Compare legacy provider requests with our manifests.", no_args_is_help=True)
console = Console(markup=False)
err = Console(stderr=True, markup=False)
"""No markup: what they print holds ids, paths and details from the topics, which are text."""


def _shadow() -> None:
    """Rollout step one: byte-level and semantic diffs against the legacy gateway's requests."""
    # a callback keeps `shadow` a command group even with one command (`turnledger shadow diff ...`)


def _bars() -> Progress:
    """The bars of `replay audit`, `replay manifest`, `replay rebuild`, `shadow diff` and `metrics`
    (`cli_progress.py`)."""
    return bars(err)


def audit_command(
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "",
    limit: Annotated[int, typer.Option(min=0, help="Divergences to list (all are counted).")] = 50,
    max_block_bytes: MaxBlockBytes = None,
    max_deltas_per_block: MaxDeltasPerBlock = None,
    max_blocks_per_turn: MaxBlocksPerTurn = None,
    max_record_bytes: MaxRecordBytes = None,
    max_turn_bytes: MaxTurnBytes = None,
    max_held_deltas: MaxHeldDeltas = None,
) -> None:
    """Fold the ingress log again and compare every output record, byte for byte, with the topics.

    The fold runs under the size limits given (--max-block-bytes ..., or the TURNLEDGER_MAX_*
    variables): give the processor's, or turns it accepted may be refused here (or the reverse), and
    those show up as divergences. The limits used are printed with the report. On a terminal, bars on
    stderr show the ingress offsets folded and each output topic's offsets read."""
    from turnledger.replay.audit import AuditReport, audit
    from turnledger.topology import Topics

    limits = limits_of(
        max_block_bytes,
        max_deltas_per_block,
        max_blocks_per_turn,
        max_record_bytes,
        max_turn_bytes,
        max_held_deltas,
    )
    export_limits(limits)  # the refold reads them, as the processor's fold does

    servers = require(bootstrap, "KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", "replay audit")
    topics = Topics(topic_prefix)
    with _bars() as progress:
        tasks = {"ingress": progress.add_task(f"folding {topics.ingress}", total=None, unit="offsets")}
        for topic in topics.outputs:
            tasks[topic] = progress.add_task(f"reading {topic}", total=None, unit="offsets")

        async def main() -> AuditReport:
            return await audit(servers, topics, moved_by_name(progress, tasks))

        report = run(main, "replay audit")
    summary = Table(title="replay audit", show_header=False)
    for name, value in (
        ("ingress records folded", report.ingress_records),
        ("expected output records", report.expected),
        ("output records on the topics", report.actual),
        ("records checked", report.checked),
        ("of them written with an older schema version", report.older_versions),
        ("divergences", len(report.divergences)),
        ("seconds", f"{report.seconds:.2f}"),
        ("size limits", describe(limits)),
    ):
        summary.add_row(name, str(value))
    console.print(summary)
    if report.divergences:
        table = Table(title=f"divergences (first {min(limit, len(report.divergences))})")
        for col in ("kind", "stream", "key", "#", "topic record (partition@offset)", "ingress source"):
            table.add_column(col, overflow="fold")
        for d in report.divergences[:limit]:
            table.add_row(d.kind, d.stream, d.key, str(d.index), str(d.actual or "-"), str(d.source or "-"))
        console.print(table)
        raise typer.Exit(1)
    console.print("the output topics are exactly the fold of the ingress log", style="green")


def manifest_command(
    operation_id: Annotated[str | None, typer.Argument(help="Operation id.")] = None,
    digest: Annotated[
        str | None,
        typer.Option("--digest", callback=cli_checks.manifest_digest, help="A manifest digest (sha256:...)."),
    ] = None,
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "",
    max_block_bytes: MaxBlockBytes = None,
    max_deltas_per_block: MaxDeltasPerBlock = None,
    max_blocks_per_turn: MaxBlocksPerTurn = None,
    max_record_bytes: MaxRecordBytes = None,
    max_turn_bytes: MaxTurnBytes = None,
    max_held_deltas: MaxHeldDeltas = None,
) -> None:
    """Rebuild a manifest's request from the topics and prove bytes and digests are equal.

    The committed turns are validated again under the size limits given (the processor's)."""
    from turnledger.replay.manifest_check import ManifestCheck, reproduce
    from turnledger.topology import Topics

    limits = limits_of(
        max_block_bytes,
        max_deltas_per_block,
        max_blocks_per_turn,
        max_record_bytes,
        max_turn_bytes,
        max_held_deltas,
    )
    export_limits(limits)
    err.print(f"size limits: {describe(limits)}", soft_wrap=True)

    if operation_id is None and digest is None:
        err.print("turnledger replay manifest: give an OPERATION_ID or --digest sha256:...", soft_wrap=True)
        raise typer.Exit(2)
    servers = require(bootstrap, "KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", "replay manifest")
    topics = Topics(topic_prefix)
    with _bars() as progress:
        tasks = {
            topic: progress.add_task(f"reading {topic}", total=None, unit="offsets")
            for topic in (topics.manifests, topics.committed, topics.ingress)
        }

        async def main() -> list[ManifestCheck]:
            return await reproduce(servers, topics, operation_id, digest, moved_by_name(progress, tasks))

        checks = run(main, "replay manifest")
    if not checks:
        err.print(f"no manifest found for {operation_id or digest!r} on the manifests topic", soft_wrap=True)
        raise typer.Exit(1)
    for check in checks:
        table = Table(
            title=f"{check.operation_id} {check.manifest_digest} "
            f"({check.adapter}, rev {check.conversation_revision})"
        )
        for col in ("binding", "equal", "recorded"):
            table.add_column(col, overflow="fold")
        for c in check.checks:
            recorded = c.recorded if len(c.recorded) < 80 else c.recorded[:77] + "..."
            table.add_row(c.name, Text("yes", style="green") if c.ok else Text("NO", style="red"), recorded)
        console.print(table)
        if check.error:
            console.print(check.error, style="red")
    if not all(c.ok for c in checks):
        raise typer.Exit(1)
    console.print(f"{len(checks)} manifest(s) reproduced byte for byte", style="green")


def rebuild_command(
    redis_url: RedisUrl = None,
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "",
    key_prefix: KeyPrefix = DEFAULT_KEY_PREFIX,
    verify: Annotated[bool, typer.Option(help="Compare with a projection of a fresh fold.")] = True,
    max_block_bytes: MaxBlockBytes = None,
    max_deltas_per_block: MaxDeltasPerBlock = None,
    max_blocks_per_turn: MaxBlocksPerTurn = None,
    max_record_bytes: MaxRecordBytes = None,
    max_turn_bytes: MaxTurnBytes = None,
    max_held_deltas: MaxHeldDeltas = None,
    shards: Annotated[
        int | None,
        typer.Option(
            "--shards",
            min=1,
            help="Redis Cluster only: rebuild the projection split in N slot groups (default: as it "
            "is split now; `turnledger project --shards`).",
        ),
    ] = None,
) -> None:
    """Drop the projection keys (SCAN+DEL by prefix), project the topics again, verify with a fresh fold.

    The fresh fold runs under the size limits given (the processor's). On a terminal, bars on stderr
    show the keys dropped (how many there are is known when the drop is over), the output topics'
    offsets projected, the ingress offsets folded and the keys of both projections compared."""
    from turnledger.projections.shards import discover
    from turnledger.replay.rebuild import RebuildReport, rebuild
    from turnledger.topology import Topics

    limits = limits_of(
        max_block_bytes,
        max_deltas_per_block,
        max_blocks_per_turn,
        max_record_bytes,
        max_turn_bytes,
        max_held_deltas,
    )
    export_limits(limits)
    if verify:
        err.print(f"size limits of the fresh fold: {describe(limits)}", soft_wrap=True)

    url = require(redis_url, "REDIS_URL", "--redis-url", "replay rebuild")
    servers = require(bootstrap, "KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", "replay rebuild")
    topics = Topics(topic_prefix)
    with _bars() as progress:
        tasks = {
            "dropping": progress.add_task(f"dropping the projection {key_prefix}", total=None, unit="keys"),
            "projecting": progress.add_task("projecting the output topics", total=None, unit="offsets"),
        }
        if verify:
            tasks["folding"] = progress.add_task(f"folding {topics.ingress}", total=None, unit="offsets")
            tasks["comparing"] = progress.add_task(
                f"comparing the projection {key_prefix} with the fresh fold's", total=None, unit="keys"
            )

        async def main() -> RebuildReport:
            redis = await connect(url)
            try:
                async with classified(redis):
                    keys = (
                        await discover(key_prefix, redis)
                        if shards is None
                        else ProjectionKeys.of(key_prefix, redis, shards)
                    )
                    return await rebuild(
                        redis, servers, topics, keys, verify=verify, progress=moved_by_name(progress, tasks)
                    )
            finally:
                await redis.aclose()

        report = run(main, "replay rebuild")
    console.print(
        f"dropped {report.dropped_keys} keys; projected {report.projected.applied} records "
        f"({report.projected.undecodable} undecodable) in {report.projected.seconds:.2f}s"
    )
    if report.verified:
        if report.differences:
            for line in report.differences[:50]:
                console.print(line, style="red")
            raise typer.Exit(1)
        console.print(
            f"equal to a projection of a fresh fold ({report.folded_records} records)", style="green"
        )


def shadow_diff_command(
    legacy: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Legacy requests, JSON Lines.")],
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "",
    fail_on_diff: Annotated[bool, typer.Option(help="Exit 1 when any request differs.")] = False,
    details: Annotated[bool, typer.Option(help="List every difference, not only the summary.")] = True,
) -> None:
    """Byte-level and semantic diff of legacy requests against our manifests' request bytes.

    LEGACY is JSON Lines: {"operationId": "...", "request": {...}} per line, with an optional
    "conversationId" (needed when several conversations use the same operation id)."""
    from turnledger.replay.manifest_check import latest_manifests
    from turnledger.replay.shadow import LegacyFormatError, compare_all, read_legacy
    from turnledger.topology import Topics

    servers = require(bootstrap, "KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", "shadow diff")
    try:
        items = read_legacy(legacy)
    except LegacyFormatError as exc:
        err.print(f"turnledger shadow diff: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from exc

    topics = Topics(topic_prefix)
    with _bars() as progress:
        reading = progress.add_task(f"reading {topics.manifests}", total=None, unit="offsets")
        comparing = progress.add_task("comparing", total=len(items), unit="lines")

        async def main() -> list[ShadowResult]:
            operations = {i.operation_id for i in items}
            manifests = await latest_manifests(servers, topics, operations, moved(progress, reading))
            return compare_all(items, manifests, moved(progress, comparing))

        results = run(main, "shadow diff")
    print_shadow(results, details)
    if fail_on_diff and any(r.status != "equal" for r in results):
        raise typer.Exit(1)


# registered here, not by decorators: mutmut mutates no decorated function
shadow_app.callback()(_shadow)
replay_app.command("audit")(audit_command)
replay_app.command("manifest")(manifest_command)
replay_app.command("rebuild")(rebuild_command)
shadow_app.command("diff")(shadow_diff_command)


def print_shadow(results: list[ShadowResult], details: bool = True) -> None:
    table = Table(title="shadow diff: legacy vs manifests")
    for col in ("line", "operation", "adapter", "bytes", "status", "differences"):
        table.add_column(col, overflow="fold")
    for r in results:
        kinds = sorted(
            {str(d.kind) + (f" ({d.side})" if str(d.side) != "both" else "") for d in r.differences}
        )
        table.add_row(
            str(r.line),
            r.operation_id,
            r.adapter or "-",
            "equal" if r.bytes_equal else "differ",
            r.status,
            ", ".join(kinds),
        )
    console.print(table)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    console.print(" · ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    if details:
        for r in results:
            if r.ambiguous:
                console.print(
                    Text.assemble(
                        f"  {r.operation_id}  ",
                        ("ambiguous", "bold"),
                        f": conversations {', '.join(r.ambiguous)} all have this operation id; "
                        f'add "conversationId" to line {r.line}',
                    )
                )
            for d in r.differences:
                console.print(
                    Text.assemble(
                        f"  {r.operation_id}  ", (d.kind, "bold"), f" {d.path} ({d.side}): {d.detail}"
                    )
                )


def metrics_command(
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """The spec's metrics, computed from the topics: validator rejections, orphaned and duplicate results,
    age of UNKNOWN dispatches, handle recovery rate, late blocks, preview retractions, CAS conflicts,
    partial tool dispatches.

    Reads every topic, one after the other, from the beginning to its end as it is when its read
    begins, into memory. On a terminal, bars on stderr show each topic's offsets read."""
    import time

    import orjson

    from turnledger.replay.evidence import STREAMS, read_all
    from turnledger.replay.metrics import compute
    from turnledger.replay.metrics_report import given_up_table, metrics_json, metrics_table
    from turnledger.topology import Topics

    servers = require(bootstrap, "KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", "metrics")
    topics = Topics(topic_prefix)
    with _bars() as progress:
        tasks = {
            topic: progress.add_task(f"reading {topic}", total=None, unit="offsets")
            for topic in map(topics.name, STREAMS)
        }
        evidence = run(
            lambda: read_all(servers, topic_prefix, progress=moved_by_name(progress, tasks)), "metrics"
        )
    metrics = compute(evidence, now_ms=int(time.time() * 1000))
    if as_json:
        typer.echo(orjson.dumps(metrics_json(metrics), option=orjson.OPT_SORT_KEYS).decode())
        return
    console.print(f"operations {metrics.operations}, committed {metrics.committed}")
    console.print(metrics_table(metrics))
    given = given_up_table(metrics)
    if given is not None:
        console.print(given)
