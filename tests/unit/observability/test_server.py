"""The metrics and health server: /metrics in Prometheus text format, /healthz, /readyz with its reason."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry, Counter

from turnledger.observability.server import MetricsServer, serving


async def test_metrics_health_and_readiness_answer_what_the_service_says() -> None:
    registry = CollectorRegistry()
    counter = Counter("turnledger_test_things", "Things.", ["kind"], registry=registry)
    counter.labels("a").inc(3)
    waiting: list[str | None] = ["partitions [1] are restoring their state"]
    server = MetricsServer(0, lambda: waiting[0], registry=registry)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            metrics = await http.get("/metrics")
            assert metrics.status_code == 200
            assert metrics.headers["content-type"].startswith("text/plain; version=")
            assert 'turnledger_test_things_total{kind="a"} 3.0' in metrics.text.splitlines()
            health = await http.get("/healthz")
            assert (health.status_code, health.text) == (200, "ok\n")
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.text) == (
                503,
                "not ready: partitions [1] are restoring their state\n",
            )
            waiting[0] = None
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.text) == (200, "ready\n")
            missing = await http.get("/nothing")
            assert missing.status_code == 404
            post = await http.post("/metrics")
            assert post.status_code == 405
    finally:
        await server.close()


async def test_port_zero_serves_nothing() -> None:
    async with serving(0) as server:
        assert server is None
