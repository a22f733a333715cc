"""The spec's metrics as a table (rich) or as JSON: shared by `turnledger metrics` and the demo report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from turnledger.replay.metrics import Metrics, percentile


def counter_text(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "-"


def metrics_rows(m: Metrics) -> list[tuple[str, str]]:
    ages = m.unknown_ages_ms
    rate = m.handle_recovery_rate
    return [
        (
            "sequence-validator rejections",
            f"{sum(m.validator_rejections.values())} ({counter_text(m.validator_rejections)})",
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
        ("late blocks (quarantine)", f"{sum(m.late_blocks.values())} ({counter_text(m.late_blocks)})"),
        ("preview retractions", str(m.preview_retractions)),
        ("canonical CAS conflicts", str(m.canonical_cas_conflicts)),
        (
            "dispatch CAS conflicts",
            f"{sum(m.dispatch_cas_conflicts.values())} ({counter_text(m.dispatch_cas_conflicts)})",
        ),
        ("partial tool dispatches", str(m.partial_tool_dispatches)),
        (
            "cancelled by a client (state the cancel found)",
            f"{m.cancelled} ({counter_text(m.cancelled_in_flight)})",
        ),
        ("operations the worker gave up", str(len(m.given_up))),
        ("answers the provider refused", str(m.refused)),
        ("answers committed cut at the output limit", str(m.committed_cut)),
        ("answers cut at the output limit (cancelled)", str(m.output_limited)),
        ("other rejections", counter_text(m.other_rejections)),
    ]


def metrics_table(m: Metrics, title: str = "metrics (from the output topics)") -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value")
    for name, value in metrics_rows(m):
        table.add_row(name, value)
    return table


def given_up_table(m: Metrics, limit: int = 20) -> Table | None:
    if not m.given_up:
        return None
    table = Table(title="given-up operations (the worker's last reason)")
    table.add_column("operation")
    table.add_column("reason", overflow="fold")
    for op, why in sorted(m.given_up.items())[:limit]:
        table.add_row(op, why)
    if len(m.given_up) > limit:
        table.add_row("…", f"{len(m.given_up) - limit} more")
    return table


def metrics_json(m: Metrics) -> dict[str, Any]:
    """Every metric by name, counters as objects; the raw UNKNOWN ages summarized like the table."""
    ages = m.unknown_ages_ms
    return {
        "operations": m.operations,
        "committed": m.committed,
        "finalStates": dict(m.final_states),
        "committedAtGeneration": {str(k): v for k, v in m.generations.items()},
        "sequenceValidatorRejections": dict(m.validator_rejections),
        "orphanedResults": m.orphaned_results,
        "duplicateResults": m.duplicate_results,
        "unknownAgesMs": {
            "n": len(ages),
            "p50": percentile(ages, 0.5),
            "p95": percentile(ages, 0.95),
            "max": max(ages, default=0),
            "sum": sum(ages),
        },
        "unknownOpen": m.unknown_open,
        "unknownOpenMaxAgeMs": m.unknown_open_max_age_ms,
        "handleEpisodes": m.handle_episodes,
        "handleRecovered": m.handle_recovered,
        "handleRecoveryRate": m.handle_recovery_rate,
        "disconnectsNotResumable": m.disconnects_not_resumable,
        "disconnectsWithoutHandle": m.disconnects_without_handle,
        "lateBlocks": dict(m.late_blocks),
        "previewRetractions": m.preview_retractions,
        "canonicalCasConflicts": m.canonical_cas_conflicts,
        "dispatchCasConflicts": dict(m.dispatch_cas_conflicts),
        "partialToolDispatches": m.partial_tool_dispatches,
        "cancelled": m.cancelled,
        "cancelledInFlight": dict(m.cancelled_in_flight),
        "givenUp": dict(m.given_up),
        "refused": m.refused,
        "committedCut": m.committed_cut,
        "outputLimited": m.output_limited,
        "otherRejections": dict(m.other_rejections),
    }
