"""Live metrics end to end: the four services expose /metrics, a real Prometheus scrapes them every second,
and what its HTTP API answers equals `turnledger metrics --json` over the topics of the same run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.unit.test_deploy_monitoring import dashboard_expressions
from turnledger.demo.driver import OBSERVED_STREAMS, Driver
from turnledger.demo.run import DemoOptions, _fault_plan, _processor_caught_up
from turnledger.devstack.ports import free_port
from turnledger.devstack.prometheus import write_targets
from turnledger.fake_provider import FakeProvider
from turnledger.gateway.client import GatewayClient
from turnledger.kafka.tail import tail_topic
from turnledger.processors.topics import ensure_topics
from turnledger.replay.evidence import read_all
from turnledger.topology import OUTPUT_STREAMS, Topics

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

SERVICES = ("processor", "projector", "worker", "tool-executor")


@dataclass
class Service:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path


def _command(
    name: str, bootstrap: str, redis_url: str, prefix: str, port: int, provider: str, tmp: Path
) -> list[str]:
    base = [sys.executable, "-m", "turnledger.cli"]
    common = ["--bootstrap", bootstrap, "--topic-prefix", prefix, "--metrics-port", str(port)]
    if name == "processor":
        return [*base, "process", *common, "--app-id", f"{prefix}turnledger"]
    if name == "projector":
        return [*base, "project", *common, "--redis-url", redis_url, "--key-prefix", f"tl:{prefix}"]
    if name == "worker":
        return [
            *base, "worker", *common, "--provider-url", provider, "--provider-keeps-keys",
            "--lease-seconds", "3", "--worker-id", "metrics-worker", "--journal-dir", str(tmp / "journal"),
        ]  # fmt: skip
    return [*base, "tool-executor", *common]


@contextlib.asynccontextmanager
async def services(
    bootstrap: str, redis_url: str, prefix: str, provider: str, env: dict[str, str], tmp: Path
) -> AsyncIterator[dict[str, Service]]:
    started: dict[str, Service] = {}
    try:
        for name in SERVICES:
            port = free_port()
            log = tmp / f"{name}.log"
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    _command(name, bootstrap, redis_url, prefix, port, provider, tmp),
                    stdout=out, stderr=out, env=env, start_new_session=True,
                )  # fmt: skip
            started[name] = Service(name, port, proc, log)
        yield started
    finally:
        for service in started.values():
            if service.proc.poll() is None:
                service.proc.send_signal(signal.SIGTERM)
        for service in started.values():
            try:
                service.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                service.proc.kill()
                service.proc.wait()


async def wait_for(what: str, check: Callable[[], Awaitable[Any]], timeout_s: float) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


async def query(http: httpx.AsyncClient, promql: str) -> dict[str, float]:
    """An instant query: label values (joined by ',') → value."""
    answer = (await http.get("/api/v1/query", params={"query": promql})).json()
    assert answer["status"] == "success", answer
    return {",".join(r["metric"].values()): float(r["value"][1]) for r in answer["data"]["result"]}


async def total(http: httpx.AsyncClient, metric: str, run: str) -> float:
    return sum((await query(http, f'sum({metric}{{run="{run}"}})')).values())


async def by(http: httpx.AsyncClient, metric: str, label: str, run: str) -> dict[str, int]:
    values = await query(http, f'sum by ({label}) ({metric}{{run="{run}"}})')
    return {k: round(v) for k, v in values.items() if v}


async def live_metrics(http: httpx.AsyncClient, run: str) -> dict[str, Any]:
    """What Prometheus says, in the shape of `turnledger metrics --json`."""
    ages_n = round(await total(http, "turnledger_unknown_settle_seconds_count", run))
    return {
        "sequenceValidatorRejections": await by(http, "turnledger_validator_rejections_total", "reason", run),
        "orphanedResults": round(await total(http, "turnledger_orphaned_tool_results_total", run)),
        "duplicateResults": round(await total(http, "turnledger_duplicate_tool_results_total", run)),
        "unknownAgesN": ages_n,
        "unknownAgesSumMs": round(await total(http, "turnledger_unknown_settle_seconds_sum", run) * 1000),
        "unknownOpen": round(await total(http, "turnledger_unknown_open", run)),
        "handleEpisodes": round(await total(http, "turnledger_handle_recovery_attempts_total", run)),
        "handleRecovered": round(await total(http, "turnledger_handle_recovery_successes_total", run)),
        "lateBlocks": await by(http, "turnledger_late_blocks_total", "reason", run),
        "previewRetractions": round(await total(http, "turnledger_preview_retractions_total", run)),
        "canonicalCasConflicts": round(await total(http, "turnledger_canonical_cas_conflicts_total", run)),
        "dispatchCasConflicts": await by(http, "turnledger_dispatch_cas_conflicts_total", "reason", run),
        "partialToolDispatches": round(await total(http, "turnledger_partial_tool_dispatches_total", run)),
    }


def batch_metrics(bootstrap: str, prefix: str) -> dict[str, Any]:
    """`turnledger metrics --json` for the run's topics, in the shape of `live_metrics`."""
    out = subprocess.run(
        [sys.executable, "-m", "turnledger.cli", "metrics", "--json", "--bootstrap", bootstrap,
         "--topic-prefix", prefix],
        check=True, capture_output=True, timeout=120,
    ).stdout  # fmt: skip
    m = json.loads(out)
    return {
        "sequenceValidatorRejections": m["sequenceValidatorRejections"],
        "orphanedResults": m["orphanedResults"],
        "duplicateResults": m["duplicateResults"],
        "unknownAgesN": m["unknownAgesMs"]["n"],
        "unknownAgesSumMs": m["unknownAgesMs"]["sum"],
        "unknownOpen": m["unknownOpen"],
        "handleEpisodes": m["handleEpisodes"],
        "handleRecovered": m["handleRecovered"],
        "lateBlocks": m["lateBlocks"],
        "previewRetractions": m["previewRetractions"],
        "canonicalCasConflicts": m["canonicalCasConflicts"],
        "dispatchCasConflicts": m["dispatchCasConflicts"],
        "partialToolDispatches": m["partialToolDispatches"],
    }


async def test_prometheus_scrapes_the_spec_metrics_equal_to_the_batch_computation(
    kafka_bootstrap: str, redis_url: str, prometheus: tuple[str, Path], tmp_path: Path
) -> None:
    prom_url, targets_dir = prometheus
    prefix = f"live-{uuid.uuid4().hex[:8]}-"
    topics = Topics(prefix)
    await ensure_topics(kafka_bootstrap, topics, 2)
    options = DemoOptions(
        conversations=16, fault_rate=0.05, invalid_rate=0.4, cancel_rate=0.2, interject_rate=0.1,
        every_fault_kind=True, partitions=2, concurrency=8,
    )  # fmt: skip
    stop = asyncio.Event()
    async with FakeProvider(seed=options.seed, fault_plan=_fault_plan(options)) as fp:
        env = {**os.environ, **fp.keys.as_env()}
        async with (
            services(kafka_bootstrap, redis_url, prefix, fp.base_url, env, tmp_path) as running,
            httpx.AsyncClient(base_url=prom_url, timeout=10) as prom,
            httpx.AsyncClient(timeout=5) as http,
        ):
            targets = {name: [f"127.0.0.1:{s.port}"] for name, s in running.items()}
            target_file = write_targets(targets_dir, prefix.rstrip("-"), targets, {"run": prefix})
            try:

                async def all_ready() -> dict[str, int] | None:
                    for s in running.values():
                        assert s.proc.poll() is None, f"{s.name} exited: {s.log.read_text()[-3000:]}"
                    codes = {}
                    for name, s in running.items():
                        try:
                            codes[name] = (await http.get(f"http://127.0.0.1:{s.port}/readyz")).status_code
                        except httpx.TransportError:
                            codes[name] = 0
                    return codes if set(codes.values()) == {200} else None

                await wait_for("every service ready", all_ready, 90)
                up = await wait_for(
                    "Prometheus scraping the four services",
                    lambda: _all_up(prom, prefix),
                    60,
                )
                assert up == dict.fromkeys(SERVICES, 1.0)

                async with GatewayClient(kafka_bootstrap, topic=topics.ingress) as client:
                    driver = Driver(
                        client, seed=options.seed, invalid_rate=options.invalid_rate, op_timeout_s=60,
                        cancel_rate=options.cancel_rate, interject_rate=options.interject_rate,
                    )  # fmt: skip
                    tails = [
                        asyncio.create_task(
                            tail_topic(kafka_bootstrap, topics.name(s), driver.observe, stop=stop)
                        )
                        for s in OBSERVED_STREAMS
                    ]
                    try:
                        slots = asyncio.Semaphore(options.concurrency)

                        async def one(i: int) -> None:
                            async with slots:
                                await driver.conversation(i)

                        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(16))), 150)
                    finally:
                        stop.set()
                        await asyncio.gather(*tails, return_exceptions=True)
                assert driver.stats.stalled == 0
                await _processor_caught_up(kafka_bootstrap, prefix)

                # the batch computation moves while the last events settle; wait until both agree
                async def agree() -> tuple[dict[str, Any], dict[str, Any]] | None:
                    expected = await asyncio.to_thread(batch_metrics, kafka_bootstrap, prefix)
                    deadline = time.monotonic() + 10
                    live: dict[str, Any] = {}
                    while time.monotonic() < deadline:
                        live = await live_metrics(prom, prefix)
                        if live == expected:
                            return expected, live
                        await asyncio.sleep(0.5)
                    print(
                        "not yet equal:",
                        {k: (live.get(k), v) for k, v in expected.items() if live.get(k) != v},
                    )
                    return None

                expected, _ = await wait_for("Prometheus to agree with `turnledger metrics`", agree, 120)
                # the workload makes these occur: the equality above is not 0 == 0
                assert sum(expected["sequenceValidatorRejections"].values()) > 0
                assert expected["orphanedResults"] + expected["duplicateResults"] > 0
                assert sum(expected["lateBlocks"].values()) > 0
                # every text answer cancelled after its first preview retracted it (`driver.cancels_text`)
                assert driver.stats.cancelled_text > 0, driver.stats
                assert expected["previewRetractions"] >= driver.stats.cancelled_text
                assert expected["unknownAgesN"] > 0
                assert expected["partialToolDispatches"] == 0 and expected["unknownOpen"] == 0

                # the processor counted what its committed transactions wrote: exactly the topics' records
                # (read again until a scrape has seen the last of them)
                last: list[tuple[dict[str, int], dict[str, int]]] = []

                async def counted_as_written() -> bool:
                    evidence = await read_all(kafka_bootstrap, prefix)
                    written = {s.value: len(evidence.raw.get(s.value, [])) for s in OUTPUT_STREAMS}
                    written = {k: v for k, v in written.items() if v}
                    written["ingress"] = len(evidence.raw["ingress"])
                    counted = await by(prom, "turnledger_processor_output_records_total", "stream", prefix)
                    inputs = await total(prom, "turnledger_processor_input_records_total", prefix)
                    counted["ingress"] = round(inputs)
                    last[:] = [(counted, written)]
                    return counted == written

                try:
                    await wait_for("the processor's counters to equal the topics", counted_as_written, 60)
                except AssertionError:
                    raise AssertionError(f"counted, written: {last}") from None

                # every expression of the Grafana dashboard runs on this Prometheus, over these series
                for expr in dashboard_expressions():
                    answer = (await prom.get("/api/v1/query", params={"query": expr})).json()
                    assert answer["status"] == "success", (expr, answer)
            finally:
                target_file.unlink(missing_ok=True)


async def _all_up(prom: httpx.AsyncClient, run: str) -> dict[str, float] | None:
    up = await query(prom, f'max by (service) (up{{run="{run}"}})')
    return up if len(up) == len(SERVICES) and all(v == 1.0 for v in up.values()) else None
