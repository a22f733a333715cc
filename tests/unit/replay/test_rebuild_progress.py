"""`replay rebuild` tells its progress a phase at a time: the keys its drop deleted ("dropping", what
`drop_projection` tells, tested in `test_snapshot.py`; the verification's own drops tell nothing), the
projection's read of the output topics ("projecting", what `Projector.run_to_end` tells, tested in
`test_projector_run.py`), then, verifying, the ingress offsets of the fresh fold ("folding", the
refold's read on topics in memory) and the keys of both projections read to compare them ("comparing",
what `compare_projections` tells, tested in `test_snapshot.py`). Redis, the projectors, the drops and the
comparison are faked; the rebuild's Redis side has its own integration tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from tests.unit.replay.fake_topics import FakeTopics
from tests.unit.replay.test_audit_reads import INGRESS, _ingress
from turnledger.kafka.reading import ReadProgress
from turnledger.processors import model_registry
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import ProjectorStats
from turnledger.replay import rebuild as module
from turnledger.replay.rebuild import VERIFY_PREFIX, rebuild
from turnledger.topology import Topics

KEYS = ProjectionKeys("tl:")
REDIS: Any = object()
"""The rebuild's Redis client, which only the faked parts are handed (`test_rebuild.py` checks they are)."""
STATS = ProjectorStats(applied=6)
FOLDED = 3
"""The engine's outputs for conversation A's two ingress records, read in two batches of one."""


class Faked:
    """The rebuild's Redis side: what was dropped and projected, and the progress the projector got."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dropped: list[str] = []
        self.drops_told: list[bool] = []
        """Whether each drop was given a progress."""
        self.projected: list[tuple[str, ProjectionKeys, bool]] = []
        """(what, keys, whether it was given a progress)"""
        self.compared: list[tuple[str, str, bool]] = []
        """(the first projection's prefix, the second's, whether it was given a progress)"""
        self.calls: list[tuple[Any, ...]] = []
        """Each part's name and what it was handed (of keys, their prefixes), in order."""
        self.differences: list[str] = []
        """What the comparison finds."""
        records = _ingress("A")
        self.topics = FakeTopics({INGRESS: [records[:1], records[1:]]})
        self.topics.install(monkeypatch, "turnledger.replay.refold")
        faked = self

        class Projector:
            def __init__(self, redis: Any, bootstrap: str, topics: Topics, keys: ProjectionKeys) -> None:
                faked.calls.append(("Projector", redis, bootstrap, topics, keys.prefix))
                self.keys = keys

            async def run_to_end(self, progress: ReadProgress | None = None) -> ProjectorStats:
                """A lag of 6 offsets, caught up in one step."""
                faked.projected.append(("topics", self.keys, progress is not None))
                if progress is not None:
                    progress(0, 6)
                    progress(6, 6)
                return STATS

        class DirectProjector:
            def __init__(self, redis: Any, keys: ProjectionKeys) -> None:
                faked.calls.append(("DirectProjector", redis, keys.prefix))
                self.keys = keys

            async def apply(self, records: Iterable[Any]) -> int:
                faked.projected.append(("fold", self.keys, False))
                return len(list(records))

        async def discover(prefix: str, redis: Any) -> ProjectionKeys:
            self.calls.append(("discover", prefix, redis))
            return KEYS

        async def drop_projection(redis: Any, *layouts: ProjectionKeys, progress: Any = None) -> int:
            """3 keys, deleted in two DELs."""
            self.calls.append(("drop_projection", redis, *(keys.prefix for keys in layouts)))
            self.dropped.extend(keys.prefix for keys in layouts)
            self.drops_told.append(progress is not None)
            if progress is not None:
                progress(2, None)
                progress(3, None)
                progress(3, 3)
            return 3

        async def compare_projections(
            redis: Any, left: ProjectionKeys, right: ProjectionKeys, progress: Any = None
        ) -> list[str]:
            """4 keys read of each, the differences as set."""
            self.calls.append(("compare_projections", redis, left.prefix, right.prefix))
            self.compared.append((left.prefix, right.prefix, progress is not None))
            if progress is not None:
                progress(4, None)
                progress(8, None)
                progress(8, 8)
            return self.differences

        monkeypatch.setattr(module, "Projector", Projector)
        monkeypatch.setattr(module, "DirectProjector", DirectProjector)
        monkeypatch.setattr(module, "discover", discover)
        monkeypatch.setattr(module, "drop_projection", drop_projection)
        monkeypatch.setattr(module, "compare_projections", compare_projections)
        monkeypatch.delenv(model_registry.REGISTRY_ENV, raising=False)


async def test_a_rebuild_tells_the_keys_dropped_the_offsets_projected_and_folded_then_the_keys_compared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faked = Faked(monkeypatch)
    told: list[tuple[str, int, int | None]] = []
    report = await rebuild(REDIS, "b:1", Topics("x."), KEYS, progress=lambda *t: told.append(t))
    assert told == [
        ("dropping", 2, None), ("dropping", 3, None), ("dropping", 3, 3),
        ("projecting", 0, 6), ("projecting", 6, 6),
        ("folding", 0, 2), ("folding", 1, 2), ("folding", 2, 2),
        ("comparing", 4, None), ("comparing", 8, None), ("comparing", 8, 8),
    ]  # fmt: skip
    assert (report.dropped_keys, report.projected, report.folded_records, report.differences) == (
        3, STATS, FOLDED, [],
    )  # fmt: skip
    check = KEYS.beside(VERIFY_PREFIX + "tl:")
    assert faked.projected == [("topics", KEYS, True), ("fold", check, False), ("fold", check, False)]
    assert faked.dropped == ["tl:", "tl:", "verify:tl:", "verify:tl:"]  # as found and as split; before, after
    assert faked.drops_told == [True, False, False]
    assert faked.compared == [("tl:", "verify:tl:", True)]


async def test_a_rebuild_that_does_not_verify_tells_the_projection_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faked = Faked(monkeypatch)
    told: list[tuple[str, int, int | None]] = []
    report = await rebuild(REDIS, "b:1", Topics("x."), KEYS, verify=False, progress=lambda *t: told.append(t))
    assert told == [
        ("dropping", 2, None), ("dropping", 3, None), ("dropping", 3, 3),
        ("projecting", 0, 6), ("projecting", 6, 6),
    ]  # fmt: skip
    assert (report.verified, faked.topics.started, faked.compared) == (False, [], [])


async def test_a_rebuild_without_a_progress_gives_its_reads_none(monkeypatch: pytest.MonkeyPatch) -> None:
    faked = Faked(monkeypatch)
    given: list[Any] = []
    read = faked.topics.read_to_end

    def recording(*args: Any) -> Any:
        given.append(args[4])  # refold's read: consumer, partitions, start, batch, progress
        return read(*args)

    monkeypatch.setattr("turnledger.replay.refold.read_to_end", recording)
    report = await rebuild(REDIS, "b:1", Topics("x."), KEYS)
    assert (faked.projected[0], given, report.folded_records) == (("topics", KEYS, False), [None], FOLDED)
    assert faked.drops_told == [False, False, False]
    assert faked.compared == [("tl:", "verify:tl:", False)]
