"""Reading a response body chunk by chunk while waking up on time for the pump's idle flush."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


class IdleTick:
    """Returned instead of a chunk when `timeout` passed with no byte from the provider."""


IDLE = IdleTick()


class TimedChunks:
    """`next(timeout)` gives the next chunk, `IDLE` after `timeout` seconds without one (the read of
    that chunk goes on: nothing is lost), or None at the end of the body.

    One reader task, one read outstanding at a time; `aclose` cancels an outstanding read, which
    is what a cancelled or abandoned read of the stream needs.
    """

    def __init__(self, body: AsyncIterator[bytes]) -> None:
        self._body = body
        self._next: asyncio.Task[bytes] | None = None

    async def next(self, timeout: float | None) -> bytes | IdleTick | None:
        if self._next is None:
            self._next = asyncio.ensure_future(self._read())
        done, _ = await asyncio.wait({self._next}, timeout=timeout)
        if not done:
            return IDLE
        task, self._next = self._next, None
        try:
            return task.result()
        except StopAsyncIteration:
            return None

    async def _read(self) -> bytes:
        return await anext(self._body)

    async def aclose(self) -> None:
        """Cancel an outstanding read and wait until it has unwound, so the body's generator is no
        longer running when the response is closed after this."""
        task, self._next = self._next, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
