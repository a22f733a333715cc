"""`replay manifest`'s and `shadow diff`'s reads, on topics in memory (`fake_topics.py`): `reproduce`
reads the manifests, committed and ingress topics in turn and tells each one's progress under its
name; `latest_manifests` reads the manifests topic and tells its progress. The offsets themselves are
`read_to_end`'s (tests/unit/test_kafka_reading.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.replay.fake_topics import FakeTopics
from tests.unit.replay.test_manifest_check import CHECKS, _tool_round
from turnledger.codec import encode
from turnledger.model.events import CommittedTurn, ManifestIssued
from turnledger.records import SourceRecord
from turnledger.replay.manifest_check import latest_manifests, reproduce
from turnledger.topology import Topics

TOPICS = Topics("x.")


def records(topic: str, values: list[Any]) -> list[SourceRecord]:
    return [SourceRecord(topic, 0, n, b"conv-check", encode(v)) for n, v in enumerate(values)]


def tool_round_topics() -> FakeTopics:
    """The tool round's manifests in batches of 1, its 3 committed turns in 2 batches, its ingress
    events in one batch."""
    c = _tool_round()
    manifests = records(TOPICS.manifests, c.of(ManifestIssued))
    committed = records(TOPICS.committed, c.of(CommittedTurn))
    ingress = records(TOPICS.ingress, c.events)
    assert (len(manifests), len(committed)) == (2, 3)
    return FakeTopics(
        {
            TOPICS.manifests: [[m] for m in manifests],
            TOPICS.committed: [committed[:2], committed[2:]],
            TOPICS.ingress: [ingress],
        }
    )


async def test_reproduce_tells_the_progress_of_each_topic_it_reads_under_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topics = tool_round_topics()
    topics.install(monkeypatch, "turnledger.replay.manifest_check")
    ingress = len(topics.batches[TOPICS.ingress][0])
    told: list[tuple[str, int, int]] = []
    [check] = await reproduce("k:1", TOPICS, "op-2", progress=lambda *t: told.append(t))
    assert (check.operation_id, [c.name for c in check.checks], check.ok) == ("op-2", CHECKS, True)
    assert told == [
        (TOPICS.manifests, 0, 2), (TOPICS.manifests, 1, 2), (TOPICS.manifests, 2, 2),
        (TOPICS.committed, 0, 3), (TOPICS.committed, 2, 3), (TOPICS.committed, 3, 3),
        (TOPICS.ingress, 0, ingress), (TOPICS.ingress, ingress, ingress),
    ]  # fmt: skip
    assert ingress > 3
    assert topics.asked == [
        ("k:1", [TOPICS.manifests]),
        ("k:1", [TOPICS.committed]),
        ("k:1", [TOPICS.ingress]),
    ]


async def test_reproduce_without_a_progress_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    topics = tool_round_topics()
    topics.install(monkeypatch, "turnledger.replay.manifest_check")
    [check] = await reproduce("k:1", TOPICS, "op-2")
    assert check.ok and [c.stopped for c in topics.consumers] == [1]


async def test_the_latest_manifests_tell_the_progress_of_the_manifests_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topics = tool_round_topics()
    topics.install(monkeypatch, "turnledger.replay.manifest_check")
    told: list[tuple[int, int]] = []
    latest = await latest_manifests("k:1", TOPICS, {"op-1"}, lambda *t: told.append(t))
    assert [(conversation, op) for conversation, op in latest] == [("conv-check", "op-1")]
    assert told == [(0, 2), (1, 2), (2, 2)]
    assert topics.asked == [("k:1", [TOPICS.manifests])]
