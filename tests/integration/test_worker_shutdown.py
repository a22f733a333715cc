"""A worker cancelled with every other task of its event loop (a host application's `asyncio.run`
ending) finishes: its last offset commit is bounded, not retried for ever against a coordinator
whose own tasks were cancelled too."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from turnledger.topology import Topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


async def test_a_worker_cancelled_with_its_event_loop_closes(kafka_bootstrap: str) -> None:
    from turnledger.processors.topics import ensure_topics

    prefix = f"t-wcancel-{uuid.uuid4().hex[:8]}-"
    await ensure_topics(kafka_bootstrap, Topics(prefix=prefix), 1)
    child = [sys.executable, "-m", "tests.integration._cancelled_worker_child", kafka_bootstrap, prefix]
    try:
        done = subprocess.run(child, capture_output=True, timeout=120)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"the host's asyncio.run never returned: {hung.stdout!r}")
    assert (done.returncode, done.stdout.split()) == (0, [b"live", b"closed"]), done.stderr[-3000:]
