"""The dispatch fold through the real Kafka runtime: the spec's cases, exactly once, across a crash.

The expected outputs are the pure engine's outputs for the same events, so these tests
prove that the runtime adds nothing, loses nothing and duplicates nothing; the exact
per-case outcomes (reason codes, counts) are asserted on the decoded records as well.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.dispatch_workload import CASES, Workload, build
from tests.integration.test_processor_eos import (
    Child,
    Sent,
    app_args,
    produce,
    read_committed,
    settled,
    wait_all_committed,
)
from turnledger.codec import decode, encode
from turnledger.dispatch.engine import BatchEngine, read_state
from turnledger.dispatch.state_keys import SEPARATOR
from turnledger.model.events import (
    CommittedTurn,
    ManifestIssued,
    Quarantined,
    Rejected,
    ToolCallReady,
)
from turnledger.model.reasons import ReasonCode
from turnledger.processors.app import ProcessorApp
from turnledger.processors.changelog import POSITION_KEY
from turnledger.processors.config import ProcessorConfig
from turnledger.processors.dispatch_partition import DispatchPartitionFold
from turnledger.processors.topics import ensure_topics
from turnledger.records import SourceRecord
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

Keyed = dict[tuple[str, bytes | None], list[bytes]]


@pytest.fixture
def topics(topic_name: Callable[[str], str]) -> Topics:
    return Topics(prefix=topic_name("") + ".")


class _Store:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


def expected_outputs(workload: Workload, topics: Topics) -> Keyed:
    engine, store = BatchEngine(), _Store()
    records = [
        SourceRecord(topics.ingress, 0, i, e.conversation_id.encode(), encode(e))
        for i, e in enumerate(workload.events)
    ]
    expected: Keyed = defaultdict(list)
    for out in engine.process_batch(records, store):
        expected[(topics.name(out.stream), out.key)].append(out.value)
    return expected


def _without_coordinates(topic: str, value: bytes, topics: Topics) -> bytes:
    """Rejections carry source offsets, which differ between the pure run and the broker."""
    if topic != topics.rejections:
        return value
    record = decode(value)
    assert isinstance(record, Rejected)
    return encode(
        record.model_copy(update={"source_topic": None, "source_partition": None, "source_offset": None})
    )


async def actual_outputs(bootstrap: str, topics: Topics) -> Keyed:
    actual: Keyed = defaultdict(list)
    for topic in topics.outputs:
        await settled(bootstrap, topic)
        for key, value in await read_committed(bootstrap, topic):
            assert value is not None
            actual[(topic, key)].append(value)
    return actual


def assert_same(actual: Keyed, expected: Keyed, topics: Topics) -> None:
    def normal(keyed: Keyed) -> dict[tuple[str, bytes | None], list[bytes]]:
        return {k: [_without_coordinates(k[0], v, topics) for v in vs] for k, vs in keyed.items()}

    a, e = normal(actual), normal(expected)
    assert sorted(a) == sorted(e)
    for key in e:
        assert a[key] == e[key], f"outputs of {key} differ"
    assert sum(len(v) for v in e.values()) > 100


def decoded(actual: Keyed, topics: Topics, conversation: str) -> list[object]:
    key = conversation.encode()
    return [decode(v) for topic in topics.outputs for v in actual.get((topic, key), [])]


def assert_spec_outcomes(actual: Keyed, topics: Topics) -> None:
    """Zero sends for invalid sequences, zero partial dispatches, one canonical turn per revision."""
    for conversation in {k.decode() for (_, k) in actual if k}:
        records = decoded(actual, topics, conversation)
        revisions = [r.revision for r in records if isinstance(r, CommittedTurn)]
        assert revisions == list(range(1, len(revisions) + 1)), conversation
        for manifest in (r.manifest for r in records if isinstance(r, ManifestIssued)):
            calls = {b.call_id for b in manifest.blocks if b.kind == "tool_call"}
            results = {b.call_id for b in manifest.blocks if b.kind == "tool_result"}
            assert calls == results, f"{conversation}: manifest with a pending call"

    def of(conversation: str, kind: type) -> list:  # type: ignore[type-arg]
        return [r for r in decoded(actual, topics, conversation) if isinstance(r, kind)]

    for cut in range(len('{"city": "Paris"}')):
        name = f"truncated-{cut}#0"
        assert of(name, ToolCallReady) == [], name
        assert [t.revision for t in of(name, CommittedTurn)] == [1], name
    assert [r.reason for r in of("orphaned#0", Rejected)] == [ReasonCode.ORPHANED_RESULT]
    assert [r.reason for r in of("two-results#0", Rejected)] == [ReasonCode.DUPLICATE_RESULT] * 2
    assert [r.reason for r in of("wrong-manifest#0", Rejected)] == [ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST]
    assert len(of("wrong-manifest#0", CommittedTurn)) == 1
    assert [q.reason for q in of("wrong-manifest#0", Quarantined)] == [ReasonCode.ILLEGAL_TRANSITION]
    assert [q.reason for q in of("old-after-new#0", Quarantined)] == [ReasonCode.STALE_GENERATION]
    new_turn = of("old-after-new#0", CommittedTurn)[-1]
    assert (new_turn.attempt_generation, new_turn.blocks[0].text) == (2, "new")
    manifests = [m.manifest for m in of("adapter-upgrade#0", ManifestIssued)]
    assert [m.adapter for m in manifests] == ["anthropic-messages@0", "anthropic-messages@1"]
    assert manifests[0].adapter_digest != manifests[1].adapter_digest
    rollback = [m.manifest for m in of("rollback#0", ManifestIssued)]
    assert [m.adapter for m in rollback] == ["anthropic-messages@1"], "the legacy adapter pauses"
    assert [len(of("reordered#0", ToolCallReady)), len(of("reordered#0", ManifestIssued))] == [2, 2]
    assert len(of("duplicated-deltas#0", CommittedTurn)) == 2
    assert of("missing-stop#0", ToolCallReady) == [] and len(of("missing-stop#0", CommittedTurn)) == 1


async def _produce(bootstrap: str, topics: Topics, workload: Workload) -> list[Sent]:
    return await produce(bootstrap, topics.ingress, [(e.conversation_id, encode(e)) for e in workload.events])


async def test_spec_cases_through_the_processor_exactly_once(kafka_bootstrap: str, topics: Topics) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    workload = build(copies=2)
    sent = await _produce(kafka_bootstrap, topics, workload)
    config = ProcessorConfig(
        bootstrap=kafka_bootstrap, app_id=f"{topics.prefix}app", topics=topics, batch_max_records=50
    )
    app = ProcessorApp(config, lambda p: DispatchPartitionFold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_all_committed(kafka_bootstrap, config.offsets_group, topics, sent, timeout_s=120)
    finally:
        app.stop()
        await asyncio.wait_for(task, 30)
    actual = await actual_outputs(kafka_bootstrap, topics)
    assert_same(actual, expected_outputs(workload, topics), topics)
    assert_spec_outcomes(actual, topics)
    assert len({k for (_, k) in actual}) == 2 * len(CASES)


@pytest.mark.slow
async def test_sigkill_mid_transaction_then_restart_keeps_outputs_exactly_once(
    kafka_bootstrap: str,
    topics: Topics,
    tmp_path: Path,
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    workload = build(copies=3)
    sent = await _produce(kafka_bootstrap, topics, workload)
    app_id = f"{topics.prefix}app"
    args = app_args(kafka_bootstrap, topics, app_id, "all", batch_max_records=7, fold="dispatch")
    crashing = Child([*args, "--kill-in-commit", "4"], tmp_path / "first.log")
    assert await crashing.wait(120) == -9
    survivor = Child(args, tmp_path / "second.log")
    try:
        await wait_all_committed(kafka_bootstrap, app_id, topics, sent, timeout_s=180)
    finally:
        survivor.signal(15)
        assert await survivor.wait(60) == 0, survivor.output()[-3000:]
    actual = await actual_outputs(kafka_bootstrap, topics)
    assert_same(actual, expected_outputs(workload, topics), topics)

    changelog = _Store()
    for key, value in await read_committed(kafka_bootstrap, topics.changelog):
        if key == POSITION_KEY:
            continue
        assert key is not None and value is not None
        changelog.put(key.decode(), value)
    heads = [key for key in changelog.data if SEPARATOR not in key]  # split: a head per conversation
    assert sorted(heads) == sorted(workload.conversations)
    for conversation_id, c in workload.conversations.items():
        assert read_state(changelog, conversation_id) == c.state, conversation_id
