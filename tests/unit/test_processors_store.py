"""Overlay/rollback semantics and the two state stores, without a broker."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from turnledger.errors import ProcessorError, StateStoreError
from turnledger.processors.store import (
    PAGE_CACHE_KIB,
    READ_CACHE_ENTRIES,
    MemoryStateStore,
    OverlayStore,
    SqliteStateStore,
    open_partition_store,
    read_cache_of,
)
from turnledger.replay.memory_store import MemoryStore


@pytest.fixture(params=["memory", "sqlite"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStateStore | SqliteStateStore:
    if request.param == "memory":
        return MemoryStateStore()
    store = SqliteStateStore(tmp_path / "s.sqlite", cache_entries=2)
    request.addfinalizer(store.close)
    return store


def test_overlay_reads_its_writes_and_leaves_base_alone(base: MemoryStateStore | SqliteStateStore) -> None:
    base.put("a", b"1")
    base.put("b", b"2")
    overlay = OverlayStore(base)
    overlay.put("a", b"10")
    overlay.delete("b")
    overlay.put("c", b"3")
    assert (overlay.get("a"), overlay.get("b"), overlay.get("c")) == (b"10", None, b"3")
    assert (base.get("a"), base.get("b"), base.get("c")) == (b"1", b"2", None)
    assert dict(overlay.dirty) == {"a": b"10", "b": None, "c": b"3"}


def test_discard_rolls_back_to_last_committed(base: MemoryStateStore | SqliteStateStore) -> None:
    base.put("a", b"1")
    overlay = OverlayStore(base)
    overlay.put("a", b"2")
    overlay.delete("a")
    overlay.discard()
    assert overlay.get("a") == b"1"
    assert dict(overlay.dirty) == {}
    assert dict(base.items()) == {"a": b"1"}


def test_commit_applies_puts_and_deletes(base: MemoryStateStore | SqliteStateStore) -> None:
    base.put("a", b"1")
    base.put("b", b"2")
    overlay = OverlayStore(base)
    overlay.put("a", b"9")
    overlay.delete("b")
    overlay.put("c", b"3")
    overlay.commit()
    assert dict(base.items()) == {"a": b"9", "c": b"3"}
    assert len(base) == 2
    assert dict(overlay.dirty) == {}


def test_stacked_overlay_commits_into_parent_only(base: MemoryStateStore | SqliteStateStore) -> None:
    batch = OverlayStore(base)
    batch.put("a", b"1")
    good = OverlayStore(batch)
    good.put("b", b"2")
    good.commit()
    bad = OverlayStore(batch)
    bad.put("a", b"poison")
    bad.put("z", b"poison")
    bad.discard()
    assert dict(batch.dirty) == {"a": b"1", "b": b"2"}
    assert base.get("a") is None
    batch.commit()
    assert dict(base.items()) == {"a": b"1", "b": b"2"}


def test_overlays_share_their_base_lineage_and_only_a_rollback_replaces_its_stamp(
    base: MemoryStateStore | SqliteStateStore,
) -> None:
    """The stamp the engine trusts its cached states by (dispatch/engine.py): the same object through
    every layer while writes are only committed, a new one once any may have been dropped."""
    start = base.rollback_stamp
    batch = OverlayStore(base)
    layer = OverlayStore(batch)
    assert batch.lineage is layer.lineage is base.lineage
    assert layer.rollback_stamp is batch.rollback_stamp is start
    layer.put("a", b"1")
    layer.commit()
    batch.put("b", b"2")
    batch.commit()
    base.put("c", b"3")
    base.delete("c")
    base.apply({"d": b"4"})
    assert base.rollback_stamp is start  # commits and the fold's own writes keep it
    poisoned = OverlayStore(batch)
    poisoned.discard()
    after_discard = base.rollback_stamp
    assert after_discard is not start
    assert batch.rollback_stamp is layer.rollback_stamp is after_discard
    base.clear()
    assert base.rollback_stamp is not after_discard
    base.lineage.rolled_back()  # what a term that keeps the store does (processors/partition.py)
    assert len({id(start), id(after_discard), id(base.rollback_stamp)}) == 3


def test_an_overlay_on_a_store_without_lineage_offers_no_stamp() -> None:
    overlay = OverlayStore(MemoryStore())  # the replay's store: no lineage
    assert overlay.lineage is None and overlay.rollback_stamp is None
    overlay.discard()
    assert overlay.rollback_stamp is None


def test_a_rebased_overlay_takes_its_new_base_lineage() -> None:
    old, new = MemoryStateStore(), MemoryStateStore()
    overlay = OverlayStore(old)
    overlay.rebase(new)
    assert overlay.lineage is new.lineage
    assert overlay.rollback_stamp is new.rollback_stamp is not old.rollback_stamp


def test_overlay_rejects_wrong_types() -> None:
    overlay = OverlayStore(MemoryStateStore())
    with pytest.raises(TypeError):
        overlay.put(b"bytes-key", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        overlay.put("k", "text")  # type: ignore[arg-type]
    overlay.put("k", bytearray(b"v"))  # type: ignore[arg-type]
    assert overlay.get("k") == b"v"


def test_sqlite_cache_stays_coherent(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "c.sqlite", cache_entries=2)
    for i in range(10):
        store.put(f"k{i}", str(i).encode())
    assert store.get("k0") == b"0"
    assert store.get("missing") is None
    store.apply({"k0": None, "missing": b"x"})
    assert store.get("k0") is None
    assert store.get("missing") == b"x"
    store.clear()
    assert store.get("k1") is None
    assert len(store) == 0
    store.close()


def test_sqlite_holds_more_than_its_cache(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "big.sqlite", cache_entries=100)
    store.apply({f"conv-{i}": os.urandom(8) + i.to_bytes(4, "big") for i in range(20_000)})
    assert len(store) == 20_000
    assert store.get("conv-19999") is not None and store.get("conv-19999")[-4:] == (19999).to_bytes(4, "big")  # type: ignore[index]
    store.close()


def test_sqlite_page_cache_is_bounded_to_its_budget(tmp_path: Path) -> None:
    """The page cache was 16 MB a store, 24 MB of the processor's RSS at 100k conversations."""
    store = SqliteStateStore(tmp_path / "pages.sqlite")
    assert PAGE_CACHE_KIB == 4_000
    assert store._conn.execute("PRAGMA cache_size").fetchone() == (-PAGE_CACHE_KIB,)
    store.close()


def test_open_partition_store_is_per_process_and_removes_dead_files(tmp_path: Path) -> None:
    stale = tmp_path / "p.turnledger.changelog-3.999999999.sqlite"
    stale.write_bytes(b"junk")
    other_partition = tmp_path / "p.turnledger.changelog-4.999999999.sqlite"
    other_partition.write_bytes(b"junk")
    store = open_partition_store(tmp_path, "p.turnledger.changelog", 3)
    assert isinstance(store, SqliteStateStore)
    assert store.path.name == f"p.turnledger.changelog-3.{os.getpid()}.sqlite"
    assert not stale.exists()
    assert other_partition.exists()
    store.close()
    assert isinstance(open_partition_store(None, "x", 0), MemoryStateStore)
    sized = open_partition_store(tmp_path, "p.turnledger.changelog", 5, read_cache=3)
    assert isinstance(sized, SqliteStateStore) and sized._cache_entries == 3
    sized.apply({"a": b"1", "b": b"2", "c": b"3", "d": b"4"})
    assert list(sized._cache) == ["b", "c", "d"]
    sized.close()


class _Asks:
    def __init__(self, entries: object) -> None:
        self.store_read_cache = entries


def test_a_fold_sizes_its_stores_read_cache_and_a_bad_size_is_a_typed_error() -> None:
    """`store_read_cache` on the fold, else the default; the dispatch fold, whose engine keeps the
    decoded states, asks for none."""
    from turnledger.processors.dispatch_partition import DispatchPartitionFold

    assert READ_CACHE_ENTRIES == 10_000
    assert read_cache_of(object()) == READ_CACHE_ENTRIES
    assert [read_cache_of(_Asks(n)) for n in (0, 1, 250)] == [0, 1, 250]
    assert read_cache_of(DispatchPartitionFold) == 0
    for bad in (-1, True, "3", 2.0, None):
        with pytest.raises(StateStoreError, match=r"_Asks.store_read_cache must be a non-negative int, got "):
            read_cache_of(_Asks(bad))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        (b"k", b"v", "state keys are str (the fold's, e.g. conversation ids), got bytes"),
        ("k", "v", "state values are bytes, got str"),
        ("k", bytearray(b"v"), "state values are bytes, got bytearray"),
    ],
)
def test_every_store_refuses_a_key_or_value_of_the_wrong_type_by_name(
    base: MemoryStateStore | SqliteStateStore, key: object, value: object, words: str
) -> None:
    """A fold that writes anything but str → bytes is told which of the two it got wrong; nothing is
    written. (The overlay turns a bytearray into bytes first; a store takes bytes only.)"""
    with pytest.raises(TypeError) as info:
        base.put(key, value)  # type: ignore[arg-type]
    assert str(info.value) == words
    with pytest.raises(TypeError) as info:
        base.delete(b"k")  # type: ignore[arg-type]
    assert str(info.value) == "state keys are str (the fold's, e.g. conversation ids), got bytes"
    assert len(base) == 0


def test_a_delete_removes_its_key_and_one_of_a_key_never_written_is_a_no_op(
    base: MemoryStateStore | SqliteStateStore,
) -> None:
    """A tombstone may name a key the store never held (a conversation created and deleted in one
    batch, restored from a compacted changelog): applying it changes nothing and does not raise."""
    base.put("a", b"1")
    base.put("c", b"3")
    base.delete("c")
    base.delete("never")
    base.apply({"gone": None, "b": b"2"})
    assert list(base.items()) == [("a", b"1"), ("b", b"2")]
    assert len(base) == 2


def test_items_are_every_key_with_its_bytes_a_snapshot_safe_to_write_under(
    base: MemoryStateStore | SqliteStateStore,
) -> None:
    """`items()` yields (str, bytes) pairs, the SQLite store in key order; the memory store's is a copy,
    so writing while iterating neither raises nor changes what is yielded."""
    base.apply({"b": b"2", "a": b"1", "c": b"3"})
    seen = []
    for key, value in base.items():
        seen.append((key, value))
        if isinstance(base, MemoryStateStore):
            base.put(f"{key}-new", value)
    ordered = [("a", b"1"), ("b", b"2"), ("c", b"3")]
    assert sorted(seen) == ordered
    if isinstance(base, SqliteStateStore):
        assert seen == ordered
        assert all(type(v) is bytes for _k, v in seen)


def test_clear_forgets_every_value_including_the_cached_ones(
    base: MemoryStateStore | SqliteStateStore,
) -> None:
    """A value read (and so cached) before `clear()` is gone after it, and the store takes writes again."""
    base.put("a", b"1")
    assert base.get("a") == b"1"
    base.clear()
    assert base.get("a") is None
    assert len(base) == 0
    base.put("a", b"2")
    assert base.get("a") == b"2"


def test_a_base_without_apply_gets_the_overlays_puts_and_deletes_one_by_one() -> None:
    """The replay's store has only get/put/delete: a commit into it puts each value and deletes each
    tombstone, and leaves the overlay empty."""
    base = MemoryStore()
    base.put("gone", b"0")
    overlay = OverlayStore(base)
    overlay.put("a", b"1")
    overlay.delete("gone")
    overlay.commit()
    assert base.values == {"a": b"1"}
    assert dict(overlay.dirty) == {}


def test_an_overlay_takes_a_memoryview_as_its_bytes() -> None:
    overlay = OverlayStore(MemoryStateStore())
    overlay.put("k", memoryview(b"mv"))  # type: ignore[arg-type]
    assert overlay.get("k") == b"mv" and type(overlay.dirty["k"]) is bytes


def test_a_rebased_overlay_reads_through_and_commits_into_its_new_base() -> None:
    old, new = MemoryStateStore(), MemoryStateStore()
    old.put("k", b"old")
    new.put("k", b"new")
    overlay = OverlayStore(old)
    overlay.rebase(new)
    assert overlay.get("k") == b"new"
    overlay.put("j", b"1")
    overlay.commit()
    assert dict(new.items()) == {"k": b"new", "j": b"1"}
    assert dict(old.items()) == {"k": b"old"}


def test_sqlite_runs_as_a_cache_of_the_changelog(tmp_path: Path) -> None:
    """The file is rebuilt from the changelog on every start, so it is written without fsyncs (WAL,
    `synchronous=OFF`, temporary tables in memory)."""
    store = SqliteStateStore(tmp_path / "pragmas.sqlite")
    pragmas = {
        name: store._conn.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("journal_mode", "synchronous", "temp_store")
    }
    assert pragmas == {"journal_mode": "wal", "synchronous": 0, "temp_store": 2}
    store.close()


def test_the_sqlite_read_cache_keeps_the_most_recently_used_values(tmp_path: Path) -> None:
    """The LRU holds `cache_entries` values (10,000 by default), a read or a write making its key the
    most recent, the least recent evicted first; a miss is cached too (as None)."""
    store = SqliteStateStore(tmp_path / "lru.sqlite", cache_entries=3)
    store.apply({"a": b"1", "b": b"2", "c": b"3"})
    assert store.get("a") == b"1"  # a is now the most recent: b goes first
    store.put("d", b"4")
    assert list(store._cache.items()) == [("c", b"3"), ("a", b"1"), ("d", b"4")]
    assert store.get("missing") is None
    assert list(store._cache.items()) == [("a", b"1"), ("d", b"4"), ("missing", None)]
    assert store.get("b") == b"2"  # evicted, read back from the file
    store.put("d", b"5")  # a write of a cached key makes it the most recent too
    assert list(store._cache.items()) == [("missing", None), ("b", b"2"), ("d", b"5")]
    store.close()
    single = SqliteStateStore(tmp_path / "single.sqlite", cache_entries=1)
    single.apply({"a": b"1", "b": b"2"})
    assert list(single._cache.items()) == [("b", b"2")]
    single.close()
    default = SqliteStateStore(tmp_path / "default.sqlite")
    default.apply({f"k{i}": b"v" for i in range(10_001)})
    assert len(default._cache) == 10_000 and "k0" not in default._cache and "k1" in default._cache
    default.close()
    uncached = SqliteStateStore(tmp_path / "uncached.sqlite", cache_entries=0)
    uncached.put("a", b"1")
    assert uncached.get("a") == b"1" and len(uncached._cache) == 0
    uncached.close()


def test_a_sqlite_apply_that_fails_half_way_writes_nothing(tmp_path: Path) -> None:
    """A batch applies all or nothing: a key SQLite cannot store (a lone surrogate is not UTF-8) rolls
    back the puts before it, raises the error itself, and the store takes the next batch."""
    store = SqliteStateStore(tmp_path / "atomic.sqlite")
    store.put("kept", b"0")
    with pytest.raises(UnicodeEncodeError):
        store.apply({"a": b"1", "\ud800": b"2"})
    with pytest.raises(UnicodeEncodeError):
        store.apply({"kept": None, "\ud800": None})
    store._cache.clear()  # what the file holds, not what was cached
    assert (store.get("a"), store.get("kept")) == (None, b"0")
    store.apply({"b": b"3"})
    assert list(store.items()) == [("b", b"3"), ("kept", b"0")]
    store.close()


def test_open_partition_store_names_its_file_after_a_safe_topic_and_makes_its_directory(
    tmp_path: Path,
) -> None:
    """A topic name's characters other than letters, digits, `.`, `_` and `-` become `_`; a missing
    state directory (and its parents) is created."""
    state_dir = tmp_path / "a" / "b"
    store = open_partition_store(state_dir, "p/x y:z.log_1-2", 7)
    assert isinstance(store, SqliteStateStore)
    assert store.path == state_dir / f"p_x_y_z.log_1-2-7.{os.getpid()}.sqlite"
    store.close()


def test_open_partition_store_keeps_live_processes_files_and_drops_its_own_and_the_deads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live process's file (and its WAL) is its own, as is one of a process we may not signal
    (another user's); a dead process's files, with their `-wal` and `-shm`, and a file this pid left
    earlier go; a name whose pid is not a number is not ours to judge. Liveness is asked with signal
    0, which only checks."""
    signalled: list[tuple[int, int]] = []

    def kill(pid: int, signal: int) -> None:
        signalled.append((pid, signal))
        if pid == 333:
            raise PermissionError(pid)
        if pid not in (111, os.getpid()):
            raise ProcessLookupError(pid)

    monkeypatch.setattr(os, "kill", kill)
    stem = "log-0"
    kept = [
        tmp_path / f"{stem}.111.sqlite",
        tmp_path / f"{stem}.111.sqlite-wal",
        tmp_path / f"{stem}.333.sqlite",
        tmp_path / f"{stem}.x1.sqlite",
        tmp_path / f"{stem}1.222.sqlite",  # another partition's
    ]
    dropped = [tmp_path / f"{stem}.222.sqlite-wal", tmp_path / f"{stem}.222.sqlite-shm"]
    mine = tmp_path / f"{stem}.{os.getpid()}.sqlite"
    for path in [*kept, *dropped, mine]:
        path.write_bytes(b"not a database")
    store = open_partition_store(tmp_path, "log", 0)
    assert isinstance(store, SqliteStateStore)
    assert [p.exists() for p in kept] == [True] * 5
    assert [p.exists() for p in dropped] == [False, False]
    assert store.path == mine and len(store) == 0  # a fresh file, not the junk
    assert {signal for _pid, signal in signalled} == {0}
    assert sorted({pid for pid, _signal in signalled}) == [111, 222, 333]
    store.close()


def test_a_state_dir_that_is_a_file_is_a_state_store_error_naming_the_path(tmp_path: Path) -> None:
    """A disk fault is no Kafka outage: the processor must not wait for it to pass (`kafka_outage`
    counts every OSError as one), so the store's OSError becomes a typed error that says what to fix."""
    taken = tmp_path / "state"
    taken.write_text("not a directory")
    with pytest.raises(StateStoreError) as raised:
        open_partition_store(taken, "log", 2)
    assert isinstance(raised.value, ProcessorError) and not isinstance(raised.value, OSError)
    assert isinstance(raised.value.__cause__, FileExistsError)
    assert str(raised.value) == (
        f"cannot open the state store of partition 2 at {taken}/log-2.{os.getpid()}.sqlite: "
        f"{raised.value.__cause__} (--state-dir must be a directory this process can create files in)"
    )


def test_a_store_file_sqlite_cannot_open_is_a_state_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(sqlite3, "connect", full)
    with pytest.raises(StateStoreError) as raised:
        open_partition_store(tmp_path, "log", 0)
    assert str(raised.value).startswith(
        f"cannot open the state store of partition 0 at {tmp_path}/log-0.{os.getpid()}.sqlite: "
        "database or disk is full ("
    )


def test_a_stale_file_another_process_removed_first_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes starting on a partition may both find a dead process's file: whichever unlinks
    it second finds it gone, and opens its store all the same."""
    vanished = tmp_path / "log-0.999999999.sqlite"

    def dead(pid: int, signal: int) -> None:
        raise ProcessLookupError(pid)

    monkeypatch.setattr(os, "kill", dead)
    monkeypatch.setattr(Path, "glob", lambda self, pattern: iter([vanished]))
    store = open_partition_store(tmp_path, "log", 0)
    assert isinstance(store, SqliteStateStore) and len(store) == 0
    store.close()


def test_an_overlay_commits_into_a_sqlite_store_in_one_transaction(tmp_path: Path) -> None:
    """A batch's writes reach the SQLite store all or nothing: a key it cannot store (a lone surrogate
    is not UTF-8) leaves none of the batch's other writes behind."""
    base = SqliteStateStore(tmp_path / "overlay.sqlite")
    overlay = OverlayStore(base)
    overlay.put("a", b"1")
    overlay.put("\ud800", b"2")
    with pytest.raises(UnicodeEncodeError):
        overlay.commit()
    base._cache.clear()
    assert (base.get("a"), len(base)) == (None, 0)
    base.close()


def test_an_overlay_rebased_onto_a_store_without_lineage_has_none() -> None:
    overlay = OverlayStore(MemoryStateStore())
    overlay.rebase(MemoryStore())
    assert overlay.lineage is None and overlay.rollback_stamp is None
