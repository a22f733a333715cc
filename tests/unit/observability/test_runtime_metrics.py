"""The services' own metric families (observability/runtime_metrics.py): each family's exposed name, type,
labels, buckets and help, as dashboards, alerts (deploy/monitoring) and operators read them."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from turnledger.observability import runtime_metrics
from turnledger.observability.runtime_metrics import (
    LATENCY_BUCKETS,
    PARTIAL_TOOL_DISPATCHES,
    PROCESSOR_ABORTS,
    PROCESSOR_BATCH_RECORDS,
    PROCESSOR_CHANGELOG,
    PROCESSOR_FENCED,
    PROCESSOR_HANGING_FOUND,
    PROCESSOR_HANGING_RESOLVED,
    PROCESSOR_OUTPUTS,
    PROCESSOR_POISON,
    PROCESSOR_REBALANCES,
    PROCESSOR_RECORDS,
    PROCESSOR_RESTORE_SECONDS,
    PROCESSOR_TERMS,
    PROCESSOR_TRANSACTION_SECONDS,
    PROJECTOR_APPLY_SECONDS,
    PROJECTOR_REBALANCES,
    PROJECTOR_RECORDS,
    PROJECTOR_UNDECODABLE,
    PROVIDER_ERRORS,
    PROVIDER_FAILURES,
    PROVIDER_FIRST_DELTA_SECONDS,
    PROVIDER_REQUEST_SECONDS,
    PROVIDER_REQUESTS,
    PROVIDER_RETRY_PAUSE_SECONDS,
    PROVIDER_STREAM_SECONDS,
    RECORD_BUCKETS,
    SERVE_EVENTS,
    SERVE_REQUESTS,
    SERVE_STREAMS,
    TOOL_CALLS,
)

RECORD = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

FAMILIES: list[tuple[MetricWrapperBase, str, str, tuple[str, ...], tuple[float, ...] | None, str]] = [
    (
        PROCESSOR_BATCH_RECORDS,
        "turnledger_processor_batch_records",
        "histogram",
        (),
        RECORD,
        "Input records per committed batch.",
    ),
    (
        PROCESSOR_TRANSACTION_SECONDS,
        "turnledger_processor_transaction_seconds",
        "histogram",
        (),
        LATENCY,
        "Time to write and commit one batch's transaction (outputs, changelog, offsets).",
    ),
    (
        PROCESSOR_RECORDS,
        "turnledger_processor_input_records",
        "counter",
        ("partition",),
        None,
        "Ingress records folded by committed transactions.",
    ),
    (
        PROCESSOR_OUTPUTS,
        "turnledger_processor_output_records",
        "counter",
        ("stream",),
        None,
        "Output records written by committed transactions.",
    ),
    (
        PROCESSOR_CHANGELOG,
        "turnledger_processor_changelog_records",
        "counter",
        (),
        None,
        "State records written by committed transactions.",
    ),
    (
        PROCESSOR_POISON,
        "turnledger_processor_poison_records",
        "counter",
        (),
        None,
        "Records that raised in the fold, replaced by a rejection.",
    ),
    (
        PROCESSOR_ABORTS,
        "turnledger_processor_aborted_transactions",
        "counter",
        (),
        None,
        "Batches rolled back (then retried).",
    ),
    (
        PROCESSOR_FENCED,
        "turnledger_processor_fenced",
        "counter",
        (),
        None,
        "Partition terms ended because another owner initialised the producer.",
    ),
    (
        PROCESSOR_TERMS,
        "turnledger_processor_terms",
        "counter",
        (),
        None,
        "Partition terms started (assignments, and starting over after outages).",
    ),
    (
        PROCESSOR_HANGING_FOUND,
        "turnledger_processor_hanging_transactions",
        "counter",
        (),
        None,
        "Hanging transactions of a partition's own producer id (older epoch) a term found and "
        "could not end (reported for an operator).",
    ),
    (
        PROCESSOR_HANGING_RESOLVED,
        "turnledger_processor_hanging_transactions_resolved",
        "counter",
        ("marker",),
        None,
        "Hanging transactions of a partition's own producer id a term ended with the marker its "
        "changelog proved, by marker (commit, abort).",
    ),
    (
        PROCESSOR_REBALANCES,
        "turnledger_processor_rebalances",
        "counter",
        (),
        None,
        "Partition assignments received from the consumer group.",
    ),
    (
        PROCESSOR_RESTORE_SECONDS,
        "turnledger_processor_restore_seconds",
        "histogram",
        (),
        LATENCY,
        "Time to restore a partition's state from its changelog.",
    ),
    (
        PROJECTOR_RECORDS,
        "turnledger_projector_records",
        "counter",
        ("stream", "outcome"),
        None,
        "Output records the projector read, by stream and outcome (applied, skipped: applied before).",
    ),
    (
        PROJECTOR_UNDECODABLE,
        "turnledger_projector_undecodable_records",
        "counter",
        (),
        None,
        "Records that did not decode.",
    ),
    (
        PROJECTOR_APPLY_SECONDS,
        "turnledger_projector_apply_seconds",
        "histogram",
        (),
        LATENCY,
        "Time of one batch's script call.",
    ),
    (
        PROJECTOR_REBALANCES,
        "turnledger_projector_rebalances",
        "counter",
        (),
        None,
        "Partition assignments received.",
    ),
    (
        PROVIDER_REQUESTS,
        "turnledger_provider_requests",
        "counter",
        ("api", "kind"),
        None,
        "HTTP requests sent to providers.",
    ),
    (
        PROVIDER_REQUEST_SECONDS,
        "turnledger_provider_request_seconds",
        "histogram",
        ("api",),
        LATENCY,
        "From sending a provider request to its response headers.",
    ),
    (
        PROVIDER_STREAM_SECONDS,
        "turnledger_provider_stream_seconds",
        "histogram",
        ("api",),
        LATENCY,
        "From sending a provider request to the end of its stream.",
    ),
    (
        PROVIDER_FIRST_DELTA_SECONDS,
        "turnledger_provider_time_to_first_delta_seconds",
        "histogram",
        ("api",),
        LATENCY,
        "From sending a provider request to the first normalized delta it yielded.",
    ),
    (
        PROVIDER_ERRORS,
        "turnledger_provider_errors",
        "counter",
        ("api", "error"),
        None,
        "Provider requests that failed: an answer that is not the API's stream (error=its status: an error "
        "status, a redirect, a 2xx of another content-type) or a disconnect.",
    ),
    (
        PROVIDER_FAILURES,
        "turnledger_provider_failures",
        "counter",
        ("api", "verdict"),
        None,
        "Generations the provider failed (an error status or an error event), by what the worker "
        "did next: retried (after a pause), or refused (the request is refused for what it is: "
        "the operation ends).",
    ),
    (
        PROVIDER_RETRY_PAUSE_SECONDS,
        "turnledger_provider_retry_pause_seconds",
        "histogram",
        ("api",),
        (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0),
        "Pauses before a new generation: the provider's Retry-After, the backoff, or a route cooling down.",
    ),
    (
        TOOL_CALLS,
        "turnledger_tool_calls",
        "counter",
        ("tool", "status"),
        None,
        "Tool calls run by the tool executor.",
    ),
    (
        PARTIAL_TOOL_DISPATCHES,
        "turnledger_partial_tool_dispatches",
        "counter",
        (),
        None,
        "Tool calls that reached turnledger.tool-calls with arguments that are no strict JSON "
        "object or do not validate against the schema the executor holds for the tool (a tool it "
        "holds none for: JSON only). Must stay 0: alert on it.",
    ),
    (
        SERVE_REQUESTS,
        "turnledger_serve_requests",
        "counter",
        ("route", "status"),
        None,
        "HTTP requests answered by `turnledger serve`, by route template and status code.",
    ),
    (
        SERVE_STREAMS,
        "turnledger_serve_event_streams",
        "gauge",
        (),
        None,
        "Clients connected to a conversation's event stream.",
    ),
    (
        SERVE_EVENTS,
        "turnledger_serve_events_sent",
        "counter",
        ("type",),
        None,
        "Events sent on conversations' event streams, by type.",
    ),
]
"""(family, exposed name, type, label names, bucket bounds without +Inf, help)."""


def test_the_bucket_tables() -> None:
    assert RECORD_BUCKETS == RECORD
    assert LATENCY_BUCKETS == LATENCY


def test_the_table_names_every_family_of_the_module() -> None:
    module_families = {id(v) for v in vars(runtime_metrics).values() if isinstance(v, MetricWrapperBase)}
    assert module_families == {id(row[0]) for row in FAMILIES}
    assert len(FAMILIES) == 29


@pytest.mark.parametrize(
    ("family", "name", "kind", "labels", "buckets", "help_text"), FAMILIES, ids=[row[1] for row in FAMILIES]
)
def test_each_family_has_its_name_type_labels_buckets_and_help(
    family: MetricWrapperBase,
    name: str,
    kind: str,
    labels: tuple[str, ...],
    buckets: tuple[float, ...] | None,
    help_text: str,
) -> None:
    [described] = family.describe()
    assert (described.name, described.type, described.documentation) == (name, kind, help_text)
    assert family._labelnames == labels
    bounds = getattr(family, "_upper_bounds", None)
    assert bounds == (None if buckets is None else [*map(float, buckets), float("inf")])


def test_every_family_is_in_the_default_registry_the_metrics_server_serves() -> None:
    registered = set(REGISTRY._collector_to_names)
    assert all(row[0] in registered for row in FAMILIES)
