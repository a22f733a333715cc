"""A last guard against a test that hangs where pytest-timeout cannot reach it.

pytest-timeout's signal method raises inside the main thread. When the hang is an event loop's
teardown (pytest-asyncio cancelling every task left running, one of which waits on Kafka for ever),
that exception lands in an asyncio callback, is logged and swallowed, and the run waits until CI
kills it, with no word of which test hung. This watchdog is a thread: once a test has run
`GRACE_S` (120 s; `TURNLEDGER_TEST_WATCHDOG_GRACE_S`) past its own timeout, it prints which test
hung, every thread's stack and every task of the running event loops, and ends the run with exit
code 70.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

GRACE_S = float(os.environ.get("TURNLEDGER_TEST_WATCHDOG_GRACE_S", "120"))
EXIT_HUNG = 70


def _limit(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0]) + GRACE_S
    try:
        configured = item.config.getini("timeout")
    except ValueError:  # pytest-timeout not loaded (`-p no:timeout`, as `make mutation` runs)
        return None
    return float(configured) + GRACE_S if configured else None


def _tasks_of(loop: asyncio.AbstractEventLoop) -> list[str]:
    lines = []
    for task in list(asyncio.all_tasks(loop)):
        lines.append(repr(task)[:300])
        awaited = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None)
            if frame is None:
                break
            lines.append(f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
            awaited = getattr(awaited, "cr_await", None)
    return lines


def _running_loops() -> list[asyncio.AbstractEventLoop]:
    import gc

    return [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()]


def _hung(config: pytest.Config, what: str, limit: float) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)
    out = sys.stderr
    out.write(f"\n+++ watchdog: {what} still running {limit:.0f} s after it started; ending the run\n")
    faulthandler.dump_traceback(file=out, all_threads=True)
    for loop in _running_loops():
        out.write(f"+++ tasks of {loop!r}\n" + "\n".join(_tasks_of(loop)) + "\n")
    out.flush()
    os._exit(EXIT_HUNG)


@contextmanager
def _watching(config: pytest.Config, what: str, limit: float | None) -> Iterator[None]:
    timer = threading.Timer(limit, _hung, (config, what, limit)) if limit else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    with _watching(item.config, item.nodeid, _limit(item)):
        yield
