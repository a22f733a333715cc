"""A least-recently-used cache bounded in the bytes its entries hold and in their number.

The engine's caches of what one dispatch leaves for the next (`adapters/prefix.py`'s rendered
prefixes, `dispatch/manifest_blocks.py`'s block listings) keep entries that say what they hold
(`held_bytes`). A lock keeps the bookkeeping whole if processors share one across threads.
Entries are immutable: a user reads one and puts a new one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar


class Held(Protocol):
    @property
    def held_bytes(self) -> int: ...


K = TypeVar("K", bound=Hashable)
E = TypeVar("E", bound=Held)


class BoundedCache(Generic[K, E]):
    """Entries by key, least recently used out first while they hold more than `max_bytes` or
    number more than `max_entries`; an entry larger than `max_bytes` alone is not kept."""

    def __init__(self, max_bytes: int, max_entries: int | None = None) -> None:
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self._bytes = 0
        self._entries: OrderedDict[K, E] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> E | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: K, entry: E) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.held_bytes
            if entry.held_bytes > self._max_bytes:
                return
            self._entries[key] = entry
            self._bytes += entry.held_bytes
            while self._bytes > self._max_bytes or self._over_count():
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.held_bytes

    def _over_count(self) -> bool:
        return self._max_entries is not None and len(self._entries) > self._max_entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        return self._bytes
