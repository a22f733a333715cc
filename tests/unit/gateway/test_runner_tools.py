"""`gateway/runner.py`'s wiring over fakes of its Kafka parts. The tool executor: a batch's tools run
once, and only the append of their results rides out an outage (the tools are never run again for it).
The worker: its ingress producer behind a `RidingSink`, its journal by worker id, the refusal feed, then
its group's share of the manifests, live once caught up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from tests.unit.gateway.test_tool_executor import call
from turnledger.errors import KafkaUnavailableError
from turnledger.gateway import runner
from turnledger.gateway.rollout import RolloutStage
from turnledger.gateway.worker import WorkerConfig
from turnledger.model.base import Frozen
from turnledger.model.events import IngressEvent, TurnSubmitted
from turnledger.retry import NO_WAIT, Backoff, StopRequested
from turnledger.topology import Topics

QUICK = Backoff(initial_s=0.001, max_s=0.001, jitter=0)
ROUTES = object()  # type: ignore[assignment]


class Client:
    """The executor's ingress producer: its first `failures` appends fail as a lost connection."""

    def __init__(self, failures: int) -> None:
        self.topic = Topics("p.").ingress
        self.failures, self.attempts, self.stopped = failures, 0, 0
        self.appended: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise KafkaConnectionError("broker away")
        self.appended.append(event)

    async def stop(self) -> None:
        self.stopped += 1


async def test_an_outage_while_appending_results_retries_the_append_not_the_tools(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(failures=2)
    read: list[dict[str, Any]] = []

    async def start_client(make: Callable[[], object], **kwargs: Any) -> Client:
        return client

    async def tail_topic(
        bootstrap: str,
        topic: str,
        on_batch: Callable[[list[Frozen]], Awaitable[None]],
        *,
        on_caught_up: Callable[[], Awaitable[None]],
        **kwargs: Any,
    ) -> None:
        read.append({"bootstrap": bootstrap, "topic": topic, **kwargs})
        await on_caught_up()
        await on_batch([call("a1", "lookup", "{}"), call("a2", "lookup", "{}")])

    runs: list[dict[str, Any]] = []

    def lookup(args: dict[str, Any]) -> str:
        runs.append(args)
        return "found"

    monkeypatch.setattr(runner, "start_client", start_client)
    monkeypatch.setattr(runner, "tail_topic", tail_topic)
    started, boxes, stop = asyncio.Event(), [], asyncio.Event()  # type: ignore[var-annotated]
    caplog.set_level(logging.WARNING, "turnledger.retry")
    await asyncio.wait_for(
        runner.run_tool_executor(
            "k:9092",
            stop=stop,
            prefix="p.",
            tools={"lookup": lookup},
            executor_box=boxes,
            outage=QUICK,
            started=started,
            session_timeout_ms=7000,
            heartbeat_interval_ms=900,
        ),
        timeout=30,
    )
    assert runs == [{}, {}] and (client.attempts, client.stopped) == (3, 1) and started.is_set()
    [turn] = client.appended
    assert isinstance(turn, TurnSubmitted) and turn.turn_id == "tr-a1+a2"
    assert read == [
        {"bootstrap": "k:9092", "topic": "p.turnledger.tool-calls", "stop": stop,
         "group_id": "p.turnledger-tool-executor", "client_id": "turnledger-tool-executor", "backoff": QUICK,
         "session_timeout_ms": 7000, "heartbeat_interval_ms": 900},
    ]  # fmt: skip
    sink = boxes[0].events.sink
    assert isinstance(sink, runner.RidingSink) and (sink.client, sink.stop, sink.backoff) == (
        client,
        stop,
        QUICK,
    )
    assert [boxes[0].calls_run, boxes[0].errors] == [2, 0]
    waits = [r.getMessage() for r in caplog.records]
    assert len(waits) == 2
    assert all(
        w.startswith("waiting for Kafka at k:9092 to append to 'p.turnledger.ingress' (attempt ")
        for w in waits
    )


# ------------------------------------------------------------------------------------ the worker's wiring


class Worker:
    """`DispatchWorker` as `run_worker` uses it: entered, observed, taken live."""

    made: list[Worker] = []

    def __init__(self, sink: object, endpoints: object, *, config: WorkerConfig, journal: object) -> None:
        self.sink, self.endpoints, self.config, self.journal = sink, endpoints, config, journal
        self.board, self.live, self.observed, self.calls = object(), False, [], []  # type: ignore[var-annotated]
        Worker.made.append(self)

    async def __aenter__(self) -> Worker:
        self.calls.append("enter")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.calls.append("exit")

    async def observe(self, records: list[Frozen]) -> None:
        self.observed.append(records)

    async def go_live(self) -> None:
        self.calls.append("live")
        self.live = True


class Refusals:
    made: list[dict[str, Any]] = []
    positioned = True

    def __init__(self, board: object, deliver: object, bootstrap: str, topic: str, **kwargs: Any) -> None:
        Refusals.made.append(
            {"board": board, "deliver": deliver, "bootstrap": bootstrap, "topic": topic, **kwargs}
        )

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncIterator[bool]:
        yield Refusals.positioned


class Manifests:
    made: list[dict[str, Any]] = []

    def __init__(self, worker: Worker, bootstrap: str, topic: str, group: str, **kwargs: Any) -> None:
        self.on_live = kwargs.pop("on_live")
        Manifests.made.append(
            {"worker": worker, "bootstrap": bootstrap, "topic": topic, "group": group, **kwargs}
        )

    async def run(self) -> None:
        await self.on_live()
        await self.on_live()  # caught up again (a partition given later): live once


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> Client:
    client = Client(failures=0)

    async def start_client(make: Callable[[], object], **kwargs: Any) -> Client:
        if kwargs["stop"].is_set():
            raise StopRequested("stop requested before Kafka")
        return client

    Worker.made, Refusals.made, Manifests.made, Refusals.positioned = [], [], [], True
    monkeypatch.setattr(runner, "start_client", start_client)
    monkeypatch.setattr(runner, "DispatchWorker", Worker)
    monkeypatch.setattr(runner, "RefusalFeed", Refusals)
    monkeypatch.setattr(runner, "ManifestFeed", Manifests)
    return client


async def test_a_worker_follows_its_group_s_share_of_the_manifests_and_goes_live_once(
    wired: Client, tmp_path: Path
) -> None:
    stop, started, box = asyncio.Event(), asyncio.Event(), []  # type: ignore[var-annotated]
    config = WorkerConfig(worker_id="w7")
    await asyncio.wait_for(
        runner.run_worker(
            "k:9092", ROUTES, stop=stop, prefix="p.", config=config, journal_dir=tmp_path, started=started,
            worker_box=box, outage=QUICK, session_timeout_ms=8_000,
        ),
        timeout=30,
    )  # fmt: skip
    [worker] = Worker.made
    assert box == [worker] and worker.calls == ["enter", "live", "exit"] and started.is_set()
    assert isinstance(worker.sink, runner.RidingSink) and worker.sink.client is wired
    assert (worker.sink.stop, worker.sink.backoff, worker.endpoints, worker.config) == (
        stop,
        QUICK,
        ROUTES,
        config,
    )
    assert worker.journal.path == tmp_path / "w7.jsonl"  # type: ignore[attr-defined]
    rejections = "p.turnledger.rejections"
    assert Refusals.made == [
        {"board": worker.board, "deliver": worker.observe, "bootstrap": "k:9092", "topic": rejections,
         "stop": stop, "outage": QUICK, "client_id": "w7-rejections"},
    ]  # fmt: skip
    manifests, group = "p.turnledger.manifests", "p.turnledger-workers"
    assert Manifests.made == [
        {"worker": worker, "bootstrap": "k:9092", "topic": manifests, "group": group,
         "stop": stop, "outage": QUICK, "session_timeout_ms": 8_000, "heartbeat_interval_ms": 2_000},
    ]  # fmt: skip
    assert wired.stopped == 1


async def test_a_worker_group_is_named_as_asked_with_a_heartbeat_of_at_least_half_a_second(
    wired: Client,
) -> None:
    await runner.run_worker("k:9092", ROUTES, stop=asyncio.Event(), group_id="mine", session_timeout_ms=1_000)
    [made] = Manifests.made
    assert (made["group"], made["heartbeat_interval_ms"]) == ("mine", 500)


async def test_a_worker_whose_refusals_never_positioned_follows_nothing(wired: Client) -> None:
    Refusals.positioned = False
    await runner.run_worker("k:9092", ROUTES, stop=asyncio.Event())
    assert (Manifests.made, Worker.made[0].calls, wired.stopped) == ([], ["enter", "exit"], 1)


async def test_a_worker_stopped_before_kafka_answered_starts_nothing(wired: Client, tmp_path: Path) -> None:
    stop = asyncio.Event()
    stop.set()
    await runner.run_worker("k:9092", ROUTES, stop=stop, journal_dir=tmp_path)
    assert (Worker.made, Refusals.made, wired.stopped) == ([], [], 0)


def test_a_journal_lives_in_its_dir_by_worker_id(tmp_path: Path) -> None:
    assert (runner.journal_path(tmp_path, "w1"), runner.journal_path(None, "w1")) == (
        tmp_path / "w1.jsonl",
        None,
    )


async def test_a_worker_alone_tails_every_manifest_and_observes_only_manifests_and_decisions(
    wired: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    tailed: list[dict[str, Any]] = []
    manifest_like = [call("a1", "lookup", "{}")]  # a ToolCallReady: not for the worker

    async def tail_topic(bootstrap: str, topic: str, on_batch: Any, **kwargs: Any) -> None:
        on_caught_up = kwargs.pop("on_caught_up")
        tailed.append({"bootstrap": bootstrap, "topic": topic, **kwargs})
        await on_batch(manifest_like)
        await on_caught_up()

    monkeypatch.setattr(runner, "tail_topic", tail_topic)
    stop, started = asyncio.Event(), asyncio.Event()
    await runner.run_worker("k:9092", ROUTES, stop=stop, group_id=None, outage=QUICK, started=started)
    [worker] = Worker.made
    me = worker.config.worker_id
    assert tailed == [
        {
            "bootstrap": "k:9092",
            "topic": "turnledger.manifests",
            "stop": stop,
            "client_id": me,
            "backoff": QUICK,
        }
    ]
    assert worker.observed == [[]] and worker.calls == ["enter", "live", "exit"] and started.is_set()
    assert Manifests.made == []


# ------------------------------------------------------------------------------------ what each part is given


class Built:
    """`GatewayClient` recording how it is built (the client the fakes hand back stands in for it)."""

    made: list[tuple[str, dict[str, Any]]] = []

    def __init__(self, bootstrap: str, **kwargs: Any) -> None:
        Built.made.append((bootstrap, kwargs))


class Served:
    """`serving`: the port asked for, and the readiness callback (read by the tests)."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.ready: list[Callable[[], str | None]] = []

    @contextlib.asynccontextmanager
    async def __call__(self, port: int, ready: Callable[[], str | None]) -> AsyncIterator[None]:
        self.ports.append(port)
        self.ready.append(ready)
        yield None


@pytest.fixture
def glued(monkeypatch: pytest.MonkeyPatch, wired: Client) -> tuple[list[dict[str, Any]], Served]:
    started: list[dict[str, Any]] = []
    served = Served()
    limits = object()

    async def start_client(make: Callable[[], object], **kwargs: Any) -> Client:
        started.append(kwargs)
        assert make() is not None
        return wired

    Built.made = []
    monkeypatch.setattr(runner, "start_client", start_client)
    monkeypatch.setattr(runner, "GatewayClient", Built)
    monkeypatch.setattr(runner, "load_limits", lambda: limits)
    monkeypatch.setattr(runner, "serving", served)
    started.append({"limits": limits})
    return started, served


async def test_a_worker_builds_and_starts_its_producer_as_its_settings_say(
    glued: tuple[list[dict[str, Any]], Served],
) -> None:
    started, served = glued
    limits = started.pop(0)["limits"]
    stop = asyncio.Event()
    await runner.run_worker(
        "k:9092", ROUTES, stop=stop, prefix="p.", config=WorkerConfig(worker_id="w3"), outage=QUICK
    )
    assert started == [
        {
            "bootstrap": "k:9092",
            "action": "start the worker's ingress producer",
            "backoff": QUICK,
            "stop": stop,
        }
    ]
    assert Built.made == [("k:9092", {"topic": "p.turnledger.ingress", "client_id": "w3", "limits": limits})]
    [worker] = Worker.made
    assert (worker.sink.stop, worker.sink.backoff) == (stop, QUICK)  # type: ignore[attr-defined]
    assert worker.sink._waiting_for == "Kafka at k:9092 to append to 'p.turnledger.ingress'"  # type: ignore[attr-defined]
    [made] = Manifests.made
    assert (made["session_timeout_ms"], made["heartbeat_interval_ms"]) == (10_000, 2_500)
    assert served.ports == [0]
    box: list[Worker] = []
    await runner.run_worker(
        "k:9092", ROUTES, stop=stop, session_timeout_ms=10_002, metrics_port=9464, worker_box=box
    )  # type: ignore[arg-type]
    assert Manifests.made[-1]["heartbeat_interval_ms"] == 2_500 and served.ports == [0, 9464]
    ready = served.ready[-1]
    assert ready() is None  # live: the fake's manifests feed took it live
    box[-1].live = False
    assert ready() == "catching up on the manifests topic"
    box.clear()
    assert ready() == "waiting for Kafka to start the ingress producer"
    box.extend([Worker.made[-1], Worker.made[0]])
    Worker.made[0].live, Worker.made[-1].live = False, True
    assert ready() == "catching up on the manifests topic"  # the last worker started is the one asked


async def test_a_tool_executor_builds_and_starts_its_producer_as_its_settings_say(
    glued: tuple[list[dict[str, Any]], Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    started, served = glued
    limits = started.pop(0)["limits"]
    polls: list[str | None] = []

    async def tail_topic(
        bootstrap: str, topic: str, on_batch: Any, *, on_caught_up: Any, **kwargs: Any
    ) -> None:
        polls.append(served.ready[-1]())
        await on_caught_up()
        polls.append(served.ready[-1]())

    monkeypatch.setattr(runner, "tail_topic", tail_topic)
    stop = asyncio.Event()
    await runner.run_tool_executor("k:9092", stop=stop, outage=QUICK, metrics_port=9465)
    await runner.run_tool_executor("k:9092", stop=stop)
    action = "start the tool executor's ingress producer"
    assert started == [
        {"bootstrap": "k:9092", "action": action, "backoff": QUICK, "stop": stop},
        {"bootstrap": "k:9092", "action": action, "backoff": runner.FOREVER, "stop": stop},
    ]
    assert (
        Built.made
        == [
            (
                "k:9092",
                {"topic": "turnledger.ingress", "client_id": "turnledger-tool-executor", "limits": limits},
            )
        ]
        * 2
    )
    assert served.ports == [9465, 0] and polls == ["waiting for Kafka", None] * 2


async def test_the_riding_sink_rides_out_an_append_as_its_backoff_and_stop_say(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = Client(failures=1)
    stop = asyncio.Event()
    caplog.set_level(logging.WARNING, "turnledger.retry")
    await runner.RidingSink(client, "k:9092", stop, QUICK).append(call("a1", "x", "{}"))  # type: ignore[arg-type]
    [line] = [r.getMessage() for r in caplog.records]
    assert f"Kafka is not reachable at 'k:9092' while trying to append to {client.topic!r}" in line
    with pytest.raises(KafkaUnavailableError):
        await runner.RidingSink(Client(failures=1), "k:9092", stop, NO_WAIT).append(call("a1", "x", "{}"))  # type: ignore[arg-type]
    slow = Backoff(initial_s=30, max_s=30, jitter=0)
    stopping = Client(failures=1)

    async def fail_then_stop(event: IngressEvent) -> None:
        stop.set()
        raise KafkaConnectionError("broker away")

    stopping.append = fail_then_stop  # type: ignore[method-assign]
    with pytest.raises(StopRequested):
        await asyncio.wait_for(
            runner.RidingSink(stopping, "k:9092", stop, slow).append(call("a1", "x", "{}")), 5
        )  # type: ignore[arg-type]


async def test_a_tool_executor_before_stage_all_leaves_the_calls_to_the_legacy_gateway(
    wired: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def tail_topic(bootstrap: str, topic: str, on_batch: Any, **kwargs: Any) -> None:
        await on_batch([call("a1", "lookup", "{}")])

    monkeypatch.setattr(runner, "tail_topic", tail_topic)
    boxes: list[Any] = []
    stage = RolloutStage.WITHOUT_TOOLS
    await runner.run_tool_executor("k:9092", stop=asyncio.Event(), executor_box=boxes, rollout_stage=stage)
    assert (boxes[0].calls_run, boxes[0].left_to_legacy, wired.attempts) == (0, 1, 0)
