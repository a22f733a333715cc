"""The concurrency slots one operation's task holds, given back while it waits between generations.

An operation runs under its route's slot and one of the worker's (gateway/worker.py). A pause
before a new generation (a provider asked for one, or the backoff) uses no provider: holding the
slots through it would let a throttled route stall every other route's operations. The pause
gives them back and takes them again before the next send, in the order they are always taken
(the route's, then the worker's), so no two tasks can wait for each other's slot.

The hold knows exactly which slots it has: a task cancelled while it waits to take one back gives
back only those it holds, so a semaphore's count never grows past its limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


class SlotHold:
    def __init__(self, semaphores: Sequence[asyncio.Semaphore]) -> None:
        self._semaphores = tuple(semaphores)
        self._held: list[asyncio.Semaphore] = []

    @property
    def held(self) -> int:
        return len(self._held)

    async def take(self) -> None:
        """Take every slot not held yet, in order (waits while one is busy)."""
        for semaphore in self._semaphores[len(self._held) :]:
            await semaphore.acquire()
            self._held.append(semaphore)

    def give_back(self) -> None:
        """Release every slot held, the last taken first."""
        while self._held:
            self._held.pop().release()
