"""`ProcessorApp` with its collaborators faked (no broker, no consumer): the partition processors, their
feeds, the consumer's start and close, and the ownership. Each test pins one branch of `app.py` by its
exact outcome: the results returned, the log lines whole, the calls made and their order, the
readiness strings and the lag numbers. The real ownerships and partition processors have their own
tests (test_processors_partition.py; tests/integration/test_ownership.py runs them together)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.unit.partition_fakes import BOOTSTRAP, INGRESS, QUICK, TOPICS, CounterFold, config
from turnledger.errors import KafkaUnavailableError, ProcessorError
from turnledger.processors import app as app_module
from turnledger.processors.app import ProcessorApp
from turnledger.processors.config import ProcessorConfig, ProcessorExit, ProcessorMetrics
from turnledger.processors.contract import PoisonHook
from turnledger.processors.ownership import GroupOwnership, Ownership, StaticOwnership
from turnledger.processors.poison import json_poison_hook
from turnledger.records import OutputRecord, SourceRecord
from turnledger.retry import StopRequested

WAIT_S = 30.0
"""How long a condition may take to hold before the test fails (they hold within milliseconds)."""
LOGGER = "turnledger.processors.app"
STOPPED, FENCED = ProcessorExit.STOPPED, ProcessorExit.FENCED
NOT_STARTED = "the consumer has not started (waiting for Kafka or its topics)"
NOT_ASSIGNED = "no partition assignment from the consumer group yet"


# ------------------------------------------------------------------------------------------ fakes


@dataclass
class Term:
    """How one term of a `FakeProcessor` goes: it ends as `ends` says (an exit, or an exception it
    raises) `when` its stop is set (three steps later: its commit), `at once` (its first step), or
    `never` (only cancellation ends it). `ready`: it reports ready once it runs."""

    ends: ProcessorExit | BaseException = ProcessorExit.STOPPED
    when: Literal["stopped", "at once", "never"] = "stopped"
    ready: bool = True


class FakeFeed:
    """`PartitionFeed`: what the app built it from."""

    def __init__(self, consumer: object, tp: TopicPartition, stop: asyncio.Event) -> None:
        self.consumer, self.tp, self.stop = consumer, tp, stop


class FakeConsumer:
    """The consumer's offsets per partition; a missing one raises KeyError, an exception is raised."""

    def __init__(self) -> None:
        self.lso: dict[TopicPartition, int | Exception | None] = {}
        self.hw: dict[TopicPartition, int | Exception | None] = {}

    @staticmethod
    def _answer(offsets: dict[TopicPartition, int | Exception | None], tp: TopicPartition) -> int | None:
        answer = offsets[tp]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self._answer(self.lso, tp)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._answer(self.hw, tp)


class FakeProcessor:
    """`PartitionProcessor`: records how it was made and driven; its terms go as `World.scripts` says."""

    def __init__(
        self,
        world: World,
        config: ProcessorConfig,
        partition: int,
        fold_factory: object,
        poison_hook_for: object,
        *,
        on_ready: object,
    ) -> None:
        self.world = world
        self.made_with = (config, partition, fold_factory, poison_hook_for, on_ready)
        self.partition = partition
        self.tp = TopicPartition(config.topics.ingress, partition)
        self.ready = asyncio.Event()
        self.metrics = ProcessorMetrics()
        self.committed_offset: int | None = None
        self.store: object | None = None
        self.terms: deque[Term] = deque(world.scripts.get(partition, []))
        self.feeds: list[FakeFeed] = []
        self.term_stops: list[asyncio.Event] = []
        self.stops = self.dropped = self.closed = 0
        self._stop = asyncio.Event()

    def begin_term(self) -> asyncio.Event:
        self._stop = asyncio.Event()
        self.term_stops.append(self._stop)
        self.ready.clear()
        return self._stop

    def stop(self) -> None:
        self.stops += 1
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def drop_state(self) -> None:
        self.dropped += 1

    def close(self) -> None:
        self.closed += 1
        self.world.journal.append(f"partition {self.partition} closed")

    async def run(self, feed: FakeFeed) -> ProcessorExit:
        self.feeds.append(feed)
        term = self.terms.popleft() if self.terms else Term()
        stop = self._stop
        journal = self.world.journal
        journal.append(f"term {self.partition} began")
        if term.ready:
            self.ready.set()
        try:
            if term.when == "stopped":
                await stop.wait()
                for _ in range(3):
                    await asyncio.sleep(0)
            elif term.when == "never":
                await asyncio.Event().wait()
        finally:
            self.ready.clear()
            journal.append(f"term {self.partition} ended")
        if isinstance(term.ends, BaseException):
            raise term.ends
        return term.ends


class FakeOwnership:
    """An ownership that hands the host `acquire` (if given) when started, then raises `raises`."""

    def __init__(
        self,
        world: World,
        *,
        ends_when_idle: bool,
        acquire: list[int] | None = None,
        raises: BaseException | None = None,
    ) -> None:
        self.world = world
        self.ends_when_idle = ends_when_idle
        self.acquire = acquire
        self.raises = raises
        self.started_with: tuple[object, object, asyncio.Event] | None = None
        self.fenced_calls: list[tuple[object, int]] = []

    def consumer(self) -> FakeConsumer:
        return self.world.consumer

    async def start(self, host: ProcessorApp, consumer: object, stop: asyncio.Event) -> None:
        self.started_with = (host, consumer, stop)
        self.world.journal.append("ownership started")
        if self.acquire is not None:
            host.acquire(self.acquire)
        if self.raises is not None:
            raise self.raises

    def fenced(self, consumer: object, partition: int) -> None:
        self.fenced_calls.append((consumer, partition))
        self.world.journal.append(f"partition {partition} fenced")

    async def close(self) -> None:
        self.world.journal.append("ownership closed")


@dataclass
class World:
    """Everything the faked collaborators did, in one place."""

    consumer: FakeConsumer = field(default_factory=FakeConsumer)
    journal: list[str] = field(default_factory=list)
    scripts: dict[int, list[Term]] = field(default_factory=dict)
    made: dict[int, FakeProcessor] = field(default_factory=dict)
    constructed: list[int] = field(default_factory=list)
    start_calls: list[tuple[object, str, str, object, asyncio.Event | None]] = field(default_factory=list)
    start_error: BaseException | None = None
    apps: list[ProcessorApp] = field(default_factory=list)
    running: asyncio.Task[dict[int, ProcessorExit]] | None = None
    """The `run()` under test (`start`): a condition waited for fails at once if it ended."""
    loop_errors: list[dict[str, Any]] = field(default_factory=list)
    """What the loop's exception handler got: a callback (`_term_done`, a signal handler) that raised."""

    def app(
        self,
        ownership: FakeOwnership | None = None,
        cfg: ProcessorConfig | None = None,
        **kwargs: Any,
    ) -> ProcessorApp:
        app = ProcessorApp(cfg or config(), fold_for, **kwargs)
        if ownership is not None:
            app.ownership = cast(Ownership, ownership)
        self.apps.append(app)
        return app

    def hosted(self, cfg: ProcessorConfig | None = None, **kwargs: Any) -> ProcessorApp:
        """An app whose consumer is up, driven by the test as an ownership would (no `run()`)."""
        app = self.app(cfg=cfg, **kwargs)
        app._consumer = cast(AIOKafkaConsumer, self.consumer)
        return app

    def own(self, **kwargs: Any) -> FakeOwnership:
        return FakeOwnership(self, **kwargs)

    def start(
        self, run: Coroutine[Any, Any, dict[int, ProcessorExit]]
    ) -> asyncio.Task[dict[int, ProcessorExit]]:
        self.running = asyncio.create_task(run)
        return self.running

    def check(self) -> None:
        """Fail now, rather than wait out a timeout, once a callback raised or `run()` ended early."""
        if self.loop_errors:
            context = self.loop_errors[0]
            pytest.fail(f"the event loop caught: {context.get('message')} {context.get('exception')!r}")
        if self.running is not None and self.running.done():
            pytest.fail(f"run() ended before the condition held, with {self.running.result()}")

    async def until(self, condition: Callable[[], bool]) -> None:
        async def poll() -> None:
            while not condition():
                self.check()
                await asyncio.sleep(0)

        await asyncio.wait_for(poll(), WAIT_S)

    async def finish(
        self, run: Coroutine[Any, Any, dict[int, ProcessorExit]] | asyncio.Task[dict[int, ProcessorExit]]
    ) -> dict[int, ProcessorExit]:
        """What `run()` returns (or raises)."""
        task = run if isinstance(run, asyncio.Task) else asyncio.ensure_future(run)
        self.running = None
        await self.until(task.done)
        return task.result()


def fold_for(partition: int) -> CounterFold:
    return CounterFold()


@pytest.fixture
async def world(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> AsyncIterator[World]:
    world = World()

    def make_processor(
        config: ProcessorConfig,
        partition: int,
        fold_factory: object,
        poison_hook_for: object,
        *,
        on_ready: object,
    ) -> FakeProcessor:
        assert type(partition) is int
        processor = FakeProcessor(world, config, partition, fold_factory, poison_hook_for, on_ready=on_ready)
        world.made[partition] = processor
        world.constructed.append(partition)
        return processor

    async def start_client(
        make: Callable[[], FakeConsumer],
        *,
        bootstrap: str,
        action: str,
        backoff: object,
        stop: asyncio.Event | None,
    ) -> FakeConsumer:
        world.start_calls.append((make, bootstrap, action, backoff, stop))
        if world.start_error is not None:
            raise world.start_error
        return make()

    async def close_client(client: object) -> None:
        assert client is world.consumer
        world.journal.append("consumer closed")

    monkeypatch.setattr(app_module, "PartitionProcessor", make_processor)
    monkeypatch.setattr(app_module, "PartitionFeed", FakeFeed)
    monkeypatch.setattr(app_module, "start_client", start_client)
    monkeypatch.setattr(app_module, "close_client", close_client)
    caplog.set_level(logging.INFO, LOGGER)
    loop = asyncio.get_running_loop()
    handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: world.loop_errors.append(context))
    yield world
    for app in world.apps:  # a failing test leaves no term running into the next one
        app.cancel()
        await asyncio.gather(*app._terms.values(), return_exceptions=True)
    loop.set_exception_handler(handler)
    assert world.loop_errors == []


async def steps(n: int = 20) -> None:
    """Let the loop run `n` rounds: enough for anything that was going to happen at once to happen."""
    for _ in range(n):
        await asyncio.sleep(0)


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def closed(partition: int) -> tuple[str, str]:
    """`_log_closed`'s line for a processor that counted nothing."""
    return (
        "INFO",
        f"partition {partition}: closed after 0 batches, 0 records in, 0 outputs, 0 changelog records, "
        "0 poison, 0 aborted, 0 ownerships, 0 restores; committed offset None",
    )


def began(world: World, *partitions: int) -> Callable[[], bool]:
    return lambda: all(f"term {p} began" in world.journal for p in partitions)


def task_of(app: ProcessorApp, partition: int) -> asyncio.Task[ProcessorExit]:
    return app._terms[partition]


# ---------------------------------------------------------------------------------- construction


def test_a_group_member_takes_no_partition_list() -> None:
    """The group decides what a member owns; a list next to it would be silently ignored."""
    with pytest.raises(ValueError) as raised:
        ProcessorApp(config(), fold_for, partitions=[0], group=True)
    assert str(raised.value) == (
        "a group member owns what the group assigns: pass partitions or group, not both"
    )


def test_group_true_joins_the_consumer_group_of_the_config() -> None:
    cfg = config()
    app = ProcessorApp(cfg, fold_for, group=True)
    assert type(app.ownership) is GroupOwnership
    assert app.ownership._config is cfg


@pytest.mark.parametrize("partitions", [[3, 1], None], ids=["listed", "all"])
def test_the_default_ownership_is_static_over_the_partitions_given(partitions: list[int] | None) -> None:
    cfg = config()
    app = ProcessorApp(cfg, fold_for, None, partitions)
    assert type(app.ownership) is StaticOwnership
    assert app.ownership._config is cfg
    assert app.ownership.requested == partitions


# ------------------------------------------------------------------------------------- readiness


async def test_readiness_says_what_the_process_still_waits_for(world: World) -> None:
    """Not started, started without an assignment, partitions restoring (sorted), then ready."""
    world.scripts = {0: [Term(ready=False)], 1: [Term()], 2: [Term(ready=False)], 3: [Term(ready=False)]}
    ownership = world.own(ends_when_idle=False)
    app = world.app(ownership)
    assert app.readiness() == NOT_STARTED
    run = world.start(app.run(handle_signals=False))
    await world.until(lambda: world.journal == ["ownership started"])
    assert app.readiness() == NOT_ASSIGNED
    app.acquire([2, 0, 1])
    await world.until(began(world, 0, 1, 2))
    assert app.readiness() == "partitions [0, 2] are restoring their state"
    world.made[2].ready.set()
    assert app.readiness() == "partitions [0] are restoring their state"
    world.made[0].ready.set()
    assert app.readiness() is None
    app.acquire([3])
    await world.until(began(world, 3))
    assert app.readiness() == "partitions [3] are restoring their state"
    app.stop()
    assert await world.finish(run) == {0: STOPPED, 1: STOPPED, 2: STOPPED, 3: STOPPED}


async def test_an_assignment_of_nothing_is_ready(world: World) -> None:
    """A member the group gave no partition is ready (it processes all it owns: none)."""
    app = world.hosted()
    app._started = True
    assert app.readiness() == NOT_ASSIGNED
    app.acquire([])
    assert app.readiness() is None
    assert app.owned == []


# --------------------------------------------------------------------------------------- acquire


async def test_acquire_starts_a_term_per_partition_with_the_apps_fold_hook_and_feed(world: World) -> None:
    cfg = config()

    def on_ready(processor: object) -> None:
        pass

    def on_poison(record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        return []

    app = world.hosted(cfg, on_poison=on_poison, on_ready=on_ready)
    app.acquire([2, 0])
    assert app.owned == [0, 2]
    assert list(app.processors) == [2, 0]
    assert app.processors[0] is cast(Any, world.made[0])
    for p in (0, 2):
        processor = world.made[p]
        assert processor.made_with == (cfg, p, fold_for, app._poison_hook, on_ready)
        assert task_of(app, p).get_name() == f"partition-{p}"
    await world.until(began(world, 0, 2))
    for p in (0, 2):
        processor = world.made[p]
        [feed] = processor.feeds
        assert feed.consumer is world.consumer
        assert feed.tp == TopicPartition(INGRESS, p)
        assert feed.stop is processor.term_stops[0]
    assert world.constructed == [2, 0]
    assert app.readiness() == NOT_STARTED  # acquire does not start the consumer: run() does
    app.stop()
    await world.until(lambda: app.owned == [])
    assert app.results == {0: STOPPED, 2: STOPPED}


async def test_acquire_skips_running_partitions_and_reuses_a_processor_for_its_next_term(
    world: World,
) -> None:
    app = world.hosted()
    app.acquire([0])
    first = task_of(app, 0)
    app.acquire([0, 1])
    assert task_of(app, 0) is first
    assert app.owned == [0, 1]
    assert world.constructed == [0, 1]
    processor = world.made[0]
    assert len(processor.term_stops) == 1
    await world.until(began(world, 0, 1))
    processor.stop()
    await world.until(lambda: app.owned == [1])
    assert app.results == {0: STOPPED}
    app.acquire([0])
    assert app.owned == [0, 1]
    assert task_of(app, 0) is not first
    assert world.constructed == [0, 1]
    assert app.processors[0] is cast(Any, processor) and world.made[0] is processor
    assert len(processor.term_stops) == 2
    await world.until(lambda: len(processor.feeds) == 2)
    assert processor.feeds[1].stop is processor.term_stops[1] and not processor.term_stops[1].is_set()


async def test_acquire_while_stopping_starts_nothing_but_counts_as_an_assignment(world: World) -> None:
    app = world.hosted()
    app._started = True
    app.stop()
    assert app.readiness() == NOT_ASSIGNED
    app.acquire([0, 1])
    assert app.readiness() is None
    assert app.owned == [] and app.processors == {} and world.constructed == []


def test_acquire_needs_the_consumer_started() -> None:
    app = ProcessorApp(config(), fold_for)
    with pytest.raises(AssertionError):
        app.acquire([0])
    assert app.owned == [] and app.processors == {}


# --------------------------------------------------------------------------------------- release


async def test_release_commits_a_ready_partition_and_cancels_one_still_starting(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Partitions not running are skipped (even first); the others not released run on."""
    world.scripts = {0: [Term()], 1: [Term(ready=False)], 2: [Term()]}
    app = world.hosted()
    app.acquire([0, 1, 2])
    await world.until(began(world, 0, 1, 2))
    await app.release([9, 1, 0])
    assert app.results == {0: STOPPED}
    assert app.owned == [2]
    assert [world.made[p].stops for p in (0, 1, 2)] == [1, 1, 0]
    assert logged(caplog) == [("INFO", "partition 1: term cancelled")]


async def test_releasing_nothing_running_returns_at_once(world: World) -> None:
    app = world.hosted()
    app.acquire([0])
    await world.until(began(world, 0))
    await app.release([])
    await app.release([5])
    assert app.owned == [0] and world.made[0].stops == 0 and app.results == {}


@dataclass(frozen=True)
class QuickRevocation:
    """`GroupSettings` with a revocation budget below its 0.5 s floor, so a test waits it out quickly."""

    revocation_budget_s: float = 0.1


async def test_release_cancels_a_straggler_once_the_revocation_budget_is_spent(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.scripts = {0: [Term(when="never")], 1: [Term()]}
    app = world.hosted(config(group=QuickRevocation()))
    app.acquire([0, 1])
    await world.until(began(world, 0, 1))
    await app.release([0, 1])
    assert app.owned == []  # the straggler's cancellation was awaited too
    assert app.results == {1: STOPPED}
    assert [world.made[p].stops for p in (0, 1)] == [1, 1]
    assert logged(caplog) == [
        ("WARNING", "partition-0: still committing after 0.1s of revocation; cancelled"),
        ("INFO", "partition 0: term cancelled"),
    ]


# ------------------------------------------------------------------------------------- keep_only


async def test_keep_only_drops_the_state_of_partitions_neither_kept_nor_running(world: World) -> None:
    app = world.hosted()
    app.acquire([0, 1, 2, 3])
    await world.until(began(world, 0, 1, 2, 3))
    world.made[0].stop()
    world.made[2].stop()
    await world.until(lambda: app.owned == [1, 3])
    app.keep_only([0, 1])
    assert [world.made[p].dropped for p in (0, 1, 2, 3)] == [0, 0, 1, 0]


# ------------------------------------------------------------------------------------------- fail


async def test_fail_keeps_the_first_failure_and_stops_every_partition(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A foreign exception is logged with its traceback; a later failure is neither kept nor logged."""
    app = world.hosted()
    app.acquire([0, 1])
    first = ValueError("disk full")
    app.fail(first)
    app.fail(ProcessorError("second"))
    assert app._failure is first
    assert [world.made[p].stops for p in (0, 1)] == [2, 2]
    assert logged(caplog) == [("ERROR", "processor failed: disk full")]
    assert caplog.records[0].exc_info == (ValueError, first, None)
    await world.until(lambda: app.owned == [])
    assert app._finished.is_set()


async def test_fail_logs_a_turnledger_error_without_a_traceback(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    app = world.hosted()
    app.fail(ProcessorError("input topic 't.ingress' does not exist"))
    assert logged(caplog) == [("ERROR", "processor failed: input topic 't.ingress' does not exist")]
    assert caplog.records[0].exc_info is None
    assert app._finished.is_set()


# --------------------------------------------------------------------------------- _check_finished


@pytest.mark.parametrize(
    ("running", "failed", "stopping", "started", "ends_when_idle", "finished"),
    [
        (True, True, True, True, True, False),
        (False, True, False, False, False, True),
        (False, False, True, False, False, True),
        (False, False, False, True, True, True),
        (False, False, False, True, False, False),
        (False, False, False, False, True, False),
        (False, False, False, False, False, False),
    ],
    ids=["terms-running", "failed", "stopping", "static-idle", "group-idle", "not-started", "nothing"],
)
async def test_the_app_finishes_once_no_term_runs_and_it_failed_stopped_or_idles_statically(
    world: World,
    running: bool,
    failed: bool,
    stopping: bool,
    started: bool,
    ends_when_idle: bool,
    finished: bool,
) -> None:
    app = world.app(world.own(ends_when_idle=ends_when_idle))
    if running:
        app._terms[0] = cast("asyncio.Task[ProcessorExit]", asyncio.get_running_loop().create_future())
    if failed:
        app._failure = ValueError("x")
    if stopping:
        app._stopping.set()
    app._started = started
    app._check_finished()
    assert app._finished.is_set() is finished
    app._terms.clear()


# ------------------------------------------------------------------------------------ _term_done


async def test_a_fenced_term_is_reported_to_the_ownership_and_static_ownership_ends_when_all_did(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.scripts = {1: [Term(FENCED, "at once")], 0: [Term(FENCED, "at once")]}
    ownership = world.own(ends_when_idle=True, acquire=[1, 0])
    app = world.app(ownership)
    results = await world.finish(app.run(handle_signals=False))
    assert results == {1: FENCED, 0: FENCED}
    assert results is not app.results
    assert ownership.fenced_calls == [(world.consumer, 1), (world.consumer, 0)]
    assert world.journal == [
        "ownership started",
        "term 1 began",
        "term 1 ended",
        "term 0 began",
        "term 0 ended",
        "partition 1 fenced",
        "partition 0 fenced",
        "ownership closed",
        "consumer closed",
        "partition 1 closed",
        "partition 0 closed",
    ]
    assert logged(caplog) == [closed(1), closed(0)]
    assert [world.made[p].closed for p in (0, 1)] == [1, 1]


async def test_a_term_fenced_while_the_app_stops_is_not_reported(world: World) -> None:
    world.scripts = {0: [Term(FENCED)]}
    ownership = world.own(ends_when_idle=False, acquire=[0])
    app = world.app(ownership)
    run = world.start(app.run(handle_signals=False))
    await world.until(began(world, 0))
    app.stop()
    assert await world.finish(run) == {0: FENCED}
    assert ownership.fenced_calls == []


async def test_a_fenced_term_without_a_consumer_is_not_reported(world: World) -> None:
    world.scripts = {0: [Term(FENCED)]}
    ownership = world.own(ends_when_idle=False)
    app = world.hosted()
    app.ownership = cast(Ownership, ownership)
    app.acquire([0])
    await world.until(began(world, 0))
    app._consumer = None
    world.made[0].stop()
    await world.until(lambda: app.owned == [])
    assert app.results == {0: FENCED}
    assert ownership.fenced_calls == []


async def test_a_stopped_term_is_recorded_and_not_reported_as_fenced(world: World) -> None:
    ownership = world.own(ends_when_idle=False)
    app = world.hosted()
    app.ownership = cast(Ownership, ownership)
    app.acquire([0])
    await world.until(began(world, 0))
    world.made[0].stop()
    await world.until(lambda: app.owned == [])
    assert app.results == {0: STOPPED}
    assert ownership.fenced_calls == []
    assert not app._finished.is_set()  # a group member stays one with no partition


async def test_a_group_member_runs_on_with_every_term_ended_until_stopped(world: World) -> None:
    world.scripts = {0: [Term(FENCED, "at once")]}
    ownership = world.own(ends_when_idle=False, acquire=[0])
    app = world.app(ownership)
    run = world.start(app.run(handle_signals=False))
    await world.until(lambda: app.results == {0: FENCED})
    assert ownership.fenced_calls == [(world.consumer, 0)]
    await steps()
    assert not run.done()
    assert app.owned == []
    app.stop()
    assert await world.finish(run) == {0: FENCED}


async def test_the_callback_of_a_term_that_is_no_longer_current_keeps_the_current_one(world: World) -> None:
    app = world.hosted()
    app.acquire([0])
    current = task_of(app, 0)

    async def old_term() -> ProcessorExit:
        return ProcessorExit.STOPPED

    old = asyncio.create_task(old_term())
    await old
    app._term_done(0, old)
    assert app._terms == {0: current}
    assert app.results == {0: STOPPED}


@pytest.mark.parametrize(
    "error",
    [ValueError("boom"), ProcessorError("partition 1: the batch at offset 3 failed to commit")],
    ids=["foreign", "turnledger"],
)
async def test_a_failed_term_stops_the_others_cleanly_and_run_raises_its_exception(
    world: World, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    """The others commit (stop, not cancel) and their results are kept; a traceback only for a
    foreign exception; everything is closed in order before `run()` raises."""
    world.scripts = {0: [Term()], 1: [Term(error, "at once")], 2: [Term()]}
    ownership = world.own(ends_when_idle=True, acquire=[0, 1, 2])
    app = world.app(ownership)
    with pytest.raises(type(error)) as raised:
        await world.finish(app.run(handle_signals=False))
    assert raised.value is error
    assert app.results == {0: STOPPED, 2: STOPPED}
    assert [world.made[p].stops for p in (0, 1, 2)] == [2, 2, 2]  # fail(), then the shutdown
    assert [world.made[p].closed for p in (0, 1, 2)] == [1, 1, 1]
    assert world.journal == [
        "ownership started",
        "term 0 began",
        "term 1 began",
        "term 1 ended",
        "term 2 began",
        "term 0 ended",
        "term 2 ended",
        "ownership closed",
        "consumer closed",
        "partition 0 closed",
        "partition 1 closed",
        "partition 2 closed",
    ]
    message = str(error)
    assert logged(caplog) == [
        ("ERROR", f"partition 1 failed: {message}"),
        ("ERROR", f"processor failed: {message}"),
        closed(0),
        closed(1),
        closed(2),
    ]
    trace = None if isinstance(error, ProcessorError) else (ValueError, error)
    assert [r.exc_info and r.exc_info[:2] for r in caplog.records[:2]] == [trace, trace]


# ------------------------------------------------------------------------------ run and shutdown


async def test_run_starts_the_consumer_then_the_ownership_with_the_apps_stop(world: World) -> None:
    ownership = world.own(ends_when_idle=True, acquire=[])
    app = world.app(ownership)
    assert await world.finish(app.run(handle_signals=False)) == {}
    assert world.start_calls == [
        (ownership.consumer, BOOTSTRAP, "start the processor's consumer", QUICK, app._stopping)
    ]
    assert ownership.started_with == (app, world.consumer, app._stopping)
    assert app._consumer is cast(Any, world.consumer)
    assert world.journal == ["ownership started", "ownership closed", "consumer closed"]


async def test_stop_before_run_still_starts_and_closes_but_runs_no_partition(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    ownership = world.own(ends_when_idle=False, acquire=[0])
    app = world.app(ownership)
    app.stop()
    assert await world.finish(app.run(handle_signals=False)) == {}
    assert world.constructed == []
    assert world.start_calls[0][4] is app._stopping and app._stopping.is_set()
    assert world.journal == ["ownership started", "ownership closed", "consumer closed"]
    assert logged(caplog) == []


async def test_a_stop_while_waiting_for_kafka_ends_run_quietly(world: World) -> None:
    world.start_error = StopRequested("stopped while waiting for Kafka")
    app = world.app(world.own(ends_when_idle=True))
    assert await world.finish(app.run(handle_signals=False)) == {}
    assert world.journal == ["ownership closed"]  # no consumer to close
    assert app.readiness() == NOT_STARTED


async def test_kafka_unavailable_at_start_is_raised_after_closing_the_ownership(world: World) -> None:
    error = KafkaUnavailableError(BOOTSTRAP, action="start the processor's consumer")
    world.start_error = error
    app = world.app(world.own(ends_when_idle=True))
    with pytest.raises(KafkaUnavailableError) as raised:
        await world.finish(app.run(handle_signals=False))
    assert raised.value is error
    assert world.journal == ["ownership closed"]
    assert app.readiness() == NOT_STARTED


async def test_an_ownership_that_fails_after_acquiring_has_its_terms_stopped_and_awaited(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """The shutdown stops the running terms and waits for all of them, even one that raises while
    stopping, before closing anything; `run()` raises the ownership's failure."""
    late = RuntimeError("late")
    world.scripts = {1: [Term(late)]}
    error = ProcessorError("partitions [7] do not exist")
    ownership = world.own(ends_when_idle=True, acquire=[0, 1], raises=error)
    app = world.app(ownership)
    with pytest.raises(ProcessorError) as raised:
        await world.finish(app.run(handle_signals=False))
    assert raised.value is error
    assert app._failure is late
    assert app.results == {0: STOPPED}
    assert [world.made[p].stops for p in (0, 1)] == [2, 2]
    assert world.journal == [
        "ownership started",
        "term 0 began",
        "term 1 began",
        "term 0 ended",
        "term 1 ended",
        "ownership closed",
        "consumer closed",
        "partition 0 closed",
        "partition 1 closed",
    ]
    assert logged(caplog) == [
        ("ERROR", "partition 1 failed: late"),
        ("ERROR", "processor failed: late"),
        closed(0),
        closed(1),
    ]


async def test_a_closed_processor_logs_every_count_and_its_committed_offset(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    app = world.app(world.own(ends_when_idle=False, acquire=[4]))
    run = world.start(app.run(handle_signals=False))
    await world.until(began(world, 4))
    processor = world.made[4]
    processor.metrics = ProcessorMetrics(
        batches=1,
        records_in=2,
        outputs_out=3,
        changelog_out=4,
        poison_records=5,
        aborted_batches=6,
        ownerships=7,
        restores=8,
    )
    processor.committed_offset = 9
    app.stop()
    assert await world.finish(run) == {4: STOPPED}
    assert logged(caplog) == [
        (
            "INFO",
            "partition 4: closed after 1 batches, 2 records in, 3 outputs, 4 changelog records, "
            "5 poison, 6 aborted, 7 ownerships, 8 restores; committed offset 9",
        )
    ]


async def test_cancel_cancels_every_term_without_waiting_for_its_commit(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.scripts = {0: [Term(when="never")], 1: [Term(when="never")]}
    app = world.hosted()
    app.acquire([0, 1])
    await world.until(began(world, 0, 1))
    app.cancel()
    assert app._stopping.is_set()
    assert [world.made[p].stops for p in (0, 1)] == [1, 1]
    await world.until(lambda: app.owned == [])
    assert app.results == {}
    assert app._finished.is_set()
    assert logged(caplog) == [
        ("INFO", "partition 0: term cancelled"),
        ("INFO", "partition 1: term cancelled"),
    ]


# ------------------------------------------------------------------------------------------ signals


@dataclass
class Caught:
    handler: Callable[[int, object], None]
    signals: list[int]


@pytest.fixture
def caught() -> Iterator[Caught]:
    """Python handlers for SIGTERM and SIGINT that record what reaches them, so a signal the app did
    not take over fails the test instead of ending the test run."""
    signals: list[int] = []

    def record(sig: int, frame: object) -> None:
        signals.append(sig)

    previous = {sig: signal.signal(sig, record) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield Caught(record, signals)
    for sig, handler in previous.items():
        if handler is not None:
            signal.signal(sig, handler)


async def test_a_first_signal_commits_and_stops_a_second_cancels(
    world: World, caplog: pytest.LogCaptureFixture, caught: Caught
) -> None:
    """`run()` takes SIGTERM and SIGINT over while it runs (by default) and gives them back after."""
    world.scripts = {0: [Term()], 1: [Term(when="never")]}
    app = world.app(world.own(ends_when_idle=False, acquire=[0, 1]))
    run = world.start(app.run())
    await world.until(began(world, 0, 1))
    assert signal.getsignal(signal.SIGTERM) is not caught.handler
    assert signal.getsignal(signal.SIGINT) is not caught.handler
    os.kill(os.getpid(), signal.SIGTERM)
    await world.until(lambda: app.owned == [1])
    assert app.results == {0: STOPPED}
    os.kill(os.getpid(), signal.SIGINT)
    assert await world.finish(run) == {0: STOPPED}
    assert caught.signals == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert [world.made[p].stops for p in (0, 1)] == [3, 3]  # the first signal, the second, the shutdown
    assert logged(caplog) == [
        ("INFO", "received SIGTERM: committing open batches and stopping"),
        ("WARNING", "received SIGINT again: cancelling without committing open batches"),
        ("INFO", "partition 1: term cancelled"),
        closed(0),
        closed(1),
    ]


async def test_run_without_handle_signals_leaves_the_signals_alone(world: World, caught: Caught) -> None:
    app = world.app(world.own(ends_when_idle=False, acquire=[0]))
    run = world.start(app.run(handle_signals=False))
    await world.until(began(world, 0))
    assert signal.getsignal(signal.SIGTERM) is caught.handler
    assert signal.getsignal(signal.SIGINT) is caught.handler
    app.stop()
    assert await world.finish(run) == {0: STOPPED}
    assert signal.getsignal(signal.SIGTERM) is caught.handler
    assert signal.getsignal(signal.SIGINT) is caught.handler


async def test_the_signal_handler_commits_first_and_cancels_the_second_time(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.scripts = {0: [Term(when="never")]}
    app = world.hosted()
    app.acquire([0])
    await world.until(began(world, 0))
    app._on_signal(signal.SIGTERM)
    assert app._stopping.is_set() and world.made[0].stops == 1
    await steps()
    assert app.owned == [0]  # still committing
    app._on_signal(signal.SIGTERM)
    await world.until(lambda: app.owned == [])
    assert app.results == {}
    assert logged(caplog) == [
        ("INFO", "received SIGTERM: committing open batches and stopping"),
        ("WARNING", "received SIGTERM again: cancelling without committing open batches"),
        ("INFO", "partition 0: term cancelled"),
    ]


async def test_the_first_signal_after_a_failure_still_lets_the_open_batches_commit(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    app = world.hosted()
    app.acquire([0])
    await world.until(began(world, 0))
    app.fail(ProcessorError("partition 1: the store is corrupt"))
    app._on_signal(signal.SIGTERM)
    await world.until(lambda: app.owned == [])
    assert app.results == {0: STOPPED}
    assert logged(caplog) == [
        ("ERROR", "processor failed: partition 1: the store is corrupt"),
        ("INFO", "received SIGTERM: committing open batches and stopping"),
    ]


# ------------------------------------------------------------------------------- lag and state size


async def test_consumer_lag_per_owned_partition(world: World) -> None:
    """The last stable offset (else the highwater) minus the committed offset (none: 0), never
    below 0; a partition the consumer cannot answer for, or has no offset for yet, is left out."""
    app = world.hosted()
    app.acquire(list(range(8)))
    tps = [TopicPartition(INGRESS, p) for p in range(8)]
    lso, hw = world.consumer.lso, world.consumer.hw
    lso[tps[0]] = AssertionError("Partition is not assigned")
    lso[tps[1]], hw[tps[1]] = 10, 20
    world.made[1].committed_offset = 3
    # tps[2]: not known to the consumer (KeyError)
    lso[tps[3]], hw[tps[3]] = None, 8
    lso[tps[4]] = ValueError("no such partition")
    lso[tps[5]], hw[tps[5]] = 5, 20
    world.made[5].committed_offset = 12
    lso[tps[6]], hw[tps[6]] = None, None
    lso[tps[7]], hw[tps[7]] = 4, 20
    world.made[7].committed_offset = 3
    assert app.consumer_lag() == {1: 7, 3: 8, 5: 0, 7: 1}


async def test_consumer_lag_without_a_consumer_is_empty(world: World) -> None:
    app = world.hosted()
    app.acquire([0])
    world.consumer.lso[TopicPartition(INGRESS, 0)] = 5
    app._consumer = None
    assert app.consumer_lag() == {}


async def test_a_last_stable_offset_of_zero_is_no_lag(world: World) -> None:
    app = world.hosted()
    app.acquire([0])
    tp = TopicPartition(INGRESS, 0)
    world.consumer.lso[tp], world.consumer.hw[tp] = 0, 5
    assert app.consumer_lag() == {0: 0}


class Unsized:
    """A store that cannot tell its size (`len` raises TypeError)."""


async def test_state_sizes_of_the_owned_partitions_whose_store_has_a_size(world: World) -> None:
    app = world.hosted()
    app.acquire([0, 1, 2, 3, 4, 5])
    world.made[0].store = Unsized()
    world.made[1].store = {"a": b"1", "b": b"2"}
    # 2: no store
    world.made[3].store = [b"x", b"y", b"z"]
    world.made[4].store = {}
    world.made[5].store = {"k": b"v"}
    world.made[5].stop()
    await world.until(lambda: app.owned == [0, 1, 2, 3, 4])
    assert app.state_sizes() == {1: 2, 3: 3, 4: 0}


# ------------------------------------------------------------------------------------- poison hook


def poisoned() -> tuple[SourceRecord, Exception]:
    return SourceRecord(INGRESS, 0, 7, b"k", b"{"), ValueError("not JSON")


class FoldWithHook(CounterFold):
    def on_poison(self, record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        return [OutputRecord("t.own-rejections", record.key, b"own")]


class FoldWithUncallableHook(CounterFold):
    on_poison = None


def test_an_on_poison_given_wins_over_the_folds(caplog: pytest.LogCaptureFixture) -> None:
    def on_poison(record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        return []

    caplog.set_level(logging.INFO, LOGGER)
    app = ProcessorApp(config(), fold_for, on_poison)
    assert app._poison_hook(FoldWithHook()) is on_poison
    assert app._poison_hook(CounterFold()) is on_poison
    assert logged(caplog) == []


def test_a_folds_own_on_poison_is_its_hook(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    fold = FoldWithHook()
    hook = ProcessorApp(config(), fold_for)._poison_hook(fold)
    assert hook == fold.on_poison
    assert hook(*poisoned()) == [OutputRecord("t.own-rejections", b"k", b"own")]
    assert logged(caplog) == []


@pytest.mark.parametrize("fold", [CounterFold(), FoldWithUncallableHook()], ids=["none", "not-callable"])
def test_a_fold_without_on_poison_gets_json_rejections_and_a_warning(
    caplog: pytest.LogCaptureFixture, fold: CounterFold
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    hook: PoisonHook = ProcessorApp(config(), fold_for)._poison_hook(fold)
    record, exc = poisoned()
    assert hook(record, exc) == json_poison_hook(TOPICS)(record, exc)
    assert [out.topic for out in hook(record, exc)] == ["t.turnledger.rejections"]
    assert logged(caplog) == [
        ("WARNING", f"{type(fold).__name__} has no on_poison; poisoned records get JSON rejections")
    ]
