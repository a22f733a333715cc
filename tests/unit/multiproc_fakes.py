"""Children for `processors.multiproc`'s tests: what a spawned child of `ProcessGroup` runs instead of a
processor, and the `ProcessorApp` that `_run_child` drives.

`scripted_child` (given as `ProcessGroup(target=partial(scripted_child, scripts))`) is spawned as
`child_main` is and plays its script, one step at a time, over the real pipe: it sends messages, echoes
what the parent tells it as `("got", message)`, reports the signals it inherited and the spec it was
given, closes its end, exits with a status or kills itself. `FakeApp` stands in for `ProcessorApp`:
it records how it was built and driven, reports its partitions ready when the test (or, in a spawned
child, its own run) says so, and ends as told once stopped. `child_main_with_fake_app` is `child_main`
over a `FakeApp` in a real child; `child_main_refused` the same over one whose run meets a refusal of
`REFUSALS`.

This module is imported by every spawned child, so it stays small."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from aiokafka.errors import SaslAuthenticationFailed

from turnledger.adapters.admission import ModelRegistryError
from turnledger.errors import (
    DevstackSettingsError,
    KafkaAccessError,
    KafkaSettingsError,
    KafkaUnavailableError,
    MetricsServeError,
    RedisAccessError,
    RedisSettingsError,
    TurnledgerError,
)
from turnledger.kafka.group_member import SessionTimeoutRefusedError
from turnledger.processors import multiproc
from turnledger.processors.config import ProcessorConfig, ProcessorExit
from turnledger.processors.errors import TopicMismatchError
from turnledger.processors.limits_config import LimitsConfigError
from turnledger.topology import Topics

FRESH = True
"""A test sets it False in the parent: a spawned child, which imports this module anew, sees True."""

Step = tuple[Any, ...]
"""One step of a script: ("send", message); ("recv",): wait for the parent's next message and echo it as
("got", message); ("expect", message): exit with status 9 unless the parent's next message is that one
(for when nobody reads the pipe any more); ("echo until eof",); ("signals",); ("spec",); ("close",):
close our end, then wait to be killed; ("fresh",): ("fresh", FRESH), True unless this module was
inherited from the parent (fork) rather than imported anew (spawn); ("pause",): wait to be killed,
reading nothing; ("exit", status); ("kill", signal)."""


def scripted_child(
    scripts: Mapping[int, Sequence[Step]], spec: multiproc.ChildSpec, conn: Connection
) -> None:
    """Child `spec.index` plays `scripts[spec.index]`, then exits with status 0. It exits with `os._exit`,
    as soon as its messages are in the pipe: an interpreter's teardown takes a quarter second."""
    _play(scripts[spec.index], spec, conn)
    os._exit(0)


def _play(script: Sequence[Step], spec: multiproc.ChildSpec, conn: Connection) -> None:
    for what, *args in script:
        if what == "send":
            conn.send(args[0])
        elif what == "recv":
            conn.send(("got", conn.recv()))
        elif what == "expect":
            if conn.recv() != args[0]:
                os._exit(9)
        elif what == "echo until eof":  # deaf to stop: only a kill or the parent's end closing ends it
            while True:
                try:
                    message = conn.recv()
                except EOFError:
                    return
                conn.send(("got", message))
        elif what == "signals":
            conn.send(("signals", [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]))
        elif what == "spec":
            conn.send(("spec", spec, mp.current_process().name))
        elif what == "close":
            conn.close()
            signal.pause()  # SIGTERM and SIGINT are ignored (inherited): the test kills it
        elif what == "fresh":
            conn.send(("fresh", FRESH))
        elif what == "pause":
            signal.pause()
        elif what == "exit":
            os._exit(args[0])
        elif what == "kill":
            os.kill(os.getpid(), args[0])
        else:
            raise AssertionError(f"unknown step {what!r}")


def fold(topics: Topics, partition: int) -> tuple[str, Topics, int]:
    """A `--fold` factory (`tests.unit.multiproc_fakes:fold`): what it was called with."""
    return ("fold", topics, partition)


FOLD = "tests.unit.multiproc_fakes:fold"


class FakeProcessor:
    """A `PartitionProcessor` as `on_ready` sees it."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.ready = asyncio.Event()


@dataclass
class Ending:
    """How a `FakeApp`'s run ends once stopped: it returns `exits` (by default every partition
    STOPPED) or raises `error`; `at_once`: without waiting for a stop."""

    exits: Mapping[int, ProcessorExit] | None = None
    error: BaseException | None = None
    at_once: bool = False
    ready_by_itself: bool = False
    """Its partitions report ready as soon as it runs (a spawned child: no test drives it)."""


class FakeApp:
    made: list[FakeApp] = []
    ending = Ending()

    def __init__(
        self,
        config: ProcessorConfig,
        fold_factory: Callable[[int], object],
        *,
        partitions: Sequence[int] | None,
        on_ready: Callable[[FakeProcessor], None],
        group: bool,
    ) -> None:
        self.config = config
        self.fold_factory = fold_factory
        self.partitions = partitions
        self.on_ready = on_ready
        self.group = group
        self.processors = {p: FakeProcessor(p) for p in (partitions if partitions is not None else (4, 7))}
        self.calls: list[str] = []
        self.stopping = asyncio.Event()
        self.handle_signals: bool | None = None
        FakeApp.made.append(self)

    @property
    def owned(self) -> list[int]:
        return sorted(self.processors)

    def stop(self) -> None:
        self.calls.append("stop")
        self.stopping.set()

    def cancel(self) -> None:
        self.calls.append("cancel")
        self.stopping.set()

    def report_ready(self, partition: int) -> None:
        """What a processor does once its state is restored: the hook, then its event."""
        processor = self.processors[partition]
        self.on_ready(processor)
        processor.ready.set()

    async def run(self, *, handle_signals: bool = True) -> dict[int, ProcessorExit]:
        self.handle_signals = handle_signals
        self.calls.append("run")
        ending = self.ending
        if ending.ready_by_itself:
            for p in self.owned:
                self.report_ready(p)
        if not ending.at_once:
            await self.stopping.wait()
        for _ in range(10):  # the commits take a few rounds of the loop
            await asyncio.sleep(0)
        if ending.error is not None:
            raise ending.error
        return (
            dict(ending.exits)
            if ending.exits is not None
            else dict.fromkeys(self.owned, ProcessorExit.STOPPED)
        )


def child_main_with_fake_app(spec: multiproc.ChildSpec, conn: Connection) -> None:
    """`child_main` in a spawned child, over a `FakeApp` whose partitions report ready by themselves."""
    FakeApp.ending = Ending(ready_by_itself=True)
    multiproc.ProcessorApp = FakeApp  # type: ignore[attr-defined, assignment]
    logging.getLogger(__name__).debug("child %s runs a fake app", spec.index)
    multiproc.child_main(spec, conn)


REFUSALS: dict[str, Callable[[], TurnledgerError]] = {
    "kafka-access": lambda: KafkaAccessError(
        "kafka.test:9093",
        "SASL_SSL, SCRAM-SHA-512 as 'ledger'",
        SaslAuthenticationFailed("Authentication failed: invalid credentials"),
        "Check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD_FILE.",
    ),
    "kafka-settings": lambda: KafkaSettingsError(
        "KAFKA_SECURITY_PROTOCOL must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, not 'BOGUS'"
    ),
    "session-timeout": lambda: SessionTimeoutRefusedError("kafka.test:9092", "app", 1000, (6000, 1_800_000)),
    "redis-access": lambda: RedisAccessError(
        "redis://ledger:hunter2@redis.test:6379/0",
        "plaintext, as user 'ledger'",
        PermissionError("WRONGPASS invalid username-password pair or user is disabled."),
        "Check REDIS_PASSWORD_FILE.",
    ),
    "redis-settings": lambda: RedisSettingsError("REDIS_URL: 'rediss//x' is not a redis:// URL"),
    "limits": lambda: LimitsConfigError("TURNLEDGER_MAX_TURN_BYTES must be a whole number >= 1, not 'lots'"),
    "model-registry": lambda: ModelRegistryError("model registry: 'gpt' is not provider/model[@revision]"),
    "devstack-settings": lambda: DevstackSettingsError("TURNLEDGER_KAFKA_PORT must be a port, not 'x'"),
    "metrics-port": lambda: MetricsServeError("cannot serve metrics on 0.0.0.0:9101 (Address in use)"),
    "kafka-unavailable": lambda: KafkaUnavailableError("kafka.test:9092", action="start the consumer"),
    "topic-mismatch": lambda: TopicMismatchError("t.ingress has 4 partitions, its changelog 2"),
}
"""An error of each family `turnledger process` says in one line, exit 2 (`cli_refusals.PROCESS_ENDINGS`)
by name: a spawned child builds its own (most of them cannot be pickled whole)."""


def speaker(refusal: str) -> str:
    """Who says `REFUSALS[refusal]` when one process meets it: `process` itself, or the entry point."""
    return "turnledger process" if refusal in ("kafka-unavailable", "topic-mismatch") else "turnledger"


def child_main_refused(refusal: str, spec: multiproc.ChildSpec, conn: Connection) -> None:
    """`child_main` in a spawned child, over a `FakeApp` whose run meets `REFUSALS[refusal]` at once."""
    FakeApp.ending = Ending(error=REFUSALS[refusal](), at_once=True)
    multiproc.ProcessorApp = FakeApp  # type: ignore[attr-defined, assignment]
    multiproc.child_main(spec, conn)
