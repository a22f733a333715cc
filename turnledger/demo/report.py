"""Rendering a demo result: metrics of the spec, then the invariants (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from turnledger.demo.metrics import percentile
from turnledger.demo.run import DemoResult


def _counter(counter: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "-"


def render(result: DemoResult, console: Console) -> None:
    m, d, w = result.metrics, result.driver, result.worker_counts
    console.print(
        f"\n[bold]turnledger demo[/bold] — {result.options.conversations} conversations, "
        f"{result.seconds:.1f}s, topic prefix {result.prefix!r}, projection key prefix {result.key_prefix!r}"
    )
    run = Table(title="run", show_header=False)
    rows = [
        (
            "conversations completed / cancelled / gave up / failed / stalled",
            f"{d.completed} / {d.cancelled} / {d.gave_up} / {d.failed} / {d.stalled}",
        ),
        ("user turns, dispatches, tool rounds", f"{d.user_turns}, {d.dispatches}, {d.tool_rounds}"),
        (
            "cancels sent mid-stream (answer committed first)",
            f"{d.cancels_requested} ({d.cancels_too_late})",
        ),
        ("tool calls run", str(result.tool_calls_run)),
        ("provider requests (POST + resume GET)", str(result.requests)),
        ("injected provider faults", _counter(result.faults)),
        ("injected invalid submissions", _counter(dict(d.invalid_submitted))),
        ("operations, committed", f"{m.operations}, {m.committed}"),
        ("committed at generation", _counter({f"g{k}": v for k, v in m.generations.items()})),
        ("final operation states", _counter(dict(m.final_states))),
        ("worker", _counter({k: v for k, v in w.items() if v})),
    ]
    for k, v in rows:
        run.add_row(k, v)
    console.print(run)
    metrics = Table(title="metrics (from the output topics)")
    metrics.add_column("metric")
    metrics.add_column("value")
    ages = m.unknown_ages_ms
    rate = m.handle_recovery_rate
    for k, v in [
        (
            "sequence-validator rejections",
            f"{sum(m.validator_rejections.values())} ({_counter(dict(m.validator_rejections))})",
        ),
        ("orphaned / duplicate tool results", f"{m.orphaned_results} / {m.duplicate_results}"),
        (
            "age of UNKNOWN dispatches (resolved)",
            f"n={len(ages)} p50={percentile(ages, 0.5)}ms p95={percentile(ages, 0.95)}ms "
            f"max={max(ages, default=0)}ms",
        ),
        ("UNKNOWN dispatches still open", f"{m.unknown_open} (oldest {m.unknown_open_max_age_ms}ms)"),
        (
            "handle recovery rate",
            f"{m.handle_recovered}/{m.handle_episodes}"
            + (f" = {rate:.0%}" if rate is not None else "")
            + f" of resumable streams (not resumable: {m.disconnects_not_resumable}, "
            + f"before a handle: {m.disconnects_without_handle})",
        ),
        ("late blocks (quarantine)", f"{sum(m.late_blocks.values())} ({_counter(dict(m.late_blocks))})"),
        ("preview retractions", str(m.preview_retractions)),
        ("canonical CAS conflicts", str(m.canonical_cas_conflicts)),
        (
            "dispatch CAS conflicts",
            f"{sum(m.dispatch_cas_conflicts.values())} ({_counter(dict(m.dispatch_cas_conflicts))})",
        ),
        ("partial tool dispatches", str(m.partial_tool_dispatches)),
        (
            "cancelled by a client (state the cancel found)",
            f"{m.cancelled} ({_counter(dict(m.cancelled_in_flight))})",
        ),
        ("operations the worker gave up", str(len(m.given_up))),
        ("other rejections", _counter(dict(m.other_rejections))),
    ]:
        metrics.add_row(k, v)
    console.print(metrics)
    if m.given_up:
        given = Table(title="given-up operations (the worker's last reason)")
        given.add_column("operation")
        given.add_column("reason", overflow="fold")
        for op, why in sorted(m.given_up.items())[:20]:
            given.add_row(op, why)
        if len(m.given_up) > 20:
            given.add_row("…", f"{len(m.given_up) - 20} more")
        console.print(given)
    inv = Table(title="invariants")
    inv.add_column("invariant")
    inv.add_column("checked", justify="right")
    inv.add_column("violations", justify="right")
    inv.add_column("")
    for c in result.checks:
        mark = "[green]ok[/green]" if c.ok else "[red]VIOLATED[/red] " + "; ".join(c.examples)
        inv.add_row(c.name, str(c.checked), str(c.violations), mark)
    console.print(inv)
    console.print(f"replay audit (turnledger.replay.audit) took {result.audit_seconds:.1f}s")
    verdict = "[green]all invariants hold[/green]" if result.ok else "[red]invariants violated[/red]"
    console.print(verdict)
