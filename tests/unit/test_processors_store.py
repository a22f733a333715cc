"""Overlay/rollback semantics and the two state stores, without a broker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from turnledger.processors.store import (
    PAGE_CACHE_KIB,
    MemoryStateStore,
    OverlayStore,
    SqliteStateStore,
    open_partition_store,
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
