"""Group-managed ownership on the real broker: processors in separate OS processes that share six
partitions through the consumer group, while traffic runs.

Every test ends with the counter fold's exact-once check: the n-th input `v` of key `k` must give
the output `k:n:v` exactly once (`assert_exactly_once`), and the changelog must hold each key's
final count. A lost input is a missing output, a twice-processed one a duplicate, a reordered one a
wrong count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.test_processor_eos import (
    Child,
    Sent,
    assert_exactly_once,
    changelog_state,
    committed_offsets,
    produce,
    wait_all_committed,
    wait_for,
)
from turnledger.processors.topics import ensure_topics
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6_000  # the broker's group.min.session.timeout.ms
HEARTBEAT_MS = 1_000
REBALANCE_SLACK_S = 15.0
"""What a takeover may take beyond the session timeout and the restore: the survivors learn of the
rebalance at their next heartbeat, commit their open batches, rejoin, sync, and initialise the
moved partitions' producers. Generous for a loaded 2-core CI machine (a timed bound is not a
benchmark), yet well under what a move driven by anything but the session would take: the poll
interval (300 s) or a transaction's timeout (60 s)."""


@pytest.fixture
def topics(topic_name: Callable[[str], str]) -> Topics:
    return Topics(prefix=topic_name("") + ".")


@dataclass(frozen=True)
class Event:
    pid: int
    t: float
    event: str
    partition: int
    committed_offset: int | None = None
    restore_seconds: float = 0.0
    signal: str = ""


def read_events(path: Path) -> list[Event]:
    if not path.exists():
        return []
    return [Event(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def owners(events: Sequence[Event]) -> dict[int, int]:
    """partition → pid of the process whose term of it became ready last."""
    out: dict[int, int] = {}
    for e in sorted(events, key=lambda e: e.t):
        if e.event == "ready":
            out[e.partition] = e.pid
    return out


class Traffic:
    """Appends `per_round` records every `every_s` until stopped; remembers every record sent."""

    def __init__(self, bootstrap: str, topic: str, keys: int = 40, per_round: int = 60, every_s: float = 0.1):
        self.bootstrap, self.topic, self.keys = bootstrap, topic, keys
        self.per_round, self.every_s = per_round, every_s
        self.sent: list[Sent] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            records = [(f"conv-{(n + i) % self.keys}", f"v{n + i}".encode()) for i in range(self.per_round)]
            n += self.per_round
            self.sent += await produce(self.bootstrap, self.topic, records)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.every_s)

    async def wait_sent(self, at_least: int, timeout_s: float = 60) -> None:
        async def enough() -> bool:
            assert self._task is not None and not self._task.done(), "traffic stopped"
            return len(self.sent) >= at_least

        await wait_for(enough, timeout_s, f"{at_least} records of traffic")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Traffic]:
        self._task = asyncio.create_task(self._run())
        try:
            yield self
        finally:
            self._stop.set()
            await self._task


class Group:
    """Processor children that are members of one consumer group, with a shared event file."""

    def __init__(self, bootstrap: str, topics: Topics, tmp: Path, **extra: object) -> None:
        self.bootstrap, self.topics, self.tmp = bootstrap, topics, tmp
        self.app_id = f"{topics.prefix}app"
        self.events_file = tmp / "events.jsonl"
        self.extra = extra
        self.children: list[Child] = []

    def start(self, **extra: object) -> Child:
        args = [
            "app",
            "--bootstrap",
            self.bootstrap,
            "--prefix",
            self.topics.prefix,
            "--app-id",
            self.app_id,
            "--group",
            "--session-timeout-ms",
            str(SESSION_TIMEOUT_MS),
            "--heartbeat-interval-ms",
            str(HEARTBEAT_MS),
            "--events",
            str(self.events_file),
        ]
        for name, value in {**self.extra, **extra}.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        child = Child(args, self.tmp / f"member-{len(self.children)}.log")
        self.children.append(child)
        return child

    def events(self) -> list[Event]:
        return read_events(self.events_file)

    def alive(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is None]

    async def wait_owned_by(
        self, members: Sequence[Child], timeout_s: float, after: float = 0.0
    ) -> dict[int, int]:
        """Until every partition's last ready term belongs to one of `members`, each member owns at
        least one, and (with `after`) every partition became ready again after that time."""
        pids = {c.proc.pid for c in members}

        async def settled() -> bool:
            for child in self.children:
                if child in members:
                    assert child.proc.poll() is None, child.output()[-3000:]
            events = [e for e in self.events() if e.t > after]
            own = owners(events)
            return len(own) == PARTITIONS and set(own.values()) == pids

        await wait_for(settled, timeout_s, f"partitions owned by pids {sorted(pids)}")
        return owners([e for e in self.events() if e.t > after])

    async def stop_all(self) -> None:
        for child in self.alive():
            child.signal(signal.SIGTERM)
        for child in self.children:
            if child.proc.returncode is None and child.proc.poll() is None:
                assert await child.wait(30) == 0, child.output()[-3000:]

    def kill_all(self) -> None:
        for child in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.proc.pid, signal.SIGCONT)
            child.kill()


async def assert_final(bootstrap: str, group: Group, sent: Sequence[Sent]) -> None:
    await wait_all_committed(bootstrap, group.app_id, group.topics, sent, timeout_s=90)
    await group.stop_all()
    await assert_exactly_once(bootstrap, group.topics, sent)
    assert await changelog_state(bootstrap, group.topics) == {
        k: str(n) for k, n in Counter(s.key for s in sent).items()
    }


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.slow
async def test_sigkill_one_of_three_its_partitions_move_within_the_session_timeout(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=PARTITIONS)
    group = Group(kafka_bootstrap, topics, tmp_path, batch_max_records=50)
    try:
        async with Traffic(kafka_bootstrap, topics.ingress).running() as traffic:
            members = [group.start() for _ in range(3)]
            own = await group.wait_owned_by(members, 90)
            victim = members[1]
            moved = sorted(p for p, pid in own.items() if pid == victim.proc.pid)
            await traffic.wait_sent(len(traffic.sent) + 600)
            killed_at = time.time()
            os.kill(victim.proc.pid, signal.SIGKILL)
            assert await victim.wait(10) == -signal.SIGKILL
            survivors = [members[0], members[2]]
            await group.wait_owned_by(survivors, 60, after=killed_at)
            takeovers = [e for e in group.events() if e.t > killed_at and e.partition in moved]
            taken = {p: min(e.t for e in takeovers if e.partition == p) for p in moved}
            restore_s = max(e.restore_seconds for e in takeovers)
            slowest = max(taken.values()) - killed_at
            assert slowest <= SESSION_TIMEOUT_MS / 1000 + restore_s + REBALANCE_SLACK_S, (taken, restore_s)
            # the moved partitions are processed by the survivors, not just owned
            before = await committed_offsets(kafka_bootstrap, group.app_id, topics.ingress, moved)
            await traffic.wait_sent(len(traffic.sent) + 600)

            async def progressed() -> bool:
                now = await committed_offsets(kafka_bootstrap, group.app_id, topics.ingress, moved)
                return all(now[p] > before[p] for p in moved)

            await wait_for(progressed, 60, f"partitions {moved} to progress after the takeover")
        await assert_final(kafka_bootstrap, group, traffic.sent)
    finally:
        group.kill_all()
    print(f"takeover of {moved} after SIGKILL: {slowest:.1f}s (session timeout {SESSION_TIMEOUT_MS} ms)")


@pytest.mark.slow
async def test_owner_paused_inside_its_commit_past_the_session_timeout_is_fenced(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    """The zombie's batch reached the broker before the pause; its commit, attempted on SIGCONT after
    the group moved the partition and the new owner initialised its producer, must be fenced."""
    await ensure_topics(kafka_bootstrap, topics, partitions=PARTITIONS)
    group = Group(kafka_bootstrap, topics, tmp_path, batch_max_records=50)
    try:
        async with Traffic(kafka_bootstrap, topics.ingress).running() as traffic:
            other = group.start()
            await group.wait_owned_by([other], 60)
            zombie = group.start(stop_in_commit=8)

            async def paused() -> bool:
                assert zombie.proc.poll() is None, zombie.output()[-3000:]
                return process_state(zombie.proc.pid) == "T"

            await wait_for(paused, 90, "the zombie to pause itself inside a commit")
            pause = next(e for e in group.events() if e.event == "signal" and e.pid == zombie.proc.pid)
            # the group declares the zombie dead and the other member takes its partition over
            await group.wait_owned_by([other], 60, after=pause.t)
            committed = await committed_offsets(
                kafka_bootstrap, group.app_id, topics.ingress, [pause.partition]
            )
            os.kill(zombie.proc.pid, signal.SIGCONT)

            async def fenced() -> bool:
                return "was fenced" in zombie.output()

            await wait_for(fenced, 30, "the resumed zombie to learn it was fenced")
            assert f"partition {pause.partition}: producer" in zombie.output()
            after = await committed_offsets(kafka_bootstrap, group.app_id, topics.ingress, [pause.partition])
            assert after[pause.partition] >= committed[pause.partition]
            await traffic.wait_sent(len(traffic.sent) + 300)
        await assert_final(kafka_bootstrap, group, traffic.sent)
    finally:
        group.kill_all()
    log = zombie.output()
    assert "asking the group to confirm ownership" in log, log[-3000:]


@pytest.mark.slow
async def test_scale_one_to_three_to_one_while_traffic_runs(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=PARTITIONS)
    group = Group(kafka_bootstrap, topics, tmp_path, batch_max_records=50)
    try:
        async with Traffic(kafka_bootstrap, topics.ingress).running() as traffic:
            first = group.start()
            await group.wait_owned_by([first], 60)
            await traffic.wait_sent(len(traffic.sent) + 300)
            added = [group.start(), group.start()]
            await group.wait_owned_by([first, *added], 90)
            await traffic.wait_sent(len(traffic.sent) + 600)
            left_at = time.time()
            for child in added:
                child.signal(signal.SIGTERM)
            for child in added:
                assert await child.wait(30) == 0, child.output()[-3000:]
            await group.wait_owned_by([first], 60, after=left_at)
            await traffic.wait_sent(len(traffic.sent) + 300)
        await assert_final(kafka_bootstrap, group, traffic.sent)
    finally:
        group.kill_all()
    assert "kept the state of its previous term" in group.children[0].output()
