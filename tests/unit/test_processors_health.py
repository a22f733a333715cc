"""The processor's scrape-time gauges (processors/health.py): `ProcessorCollector`'s families read from
the app when collected, and `serve_processor_metrics` registering them (and serving, here faked: no
socket) only while its block runs, and only when a port is given."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.samples import Sample

from turnledger.processors import health
from turnledger.processors.health import ProcessorCollector, serve_processor_metrics

LAG = "turnledger_processor_consumer_lag"
OWNED = "turnledger_processor_partitions_owned"
RESTORING = "partitions [3] are restoring their state"


class _App:
    def __init__(self, lag: dict[int, int] | None = None, owned: list[int] | None = None) -> None:
        self.lag, self.owned = lag or {}, owned or []
        self.sizes: dict[int, int] = {}

    def consumer_lag(self) -> dict[int, int]:
        return self.lag

    def state_sizes(self) -> dict[int, int]:
        return self.sizes

    def readiness(self) -> str | None:
        return RESTORING


def _families(app: _App) -> list[tuple[str, str, str, str, list[Sample]]]:
    return [(m.name, m.documentation, m.type, m.unit, m.samples) for m in ProcessorCollector(app).collect()]  # type: ignore[arg-type]


LAG_DOC = "Ingress records not committed yet: the partition's last stable offset - the committed offset."
KEYS_DOC = "Keys (conversations) in the partition's state store."


def test_the_collector_yields_lag_state_keys_and_owned_partitions_with_partitions_as_string_labels() -> None:
    app = _App(lag={3: 120, 0: 7}, owned=[0, 3, 5])
    app.sizes = {3: 40, 5: 2}
    assert _families(app) == [
        (
            "turnledger_processor_consumer_lag", LAG_DOC, "gauge", "",
            [
                Sample("turnledger_processor_consumer_lag", {"partition": "3"}, 120),
                Sample("turnledger_processor_consumer_lag", {"partition": "0"}, 7),
            ],
        ),
        (
            "turnledger_processor_state_keys", KEYS_DOC, "gauge", "",
            [
                Sample("turnledger_processor_state_keys", {"partition": "3"}, 40),
                Sample("turnledger_processor_state_keys", {"partition": "5"}, 2),
            ],
        ),
        (OWNED, "Ingress partitions with a running term.", "gauge", "", [Sample(OWNED, {}, 3)]),
    ]  # fmt: skip


def test_an_app_with_nothing_owned_gives_empty_families_and_zero_owned() -> None:
    assert _families(_App()) == [
        ("turnledger_processor_consumer_lag", LAG_DOC, "gauge", "", []),
        ("turnledger_processor_state_keys", KEYS_DOC, "gauge", "", []),
        (OWNED, "Ingress partitions with a running term.", "gauge", "", [Sample(OWNED, {}, 0)]),
    ]


def test_the_collector_reads_the_app_again_at_every_collection() -> None:
    app = _App(lag={1: 4}, owned=[1])
    collector = ProcessorCollector(app)  # type: ignore[arg-type]
    assert collector.app is app  # type: ignore[comparison-overlap]
    first = [m.samples for m in collector.collect()]
    app.lag, app.owned = {1: 9}, []
    second = [m.samples for m in collector.collect()]
    assert first == [[Sample(LAG, {"partition": "1"}, 4)], [], [Sample(OWNED, {}, 1)]]
    assert second == [[Sample(LAG, {"partition": "1"}, 9)], [], [Sample(OWNED, {}, 0)]]


# ------------------------------------------------------------------------- serve_processor_metrics


class _Serving:
    """Stands for `observability.server.serving`: records the port and readiness it was given, and
    whether the gauges were registered when it was entered and when it was left."""

    def __init__(self, fail_to_start: bool = False) -> None:
        self.fail_to_start = fail_to_start
        self.journal: list[tuple[Any, ...]] = []

    @contextlib.asynccontextmanager
    async def __call__(self, port: int, ready: Any) -> AsyncIterator[None]:
        self.journal.append(("serving", port, ready, ready(), REGISTRY.get_sample_value(OWNED)))
        if self.fail_to_start:
            raise OSError("address already in use")
        try:
            yield
        finally:
            self.journal.append(("served", REGISTRY.get_sample_value(OWNED)))


@pytest.fixture
def serving(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Serving]:
    fake = _Serving()
    monkeypatch.setattr(health, "serving", fake)
    assert REGISTRY.get_sample_value(OWNED) is None
    yield fake
    left = REGISTRY._names_to_collectors.get(OWNED)  # a failed test must not leave its collector behind
    if left is not None:
        REGISTRY.unregister(left)


async def _enter(port: int, app: _App) -> contextlib.AbstractAsyncContextManager[None]:
    manager = serve_processor_metrics(port, app)  # type: ignore[arg-type]
    await asyncio.wait_for(manager.__aenter__(), 10)
    return manager


async def test_port_zero_runs_the_block_with_nothing_registered_and_nothing_served(serving: _Serving) -> None:
    app = _App(owned=[0, 1])
    manager = await _enter(0, app)
    assert REGISTRY.get_sample_value(OWNED) is None
    await asyncio.wait_for(manager.__aexit__(None, None, None), 10)
    assert REGISTRY.get_sample_value(OWNED) is None
    assert serving.journal == []


async def test_with_a_port_the_gauges_are_registered_while_the_block_runs_and_served_on_it(
    serving: _Serving,
) -> None:
    app = _App(lag={2: 11}, owned=[2, 4])
    manager = await _enter(9464, app)
    assert REGISTRY.get_sample_value(OWNED) == 2
    assert REGISTRY.get_sample_value("turnledger_processor_consumer_lag", {"partition": "2"}) == 11
    await asyncio.wait_for(manager.__aexit__(None, None, None), 10)
    assert REGISTRY.get_sample_value(OWNED) is None
    [(serving_, port, ready, readiness, registered), served] = serving.journal
    assert (serving_, port, ready, readiness, registered) == ("serving", 9464, app.readiness, RESTORING, 2)
    assert served == ("served", 2)  # the server closed before the gauges went


async def test_the_gauges_are_unregistered_when_the_block_raises(serving: _Serving) -> None:
    app = _App(owned=[1])

    async def run() -> None:
        async with serve_processor_metrics(8000, app):  # type: ignore[arg-type]
            assert REGISTRY.get_sample_value(OWNED) == 1
            raise RuntimeError("the app failed")

    with pytest.raises(RuntimeError, match=r"^the app failed$"):
        await asyncio.wait_for(run(), 10)
    assert REGISTRY.get_sample_value(OWNED) is None
    assert [entry[:2] for entry in serving.journal] == [("serving", 8000), ("served", 1)]


async def test_the_gauges_are_unregistered_when_the_server_fails_to_start(serving: _Serving) -> None:
    serving.fail_to_start = True
    entered: list[bool] = []

    app = _App()

    async def run() -> None:
        async with serve_processor_metrics(8001, app):  # type: ignore[arg-type]
            entered.append(True)

    with pytest.raises(OSError, match=r"^address already in use$"):
        await asyncio.wait_for(run(), 10)
    assert entered == []
    assert REGISTRY.get_sample_value(OWNED) is None
    assert serving.journal == [("serving", 8001, app.readiness, RESTORING, 0)]


async def test_the_gauges_can_be_served_again_after_a_block_ended(serving: _Serving) -> None:
    seen: list[float | None] = []

    async def run(owned: list[int]) -> None:
        async with serve_processor_metrics(9000, _App(owned=owned)):  # type: ignore[arg-type]
            seen.append(REGISTRY.get_sample_value(OWNED))

    await asyncio.wait_for(run([5]), 10)
    await asyncio.wait_for(run([5, 6]), 10)
    assert seen == [1, 2]
    assert REGISTRY.get_sample_value(OWNED) is None
