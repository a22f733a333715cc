"""Keeping the leases of the attempts a worker runs: its signs of life, and LeaseRenewed when quiet.

Every event a worker appends for an attempt renews its lease in the fold. An attempt that appends
nothing for a third of the lease (a provider slow to answer, a long pause in a stream) gets a
LeaseRenewed, so that only a dead or cut-off worker loses its leases.

An attempt whose stream carried the provider's final event is settled in the fold, and its lease
ended with it: it gets no renewal while the worker waits to see the verdict (such a renewal would
reach the fold after the commit and be refused as ILLEGAL_TRANSITION).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection

from turnledger.gateway.board import DecisionBoard, OperationKey, may_produce_output
from turnledger.gateway.client import WorkerEvents
from turnledger.gateway.worker_config import WorkerStats
from turnledger.model.events import DispatchDecision


class LeaseKeeper:
    def __init__(
        self,
        worker_id: str,
        lease_s: float,
        board: DecisionBoard,
        events: WorkerEvents,
        stats: WorkerStats,
        running: Callable[[], Collection[OperationKey]],
    ) -> None:
        self.worker_id, self.lease_s = worker_id, lease_s
        self._board, self._events, self._stats, self._running = board, events, stats, running
        self._signs_of_life: dict[OperationKey, float] = {}  # monotonic time of our last event for it
        self._settled: set[OperationKey] = set()  # final event appended: nothing to renew until next attempt

    def alive(self, key: OperationKey) -> None:
        self._signs_of_life[key] = time.monotonic()
        self._settled.discard(key)

    def settled(self, key: OperationKey) -> None:
        """The attempt's final event is appended: no renewal until the next sign of life."""
        self._settled.add(key)

    def forget(self, key: OperationKey) -> None:
        self._signs_of_life.pop(key, None)
        self._settled.discard(key)

    def holds(self, decision: DispatchDecision | None) -> bool:
        return (
            decision is not None and decision.lease_owner == self.worker_id and may_produce_output(decision)
        )

    async def run(self, stopping: asyncio.Event) -> None:
        quiet_s = self.lease_s / 3
        while not stopping.is_set():
            now = time.monotonic()
            for key in list(self._running()):
                latest = self._board.latest.get(key)
                if (
                    key in self._settled
                    or not self.holds(latest)
                    or now - self._signs_of_life.get(key, 0.0) < quiet_s
                ):
                    continue
                assert latest is not None
                self.alive(key)
                self._stats.bump("lease_renewals")
                await self._events.renew(*key, latest.attempt_generation)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), quiet_s / 2)
