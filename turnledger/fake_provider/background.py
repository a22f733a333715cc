"""Background Responses: a generation that runs on its own, stored by id, readable while it runs.

The generation is an asyncio task that releases the pre-built script one event per tick, independent of
any client connection: a client may disconnect, poll `GET /v1/responses/{id}`, or reattach with
`?stream=true&starting_after=N` and read the remaining events live. Cancelling stops the release.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnledger.fake_provider.delivery import WireEvent
from turnledger.fake_provider.openai_responses import TERMINAL_TYPES

SnapshotFn = Callable[[str, list[dict[str, Any]]], dict[str, Any]]


@dataclass
class BackgroundResponse:
    response_id: str
    events: list[WireEvent]
    #: builds a response object from (status, output items so far)
    snapshot_fn: SnapshotFn
    #: a stream can be reopened only for responses created with stream=true (as the real API says)
    streamable: bool
    body_hash: str = ""
    produced: int = 0
    cancelled: bool = False
    _cond: asyncio.Condition = field(default_factory=asyncio.Condition)
    _task: asyncio.Task[None] | None = None

    def start(self, tick_s: float) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(tick_s))

    async def _run(self, tick_s: float) -> None:
        for _ in self.events:
            if tick_s > 0:
                await asyncio.sleep(tick_s)
            else:
                await asyncio.sleep(0)
            async with self._cond:
                if self.cancelled:
                    return
                self.produced += 1
                self._cond.notify_all()

    @property
    def finished(self) -> bool:
        return self.cancelled or self.produced >= len(self.events)

    async def wait_for(self, index: int) -> bool:
        """True once script event `index` has been generated; False if it never will be."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.produced > index or self.finished)
            return self.produced > index

    async def cancel(self) -> None:
        async with self._cond:
            if not self.finished:
                self.cancelled = True
            self._cond.notify_all()

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def snapshot(self) -> dict[str, Any]:
        """The response object as `GET /v1/responses/{id}` shows it now."""
        produced = self.events[: self.produced]
        for ev in reversed(produced):
            if isinstance(ev.data, dict) and ev.data.get("type") in TERMINAL_TYPES:
                return dict(ev.data["response"])
        output = [
            ev.data["item"]
            for ev in produced
            if isinstance(ev.data, dict) and ev.data.get("type") == "response.output_item.done"
        ]
        if self.cancelled:
            status = "cancelled"
        elif self.produced >= len(self.events):
            status = "incomplete"  # the script ended without a terminal event
        else:
            status = "queued" if self.produced <= 1 else "in_progress"
        return self.snapshot_fn(status, output)
