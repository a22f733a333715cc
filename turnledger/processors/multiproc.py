"""`turnledger process --processes N`: N child processes, as group members or with partitions dealt out.

The fold is pure Python, so one process, which runs every partition on one asyncio loop,
uses one core. Partitions are the unit of parallelism. With group ownership (the default) each
of N children (multiprocessing, spawn) runs the ordinary `ProcessorApp` as one more member of
the processor's consumer group, which spreads the partitions over them. With static partitions
the parent splits its partitions round-robin over the children. Either way the config is the
same, hence the same per-partition transactional ids, fencing and exactly-once as a single
process. Children share nothing.

Control goes over one pipe per child. The parent's first SIGTERM/SIGINT becomes "stop"
(each child commits its open batches and exits), the second "cancel" (each stops at once).
A child also stops cleanly on a SIGTERM/SIGINT of its own (Ctrl-C reaches the whole
foreground process group, systemd signals the whole cgroup), but only the parent escalates
to "cancel", so a signal delivered both ways still counts once. A child whose parent is gone
sees EOF on its pipe and stops cleanly.

Failures: a child that fails, or dies (killed, or exits without reporting), makes the parent
stop the others and raise `ProcessesFailedError` naming the partitions, as one partition's
failure stops a `ProcessorApp`. A child whose partitions were all fenced ends alone, as fenced
partitions do in one process; a child that stopped on its own signal stops the others cleanly.
A child reports an error in building its app (it imports the `--fold` spec again) as one in its run.
What one process ends with in one line, exit 2 (`turnledger.cli_refusals.PROCESS_ENDINGS`: a Kafka
setting that cannot work, Kafka refusing our login, a metrics port taken, Kafka unreachable for longer
than --max-outage, a topic that does not fit) a child reports as such, with who says it: when every
failed child met one said by the same, the parent raises `ChildRefusedError` with their messages,
which `process` says as one process says it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from turnledger import cli_logging
from turnledger.cli_refusals import EXIT_REFUSED, refusals_of
from turnledger.errors import TurnledgerError
from turnledger.processors.app import ProcessorApp
from turnledger.processors.config import ProcessorConfig, ProcessorExit
from turnledger.processors.errors import (
    EXIT_FAILED,
    EXIT_FENCED,
    EXIT_USAGE,
    ChildRefusedError,
    ProcessesFailedError,
)
from turnledger.processors.fold_spec import load_fold_factory
from turnledger.processors.health import serve_processor_metrics
from turnledger.processors.partition import PartitionProcessor

log = logging.getLogger(__name__)

EXIT_OK = 0
SEVERITY = {EXIT_OK: 0, EXIT_FENCED: 1, EXIT_USAGE: 2, EXIT_FAILED: 3}
"""Worst first when several children end differently: failed > usage/Kafka unreachable > fenced > ok."""

STOP, CANCEL = "stop", "cancel"


def split_round_robin(partitions: Sequence[int], processes: int) -> list[list[int]]:
    """Partitions dealt in order over min(processes, len(partitions)) groups (at most one process per
    partition): [0, 1, 2, 3, 4] over 2 → [0, 2, 4], [1, 3]."""
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    n = min(processes, len(partitions))
    return [list(partitions[i::n]) for i in range(n)]


def worst_exit(codes: Sequence[int]) -> int:
    return max(codes, key=lambda c: SEVERITY.get(c, SEVERITY[EXIT_FAILED]), default=EXIT_OK)


@dataclass(frozen=True, slots=True)
class ChildSpec:
    index: int  # 1-based, for logs
    count: int
    config: ProcessorConfig
    fold: str  # module:attr, loaded in the child
    partitions: tuple[int, ...] | None
    """None: a member of the consumer group."""
    log_level: str
    metrics_port: int = 0
    """This child's /metrics port (0: off)."""

    @property
    def name(self) -> str:
        return f"process {self.index}/{self.count}"


# ----------------------------------------------------------------------------------------- child side


def child_main(spec: ChildSpec, conn: Connection) -> None:
    """Entry point of a child: run `ProcessorApp` on `spec.partitions`; the exit status is the CLI's."""
    cli_logging.configure(spec.log_level, f"%(asctime)s %(levelname)s [{spec.name}] %(name)s: %(message)s")
    code = asyncio.run(_run_child(spec, conn))
    conn.close()
    sys.exit(code)


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    with contextlib.suppress(OSError):
        conn.send(message)


async def _run_child(spec: ChildSpec, conn: Connection) -> int:
    """Run the child's app and tell the parent how it ended; the exit status. An error in building the
    app (its fold is imported again here) is reported as one in its run is."""
    try:
        results = await _run_app(spec, conn)
    except Exception as exc:
        return _report(conn, exc)
    fenced = spec.partitions is not None and any(how is ProcessorExit.FENCED for how in results.values())
    _send(conn, ("result", {p: how.value for p, how in results.items()}))
    return EXIT_FENCED if fenced else EXIT_OK


def _report(conn: Connection, error: Exception) -> int:
    """Tell the parent what ended the child: a refusal with who says it (`cli_refusals.refusals_of`),
    else a failure; the exit status."""
    if (refusals := refusals_of(error)) is not None:
        _send(conn, ("refused", refusals.speaker, str(error)))
        return EXIT_REFUSED
    if not isinstance(error, TurnledgerError):
        log.exception("processor failed", exc_info=error)
    _send(conn, ("failed", EXIT_FAILED, str(error)))
    return EXIT_FAILED


async def _run_app(spec: ChildSpec, conn: Connection) -> dict[int, ProcessorExit]:
    """Build the child's `ProcessorApp` and run it until it ends: stopped by the parent, by the parent's
    end of the pipe closing or by a signal of its own, or cancelled by the parent."""
    topics = spec.config.topics
    factory = load_fold_factory(spec.fold)
    told = [False]

    def on_ready(processor: PartitionProcessor) -> None:
        """ "ready" once every partition the child runs has restored its state (the first time)."""
        if not told[0] and all(
            app.processors[p].ready.is_set() or p == processor.partition for p in app.owned
        ):
            told[0] = True
            _send(conn, ("ready",))

    app = ProcessorApp(
        spec.config,
        lambda p: factory(topics, p),
        partitions=spec.partitions,
        on_ready=on_ready,
        group=spec.partitions is None,
    )
    stopped_by: list[str] = []

    def stop(reason: str) -> None:
        if not stopped_by:
            log.info("%s: committing open batches and stopping", reason)
            stopped_by.append(reason)
        app.stop()

    def on_message() -> None:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            stop("the parent process is gone")
            return
        if message == CANCEL:
            log.warning("cancel from the parent: stopping without committing open batches")
            app.cancel()
        else:
            stop("stop from the parent")

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, f"received {sig.name}")
    loop.add_reader(conn.fileno(), on_message)
    try:
        async with serve_processor_metrics(spec.metrics_port, app):
            return await app.run(handle_signals=False)
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(conn.fileno())


# ---------------------------------------------------------------------------------------- parent side


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """A child inherits ignored signals through exec and Python keeps them ignored, so a Ctrl-C or a
    group-wide SIGTERM during its start-up cannot kill it before it installed its own handlers (it
    learns of the stop through its pipe). The parent ignores them only for the spawn itself."""
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = [signal.signal(sig, signal.SIG_IGN) for sig in signals]
    try:
        yield
    finally:
        for sig, handler in zip(signals, previous, strict=True):
            signal.signal(sig, handler)


@dataclass(slots=True)
class _Child:
    spec: ChildSpec
    process: BaseProcess
    conn: Connection
    exited: asyncio.Future[None]
    messages: list[tuple[Any, ...]] = field(default_factory=list)

    def describe(self) -> str:
        owned = "group member" if self.spec.partitions is None else f"partitions {list(self.spec.partitions)}"
        return f"{self.spec.name} (pid {self.process.pid}, {owned})"

    def receive(self) -> None:
        with contextlib.suppress(EOFError, OSError):
            while self.conn.poll():
                self.messages.append(self.conn.recv())

    def refusal(self) -> tuple[str, str] | None:
        """Who says the refusal it reported (its last message), and its message, if it did."""
        last = self.messages[-1] if self.messages else ("none",)
        return (str(last[1]), str(last[2])) if last[0] == "refused" else None

    def all_fenced(self) -> bool:
        """Whether every partition of its result (its last message) was fenced. A child that stopped on its
        own signal after one of its partitions was fenced exits as fenced too, with the others stopped."""
        return all(how == ProcessorExit.FENCED.value for how in self.messages[-1][1].values())

    def tell(self, message: str) -> None:
        if self.process.exitcode is None:
            with contextlib.suppress(OSError):
                self.conn.send(message)


class ProcessGroup:
    """Runs `ProcessorApp`s in `processes` child processes: consumer-group members when `partitions` is
    None, else each on its round-robin share of `partitions` (capped to one process per partition)."""

    def __init__(
        self,
        config: ProcessorConfig,
        fold: str,
        partitions: Sequence[int] | None,
        processes: int,
        *,
        log_level: str = "INFO",
        metrics_port: int = 0,
        target: Callable[[ChildSpec, Connection], None] = child_main,
        stop_timeout_s: float = 30.0,
    ) -> None:
        """`metrics_port`: child k (1-based) serves its metrics on `metrics_port + k` (0: off). `target`:
        what each child runs (a test's fake); `stop_timeout_s`: how long `run()`, ending early, waits for
        a child it told to stop before it kills it."""
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self.groups: list[list[int] | None] = (
            [None] * processes if partitions is None else list(split_round_robin(partitions, processes))
        )
        self.config = config
        self.fold = fold
        self.log_level = log_level
        self.metrics_port = metrics_port
        self.target = target
        self.stop_timeout_s = stop_timeout_s
        self.ready = asyncio.Event()
        """Set once every child has restored its partitions' state and is about to process."""
        self.children: list[_Child] = []
        self._stopping = False
        self._cancelled = False
        self._signals = 0

    def stop(self) -> None:
        """Ask every child to commit its open batches and exit."""
        self._stopping = True
        for child in self.children:
            child.tell(STOP)

    def cancel(self) -> None:
        """Ask every child to stop at once, without committing."""
        self._stopping = self._cancelled = True
        for child in self.children:
            child.tell(CANCEL)

    async def run(self, *, handle_signals: bool = True) -> dict[int, ProcessorExit]:
        """Run until every child has exited; the partitions' exits, or `ProcessesFailedError`."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            self._start(loop)
            return await self._supervise()
        finally:
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            self._reap_all(loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        ctx = mp.get_context("spawn")
        count = len(self.groups)
        for index, partitions in enumerate(self.groups, start=1):
            owned = None if partitions is None else tuple(partitions)
            port = self.metrics_port + index if self.metrics_port else 0
            spec = ChildSpec(index, count, self.config, self.fold, owned, self.log_level, port)
            parent_conn, child_conn = ctx.Pipe()
            process = ctx.Process(target=self.target, args=(spec, child_conn), name=f"turnledger-{spec.name}")
            with _signals_ignored():
                process.start()
            child_conn.close()
            child = _Child(spec, process, parent_conn, loop.create_future())
            self.children.append(child)
            loop.add_reader(process.sentinel, self._on_exit, child)
            loop.add_reader(parent_conn.fileno(), self._on_message, child)
            log.info("started %s", child.describe())
        if self._stopping:
            (self.cancel if self._cancelled else self.stop)()

    def _on_message(self, child: _Child) -> None:
        before = len(child.messages)
        child.receive()
        if len(child.messages) == before:  # EOF: the child closed its end
            asyncio.get_running_loop().remove_reader(child.conn.fileno())
        if all(("ready",) in c.messages for c in self.children) and not self.ready.is_set():
            log.info("all %d processes ready", len(self.children))
            self.ready.set()

    def _on_exit(self, child: _Child) -> None:
        asyncio.get_running_loop().remove_reader(child.process.sentinel)
        child.process.join()
        child.receive()
        if not child.exited.done():
            child.exited.set_result(None)

    async def _supervise(self) -> dict[int, ProcessorExit]:
        results: dict[int, ProcessorExit] = {}
        codes: list[int] = []
        failures: list[str] = []
        refusals: list[tuple[str, str]] = []
        pending = {child.exited: child for child in self.children}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                child = pending.pop(future)
                code, failure = self._outcome(child, results)
                codes.append(code)
                if failure is not None:
                    failures.append(failure)
                    log.error("%s", failure)
                if (refusal := child.refusal()) is not None:
                    refusals.append(refusal)
                if not pending or self._stopping:
                    continue
                if failure is not None:
                    log.warning("stopping the other processes")
                    self.stop()
                elif code == EXIT_OK or not child.all_fenced():
                    log.warning("%s stopped on its own; stopping the others", child.describe())
                    self.stop()
                # else all its partitions were fenced: the others go on, as in one process
        speakers = {speaker for speaker, _ in refusals}
        if failures and len(refusals) == len(failures) and len(speakers) == 1:
            raise ChildRefusedError(speakers.pop(), [message for _, message in refusals])
        code = worst_exit(codes)
        if failures:
            raise ProcessesFailedError("; ".join(failures), code)
        return results

    def _outcome(self, child: _Child, results: dict[int, ProcessorExit]) -> tuple[int, str | None]:
        """(exit status, failure message or None) of an exited child; its partitions' exits into results."""
        status = child.process.exitcode
        last = child.messages[-1] if child.messages else ("none",)
        if last[0] == "result" and status in (EXIT_OK, EXIT_FENCED):
            results.update({p: ProcessorExit(how) for p, how in last[1].items()})
            return status, None
        if last[0] == "failed":
            return int(last[1]), f"{child.describe()} failed: {last[2]}"
        if last[0] == "refused":
            return EXIT_REFUSED, f"{child.describe()} failed: {last[2]}"
        if status is not None and status < 0:
            how = f"was killed by {signal.Signals(-status).name}"
        else:
            how = f"exited with status {status} without reporting"
        if child.spec.partitions is None:
            return EXIT_FAILED, (
                f"{child.describe()} died unexpectedly: it {how}; its partitions move to the other members "
                "of the group after the session timeout, but the process group was stopped so that a "
                "supervisor restarts it whole"
            )
        partitions = list(child.spec.partitions)
        return EXIT_FAILED, (
            f"{child.describe()} died unexpectedly: it {how}; partitions {partitions} are not processed, "
            "so the other processes were stopped too. Restart `turnledger process` to resume them "
            "exactly once from their last committed transaction"
        )

    def _on_signal(self, sig: signal.Signals) -> None:
        """The first signal commits, the second cancels, counted apart from `stop()`: a group already
        stopping the others after one failed still lets them commit on the first signal."""
        self._signals += 1
        if self._signals > 1:
            log.warning("received %s again: cancelling the children without committing", sig.name)
            self.cancel()
            return
        log.info("received %s: asking the processes to commit their open batches and stop", sig.name)
        self.stop()

    def _reap_all(self, loop: asyncio.AbstractEventLoop) -> None:
        """Nothing outlives `run()`: children still running (run was cancelled or raised) are stopped."""
        alive = [c for c in self.children if c.process.exitcode is None]
        for child in alive:
            child.tell(STOP)
        for child in alive:
            child.process.join(self.stop_timeout_s)
            if child.process.exitcode is None:
                log.error("%s did not stop within %g s; killing it", child.describe(), self.stop_timeout_s)
                child.process.kill()
                child.process.join()
        for child in self.children:
            for fd in (child.process.sentinel, child.conn.fileno()):
                with contextlib.suppress(Exception):
                    loop.remove_reader(fd)
            child.conn.close()
