"""A worker or a tool executor cancelled with every other task of its event loop (a host
application's `asyncio.run` ending) closes within seconds: its last offset commit and its group's
LeaveGroup are bounded, not retried for ever or waited out against a coordinator whose own tasks
were cancelled too."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from turnledger.topology import Topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.mark.parametrize("component", ["worker", "tool-executor"])
async def test_a_component_cancelled_with_its_event_loop_closes(kafka_bootstrap: str, component: str) -> None:
    from turnledger.processors.topics import ensure_topics

    prefix = f"t-cancel-{uuid.uuid4().hex[:8]}-"
    await ensure_topics(kafka_bootstrap, Topics(prefix=prefix), 1)
    child = [
        sys.executable,
        "-u",
        "-m",
        "tests.integration._cancelled_worker_child",
        component,
        kafka_bootstrap,
        prefix,
    ]
    proc = subprocess.Popen(child, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"live\n"
        live = time.monotonic()
        closed = proc.stdout.readline()
        # a LeaveGroup left waiting takes its 40 s request timeout; the bounds take 5 s a step
        closing_s = time.monotonic() - live
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert closed == b"closed\n", proc.stderr.read()[-3000:] if proc.stderr else b""
    assert closing_s < 30, closing_s
