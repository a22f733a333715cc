"""Gathering one transaction's worth of input: a batch bounded in records and in the latency it adds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from turnledger.records import SourceRecord

Fetch = Callable[[int, int], Awaitable[list[SourceRecord]]]
"""(timeout_ms, max_records) → the records available now, waiting at most timeout_ms for the first one."""


async def collect_batch(
    fetch: Fetch,
    *,
    max_records: int,
    max_ms: int,
    stop: asyncio.Event,
    idle_poll_ms: int = 100,
    clock: Callable[[], float] = time.monotonic,
) -> list[SourceRecord]:
    """Gather up to `max_records`, for at most `max_ms` counted from the first record's arrival.

    Counting from the first record bounds the latency a batch adds to any record without
    committing empty transactions while idle. Returns `[]` after one idle poll so the
    caller can notice `stop`; once `stop` is set it returns what it has at once.
    """
    batch: list[SourceRecord] = []
    deadline: float | None = None
    while len(batch) < max_records and not stop.is_set():
        if deadline is None:
            timeout_ms = idle_poll_ms
        else:
            remaining_ms = int((deadline - clock()) * 1000)
            if remaining_ms <= 0:
                break
            timeout_ms = min(remaining_ms, idle_poll_ms)
        records = await fetch(timeout_ms, max_records - len(batch))
        if records:
            if deadline is None:
                deadline = clock() + max_ms / 1000
            batch.extend(records)
        elif deadline is None:
            break
    return batch
