"""Gathering one transaction's worth of input: a batch bounded in records and in the latency it adds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from turnledger.records import SourceRecord

Fetch = Callable[[int, int], Awaitable[list[SourceRecord]]]
"""(timeout_ms, max_records) → the records available now, waiting at most timeout_ms for the first one."""

CLOSE_POLL_MS = 5
"""How often a batch waiting on `close_when` looks at it again: the latency that waiting can add."""


async def collect_batch(
    fetch: Fetch,
    *,
    max_records: int,
    max_ms: int,
    stop: asyncio.Event,
    idle_poll_ms: int = 100,
    clock: Callable[[], float] = time.monotonic,
    close_when: Callable[[], bool] | None = None,
    close_poll_ms: int = CLOSE_POLL_MS,
    on_records: Callable[[list[SourceRecord]], None] | None = None,
) -> list[SourceRecord]:
    """Gather up to `max_records`, for at most `max_ms` counted from the first record's arrival.

    Counting from the first record bounds the latency a batch adds to any record without
    committing empty transactions while idle. Returns `[]` after one idle poll so the
    caller can notice `stop`; once `stop` is set it returns what it has at once.

    With `close_when`, a batch that holds a record also closes as soon as `close_when()` is
    true (checked after every fetch, fetches then waiting at most `close_poll_ms`): group
    commit. The pipelined runtime passes "the previous commit has ended", so a batch is what
    arrived during one commit: small and quick when the load is light, larger as it grows,
    and never waiting out `max_ms` for a transaction that could already begin.

    `on_records` is called with the records of every fetch as they arrive, so the caller can fold
    a batch while it is still being gathered (an exception from it ends the gathering).
    """
    batch: list[SourceRecord] = []
    deadline: float | None = None
    while len(batch) < max_records and not stop.is_set():
        if deadline is None:
            timeout_ms = idle_poll_ms
        else:
            if close_when is not None and close_when():
                break
            remaining_ms = int((deadline - clock()) * 1000)
            if remaining_ms <= 0:
                break
            timeout_ms = min(remaining_ms, idle_poll_ms if close_when is None else close_poll_ms)
        records = await fetch(timeout_ms, max_records - len(batch))
        if records:
            if deadline is None:
                deadline = clock() + max_ms / 1000
            batch.extend(records)
            if on_records is not None:
                on_records(records)
        elif deadline is None:
            break
    return batch
