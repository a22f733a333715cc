"""What `replay rebuild` (`replay/rebuild.py`) hands each of its parts, in order: the Redis client to the
discovery, the drops, the projector, the fresh fold's projection and the comparison; the bootstrap and the
topics to the projector and the refold; the prefix discovered, and the verification's beside it; its
report, and that the verification's keys are dropped however the fold ends. The parts are faked as in
`test_rebuild_progress.py`; the rebuild's Redis side has its own integration tests."""

from __future__ import annotations

import pytest

from tests.unit.replay.test_rebuild_progress import FOLDED, KEYS, REDIS, STATS, Faked
from turnledger.projections.projector import ProjectorStats
from turnledger.replay.rebuild import RebuildReport, rebuild
from turnledger.topology import Topics

VERIFYING = [
    ("drop_projection", REDIS, "verify:tl:"),
    ("DirectProjector", REDIS, "verify:tl:"),
    ("compare_projections", REDIS, "tl:", "verify:tl:"),
    ("drop_projection", REDIS, "verify:tl:"),
]
"""The verification's parts, after the projection's: its keys dropped, the fresh fold projected under them,
the two compared, its keys dropped again."""


async def test_a_rebuild_hands_each_part_its_redis_bootstrap_topics_and_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faked = Faked(monkeypatch)
    faked.differences = ["differs: stats"]
    report = await rebuild(REDIS, "b:1", Topics("x."), KEYS)
    assert faked.calls == [
        ("discover", "tl:", REDIS),
        ("drop_projection", REDIS, "tl:", "tl:"),  # as Redis holds it split, and as KEYS splits it
        ("Projector", REDIS, "b:1", Topics("x."), "tl:"),
        *VERIFYING,
    ]
    assert (faked.topics.started, faked.topics.asked) == (["b:1"], [("b:1", ["x.turnledger.ingress"])])
    assert report == RebuildReport(3, STATS, True, FOLDED, ["differs: stats"])
    assert report.ok is False


async def test_a_rebuild_that_does_not_verify_projects_and_reports_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faked = Faked(monkeypatch)
    report = await rebuild(REDIS, "b:1", Topics("x."), KEYS, verify=False)
    assert [call[0] for call in faked.calls] == ["discover", "drop_projection", "Projector"]
    assert (report.dropped_keys, report.projected, report.verified) == (3, STATS, False)
    assert (report.folded_records, report.differences, report.ok) == (0, [], True)


async def test_the_verification_s_keys_are_dropped_again_when_the_fresh_fold_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faked = Faked(monkeypatch)
    faked.topics.batches.clear()  # no ingress topic: the refold's partitions_of raises
    with pytest.raises(LookupError) as raised:
        await rebuild(REDIS, "b:1", Topics("x."), KEYS)
    assert str(raised.value) == "no topic x.turnledger.ingress"
    assert faked.calls[3:] == [VERIFYING[0], VERIFYING[1], VERIFYING[3]]


def test_a_report_is_ok_exactly_when_it_lists_no_difference() -> None:
    assert RebuildReport(0, ProjectorStats(), True).ok is True
    assert RebuildReport(0, ProjectorStats(), True, differences=["only in the first: stats"]).ok is False
