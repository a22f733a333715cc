"""Per-partition state stores and the batch overlay.

The changelog topic is the only durable copy of processor state. Local stores are
caches of it (`changelog.restore_from_changelog` rebuilds them), so a crash at any
point can never leave a local store ahead of or behind what Kafka committed.
`SqliteStateStore` keeps that cache on disk so that conversation state need not fit
in memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from turnledger.errors import StateStoreError
from turnledger.processors.contract import StateStore

Writes = Mapping[str, bytes | None]
"""Key → latest value, `None` meaning deleted (a tombstone in the changelog)."""


class Lineage:
    """What a base store and every overlay stacked on it share: a stamp that is replaced whenever
    writes made through them may have been dropped (an overlay discarded, the base cleared, a term
    that left its overlays behind).

    The engine caches the states it wrote, and before it trusts one it checked that the store still
    holds every key's bytes (`Stored.current`): ~8 reads through the overlays a record, ~10% of the
    engine's CPU on streamed records (issue 20). While the stamp is the one it wrote under, nothing
    it wrote was dropped, so it skips that check (`rollback_stamp`, dispatch/engine.py). A fresh
    `object()` per rollback: compared by identity, and never equal to a stamp still held."""

    __slots__ = ("stamp",)

    def __init__(self) -> None:
        self.stamp = object()

    def rolled_back(self) -> None:
        self.stamp = object()


class PartitionStore(StateStore, Protocol):
    """What the runtime needs beyond `StateStore`: bulk application of a committed batch, and the
    lineage its overlays share (`Lineage`)."""

    lineage: Lineage

    def apply(self, writes: Writes) -> None: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...


def _check(key: str, value: bytes | None = None) -> None:
    if not isinstance(key, str):
        raise TypeError(f"state keys are str (the fold's, e.g. conversation ids), got {type(key).__name__}")
    if value is not None and not isinstance(value, bytes):
        raise TypeError(f"state values are bytes, got {type(value).__name__}")


class MemoryStateStore:
    """A dict. For tests and for small deployments where state fits in memory."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self.lineage = Lineage()

    @property
    def rollback_stamp(self) -> object:
        return self.lineage.stamp

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    def put(self, key: str, value: bytes) -> None:
        _check(key, value)
        self._data[key] = value

    def delete(self, key: str) -> None:
        _check(key)
        self._data.pop(key, None)

    def apply(self, writes: Writes) -> None:
        for key, value in writes.items():
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value

    def clear(self) -> None:
        self._data.clear()
        self.lineage.rolled_back()

    def close(self) -> None:
        pass

    def items(self) -> Iterator[tuple[str, bytes]]:
        return iter(list(self._data.items()))

    def __len__(self) -> int:
        return len(self._data)


PAGE_CACHE_KIB = 4_000
"""SQLite's page cache per store. The interior pages of a store of 50k conversations (~150 MB) take
about 1.5 MB; leaf pages are rarely read twice from it, since the engine caches the decoded states.
At 16 MB a store, the two stores of the RSS benchmark held 24 MB more at 100k conversations (411 vs
387 MB peak) for no measurable throughput
(`bench_dispatch --phases rss --rss 100000:sqlite`, alternating: 2,926 / 2,252 vs 2,738 / 2,524 events/s)."""


READ_CACHE_ENTRIES = 10_000
"""Values a SQLite store keeps in its LRU read cache unless the fold asks otherwise (`read_cache_of`)."""


def read_cache_of(fold: object) -> int:
    """The read cache the fold asks its store for: its `store_read_cache` attribute, else
    `READ_CACHE_ENTRIES`. A fold that keeps its own decoded states asks 0, since cached values would hold
    the same conversations a second time (`DispatchPartitionFold`)."""
    entries = getattr(fold, "store_read_cache", READ_CACHE_ENTRIES)
    if not isinstance(entries, int) or isinstance(entries, bool) or entries < 0:
        raise StateStoreError(
            f"{type(fold).__name__}.store_read_cache must be a non-negative int, got {entries!r}"
        )
    return entries


class SqliteStateStore:
    """A key/value table in one SQLite file, with a bounded LRU read cache.

    Durability settings are deliberately weak (`synchronous=OFF`): the file is a cache
    of the changelog and is rebuilt on every start, so fsyncs would buy nothing.
    """

    def __init__(self, path: Path, *, cache_entries: int = READ_CACHE_ENTRIES) -> None:
        self.path = path
        self._cache: OrderedDict[str, bytes | None] = OrderedDict()
        self._cache_entries = cache_entries
        self.lineage = Lineage()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        page_cache = f"cache_size=-{PAGE_CACHE_KIB}"
        for pragma in ("journal_mode=WAL", "synchronous=OFF", "temp_store=MEMORY", page_cache):
            self._conn.execute(f"PRAGMA {pragma}")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"
        )

    def _remember(self, key: str, value: bytes | None) -> None:
        if self._cache_entries <= 0:
            return
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)

    @property
    def rollback_stamp(self) -> object:
        return self.lineage.stamp

    def get(self, key: str) -> bytes | None:
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        row = self._conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        value = None if row is None else bytes(row[0])
        self._remember(key, value)
        return value

    def put(self, key: str, value: bytes) -> None:
        self.apply({key: value})

    def delete(self, key: str) -> None:
        self.apply({key: None})

    def apply(self, writes: Writes) -> None:
        for key, value in writes.items():
            _check(key, value)
        puts = [(k, v) for k, v in writes.items() if v is not None]
        deletes = [(k,) for k, v in writes.items() if v is None]
        with self._transaction():
            if puts:
                self._conn.executemany(
                    "INSERT INTO kv (key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    puts,
                )
            if deletes:
                self._conn.executemany("DELETE FROM kv WHERE key = ?", deletes)
        for key, value in writes.items():
            self._remember(key, value)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def clear(self) -> None:
        self._conn.execute("DELETE FROM kv")
        self._cache.clear()
        self.lineage.rolled_back()

    def close(self) -> None:
        self._conn.close()

    def items(self) -> Iterator[tuple[str, bytes]]:
        for key, value in self._conn.execute("SELECT key, value FROM kv ORDER BY key"):
            yield key, bytes(value)

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0])


class OverlayStore:
    """Batch-scoped writes layered over a base store; nothing reaches the base until `commit()`.

    The runtime gives the fold an overlay per batch. The overlay's dirty keys become
    the batch's changelog records, and `commit()` is called only after the Kafka
    transaction committed, so an aborted transaction leaves the base store exactly at
    the last committed state (`discard()`). Overlays stack: the per-record retry of a
    poisoned batch puts one overlay per record on top of the batch overlay.

    Every overlay shares its base's `Lineage` (none when the base has none: then it offers no
    stamp, and the engine checks every cached state against the store), and a discard rolls it back.
    """

    def __init__(self, base: StateStore) -> None:
        self._base = base
        self._writes: dict[str, bytes | None] = {}
        self.lineage: Lineage | None = getattr(base, "lineage", None)

    @property
    def rollback_stamp(self) -> object | None:
        """The lineage's stamp (`Lineage`), None without one."""
        return None if self.lineage is None else self.lineage.stamp

    def get(self, key: str) -> bytes | None:
        if key in self._writes:
            return self._writes[key]
        return self._base.get(key)

    def put(self, key: str, value: bytes) -> None:
        if isinstance(value, bytearray | memoryview):
            value = bytes(value)
        _check(key, value)
        self._writes[key] = value

    def delete(self, key: str) -> None:
        _check(key)
        self._writes[key] = None

    @property
    def dirty(self) -> Writes:
        return self._writes

    def commit(self) -> None:
        """Push the writes one layer down and forget them."""
        base = self._base
        if isinstance(base, OverlayStore):
            base._writes.update(self._writes)
        elif hasattr(base, "apply"):
            base.apply(self._writes)
        else:
            for key, value in self._writes.items():
                if value is None:
                    base.delete(key)
                else:
                    base.put(key, value)
        self._writes = {}

    def discard(self) -> None:
        self._writes = {}
        if self.lineage is not None:
            self.lineage.rolled_back()

    def rebase(self, base: StateStore) -> None:
        """Read through and commit into `base` from now on: the overlay this one was stacked on has
        committed into `base` (pipelined commits, processors/partition.py)."""
        self._base = base
        self.lineage = getattr(base, "lineage", None)


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def open_partition_store(
    state_dir: Path | None, changelog_topic: str, partition: int, read_cache: int = READ_CACHE_ENTRIES
) -> PartitionStore:
    """A fresh, empty store for one partition: in memory without `state_dir`, else a SQLite file in it
    that keeps `read_cache` values in its LRU.

    The file name carries this process's pid, so two processes on the same partition
    (a zombie and its successor, during fencing) never share a file; files left by dead
    processes are removed here.
    """
    if state_dir is None:
        return MemoryStateStore()
    stem = f"{_SAFE.sub('_', changelog_topic)}-{partition}"
    path = state_dir / f"{stem}.{os.getpid()}.sqlite"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        for stale in state_dir.glob(f"{stem}.*.sqlite*"):
            pid = stale.name[len(stem) + 1 :].split(".", 1)[0]
            if pid.isdigit() and (int(pid) == os.getpid() or not _pid_alive(int(pid))):
                stale.unlink(missing_ok=True)
        return SqliteStateStore(path, cache_entries=read_cache)
    except (OSError, sqlite3.Error) as exc:
        raise StateStoreError(
            f"cannot open the state store of partition {partition} at {path}: {exc} "
            "(--state-dir must be a directory this process can create files in)"
        ) from exc
