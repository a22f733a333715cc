"""`turnledger process --processes 2` on the real broker: the dispatch fold's exact outputs, clean
SIGTERM of both children, and a SIGKILLed child that stops the parent and resumes exactly once."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.dispatch_workload import build
from tests.integration.test_dispatch_processor import (
    _produce,
    actual_outputs,
    assert_same,
    expected_outputs,
)
from tests.integration.test_processor_eos import Child, committed_offsets, wait_all_committed, wait_for
from turnledger.processors.cli import EXIT_FAILED
from turnledger.processors.topics import ensure_topics
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

STARTED = re.compile(r"started process (\d)/2 \(pid (\d+), partitions \[(\d+)\]\)")


@pytest.fixture
def topics(topic_name: Callable[[str], str]) -> Topics:
    return Topics(prefix=topic_name("") + ".")


def cli_args(bootstrap: str, topics: Topics, app_id: str, batch_max_records: int) -> list[str]:
    return [
        "cli",
        "--bootstrap",
        bootstrap,
        "--topic-prefix",
        topics.prefix,
        "--app-id",
        app_id,
        "--batch-max-records",
        str(batch_max_records),
        "--processes",
        "2",
        "--partitions",
        "all",
    ]


async def children_of(parent: Child, timeout_s: float = 60) -> dict[int, int]:
    """partition → pid of the child process that owns it, once both children are ready."""

    async def ready() -> bool:
        assert parent.proc.poll() is None, parent.output()[-3000:]
        return "all 2 processes ready" in parent.output()

    await wait_for(ready, timeout_s, "both child processes to be ready")
    pids = {int(part): int(pid) for _, pid, part in STARTED.findall(parent.output())}
    assert sorted(pids) == [0, 1], parent.output()[-3000:]
    return pids


async def assert_gone(pids: list[int]) -> None:
    async def gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() for pid in pids)

    await wait_for(gone, 10, f"child processes {pids} to be gone")


async def test_two_processes_fold_exactly_once_and_stop_on_sigterm(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    workload = build(copies=2)
    sent = await _produce(kafka_bootstrap, topics, workload)
    assert {s.partition for s in sent} == {0, 1}
    app_id = f"{topics.prefix}app"
    parent = Child(cli_args(kafka_bootstrap, topics, app_id, 50), tmp_path / "parent.log")
    try:
        pids = await children_of(parent)
        assert len(set(pids.values())) == 2 and parent.proc.pid not in pids.values()
        await wait_all_committed(kafka_bootstrap, app_id, topics, sent, timeout_s=120)
        parent.signal(signal.SIGTERM)
        assert await parent.wait(30) == 0, parent.output()[-3000:]
    finally:
        parent.kill()
    await assert_gone(list(pids.values()))
    log = parent.output()
    assert log.count("stop from the parent: committing open batches") == 2, log[-3000:]
    assert "died unexpectedly" not in log
    actual = await actual_outputs(kafka_bootstrap, topics)
    assert_same(actual, expected_outputs(workload, topics), topics)


async def test_sigkilled_child_stops_the_parent_and_a_restart_resumes_exactly_once(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    workload = build(copies=3)
    app_id = f"{topics.prefix}app"
    args = cli_args(kafka_bootstrap, topics, app_id, 7)
    first = Child(args, tmp_path / "first.log")
    try:
        pids = await children_of(first)
        sent = await _produce(kafka_bootstrap, topics, workload)

        async def started_committing() -> bool:
            offsets = await committed_offsets(kafka_bootstrap, app_id, topics.ingress, [1])
            return offsets[1] > 0

        await wait_for(started_committing, 60, "partition 1 to commit a first batch")
        os.kill(pids[1], signal.SIGKILL)
        assert await first.wait(60) == EXIT_FAILED, first.output()[-3000:]
    finally:
        first.kill()
    await assert_gone(list(pids.values()))
    log = first.output()
    died = r"process \d/2 \(pid \d+, partitions \[1\]\) died unexpectedly: it was killed by SIGKILL"
    assert re.search(died, log), log[-3000:]
    assert "partitions [1] are not processed" in log
    ends = await committed_offsets(kafka_bootstrap, app_id, topics.ingress, [0, 1])
    assert ends[1] < max(s.offset + 1 for s in sent if s.partition == 1), "killed after the last commit"

    second = Child(args, tmp_path / "second.log")
    try:
        await children_of(second)
        await wait_all_committed(kafka_bootstrap, app_id, topics, sent, timeout_s=180)
        second.signal(signal.SIGTERM)
        assert await second.wait(30) == 0, second.output()[-3000:]
    finally:
        second.kill()
    actual = await actual_outputs(kafka_bootstrap, topics)
    assert_same(actual, expected_outputs(workload, topics), topics)
