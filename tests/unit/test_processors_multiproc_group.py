"""`ProcessGroup`'s supervision with real children: each test spawns its children as `run()` does (the
spawn context, one pipe each) over `multiproc_fakes.scripted_child`, which plays a script instead of a
processor, and pins the outcome whole: what `run()` returns or raises (message and exit status), which
child was told what, the log lines, the exit statuses, and what is left once `run()` returned.

The tests wait on what the group sees (every message and exit it handles wakes them), never on time."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from functools import partial
from typing import Any

import pytest

from tests.unit import multiproc_fakes
from tests.unit.multiproc_fakes import FOLD, Step, child_main_with_fake_app, scripted_child
from turnledger.processors.config import ProcessorConfig, ProcessorExit
from turnledger.processors.errors import (
    EXIT_FAILED,
    EXIT_FENCED,
    EXIT_USAGE,
    ChildRefusedError,
    ProcessesFailedError,
)
from turnledger.processors.multiproc import CANCEL, STOP, ChildSpec, ProcessGroup, _Child

WAIT_S = 120.0
"""How long a condition may take to hold before the test fails: a deadline, not a wait (spawning a child
takes ~0.5 s on a quiet machine, and past 10 s on 2 cores shared with mutation runs, where 10 s failed)."""
LOGGER = "turnledger.processors.multiproc"
CONFIG = ProcessorConfig(bootstrap="kafka.test:9092")
STOPPED, FENCED = ProcessorExit.STOPPED, ProcessorExit.FENCED
READY: Step = ("send", ("ready",))


def result(**exits: str) -> Step:
    """("send", ("result", {partition: exit})) from `p0="stopped", ...`."""
    return ("send", ("result", {int(p[1:]): how for p, how in exits.items()}))


class Watched:
    """A group whose every handled message and exit wakes `until`; `calls` counts `_on_message` per child."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group
        self.changed = asyncio.Event()
        self.calls: dict[int, int] = {}
        self.task: asyncio.Task[dict[int, ProcessorExit]] | None = None
        on_message, on_exit = group._on_message, group._on_exit

        def message(child: _Child) -> None:
            self.calls[child.spec.index] = self.calls.get(child.spec.index, 0) + 1
            on_message(child)
            self.changed.set()

        def exited(child: _Child) -> None:
            on_exit(child)
            self.changed.set()

        group._on_message = message  # type: ignore[method-assign]
        group._on_exit = exited  # type: ignore[method-assign]

    def start(self, **kwargs: Any) -> asyncio.Task[dict[int, ProcessorExit]]:
        self.task = asyncio.create_task(self.group.run(**kwargs))
        self.task.add_done_callback(lambda _: self.changed.set())
        return self.task

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not condition():
                if self.task is not None and self.task.done():
                    pytest.fail(f"run() ended before the condition held: {self.task!r}")
                self.changed.clear()
                await self.changed.wait()

    async def finish(self) -> dict[int, ProcessorExit]:
        assert self.task is not None
        async with asyncio.timeout(WAIT_S):
            return await self.task

    def child(self, index: int) -> _Child:
        return self.group.children[index - 1]

    def messages(self, index: int) -> list[tuple[Any, ...]]:
        """What child `index` sent so far (nothing before it started)."""
        children = self.group.children
        return children[index - 1].messages if index <= len(children) else []

    def exited(self, index: int) -> bool:
        children = self.group.children
        return index <= len(children) and children[index - 1].exited.done()

    def pid(self, index: int) -> int | None:
        return self.child(index).process.pid


@pytest.fixture
async def watch(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Callable[..., Watched]]:
    """`watch(scripts, partitions=[0, 1], processes=2, fold=FOLD, **kwargs)`: a watched group of scripted
    children (without scripts, of `target`, by default `child_main`). No child outlives the test, whatever
    it asserted."""
    caplog.set_level(logging.INFO, LOGGER)
    made: list[Watched] = []

    def make(
        scripts: Mapping[int, Sequence[Step]] | None = None,
        partitions: Sequence[int] | None = (0, 1),
        processes: int = 2,
        fold: str = FOLD,
        **kwargs: Any,
    ) -> Watched:
        if scripts is not None:
            kwargs["target"] = partial(scripted_child, scripts)
        watched = Watched(ProcessGroup(CONFIG, fold, partitions, processes, **kwargs))
        made.append(watched)
        return watched

    yield make
    for watched in made:
        if watched.task is not None and not watched.task.done():
            watched.task.cancel()
            await asyncio.gather(watched.task, return_exceptions=True)
        for child in watched.group.children:
            if child.process.exitcode is None:
                child.process.kill()
                child.process.join()


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def started(watched: Watched, owned: Sequence[str]) -> list[tuple[str, str]]:
    count = len(owned)
    return [
        ("INFO", f"started process {i}/{count} (pid {watched.pid(i)}, {what})")
        for i, what in enumerate(owned, start=1)
    ]


def described(watched: Watched, index: int, what: str) -> str:
    return f"process {index}/{len(watched.group.children)} (pid {watched.pid(index)}, {what})"


# ------------------------------------------------------------------------------------ clean endings


@pytest.mark.parametrize(("metrics_port", "ports"), [(0, (0, 0)), (9100, (9101, 9102))])
async def test_children_get_their_share_ready_and_commit_on_stop(
    watch: Callable[..., Watched],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    metrics_port: int,
    ports: tuple[int, int],
) -> None:
    """Each child is spawned with its spec (its round-robin share, its metrics port, its name), SIGINT
    and SIGTERM ignored until it installs its own handlers; `ready` once all said so; `stop()` tells
    every child "stop" and `run()` returns every partition's exit. Nothing is left behind."""
    monkeypatch.setattr(multiproc_fakes, "FRESH", False)
    script = [("fresh",), ("signals",), ("spec",), READY, ("recv",)]
    watched = watch(
        {1: [*script, result(p0="stopped", p2="fenced")], 2: [*script, result(p1="stopped")]},
        partitions=[0, 1, 2],
        log_level="DEBUG",
        metrics_port=metrics_port,
    )
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    watched.start(handle_signals=False)
    await watched.until(watched.group.ready.is_set)
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers
    pipes = [child.conn.fileno() for child in watched.group.children]
    watched.group.stop()
    assert await watched.finish() == {0: STOPPED, 2: FENCED, 1: STOPPED}
    specs = [
        ChildSpec(1, 2, CONFIG, FOLD, (0, 2), "DEBUG", ports[0]),
        ChildSpec(2, 2, CONFIG, FOLD, (1,), "DEBUG", ports[1]),
    ]
    ignored = ("signals", [signal.SIG_IGN, signal.SIG_IGN])
    for index, spec in enumerate(specs, start=1):
        assert watched.messages(index) == [
            ("fresh", True),  # spawned, not forked
            ignored,
            ("spec", spec, f"turnledger-process {index}/2"),
            ("ready",),
            ("got", STOP),
            ("result", {0: "stopped", 2: "fenced"} if index == 1 else {1: "stopped"}),
        ]
        child = watched.child(index)
        assert child.process.exitcode == 0
        assert child.conn.closed
        loop = asyncio.get_running_loop()
        assert not loop.remove_reader(child.process.sentinel)
        assert not loop.remove_reader(pipes[index - 1])
    assert logged(caplog) == [
        *started(watched, ["partitions [0, 2]", "partitions [1]"]),
        ("INFO", "all 2 processes ready"),
    ]


async def test_group_members_own_no_partition_list(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    script = [("spec",), READY, ("recv",)]
    watched = watch({1: [*script, result(p3="stopped")], 2: [*script, result(p5="stopped")]}, None, 2)
    watched.start(handle_signals=False)
    await watched.until(watched.group.ready.is_set)
    watched.group.stop()
    assert await watched.finish() == {3: STOPPED, 5: STOPPED}
    assert [watched.messages(i)[0][1].partitions for i in (1, 2)] == [None, None]
    assert logged(caplog) == [
        *started(watched, ["group member", "group member"]),
        ("INFO", "all 2 processes ready"),
    ]


async def test_ready_once_every_child_said_so_and_logged_once(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    watched = watch(
        {
            1: [READY, ("recv",), READY, result(p0="stopped")],  # says it twice
            2: [("recv",), READY, result(p1="stopped")],  # only once stopped
        }
    )
    watched.start(handle_signals=False)
    await watched.until(lambda: ("ready",) in watched.messages(1))
    assert not watched.group.ready.is_set()
    watched.group.stop()
    await watched.until(lambda: ("ready",) in watched.messages(2))
    assert watched.group.ready.is_set()
    assert await watched.finish() == {0: STOPPED, 1: STOPPED}
    assert watched.messages(1) == [("ready",), ("got", STOP), ("ready",), ("result", {0: "stopped"})]
    assert logged(caplog) == [
        *started(watched, ["partitions [0]", "partitions [1]"]),
        ("INFO", "all 2 processes ready"),
    ]


async def test_a_child_that_stopped_on_its_own_signal_stops_the_others(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    watched = watch({1: [READY, result(p0="stopped")], 2: [READY, ("recv",), result(p1="stopped")]})
    watched.start(handle_signals=False)
    assert await watched.finish() == {0: STOPPED, 1: STOPPED}
    assert watched.messages(2) == [("ready",), ("got", STOP), ("result", {1: "stopped"})]
    lines = logged(caplog)[2:]
    lines.remove(("INFO", "all 2 processes ready"))  # before or after: child 1 may end before 2 is ready
    assert lines == [
        ("WARNING", f"{described(watched, 1, 'partitions [0]')} stopped on its own; stopping the others")
    ]


async def test_a_fenced_child_ends_alone_and_the_others_go_on(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    """Its partitions were taken over, as a fenced partition ends alone in one process: the other child is
    told nothing until the test cancels, and the fenced exits are results, not a failure."""
    watched = watch(
        {  # child 1's result is its last message, not its second one
            1: [("spec",), READY, result(p0="fenced"), ("exit", EXIT_FENCED)],
            2: [READY, ("recv",), result(p1="stopped")],
        }
    )
    watched.start(handle_signals=False)
    await watched.until(lambda: watched.exited(1))
    for _ in range(20):  # let the supervisor judge it
        await asyncio.sleep(0)
    watched.group.cancel()
    assert await watched.finish() == {0: FENCED, 1: STOPPED}
    assert watched.messages(2) == [("ready",), ("got", CANCEL), ("result", {1: "stopped"})]
    assert watched.child(1).process.exitcode == EXIT_FENCED
    assert logged(caplog)[2:] in ([], [("INFO", "all 2 processes ready")])


@pytest.mark.parametrize(
    ("partitions", "first", "status", "exits"),
    [
        ([0, 1, 2], result(p0="fenced", p2="stopped"), EXIT_FENCED, {0: FENCED, 2: STOPPED, 1: STOPPED}),
        (None, result(p0="fenced"), 0, {0: FENCED, 1: STOPPED}),
    ],
    ids=["static", "member"],
)
async def test_a_child_stopped_on_its_own_after_a_partition_was_fenced_stops_the_others(
    watch: Callable[..., Watched],
    caplog: pytest.LogCaptureFixture,
    partitions: list[int] | None,
    first: Step,
    status: int,
    exits: dict[int, ProcessorExit],
) -> None:
    """A static child's exit status says fenced, but only partition 0 was: 2 stopped on the child's own
    signal, so it is no longer processed and the group stops, as when a child stops on its own with
    nothing fenced. A group member whose partitions were all fenced ended on its own signal too (the
    group would have assigned it others)."""
    watched = watch(
        {1: [READY, first, ("exit", status)], 2: [READY, ("recv",), result(p1="stopped")]},
        partitions=partitions,
    )
    watched.start(handle_signals=False)
    assert await watched.finish() == exits
    assert watched.messages(2) == [("ready",), ("got", STOP), ("result", {1: "stopped"})]
    assert watched.child(1).process.exitcode == status
    lines = logged(caplog)[2:]
    lines.remove(("INFO", "all 2 processes ready"))
    owned = "partitions [0, 2]" if partitions else "group member"
    assert lines == [("WARNING", f"{described(watched, 1, owned)} stopped on its own; stopping the others")]


@pytest.mark.parametrize("early", [STOP, CANCEL])
async def test_a_stop_or_cancel_before_the_children_started_reaches_them_first(
    watch: Callable[..., Watched], early: str
) -> None:
    script = [("recv",), result(p0="stopped")]
    watched = watch({1: script, 2: script}, partitions=[0], processes=1)
    (watched.group.stop if early == STOP else watched.group.cancel)()
    watched.start(handle_signals=False)
    assert await watched.finish() == {0: STOPPED}
    assert watched.messages(1) == [("got", early), ("result", {0: "stopped"})]


async def test_the_first_signal_commits_the_second_cancels(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    """Through the loop's own signal handlers, which `run()` installs (the spawn does not disturb them)
    and removes."""
    script = [READY, ("recv",), ("recv",)]
    watched = watch({1: [*script, result(p0="stopped")], 2: [*script, result(p1="stopped")]})
    watched.start()
    await watched.until(watched.group.ready.is_set)
    os.kill(os.getpid(), signal.SIGTERM)
    await watched.until(lambda: all(("got", STOP) in watched.messages(i) for i in (1, 2)))
    assert not watched.group._cancelled
    os.kill(os.getpid(), signal.SIGINT)
    assert await watched.finish() == {0: STOPPED, 1: STOPPED}
    for index in (1, 2):
        assert watched.messages(index)[1:3] == [("got", STOP), ("got", CANCEL)]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the loop's handlers removed
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert logged(caplog)[2:] == [
        ("INFO", "all 2 processes ready"),
        ("INFO", "received SIGTERM: asking the processes to commit their open batches and stop"),
        ("WARNING", "received SIGINT again: cancelling the children without committing"),
    ]


# ------------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("code", "other", "status"),
    [
        (EXIT_FAILED, "stopped", EXIT_FAILED),
        (EXIT_USAGE, "fenced", EXIT_USAGE),
    ],
)
async def test_a_failed_child_stops_the_others_and_fails_the_group_with_the_worst_status(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture, code: int, other: str, status: int
) -> None:
    watched = watch(
        {
            1: [("send", ("failed", code, "the fold broke")), ("exit", code)],
            2: [READY, ("recv",), result(p1=other), ("exit", EXIT_FENCED if other == "fenced" else 0)],
        }
    )
    watched.start(handle_signals=False)
    with pytest.raises(ProcessesFailedError) as raised:
        await watched.finish()
    failure = f"{described(watched, 1, 'partitions [0]')} failed: the fold broke"
    assert (str(raised.value), raised.value.exit_code) == (failure, status)
    assert watched.messages(2) == [("ready",), ("got", STOP), ("result", {1: other})]
    assert logged(caplog)[2:] == [("ERROR", failure), ("WARNING", "stopping the other processes")]


def died(watched: Watched, index: int, how: str, partitions: list[int] | None) -> str:
    if partitions is None:
        return (
            f"{described(watched, index, 'group member')} died unexpectedly: it {how}; its partitions move "
            "to the other members of the group after the session timeout, but the process group was "
            "stopped so that a supervisor restarts it whole"
        )
    return (
        f"{described(watched, index, f'partitions {partitions}')} died unexpectedly: it {how}; partitions "
        f"{partitions} are not processed, so the other processes were stopped too. Restart `turnledger "
        "process` to resume them exactly once from their last committed transaction"
    )


@pytest.mark.parametrize(
    ("script", "how", "static"),
    [
        ([READY, ("kill", signal.SIGKILL)], "was killed by SIGKILL", True),
        ([("exit", 7)], "exited with status 7 without reporting", True),  # before it was ready
        ([("exit", 7)], "exited with status 7 without reporting", False),
        ([READY], "exited with status 0 without reporting", True),
        (
            [READY, result(p0="stopped"), ("exit", EXIT_FAILED)],
            "exited with status 1 without reporting",
            True,
        ),
    ],
    ids=["killed", "before-ready", "before-ready-member", "exit-0-silent", "result-then-1"],
)
async def test_a_child_that_dies_stops_the_others_and_fails_the_group(
    watch: Callable[..., Watched],
    caplog: pytest.LogCaptureFixture,
    script: list[Step],
    how: str,
    static: bool,
) -> None:
    watched = watch(
        {1: script, 2: [READY, ("recv",), result(p1="stopped")]},
        partitions=[0, 1] if static else None,
    )
    watched.start(handle_signals=False)
    with pytest.raises(ProcessesFailedError) as raised:
        await watched.finish()
    failure = died(watched, 1, how, [0] if static else None)
    assert (str(raised.value), raised.value.exit_code) == (failure, EXIT_FAILED)
    assert watched.messages(2)[1:] == [("got", STOP), ("result", {1: "stopped"})]
    lines = [line for line in logged(caplog)[2:] if line != ("INFO", "all 2 processes ready")]
    assert lines == [("ERROR", failure), ("WARNING", "stopping the other processes")]


async def test_every_failure_is_named_and_the_last_one_stops_no_one(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    """The second child fails after the first stopped the group: both are named, in the order they
    ended, and no second "stopping the other processes"."""
    watched = watch(
        {1: [("exit", 5)], 2: [("recv",), ("send", ("failed", EXIT_USAGE, "no Kafka")), ("exit", 2)]}
    )
    watched.start(handle_signals=False)
    with pytest.raises(ProcessesFailedError) as raised:
        await watched.finish()
    first = died(watched, 1, "exited with status 5 without reporting", [0])
    second = f"{described(watched, 2, 'partitions [1]')} failed: no Kafka"
    assert (str(raised.value), raised.value.exit_code) == (f"{first}; {second}", EXIT_FAILED)
    assert logged(caplog)[2:] == [
        ("ERROR", first),
        ("WARNING", "stopping the other processes"),
        ("ERROR", second),
    ]


REFUSED = "KAFKA_SECURITY_PROTOCOL must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, not 'BOGUS'"
UNREACHABLE = "Kafka at kafka.test:9092 unreachable: no broker answered"


def refused(message: str, speaker: str = "turnledger") -> Step:
    return ("send", ("refused", speaker, message))


@pytest.mark.parametrize(
    ("second", "raised"),
    [
        (REFUSED, [REFUSED]),
        ("another refusal", [REFUSED, "another refusal"]),
        (None, [REFUSED]),
    ],
    ids=["the-same", "another", "the-other-stopped"],
)
async def test_children_that_failed_only_on_refusals_raise_them_as_one_process_would(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture, second: str | None, raised: list[str]
) -> None:
    """`ChildRefusedError` (said by `process` in the entry point's line, exit 2), with each message once;
    the log still names each child that failed."""
    ends: list[Step] = [READY, ("recv",), result(p1="stopped")]
    if second is not None:
        ends = [("recv",), refused(second), ("exit", 2)]
    watched = watch({1: [refused(REFUSED), ("exit", 2)], 2: ends})
    watched.start(handle_signals=False)
    with pytest.raises(ChildRefusedError) as raised_by:
        await watched.finish()
    error = raised_by.value
    line = f"turnledger: {'; '.join(raised)}"
    assert (error.speaker, error.messages, error.line) == ("turnledger", raised, line)
    said = [(1, REFUSED)] + ([] if second is None else [(2, second)])
    errors = [line for line in logged(caplog)[2:] if line[0] == "ERROR"]
    assert errors == [
        ("ERROR", f"{described(watched, i, f'partitions [{i - 1}]')} failed: {message}")
        for i, message in said
    ]


async def test_children_that_failed_only_on_what_process_says_itself_raise_it_in_its_line(
    watch: Callable[..., Watched],
) -> None:
    """Kafka unreachable for longer than --max-outage (or a topic that does not fit), which one process
    says as `turnledger process: ...`: each message once, in that line."""
    other = "Kafka at kafka.test:9092 unreachable: the group coordinator did not answer"
    watched = watch(
        {
            1: [refused(UNREACHABLE, "turnledger process"), ("exit", 2)],
            2: [("recv",), refused(other, "turnledger process"), ("exit", 2)],
            3: [("recv",), refused(UNREACHABLE, "turnledger process"), ("exit", 2)],
        },
        partitions=None,
        processes=3,
    )
    watched.start(handle_signals=False)
    with pytest.raises(ChildRefusedError) as raised:
        await watched.finish()
    error = raised.value
    assert (error.speaker, error.messages, error.line) == (
        "turnledger process",
        [UNREACHABLE, other],
        f"turnledger process: {UNREACHABLE}; {other}",
    )


@pytest.mark.parametrize(
    ("second", "said", "code"),
    [
        (("send", ("failed", EXIT_FAILED, "the fold broke")), "the fold broke", EXIT_FAILED),
        (refused(UNREACHABLE, "turnledger process"), UNREACHABLE, EXIT_USAGE),
    ],
    ids=["a-failure", "said-by-another"],
)
async def test_a_refusal_beside_a_failure_or_one_said_by_another_is_a_failure_of_the_group(
    watch: Callable[..., Watched], second: Step, said: str, code: int
) -> None:
    """One process would have ended on one of them only: the group names each child's, exit the worst."""
    watched = watch({1: [refused(REFUSED), ("exit", 2)], 2: [("recv",), second, ("exit", code)]})
    watched.start(handle_signals=False)
    with pytest.raises(ProcessesFailedError) as raised:
        await watched.finish()
    first = f"{described(watched, 1, 'partitions [0]')} failed: {REFUSED}"
    then = f"{described(watched, 2, 'partitions [1]')} failed: {said}"
    assert (str(raised.value), raised.value.exit_code) == (f"{first}; {then}", code)


# -------------------------------------------------------------------------------------- pipes, reaping


async def test_a_child_that_closed_its_pipe_is_no_longer_read(watch: Callable[..., Watched]) -> None:
    """EOF on a child's pipe takes its reader off the loop (else the loop would spin on it); telling that
    child to stop, while it lives, fails quietly (a broken pipe) and the others are told all the same."""
    watched = watch({1: [READY, ("close",)], 2: [READY, ("recv",), result(p1="stopped")]})
    watched.start(handle_signals=False)
    await watched.until(lambda: watched.calls.get(1, 0) >= 2)  # the ready, then the EOF
    for _ in range(20):
        await asyncio.sleep(0)
    assert watched.calls[1] == 2
    assert watched.child(1).process.exitcode is None
    watched.group.stop()
    await watched.until(lambda: watched.exited(2))
    assert watched.messages(2) == [("ready",), ("got", STOP), ("result", {1: "stopped"})]
    watched.child(1).process.kill()
    with pytest.raises(ProcessesFailedError) as raised:
        await watched.finish()
    assert str(raised.value) == died(watched, 1, "was killed by SIGKILL", [0])


async def test_a_child_killed_with_its_stop_unread_is_judged_by_its_exit(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    """A child that dies with the parent's "stop" unread in its pipe resets the connection: the parent's
    read of that pipe fails (ConnectionResetError), quietly, and the child is judged all the same."""
    watched = watch({1: [READY, ("pause",)], 2: [READY, ("recv",), result(p1="stopped")]})
    watched.start(handle_signals=False)
    await watched.until(watched.group.ready.is_set)
    watched.group.stop()
    await watched.until(lambda: watched.exited(2))
    watched.child(1).process.kill()
    with pytest.raises(ProcessesFailedError) as raised:
        await watched.finish()
    failure = died(watched, 1, "was killed by SIGKILL", [0])
    assert (str(raised.value), raised.value.exit_code) == (failure, EXIT_FAILED)
    assert watched.messages(1) == [("ready",)]
    assert logged(caplog)[3:] == [("ERROR", failure)]


async def test_run_cancelled_stops_the_children_and_kills_one_that_does_not_stop(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    watched = watch({1: [READY, ("expect", STOP)], 2: [READY, ("echo until eof",)]}, stop_timeout_s=0.5)
    task = watched.start(handle_signals=False)
    await watched.until(watched.group.ready.is_set)
    fds = [fd for child in watched.group.children for fd in (child.process.sentinel, child.conn.fileno())]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watched.finish()
    assert [watched.child(i).process.exitcode for i in (1, 2)] == [0, -signal.SIGKILL]
    loop = asyncio.get_running_loop()
    assert [loop.remove_reader(fd) for fd in fds] == [False] * 4  # run() took its readers off the loop
    assert all(watched.child(i).conn.closed for i in (1, 2))
    assert logged(caplog)[3:] == [
        ("ERROR", f"{described(watched, 2, 'partitions [1]')} did not stop within 0.5 s; killing it")
    ]


async def test_run_cancelled_lets_every_child_stop_in_time(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    watched = watch({1: [READY, ("expect", STOP)], 2: [READY, ("expect", STOP)]}, stop_timeout_s=WAIT_S)
    task = watched.start(handle_signals=False)
    await watched.until(watched.group.ready.is_set)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watched.finish()
    assert [watched.child(i).process.exitcode for i in (1, 2)] == [0, 0]
    assert logged(caplog)[3:] == []


@pytest.mark.parametrize("partitions", [None, [0, 1]])
def test_a_group_of_no_process_is_refused(partitions: list[int] | None) -> None:
    with pytest.raises(ValueError, match=r"^processes must be at least 1, got 0$"):
        ProcessGroup(CONFIG, FOLD, partitions, 0)


def test_the_default_target_and_stop_timeout() -> None:
    from turnledger.processors.multiproc import child_main

    group = ProcessGroup(CONFIG, FOLD, [0, 1], 2)
    assert (group.target, group.stop_timeout_s) == (child_main, 30.0)
    assert (group.config, group.fold, group.log_level, group.metrics_port) == (CONFIG, FOLD, "INFO", 0)


# ------------------------------------------------------------------------------ with child_main itself


async def test_child_main_over_the_pipe_ready_stop_and_its_own_signal(
    watch: Callable[..., Watched], caplog: pytest.LogCaptureFixture
) -> None:
    """The real child entry (`child_main`, `_run_child`) over a fake app in spawned children: both report
    ready; a SIGTERM to one child stops it cleanly on its own, and the group stops the other."""
    watched = watch(target=child_main_with_fake_app, partitions=[0, 1, 2])
    watched.start(handle_signals=False)
    await watched.until(watched.group.ready.is_set)
    pid = watched.pid(1)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    assert await watched.finish() == {0: STOPPED, 2: STOPPED, 1: STOPPED}
    assert watched.messages(1) == [("ready",), ("result", {0: "stopped", 2: "stopped"})]
    assert watched.messages(2) == [("ready",), ("result", {1: "stopped"})]
    assert [watched.child(i).process.exitcode for i in (1, 2)] == [0, 0]
    assert logged(caplog)[2:] == [
        ("INFO", "all 2 processes ready"),
        ("WARNING", f"{described(watched, 1, 'partitions [0, 2]')} stopped on its own; stopping the others"),
    ]


MODULE = "tests.unit.multiproc_fakes"


async def test_a_fold_only_the_parent_can_load_fails_the_child_with_its_words(
    watch: Callable[..., Watched], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The real child entry in a spawned child, whose import of the `--fold` spec fails where the parent's
    did not (here: an attribute only this process has): the child reports the failure, exit 1, and the
    group names it, as it names a failure in the run."""
    monkeypatch.setattr(multiproc_fakes, "fold_in_this_process_only", multiproc_fakes.fold, raising=False)
    spec = f"{MODULE}:fold_in_this_process_only"
    watched = watch(partitions=[0], processes=1, fold=spec)
    watched.start(handle_signals=False)
    with pytest.raises(ProcessesFailedError) as raised:
        await watched.finish()
    said = f"cannot load {spec!r}: module {MODULE!r} has no attribute 'fold_in_this_process_only'"
    failure = f"{described(watched, 1, 'partitions [0]')} failed: {said}"
    assert (str(raised.value), raised.value.exit_code) == (failure, EXIT_FAILED)
    assert (watched.messages(1), watched.child(1).process.exitcode) == ([("failed", EXIT_FAILED, said)], 1)
    assert logged(caplog)[1:] == [("ERROR", failure)]
