"""Stopping one read of a provider stream the moment its operation is cancelled (or its lease is lost),
without tearing an append."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class StopOnCancel:
    """Stops one read of a stream as soon as one of its signals is set: its operation is CANCELLED, or
    its generation's lease expired.

    A watcher task waits for the board's signals. When it fires, a reader waiting
    on the network is interrupted at once (its task is cancelled, and `absorb` turns that
    cancellation back into a normal end of the read); a reader in the middle of appending
    events (`feeding`) is left to finish that append and stops right after it (`fired`),
    so an append to the ledger is never cut in half.
    """

    def __init__(self, *signals: asyncio.Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        self._signals = signals
        self._feeding = False
        self._interrupted = False
        self.fired = False
        self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        waits = [asyncio.ensure_future(signal.wait()) for signal in self._signals]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        self.fired = True
        if not self._feeding:
            self._interrupted = True
            self._task.cancel()

    @contextlib.contextmanager
    def feeding(self) -> Iterator[None]:
        self._feeding = True
        try:
            yield
        finally:
            self._feeding = False

    def absorb(self) -> bool:
        """On a CancelledError in the reader: was it only ours? (Then the read just ends.)"""
        if not self._interrupted:
            return False
        self._interrupted = False
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        self._watcher.cancel()
