"""Rendering a demo result: metrics of the spec, then the invariants (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from turnledger.demo.run import DemoResult
from turnledger.replay.metrics_report import counter_text as _counter
from turnledger.replay.metrics_report import given_up_table, metrics_table


def render(result: DemoResult, console: Console) -> None:
    m, d, w = result.metrics, result.driver, result.worker_counts
    console.print(
        f"\n[bold]turnledger demo[/bold] — {result.options.conversations} conversations, "
        f"{result.seconds:.1f}s, topic prefix {result.prefix!r}, projection key prefix {result.key_prefix!r}"
    )
    run = Table(title="run", show_header=False)
    rows = [
        (
            "conversations completed / cancelled / gave up / refused / cut at the limit / failed / stalled",
            f"{d.completed} / {d.cancelled} / {d.gave_up} / {d.refused} / {d.output_limited} / {d.failed}"
            f" / {d.stalled}",
        ),
        ("answers with nothing visible (COMMITTED EMPTY_RESPONSE, no turn)", str(d.nothing_visible)),
        ("user turns, dispatches, tool rounds", f"{d.user_turns}, {d.dispatches}, {d.tool_rounds}"),
        (
            "cancels sent mid-stream (answer committed first)",
            f"{d.cancels_requested} ({d.cancels_too_late})",
        ),
        (
            "interjections mid-stream, superseded (answer committed first)",
            f"{d.interjections} ({d.interjections_too_late})",
        ),
        ("conversations throttled (a 429 on their first request)", str(d.throttled)),
        ("conversations moving between APIs, API changes", f"{len(d.moving)}, {d.api_changes}"),
        (
            "worker killed mid-run",
            "no"
            if result.worker_crashed_after is None
            else f"after {result.worker_crashed_after} conversations",
        ),
        ("tool calls run", str(result.tool_calls_run)),
        ("provider requests (POST + resume GET)", str(result.requests)),
        ("provider requests per API", _counter(result.requests_by_api)),
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
    console.print(metrics_table(m))
    given = given_up_table(m)
    if given is not None:
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
    t = result.settle
    console.print(
        f"operations not final: {t.not_final} of {t.operations}; "
        f"longest time to settle: {t.longest_s:.1f}s ({t.longest})"
    )
    verdict = "[green]all invariants hold[/green]" if result.ok else "[red]invariants violated[/red]"
    console.print(verdict)
