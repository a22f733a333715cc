"""The LRU under the engine's render and listing caches (`model/bounded_cache.py`): its byte and
entry bounds, what a replaced entry gives back, and an entry too large to keep."""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.model.bounded_cache import BoundedCache


@dataclass(frozen=True)
class Sized:
    held_bytes: int


def test_the_least_recently_used_go_first_when_the_bytes_are_over() -> None:
    cache: BoundedCache[str, Sized] = BoundedCache(max_bytes=100)
    for key in "abc":
        cache.put(key, Sized(30))
    assert cache.get("a") == Sized(30)  # a is now the most recent: b goes first
    cache.put("d", Sized(30))
    assert (len(cache), cache.held_bytes) == (3, 90)
    assert [k for k in "abcd" if cache.get(k) is not None] == ["a", "c", "d"]


def test_a_replaced_entry_gives_its_bytes_back() -> None:
    cache: BoundedCache[str, Sized] = BoundedCache(max_bytes=100)
    cache.put("a", Sized(60))
    cache.put("a", Sized(50))
    assert (len(cache), cache.held_bytes, cache.get("a")) == (1, 50, Sized(50))
    cache.put("b", Sized(50))  # 100: at the bound, nothing goes
    assert (len(cache), cache.held_bytes) == (2, 100)
    cache.put("a", Sized(10))
    assert (len(cache), cache.held_bytes, cache.get("b")) == (2, 60, Sized(50))


def test_an_entry_larger_than_the_bound_is_not_kept_and_drops_the_one_it_replaces() -> None:
    cache: BoundedCache[str, Sized] = BoundedCache(max_bytes=100)
    cache.put("a", Sized(100))  # exactly the bound: kept
    assert (len(cache), cache.held_bytes) == (1, 100)
    cache.put("a", Sized(101))
    assert (len(cache), cache.held_bytes, cache.get("a")) == (0, 0, None)


def test_the_entry_bound_counts_entries_whatever_their_bytes() -> None:
    cache: BoundedCache[int, Sized] = BoundedCache(max_bytes=1_000, max_entries=2)
    for key in range(4):
        cache.put(key, Sized(1))
    assert (len(cache), cache.held_bytes, cache.get(2), cache.get(3), cache.get(1)) == (
        2,
        2,
        Sized(1),
        Sized(1),
        None,
    )
    unbounded: BoundedCache[int, Sized] = BoundedCache(max_bytes=1_000)
    for key in range(50):
        unbounded.put(key, Sized(1))
    assert (len(unbounded), unbounded.held_bytes) == (50, 50)
