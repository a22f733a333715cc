"""The services' own metric families (module-level, in prometheus-client's default registry).

Processor counters are incremented only after the batch's transaction committed, from what that
transaction wrote: an aborted batch (retried, then committed once) is counted once, at its commit.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECORD_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# ------------------------------------------------------------------------------------------ processor
PROCESSOR_BATCH_RECORDS = Histogram(
    "turnledger_processor_batch_records", "Input records per committed batch.", buckets=RECORD_BUCKETS
)
PROCESSOR_TRANSACTION_SECONDS = Histogram(
    "turnledger_processor_transaction_seconds",
    "Time to write and commit one batch's transaction (outputs, changelog, offsets).",
    buckets=LATENCY_BUCKETS,
)
PROCESSOR_RECORDS = Counter(
    "turnledger_processor_input_records", "Ingress records folded by committed transactions.", ["partition"]
)
PROCESSOR_OUTPUTS = Counter(
    "turnledger_processor_output_records", "Output records written by committed transactions.", ["stream"]
)
PROCESSOR_CHANGELOG = Counter(
    "turnledger_processor_changelog_records", "State records written by committed transactions."
)
PROCESSOR_POISON = Counter(
    "turnledger_processor_poison_records", "Records that raised in the fold, replaced by a rejection."
)
PROCESSOR_ABORTS = Counter("turnledger_processor_aborted_transactions", "Batches rolled back (then retried).")
PROCESSOR_FENCED = Counter(
    "turnledger_processor_fenced", "Partition terms ended because another owner initialised the producer."
)
PROCESSOR_TERMS = Counter(
    "turnledger_processor_terms", "Partition terms started (assignments, and starting over after outages)."
)
PROCESSOR_HANGING_FOUND = Counter(
    "turnledger_processor_hanging_transactions",
    "Hanging transactions of a partition's own producer id (older epoch) a term found and could not end "
    "(reported for an operator).",
)
PROCESSOR_HANGING_RESOLVED = Counter(
    "turnledger_processor_hanging_transactions_resolved",
    "Hanging transactions of a partition's own producer id a term ended with the marker its changelog "
    "proved, by marker (commit, abort).",
    ["marker"],
)
PROCESSOR_REBALANCES = Counter(
    "turnledger_processor_rebalances", "Partition assignments received from the consumer group."
)
PROCESSOR_RESTORE_SECONDS = Histogram(
    "turnledger_processor_restore_seconds", "Time to restore a partition's state from its changelog.",
    buckets=LATENCY_BUCKETS,
)  # fmt: skip

# ------------------------------------------------------------------------------------------ projector
PROJECTOR_RECORDS = Counter(
    "turnledger_projector_records",
    "Output records the projector read, by stream and outcome (applied, skipped: applied before).",
    ["stream", "outcome"],
)
PROJECTOR_UNDECODABLE = Counter("turnledger_projector_undecodable_records", "Records that did not decode.")
PROJECTOR_APPLY_SECONDS = Histogram(
    "turnledger_projector_apply_seconds", "Time of one batch's script call.", buckets=LATENCY_BUCKETS
)
PROJECTOR_REBALANCES = Counter("turnledger_projector_rebalances", "Partition assignments received.")

# --------------------------------------------------------------------------------------------- worker
PROVIDER_REQUESTS = Counter(
    "turnledger_provider_requests", "HTTP requests sent to providers.", ["api", "kind"]
)
PROVIDER_REQUEST_SECONDS = Histogram(
    "turnledger_provider_request_seconds",
    "From sending a provider request to its response headers.",
    ["api"],
    buckets=LATENCY_BUCKETS,
)
PROVIDER_STREAM_SECONDS = Histogram(
    "turnledger_provider_stream_seconds",
    "From sending a provider request to the end of its stream.",
    ["api"],
    buckets=LATENCY_BUCKETS,
)
PROVIDER_FIRST_DELTA_SECONDS = Histogram(
    "turnledger_provider_time_to_first_delta_seconds",
    "From sending a provider request to the first normalized delta it yielded.",
    ["api"],
    buckets=LATENCY_BUCKETS,
)
PROVIDER_ERRORS = Counter(
    "turnledger_provider_errors",
    "Provider requests that failed: an answer that is not the API's stream (error=its status: an error "
    "status, a redirect, a 2xx of another content-type) or a disconnect.",
    ["api", "error"],
)
PROVIDER_FAILURES = Counter(
    "turnledger_provider_failures",
    "Generations the provider failed (an error status or an error event), by what the worker did next: "
    "retried (after a pause), or refused (the request is refused for what it is: the operation ends).",
    ["api", "verdict"],
)
PROVIDER_RETRY_PAUSE_SECONDS = Histogram(
    "turnledger_provider_retry_pause_seconds",
    "Pauses before a new generation: the provider's Retry-After, the backoff, or a route cooling down.",
    ["api"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0),
)

# ------------------------------------------------------------------------------------- tool executor
TOOL_CALLS = Counter("turnledger_tool_calls", "Tool calls run by the tool executor.", ["tool", "status"])
PARTIAL_TOOL_DISPATCHES = Counter(
    "turnledger_partial_tool_dispatches",
    "Tool calls that reached turnledger.tool-calls with arguments that are no strict JSON object or do "
    "not validate against the schema the executor holds for the tool (a tool it holds none for: JSON "
    "only). Must stay 0: alert on it.",
)

# --------------------------------------------------------------------------------------------- serve
SERVE_REQUESTS = Counter(
    "turnledger_serve_requests",
    "HTTP requests answered by `turnledger serve`, by route template and status code.",
    ["route", "status"],
)
SERVE_STREAMS = Gauge("turnledger_serve_event_streams", "Clients connected to a conversation's event stream.")
SERVE_EVENTS = Counter(
    "turnledger_serve_events_sent", "Events sent on conversations' event streams, by type.", ["type"]
)
