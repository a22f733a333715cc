"""The worker's view of `turnledger.manifests`: manifests, latest decisions, and waiting for answers.

The worker never decides anything itself: every step it takes is answered by a
DispatchDecision of the fold. The CAS answer to a DispatchAttempt is found by the
attempt's event id (`source_event_id`); the end of a stream by the first decision
of the attempt's generation, caused by one of the worker's own events of that phase,
that settles it (COMMITTED or UNKNOWN), or by a cancel from anyone. A stream being
read watches its operation's cancel signal (`cancel_signal`), set by the first
CANCELLED decision, to stop reading at once.

Operation ids are unique within a conversation only, so everything here is keyed by
`OperationKey` (conversation id, operation id).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection

from turnledger.model.events import DispatchDecision, DispatchState, ManifestIssued
from turnledger.model.manifest import DispatchManifest

S = DispatchState
FINAL = frozenset({S.COMMITTED, S.REJECTED, S.CANCELLED})

OperationKey = tuple[str, str]
"""(conversation id, operation id): what names one operation."""


def key_of(record: DispatchDecision | DispatchManifest) -> OperationKey:
    return (record.conversation_id, record.operation_id)


class DecisionBoard:
    def __init__(self) -> None:
        self.manifests: dict[OperationKey, DispatchManifest] = {}  # the operation's current manifest
        self.latest: dict[OperationKey, DispatchDecision] = {}
        self._cas: dict[str, DispatchDecision] = {}  # source event id → CAS answer
        self._settling: dict[OperationKey, list[DispatchDecision]] = {}  # COMMITTED/UNKNOWN/CANCELLED
        self._cancel_signals: dict[OperationKey, asyncio.Event] = {}  # set once it is CANCELLED
        self._changed = asyncio.Condition()

    async def apply(self, records: Collection[ManifestIssued | DispatchDecision]) -> None:
        for record in records:
            self.apply_nowait(record)
        async with self._changed:
            self._changed.notify_all()

    def apply_nowait(self, record: ManifestIssued | DispatchDecision) -> None:
        if isinstance(record, ManifestIssued):
            self.manifests[key_of(record.manifest)] = record.manifest
            return
        op = key_of(record)
        self.latest[op] = record
        if not record.accepted or (record.state == S.DISPATCHING and record.previous_state != S.DISPATCHING):
            self._cas[record.source_event_id] = record
        if record.state in (S.COMMITTED, S.UNKNOWN, S.CANCELLED):
            self._settling.setdefault(op, []).append(record)
        if record.state == S.CANCELLED:
            signal = self._cancel_signals.get(op)
            if signal is not None:
                signal.set()

    def forget(self, operation_id: OperationKey) -> None:
        """Drop what is kept for a finished operation (its latest decision stays for status)."""
        self.manifests.pop(operation_id, None)
        self._settling.pop(operation_id, None)
        self._cancel_signals.pop(operation_id, None)

    def cancelled(self, operation_id: OperationKey) -> bool:
        """Has a CANCELLED decision been seen for the operation (CANCELLED is final)?"""
        latest = self.latest.get(operation_id)
        if latest is not None and latest.state == S.CANCELLED:
            return True
        return any(d.state == S.CANCELLED for d in self._settling.get(operation_id, ()))

    def cancel_signal(self, operation_id: OperationKey) -> asyncio.Event:
        """An event set as soon as the operation is CANCELLED (already set if it is). Release it after use."""
        signal = self._cancel_signals.get(operation_id)
        if signal is None:
            signal = self._cancel_signals[operation_id] = asyncio.Event()
            if self.cancelled(operation_id):
                signal.set()
        return signal

    def release_cancel_signal(self, operation_id: OperationKey) -> None:
        self._cancel_signals.pop(operation_id, None)

    async def cas_answer(self, attempt_event_id: str, timeout_s: float) -> DispatchDecision | None:
        def ready() -> bool:
            return attempt_event_id in self._cas

        if not await self._wait(ready, timeout_s):
            return None
        return self._cas.pop(attempt_event_id)

    async def settled(
        self, operation_id: OperationKey, generation: int, sources: Collection[str], timeout_s: float
    ) -> DispatchDecision | None:
        """The decision that ends this phase of the attempt, or None on timeout."""

        def found() -> DispatchDecision | None:
            for d in self._settling.get(operation_id, ()):
                if d.state == S.CANCELLED:
                    return d
                if d.attempt_generation != generation:
                    continue
                if d.state == S.COMMITTED or d.source_event_id in sources:
                    return d
            return None

        if not await self._wait(lambda: found() is not None, timeout_s):
            return None
        return found()

    async def state_after(self, operation_id: OperationKey, source_event_id: str, timeout_s: float) -> bool:
        """Wait until some decision caused by `source_event_id` was seen for the operation."""
        return await self._wait(
            lambda: (
                any(d.source_event_id == source_event_id for d in self._settling.get(operation_id, ()))
                or (
                    operation_id in self.latest
                    and self.latest[operation_id].source_event_id == source_event_id
                )
            ),
            timeout_s,
        )

    async def _wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        async with self._changed:
            if predicate():
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)
            return predicate()
