"""Live metrics and health of the long-running services (runtime layer: never imported by the core).

`server.py` serves /metrics, /healthz and /readyz; `spec_metrics.py` counts the spec's metrics from the
records the projector applied; `runtime_metrics.py` holds the services' own metric families.
"""
