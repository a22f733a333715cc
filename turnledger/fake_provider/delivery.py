"""Putting a script's events on the wire, with the delivery faults applied.

Delivery faults change what one connection sees, never what was generated: a duplicated event, a
dropped terminal event, re-sent late events, a pause before every event, a cut after exactly N body
bytes, a connection held open after the last event (`hold`). For a background response the same
delivery follows the generation live: each event waits until the generation has produced it (the
`gate`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from turnledger.fake_provider.eventstream import EventStreamEvent
from turnledger.fake_provider.httpio import ResponseWriter
from turnledger.fake_provider.sse import SseEvent

WireEvent = SseEvent | EventStreamEvent


class HoldEnd(StrEnum):
    """How a connection held open after its last event (the `hold_open` fault) ended."""

    CLIENT_CLOSED = "client closed"
    TIME_UP = "time up"


class HoldRecord(NamedTuple):
    """One held connection: which request, how the hold ended, after how many seconds."""

    request_id: str
    ended: HoldEnd
    held_s: float


@dataclass(frozen=True, slots=True)
class Planned:
    """An event to send; `gate` is the script index that must be generated first (None: no wait)."""

    event: WireEvent
    gate: int | None = None


def plan(
    events: Sequence[WireEvent],
    *,
    start: int = 0,
    duplicate: int | None = None,
    drop_terminal: bool = False,
    late: Sequence[WireEvent] | None = None,
    gated: bool = False,
) -> list[Planned]:
    """The events one connection will see: late ones first, then events[start:] with the faults."""
    out = [Planned(e) for e in (late or [])]
    for i in range(start, len(events)):
        ev = events[i]
        if drop_terminal and ev.terminal:
            continue
        gate = i if gated else None
        out.append(Planned(ev, gate))
        if duplicate == i:
            out.append(Planned(ev, gate))
    return out


def planned_bytes(planned: list[Planned]) -> int:
    return sum(len(p.event.encode()) for p in planned)


async def deliver(
    out: ResponseWriter,
    planned: list[Planned],
    *,
    disconnect_at: int | None = None,
    delay_s: float = 0.0,
    wait_for: Callable[[int], Awaitable[bool]] | None = None,
    hold: Callable[[], Awaitable[HoldEnd]] | None = None,
) -> bool:
    """Send the planned events; True if every one was sent (the stream ended normally, or was held
    open after its last event), False if it was cut on purpose.

    `wait_for(i)` resolves True once script event i exists, False if it never will (cancelled).
    `hold()`, after the last event: keeps the connection open, sending nothing; the body is ended
    only when the hold's time is up, never on a connection the client closed meanwhile.
    """
    await out.start_stream()
    for p in planned:
        if p.gate is not None and wait_for is not None and not await wait_for(p.gate):
            break
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        data = p.event.encode()
        if disconnect_at is not None:
            remaining = disconnect_at - out.body_bytes_sent
            if len(data) > remaining:
                if remaining > 0:
                    await out.write_partial_chunk(data[:remaining])
                return False
            await out.write_chunk(data)
            if len(data) == remaining:
                return False
            continue
        await out.write_chunk(data)
    if disconnect_at is not None and out.body_bytes_sent <= disconnect_at:
        return False  # the body ended at or before the cut: still close without the final chunk
    if hold is not None and await hold() is HoldEnd.CLIENT_CLOSED:
        return True
    await out.end_stream()
    return True
