"""The worker's view of `turnledger.manifests`: manifests, latest decisions, and waiting for answers.

The worker never decides anything itself: every step it takes is answered by a
DispatchDecision of the fold. The CAS answer to a DispatchAttempt is found by the
attempt's event id (`source_event_id`); the end of a stream by the first decision
of the attempt's generation, caused by one of the worker's own events of that phase,
that settles it (COMMITTED or UNKNOWN), or by a cancel from anyone. A stream being
read watches its operation's cancel signal (`cancel_signal`), set by the first
CANCELLED decision, and its generation's lease-lost signal (`lease_lost_signal`), set by a
lease expiry seen while it reads, to stop reading at once.

The answer to a worker's own event is the first decision it caused (`answer`), found
even when other decisions of the operation came after it: the latest decision may be
another worker's refused CAS.

A decision of the attempt's generation that says its lease expired ends the phase too:
another worker may have taken the attempt over, and this one must stop.

An event the fold refuses gets a Rejected on the rejections topic, never a decision
(`gateway/refusal_feed.py` brings the refusals of the conversations the board follows).
A wait for the answer to an event ends when it is refused: the event did nothing, and no
decision will ever name it. A phase of an attempt ends when one of its own events is
refused because the attempt is no longer this worker's (`PHASE_ENDING_REFUSALS`).

Operation ids are unique within a conversation only, so everything here is keyed by
`OperationKey` (conversation id, operation id).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Collection

from turnledger.model.events import DispatchDecision, DispatchState, ManifestIssued, Rejected
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode

S = DispatchState
FINAL = frozenset({S.COMMITTED, S.REJECTED, S.CANCELLED})
ACTIVE = frozenset({S.DISPATCHING, S.SENT, S.STREAMING})
CAS_ANSWERS_KEPT = 50_000
"""Refused decisions are kept by source event id for whoever waits for them; the oldest are dropped."""
REFUSALS_KEPT = 50_000
"""The fold's rejections of events, kept by event id for whoever waits for them; the oldest are dropped."""
PHASE_ENDING_REFUSALS = frozenset({ReasonCode.LEASE_NOT_HELD, ReasonCode.STALE_GENERATION})
"""Refusals of a phase's own event that end the phase: another worker holds the attempt's lease, or a
newer generation started. Either way another worker continues, and the decision that moved the
attempt may reach this board after the refusal. Other refusals of a phase's events do not end it:
a handle bound to another manifest leaves the stream to go on unresumable, and a state that does not
take the event (ILLEGAL_TRANSITION) comes with a decision that settles the phase."""

Observed = ManifestIssued | DispatchDecision | Rejected


def may_produce_output(decision: DispatchDecision) -> bool:
    """What the fold's `OperationState.may_produce_output` was when it made this decision."""
    if decision.state in ACTIVE:
        return True
    open_attempt = decision.attempt_generation > 0 and not decision.attempt_terminated
    return decision.state in (S.UNKNOWN, S.CANCELLED) and open_attempt


OperationKey = tuple[str, str]
"""(conversation id, operation id): what names one operation."""


def key_of(record: DispatchDecision | DispatchManifest) -> OperationKey:
    return (record.conversation_id, record.operation_id)


class DecisionBoard:
    def __init__(self) -> None:
        self.manifests: dict[OperationKey, DispatchManifest] = {}  # the operation's current manifest
        self.latest: dict[OperationKey, DispatchDecision] = {}
        self._cas: OrderedDict[str, DispatchDecision] = OrderedDict()  # source event id → CAS answer
        self._conversations: dict[str, set[str]] = {}  # conversation id → operation ids seen
        self._settling: dict[OperationKey, list[DispatchDecision]] = {}  # COMMITTED/UNKNOWN/CANCELLED
        self._answers: dict[OperationKey, dict[str, DispatchDecision]] = {}  # open ones: source id → first
        self._refusals: OrderedDict[str, Rejected] = OrderedDict()  # event id → the fold's rejection
        self._cancel_signals: dict[OperationKey, asyncio.Event] = {}  # set once it is CANCELLED
        self._lease_signals: dict[OperationKey, tuple[int, asyncio.Event]] = {}  # generation, set on expiry
        self._lease_lost_at: dict[tuple[str, str, int], int] = {}  # (conv, op, generation) → position
        self._changed = asyncio.Condition()
        self.open: set[OperationKey] = set()
        """Operations a lease, a deadline or a worker can still move: not final, or an attempt still open."""
        self.position = 0
        """How many decisions were applied: a phase that starts now sees only the expiries after it."""

    async def apply(self, records: Collection[Observed]) -> None:
        for record in records:
            self.apply_nowait(record)
        async with self._changed:
            self._changed.notify_all()

    def apply_nowait(self, record: Observed) -> None:
        if isinstance(record, ManifestIssued):
            self.manifests[key_of(record.manifest)] = record.manifest
            return
        if isinstance(record, Rejected):
            self._refuse(record)
            return
        op = key_of(record)
        self.position += 1
        self.latest[op] = record
        if record.state not in FINAL or may_produce_output(record):
            self.open.add(op)
            self._answers.setdefault(op, {}).setdefault(record.source_event_id, record)
        else:
            self.open.discard(op)
            self._answers.pop(op, None)
        if record.reason == ReasonCode.LEASE_EXPIRED and record.accepted:
            self._lease_lost_at[(*op, record.attempt_generation)] = self.position
            watched = self._lease_signals.get(op)
            if watched is not None and watched[0] == record.attempt_generation:
                watched[1].set()
        self._conversations.setdefault(record.conversation_id, set()).add(record.operation_id)
        if not record.accepted or (record.state == S.DISPATCHING and record.previous_state != S.DISPATCHING):
            self._cas.setdefault(record.source_event_id, record)
            while len(self._cas) > CAS_ANSWERS_KEPT:
                self._cas.popitem(last=False)
        if record.state in (S.COMMITTED, S.UNKNOWN, S.CANCELLED):
            self._settling.setdefault(op, []).append(record)
        if record.state == S.CANCELLED:
            signal = self._cancel_signals.get(op)
            if signal is not None:
                signal.set()

    def _refuse(self, rejection: Rejected) -> None:
        """Keep a rejection of an event of an operation this board follows (others are not its share)."""
        event_id, conversation_id = rejection.event_id, rejection.conversation_id
        if event_id is None or conversation_id is None:
            return
        if rejection.operation_id not in self._conversations.get(conversation_id, ()):  # None too
            return
        self._refusals.setdefault(event_id, rejection)
        while len(self._refusals) > REFUSALS_KEPT:
            self._refusals.popitem(last=False)

    def follows(self, conversation_id: str) -> bool:
        """Has the board seen a decision of the conversation (is it in this worker's share)?"""
        return conversation_id in self._conversations

    def refusal(self, event_id: str) -> Rejected | None:
        """The fold's rejection of the event, if it refused it."""
        return self._refusals.get(event_id)

    def forget(self, operation_id: OperationKey) -> None:
        """Drop what is kept for a finished operation (its latest decision stays for status)."""
        self.manifests.pop(operation_id, None)
        self._settling.pop(operation_id, None)
        self._answers.pop(operation_id, None)
        for lost in [k for k in self._lease_lost_at if k[:2] == operation_id]:
            del self._lease_lost_at[lost]
        self._cancel_signals.pop(operation_id, None)
        self._lease_signals.pop(operation_id, None)

    def drop(self, keys: Collection[OperationKey]) -> None:
        """Forget everything about these operations (their partition moved to another worker)."""
        for key in keys:
            self.forget(key)
            self.latest.pop(key, None)
            self.open.discard(key)
            ops = self._conversations.get(key[0])
            if ops is not None:
                ops.discard(key[1])

    def busy_operations(self, conversation_id: str, except_id: str) -> list[str]:
        """Operations of the conversation whose attempt may still produce output (the CAS refuses the
        conversation's next attempt with CONVERSATION_BUSY until they are confirmed terminated)."""
        return sorted(
            op_id
            for op_id in self._conversations.get(conversation_id, ())
            if op_id != except_id and may_produce_output(self.latest[(conversation_id, op_id)])
        )

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `predicate()` holds after some applied batch, at most `timeout_s`."""
        return await self._wait(predicate, timeout_s)

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

    def lease_lost_signal(self, operation_id: OperationKey, generation: int) -> asyncio.Event:
        """An event set when a lease expiry of this generation is seen from now on (a read watches it:
        whoever claimed the lease continues the attempt, or it is over). Release it after use."""
        watched = self._lease_signals.get(operation_id)
        if watched is None or watched[0] != generation:
            watched = self._lease_signals[operation_id] = (generation, asyncio.Event())
        return watched[1]

    def release_lease_lost_signal(self, operation_id: OperationKey) -> None:
        self._lease_signals.pop(operation_id, None)

    async def cas_answer(self, attempt_event_id: str, timeout_s: float) -> DispatchDecision | Rejected | None:
        """The CAS decision on the attempt, or the rejection of the attempt event, or None on timeout."""

        def ready() -> bool:
            return attempt_event_id in self._cas or attempt_event_id in self._refusals

        if not await self._wait(ready, timeout_s):
            return None
        decision = self._cas.pop(attempt_event_id, None)
        return decision if decision is not None else self._refusals[attempt_event_id]

    async def settled(
        self,
        operation_id: OperationKey,
        generation: int,
        sources: Collection[str],
        timeout_s: float,
        since: int = 0,
    ) -> DispatchDecision | Rejected | None:
        """The decision that ends this phase of the attempt (begun at board position `since`), or None
        on timeout: one caused by the phase's own events, a commit, a cancel, or its lease expiring;
        or the refusal of one of the phase's own events that says the attempt is another's."""

        def found() -> DispatchDecision | Rejected | None:
            for d in self._settling.get(operation_id, ()):
                if d.state == S.CANCELLED:
                    return d
                if d.attempt_generation != generation:
                    continue
                if d.state == S.COMMITTED or d.source_event_id in sources:
                    return d
                lost_at = self._lease_lost_at.get((*operation_id, generation), 0)
                if d.reason == ReasonCode.LEASE_EXPIRED and lost_at > since:
                    return d
            for source in sources:
                refused = self._refusals.get(source)
                if refused is not None and refused.reason in PHASE_ENDING_REFUSALS:
                    return refused
            return None

        if not await self._wait(lambda: found() is not None, timeout_s):
            return None
        return found()

    async def state_after(
        self, operation_id: OperationKey, source_event_id: str, timeout_s: float, *, or_cancel: bool = False
    ) -> bool:
        """Wait until some decision caused by `source_event_id` was seen for the operation, or its
        refusal (or, with `or_cancel`, the operation is CANCELLED: an event the fold refuses in that
        state gets a rejection, never a decision, and the decision may reach this board first)."""
        return await self._wait(
            lambda: (
                self.caused(operation_id, source_event_id)
                or source_event_id in self._refusals
                or (or_cancel and self.cancelled(operation_id))
            ),
            timeout_s,
        )

    def caused(self, operation_id: OperationKey, source_event_id: str) -> bool:
        """Has a decision caused by `source_event_id` been seen for the operation?"""
        return self.answer(operation_id, source_event_id) is not None

    def answer(self, operation_id: OperationKey, source_event_id: str) -> DispatchDecision | None:
        """The first decision caused by `source_event_id`, whatever decisions of the operation came
        after it (another worker's refused CAS, say): the answer to a worker's own event."""
        found = self._answers.get(operation_id, {}).get(source_event_id)
        if found is None:
            settling = self._settling.get(operation_id, ())
            found = next((d for d in settling if d.source_event_id == source_event_id), None)
        latest = self.latest.get(operation_id)
        if found is None and latest is not None and latest.source_event_id == source_event_id:
            found = latest
        return found

    async def _wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """`asyncio.timeout`, not `wait_for`: CPython 3.11's `wait_for` returns the result instead of
        raising when its task is cancelled after the condition came true, and a cancelled operation
        task that runs on blind holds a rebalance up (tests/unit/gateway/test_board_cancellation.py)."""
        async with self._changed:
            if predicate():
                return True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._changed.wait_for(predicate)
            return predicate()
