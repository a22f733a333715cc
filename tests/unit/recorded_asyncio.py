"""A module's `asyncio` whose sleeps and timed waits return at once and are recorded: backoffs become
exact numbers to assert, and cost no time. Install it with `record_asyncio(monkeypatch, module)`."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import ModuleType
from typing import Any

import pytest


class RecordedAsyncio:
    """`sleep(s)` is recorded as ("sleep", s); `wait_for(aw, t)` as ("wait", t), and times out at once
    (the awaitable closed unawaited) until `stop_after` waits were recorded, after which it awaits
    `aw` (a stop event's wait, set by the test). Everything else is asyncio's own."""

    def __init__(self) -> None:
        self.waits: list[tuple[str, float | None]] = []
        self.stop_after: int | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self.waits.append(("sleep", seconds))

    async def wait_for(self, waiting: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
        self.waits.append(("wait", timeout))
        if self.stop_after is not None and len(self.waits) > self.stop_after:
            return await waiting
        waiting.close()
        raise TimeoutError

    @property
    def slept(self) -> list[float | None]:
        return [seconds for kind, seconds in self.waits if kind == "sleep"]

    @property
    def timeouts(self) -> list[float | None]:
        return [seconds for kind, seconds in self.waits if kind == "wait"]


def record_asyncio(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> RecordedAsyncio:
    recorded = RecordedAsyncio()
    monkeypatch.setattr(module, "asyncio", recorded)
    return recorded
