"""Readiness and the scrape-time gauges of a processor process (consumer lag, state size).

Gauges are read when Prometheus scrapes, from what the process holds then: nothing to keep in step.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from turnledger.observability.server import serving

if TYPE_CHECKING:
    from turnledger.processors.app import ProcessorApp


class ProcessorCollector(Collector):
    def __init__(self, app: ProcessorApp) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "turnledger_processor_consumer_lag",
            "Ingress records not committed yet: the partition's last stable offset - the committed offset.",
            labels=["partition"],
        )
        keys = GaugeMetricFamily(
            "turnledger_processor_state_keys", "Keys (conversations) in the partition's state store.",
            labels=["partition"],
        )  # fmt: skip
        for partition, value in self.app.consumer_lag().items():
            lag.add_metric([str(partition)], value)
        for partition, value in self.app.state_sizes().items():
            keys.add_metric([str(partition)], value)
        yield lag
        yield keys
        yield GaugeMetricFamily(
            "turnledger_processor_partitions_owned", "Ingress partitions with a running term.",
            value=len(self.app.owned),
        )  # fmt: skip


@contextlib.asynccontextmanager
async def serve_processor_metrics(port: int, app: ProcessorApp) -> AsyncIterator[None]:
    """While the block runs: the app's gauges registered and, on `port` (0: off), /metrics and health."""
    if not port:
        yield
        return
    collector = ProcessorCollector(app)
    REGISTRY.register(collector)
    try:
        async with serving(port, app.readiness):
            yield
    finally:
        REGISTRY.unregister(collector)
