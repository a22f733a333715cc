"""A child's side of `--processes N` (`child_main`, `_run_child`): the messages it sends its parent over the
pipe and what it makes of the parent's, its own signals and the parent's end closing, its exit status.
Run in this process, on a real pipe, over `multiproc_fakes.FakeApp` (the app it builds); the group's
tests run the same code in spawned children."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.unit.multiproc_fakes import FOLD, REFUSALS, Ending, FakeApp, speaker
from turnledger import cli_refusals
from turnledger.errors import ProcessorError
from turnledger.processors import multiproc
from turnledger.processors.config import ProcessorConfig, ProcessorExit
from turnledger.processors.errors import EXIT_FAILED, EXIT_FENCED
from turnledger.processors.multiproc import CANCEL, STOP, ChildSpec
from turnledger.topology import Topics

WAIT_S = 10.0
LOGGER = "turnledger.processors.multiproc"
CONFIG = ProcessorConfig(bootstrap="kafka.test:9092", topics=Topics("t."))
SPEC = ChildSpec(1, 2, CONFIG, FOLD, (0, 1), "INFO")
STOPPED, FENCED = ProcessorExit.STOPPED, ProcessorExit.FENCED


class Child:
    """`_run_child(spec, conn)` as a task, the parent's end of its pipe, and what the child did."""

    def __init__(self, journal: list[Any]) -> None:
        self.parent, self.conn = mp.get_context("spawn").Pipe()
        self.journal = journal
        self.task: asyncio.Task[int] | None = None

    @property
    def app(self) -> FakeApp:
        (app,) = FakeApp.made
        return app

    async def start(self, spec: ChildSpec = SPEC, ending: Ending | None = None) -> FakeApp:
        FakeApp.ending = ending or Ending()
        self.task = asyncio.create_task(multiproc._run_child(spec, self.conn))
        await self.until(lambda: bool(FakeApp.made) and "run" in FakeApp.made[0].calls)
        return self.app

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not condition():
                await asyncio.sleep(0)

    async def finish(self) -> int:
        assert self.task is not None
        async with asyncio.timeout(WAIT_S):
            return await self.task

    def received(self) -> list[tuple[Any, ...]]:
        """Every message the child sent that the parent has not read yet."""
        messages = []
        while self.parent.poll():
            messages.append(self.parent.recv())
        return messages

    def still_read(self) -> bool:
        """Whether the child's loop still reads its end of the pipe (and stops reading it now)."""
        return asyncio.get_running_loop().remove_reader(self.conn.fileno())


@pytest.fixture
def journal(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The app and the metrics server faked; the journal says when the metrics were served."""
    journal: list[Any] = []

    @contextlib.asynccontextmanager
    async def serve(port: int, app: FakeApp) -> AsyncIterator[None]:
        journal.append(("serving", port, app, list(app.calls)))
        yield
        journal.append(("served", list(app.calls)))

    monkeypatch.setattr(FakeApp, "made", [])
    monkeypatch.setattr(FakeApp, "ending", Ending())
    monkeypatch.setattr(multiproc, "ProcessorApp", FakeApp)
    monkeypatch.setattr(multiproc, "serve_processor_metrics", serve)
    return journal


@pytest.fixture
async def child(journal: list[Any], caplog: pytest.LogCaptureFixture) -> AsyncIterator[Child]:
    caplog.set_level(logging.INFO, LOGGER)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    child = Child(journal)
    yield child
    if child.task is not None and not child.task.done():
        child.task.cancel()
        await asyncio.gather(child.task, return_exceptions=True)
    loop = asyncio.get_running_loop()
    for sig, handler in handlers.items():  # _run_child's handlers off this loop
        loop.remove_signal_handler(sig)
        signal.signal(sig, handler)
    child.parent.close()
    child.conn.close()


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]


# ------------------------------------------------------------------------------------- ready, stop


async def test_ready_once_every_partition_restored_then_the_result_on_stop(
    child: Child, caplog: pytest.LogCaptureFixture
) -> None:
    app = await child.start()
    assert (app.config, app.partitions, app.group, app.handle_signals) == (CONFIG, (0, 1), False, False)
    assert app.fold_factory(5) == ("fold", CONFIG.topics, 5)  # the --fold factory, on the config's topics
    app.report_ready(0)
    assert child.received() == []
    app.report_ready(1)
    assert child.received() == [("ready",)]
    app.report_ready(0)  # a later term of partition 0: "ready" was said once
    assert child.received() == []
    child.parent.send(STOP)
    assert await child.finish() == 0
    assert child.received() == [("result", {0: "stopped", 1: "stopped"})]
    assert app.calls == ["run", "stop"]
    assert child.journal == [("serving", 0, app, []), ("served", ["run", "stop"])]
    assert not child.still_read()
    assert logged(caplog) == [("INFO", "stop from the parent: committing open batches and stopping")]


async def test_ready_waits_for_the_partition_restored_last(child: Child) -> None:
    app = await child.start()
    app.report_ready(1)
    assert child.received() == []
    app.report_ready(0)
    assert child.received() == [("ready",)]


async def test_the_metrics_are_served_on_the_childs_port(child: Child) -> None:
    app = await child.start(replace(SPEC, metrics_port=9102), Ending(at_once=True))
    assert await child.finish() == 0
    assert child.journal == [("serving", 9102, app, []), ("served", ["run"])]


async def test_a_second_stop_is_obeyed_but_not_logged_again(
    child: Child, caplog: pytest.LogCaptureFixture
) -> None:
    app = await child.start()
    child.parent.send(STOP)
    child.parent.send(STOP)
    await child.until(lambda: app.calls.count("stop") == 2)
    assert await child.finish() == 0
    assert app.calls == ["run", "stop", "stop"]
    assert logged(caplog) == [("INFO", "stop from the parent: committing open batches and stopping")]


async def test_cancel_stops_without_committing(child: Child, caplog: pytest.LogCaptureFixture) -> None:
    app = await child.start()
    child.parent.send(CANCEL)
    assert await child.finish() == 0
    assert app.calls == ["run", "cancel"]
    assert child.received() == [("result", {0: "stopped", 1: "stopped"})]
    assert logged(caplog) == [("WARNING", "cancel from the parent: stopping without committing open batches")]


async def test_the_parents_end_closing_stops_the_child_once(
    child: Child, caplog: pytest.LogCaptureFixture
) -> None:
    """EOF: the parent is gone. The child stops cleanly, reads its pipe no more (else the loop would spin
    on the EOF), and its result, which nobody can read, is dropped without an error."""
    app = await child.start()
    child.parent.close()
    assert await child.finish() == 0
    assert app.calls == ["run", "stop"]
    assert not child.still_read()
    assert logged(caplog) == [("INFO", "the parent process is gone: committing open batches and stopping")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_its_own_signal_stops_it_cleanly(
    child: Child, caplog: pytest.LogCaptureFixture, sig: signal.Signals
) -> None:
    app = await child.start()
    os.kill(os.getpid(), sig)
    assert await child.finish() == 0
    assert app.calls == ["run", "stop"]
    assert child.received() == [("result", {0: "stopped", 1: "stopped"})]
    assert logged(caplog) == [("INFO", f"received {sig.name}: committing open batches and stopping")]


# ---------------------------------------------------------------------------------------- endings


@pytest.mark.parametrize(
    ("partitions", "status", "group"),
    [((0, 1), EXIT_FENCED, False), (None, 0, True)],
    ids=["static", "member"],
)
async def test_fenced_partitions_end_a_static_child_as_fenced_a_member_as_ok(
    child: Child, partitions: tuple[int, ...] | None, status: int, group: bool
) -> None:
    """A member's fenced partitions went to another member: nothing for the parent to report."""
    exits = {0: FENCED, 1: STOPPED}
    app = await child.start(replace(SPEC, partitions=partitions), Ending(exits, at_once=True))
    assert await child.finish() == status
    assert (app.partitions, app.group) == (partitions, group)
    assert child.received() == [("result", {0: "fenced", 1: "stopped"})]


@pytest.mark.parametrize(
    ("error", "traceback"),
    [(ProcessorError("the fold refused its state"), False), (ValueError("a bug"), True)],
    ids=["turnledger-error", "bug"],
)
async def test_a_failure_is_reported_with_exit_1(
    child: Child, caplog: pytest.LogCaptureFixture, error: Exception, traceback: bool
) -> None:
    """Only an error that is not turnledger's own is logged with its traceback; the parent gets its words."""
    await child.start(ending=Ending(error=error, at_once=True))
    assert await child.finish() == EXIT_FAILED
    assert child.received() == [("failed", EXIT_FAILED, str(error))]
    assert not child.still_read()
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None and r.exc_info[1]) for r in caplog.records]
    assert lines == ([("ERROR", "processor failed", error)] if traceback else [])


@pytest.mark.parametrize("refusal", list(REFUSALS))
async def test_a_refusal_is_reported_as_one_with_exit_2(
    child: Child, caplog: pytest.LogCaptureFixture, refusal: str
) -> None:
    """Whatever one process ends with in one line (`cli_refusals.PROCESS_ENDINGS`): who says it and its
    words, as a refusal the parent says in that line too, not as a failure of the child."""
    error = REFUSALS[refusal]()
    await child.start(ending=Ending(error=error, at_once=True))
    assert await child.finish() == 2
    assert child.received() == [("refused", speaker(refusal), str(error))]
    assert not child.still_read()
    assert caplog.records == []


def test_a_refusal_of_every_family_one_process_says_in_one_line_is_tried() -> None:
    """`REFUSALS` (the fakes) holds one of each family of `cli_refusals.PROCESS_ENDINGS`, and `speaker`
    names who says it."""
    said = {
        family: refusals.speaker for refusals in cli_refusals.PROCESS_ENDINGS for family in refusals.families
    }
    faked = {family: speaker(name) for name, make in REFUSALS.items() for family in type(make()).__mro__}
    assert {family: faked.get(family) for family in said} == said


async def test_a_fold_the_child_cannot_load_is_reported_as_a_failure(
    child: Child, caplog: pytest.LogCaptureFixture
) -> None:
    """The child imports the `--fold` spec again: when that fails, the parent gets its words, exit 1."""
    spec = replace(SPEC, fold="tests.unit.multiproc_fakes:no_such_fold")
    async with asyncio.timeout(WAIT_S):
        assert await multiproc._run_child(spec, child.conn) == EXIT_FAILED
    said = (
        "cannot load 'tests.unit.multiproc_fakes:no_such_fold': module 'tests.unit.multiproc_fakes' has no "
        "attribute 'no_such_fold'"
    )
    assert (child.received(), FakeApp.made, caplog.records) == ([("failed", EXIT_FAILED, said)], [], [])


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (REFUSALS["limits"](), 2, ("refused", "turnledger", str(REFUSALS["limits"]()))),
        (ValueError("a bug in the app"), EXIT_FAILED, ("failed", EXIT_FAILED, "a bug in the app")),
    ],
    ids=["refusal", "bug"],
)
async def test_an_app_that_cannot_be_built_is_reported_as_its_run_is(
    child: Child,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
    status: int,
    message: tuple[Any, ...],
) -> None:
    def refuse(*args: object, **kwargs: object) -> FakeApp:
        raise error

    monkeypatch.setattr(multiproc, "ProcessorApp", refuse)
    async with asyncio.timeout(WAIT_S):
        assert await multiproc._run_child(SPEC, child.conn) == status
    assert child.received() == [message]
    assert not child.still_read()
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None and r.exc_info[1]) for r in caplog.records]
    assert lines == ([("ERROR", "processor failed", error)] if status == EXIT_FAILED else [])


async def test_a_failure_the_parent_cannot_hear_still_sets_the_status(child: Child) -> None:
    await child.start(ending=Ending(error=ValueError("a bug")))
    child.parent.close()
    assert await child.finish() == EXIT_FAILED


# ------------------------------------------------------------------------------------- child_main


def bare_root_logger(monkeypatch: pytest.MonkeyPatch) -> logging.Logger:
    """The root logger with no handler, as a spawned child starts with (pytest adds its own as each test
    starts); restored after the test."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    return root


@pytest.mark.parametrize(("exits", "status"), [({0: STOPPED}, 0), ({0: FENCED}, EXIT_FENCED)])
def test_child_main_logs_under_its_name_and_exits_with_the_childs_status(
    journal: list[Any], monkeypatch: pytest.MonkeyPatch, exits: dict[int, ProcessorExit], status: int
) -> None:
    root_logging = bare_root_logger(monkeypatch)
    FakeApp.ending = Ending(exits, at_once=True)
    parent, conn = mp.get_context("spawn").Pipe()
    with pytest.raises(SystemExit) as exited:
        multiproc.child_main(replace(SPEC, partitions=(0,), log_level="debug"), conn)
    assert exited.value.code == status
    assert conn.closed
    assert parent.recv() == ("result", {0: exits[0].value})
    with pytest.raises(EOFError):  # its end closed: nothing more comes
        parent.recv()
    assert root_logging.level == logging.DEBUG
    (handler,) = root_logging.handlers
    assert handler.formatter is not None
    assert handler.formatter._fmt == "%(asctime)s %(levelname)s [process 1/2] %(name)s: %(message)s"
    parent.close()
