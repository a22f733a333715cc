"""The spec's metrics as text rows, rich tables and JSON (`replay/metrics_report.py`), from `Metrics`
built by hand: every field a different value, so a row showing the wrong field shows."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from rich.table import Table

from turnledger.replay.metrics import Metrics
from turnledger.replay.metrics_report import (
    counter_text,
    given_up_table,
    metrics_json,
    metrics_rows,
    metrics_table,
)

AGES = [10 * i for i in range(40, 0, -1)]
"""400 down to 10: p50 is the 21st smallest (210), p95 the 39th (390), both below the max."""


def busy() -> Metrics:
    return Metrics(
        validator_rejections=Counter({"ORPHANED_RESULT": 2, "DUPLICATE_RESULT": 1}),
        orphaned_results=3,
        duplicate_results=4,
        unknown_ages_ms=list(AGES),
        unknown_open=5,
        unknown_open_max_age_ms=6000,
        handle_episodes=3,
        handle_recovered=2,
        disconnects_without_handle=7,
        disconnects_not_resumable=8,
        late_blocks=Counter({"LATE_BLOCK": 9, "CANONICAL_CAS_CONFLICT": 11}),
        preview_retractions=10,
        canonical_cas_conflicts=11,
        dispatch_cas_conflicts=Counter({"STALE_REVISION": 12, "LEASE_HELD": 2}),
        partial_tool_dispatches=13,
        operations=40,
        committed=30,
        generations=Counter({1: 25, 2: 5}),
        final_states=Counter({"COMMITTED": 30, "FAILED": 8}),
        other_rejections=Counter({"UNKNOWN_TOOL": 16, "BAD_REQUEST": 1}),
        cancelled=17,
        cancelled_in_flight=Counter({"STREAMING": 15, "PREPARED": 2}),
        given_up={"c/op-2": "no handle", "a/op-1": "3 attempts failed"},
        refused=19,
        committed_cut=21,
        output_limited=20,
    )


def cells(table: Table) -> list[tuple[str, ...]]:
    return [tuple(row) for row in zip(*(column._cells for column in table.columns), strict=True)]


def given_up(n: int) -> Metrics:
    return Metrics(given_up={f"c/op-{i:02}": f"reason {i}" for i in range(n, 0, -1)})


def test_a_counter_is_its_entries_by_key_or_a_dash_when_empty() -> None:
    assert counter_text(Counter({"b": 2, "a": 10, "c": 0})) == "a 10, b 2, c 0"
    assert counter_text({"only": 1}) == "only 1"
    assert counter_text(Counter()) == "-"


def test_every_row_shows_its_own_metrics() -> None:
    assert metrics_rows(busy()) == [
        ("sequence-validator rejections", "3 (DUPLICATE_RESULT 1, ORPHANED_RESULT 2)"),
        ("orphaned / duplicate tool results", "3 / 4"),
        ("age of UNKNOWN dispatches (resolved)", "n=40 p50=210ms p95=390ms max=400ms"),
        ("UNKNOWN dispatches still open", "5 (oldest 6000ms)"),
        (
            "handle recovery rate",
            "2/3 = 67% of resumable streams (not resumable: 8, before a handle: 7)",
        ),
        ("late blocks (quarantine)", "20 (CANONICAL_CAS_CONFLICT 11, LATE_BLOCK 9)"),
        ("preview retractions", "10"),
        ("canonical CAS conflicts", "11"),
        ("dispatch CAS conflicts", "14 (LEASE_HELD 2, STALE_REVISION 12)"),
        ("partial tool dispatches", "13"),
        ("cancelled by a client (state the cancel found)", "17 (PREPARED 2, STREAMING 15)"),
        ("operations the worker gave up", "2"),
        ("answers the provider refused", "19"),
        ("answers committed cut at the output limit", "21"),
        ("answers cut at the output limit (cancelled)", "20"),
        ("other rejections", "BAD_REQUEST 1, UNKNOWN_TOOL 16"),
    ]


def test_empty_metrics_show_zeros_dashes_and_no_recovery_rate() -> None:
    assert metrics_rows(Metrics()) == [
        ("sequence-validator rejections", "0 (-)"),
        ("orphaned / duplicate tool results", "0 / 0"),
        ("age of UNKNOWN dispatches (resolved)", "n=0 p50=0ms p95=0ms max=0ms"),
        ("UNKNOWN dispatches still open", "0 (oldest 0ms)"),
        ("handle recovery rate", "0/0 of resumable streams (not resumable: 0, before a handle: 0)"),
        ("late blocks (quarantine)", "0 (-)"),
        ("preview retractions", "0"),
        ("canonical CAS conflicts", "0"),
        ("dispatch CAS conflicts", "0 (-)"),
        ("partial tool dispatches", "0"),
        ("cancelled by a client (state the cancel found)", "0 (-)"),
        ("operations the worker gave up", "0"),
        ("answers the provider refused", "0"),
        ("answers committed cut at the output limit", "0"),
        ("answers cut at the output limit (cancelled)", "0"),
        ("other rejections", "-"),
    ]


def test_a_zero_recovery_rate_is_shown_as_zero_percent() -> None:
    rows = dict(metrics_rows(Metrics(handle_episodes=4)))
    assert rows["handle recovery rate"] == (
        "0/4 = 0% of resumable streams (not resumable: 0, before a handle: 0)"
    )


def test_one_unknown_age_is_every_percentile() -> None:
    rows = dict(metrics_rows(Metrics(unknown_ages_ms=[70])))
    assert rows["age of UNKNOWN dispatches (resolved)"] == "n=1 p50=70ms p95=70ms max=70ms"


def test_the_table_has_a_metric_and_a_value_column_with_the_rows_in_order() -> None:
    table = metrics_table(busy())
    assert table.title == "metrics (from the output topics)"
    assert [c.header for c in table.columns] == ["metric", "value"]
    assert cells(table) == metrics_rows(busy())


def test_the_table_takes_a_title() -> None:
    table = metrics_table(Metrics(), title="demo metrics")
    assert table.title == "demo metrics"
    assert cells(table) == metrics_rows(Metrics())


def test_no_given_up_operations_make_no_table() -> None:
    assert given_up_table(Metrics()) is None
    assert given_up_table(Metrics(), limit=0) is None


def test_given_up_operations_are_listed_by_name_with_their_reasons_folded() -> None:
    table = given_up_table(busy())
    assert table is not None
    assert table.title == "given-up operations (the worker's last reason)"
    assert [(c.header, c.overflow) for c in table.columns] == [
        ("operation", "ellipsis"),
        ("reason", "fold"),
    ]
    assert cells(table) == [("a/op-1", "3 attempts failed"), ("c/op-2", "no handle")]


@pytest.mark.parametrize(("n", "limit"), [(2, 2), (20, 20)])
def test_as_many_operations_as_the_limit_are_all_listed(n: int, limit: int) -> None:
    kwargs: dict[str, Any] = {} if limit == 20 else {"limit": limit}
    table = given_up_table(given_up(n), **kwargs)
    assert table is not None
    assert cells(table) == [(f"c/op-{i:02}", f"reason {i}") for i in range(1, n + 1)]


@pytest.mark.parametrize(("n", "limit"), [(3, 2), (21, 20), (25, 20)])
def test_operations_beyond_the_limit_are_counted_in_a_last_row(n: int, limit: int) -> None:
    kwargs: dict[str, Any] = {} if limit == 20 else {"limit": limit}
    table = given_up_table(given_up(n), **kwargs)
    assert table is not None
    listed = [(f"c/op-{i:02}", f"reason {i}") for i in range(1, limit + 1)]
    assert cells(table) == [*listed, ("…", f"{n - limit} more")]


def test_the_json_has_every_metric_by_name_and_the_ages_summarized() -> None:
    assert metrics_json(busy()) == {
        "operations": 40,
        "committed": 30,
        "finalStates": {"COMMITTED": 30, "FAILED": 8},
        "committedAtGeneration": {"1": 25, "2": 5},
        "sequenceValidatorRejections": {"ORPHANED_RESULT": 2, "DUPLICATE_RESULT": 1},
        "orphanedResults": 3,
        "duplicateResults": 4,
        "unknownAgesMs": {"n": 40, "p50": 210, "p95": 390, "max": 400, "sum": 8200},
        "unknownOpen": 5,
        "unknownOpenMaxAgeMs": 6000,
        "handleEpisodes": 3,
        "handleRecovered": 2,
        "handleRecoveryRate": 2 / 3,
        "disconnectsNotResumable": 8,
        "disconnectsWithoutHandle": 7,
        "lateBlocks": {"LATE_BLOCK": 9, "CANONICAL_CAS_CONFLICT": 11},
        "previewRetractions": 10,
        "canonicalCasConflicts": 11,
        "dispatchCasConflicts": {"STALE_REVISION": 12, "LEASE_HELD": 2},
        "partialToolDispatches": 13,
        "cancelled": 17,
        "cancelledInFlight": {"STREAMING": 15, "PREPARED": 2},
        "givenUp": {"c/op-2": "no handle", "a/op-1": "3 attempts failed"},
        "refused": 19,
        "committedCut": 21,
        "outputLimited": 20,
        "otherRejections": {"UNKNOWN_TOOL": 16, "BAD_REQUEST": 1},
    }


def test_the_json_of_empty_metrics_has_zeros_empty_objects_and_no_rate() -> None:
    assert metrics_json(Metrics()) == {
        "operations": 0,
        "committed": 0,
        "finalStates": {},
        "committedAtGeneration": {},
        "sequenceValidatorRejections": {},
        "orphanedResults": 0,
        "duplicateResults": 0,
        "unknownAgesMs": {"n": 0, "p50": 0, "p95": 0, "max": 0, "sum": 0},
        "unknownOpen": 0,
        "unknownOpenMaxAgeMs": 0,
        "handleEpisodes": 0,
        "handleRecovered": 0,
        "handleRecoveryRate": None,
        "disconnectsNotResumable": 0,
        "disconnectsWithoutHandle": 0,
        "lateBlocks": {},
        "previewRetractions": 0,
        "canonicalCasConflicts": 0,
        "dispatchCasConflicts": {},
        "partialToolDispatches": 0,
        "cancelled": 0,
        "cancelledInFlight": {},
        "givenUp": {},
        "refused": 0,
        "committedCut": 0,
        "outputLimited": 0,
        "otherRejections": {},
    }


def test_the_json_counters_are_plain_dicts() -> None:
    as_json = metrics_json(busy())
    counters = ["finalStates", "sequenceValidatorRejections", "lateBlocks", "dispatchCasConflicts"]
    counters += ["cancelledInFlight", "otherRejections"]
    assert {type(as_json[name]) for name in counters} == {dict}
