"""The processor's collector settings (`processors/gc_tuning.py`): what survives is frozen, the young
generation's threshold raised, never lowered."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from turnledger.processors.gc_tuning import GC_GEN0_THRESHOLD, tune_gc


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_the_threshold_is_ten_thousand() -> None:
    assert GC_GEN0_THRESHOLD == 10_000


@pytest.mark.usefixtures("collector")
def test_the_young_threshold_is_raised_and_the_older_ones_kept() -> None:
    gc.set_threshold(700, 11, 12)
    tune_gc()
    assert gc.get_threshold() == (10_000, 11, 12)


@pytest.mark.usefixtures("collector")
@pytest.mark.parametrize(("before", "asked", "after"), [(700, 5_000, 5_000), (20_000, 5_000, 20_000)])
def test_the_young_threshold_is_never_lowered(before: int, asked: int, after: int) -> None:
    gc.set_threshold(before, 10, 10)
    tune_gc(asked)
    assert gc.get_threshold() == (after, 10, 10)


@pytest.mark.usefixtures("collector")
def test_cyclic_garbage_is_collected_first_and_what_survives_frozen() -> None:
    gc.unfreeze()

    class Node:
        def __init__(self) -> None:
            self.me = self

    garbage = weakref.ref(Node())
    kept = Node()
    tune_gc()
    assert garbage() is None
    assert gc.get_freeze_count() > 0
    assert kept.me is kept
