"""Replay and projections over what the REAL processor wrote for the spec's dispatch cases.

`ProcessorApp` + `DispatchPartitionFold` (one EOS transaction per batch, three partitions) fold the
dispatch workload of `tests/dispatch_workload.py`: duplicated and reordered deltas, orphaned
and duplicate results, truncated arguments, stale generations, a legacy adapter that meets a
kind it does not know. On its output topics: rollback safety seen through the projection,
`replay audit` (clean, then a corrupted record found by partition and offset), `replay
manifest` for every manifest, `replay rebuild`, and a projection built across a crash before
the script call and duplicate delivery that still equals a fresh fold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis
import typer
from aiokafka import AIOKafkaProducer, TopicPartition
from typer.testing import CliRunner, Result

from tests.dispatch_workload import Workload, build
from tests.integration.projections.workload import settled
from tests.integration.replay.ingress_workload import run_processor
from tests.integration.test_processor_eos import Sent, produce, read_committed
from turnledger.codec import decode, encode
from turnledger.model.events import DispatchDecision, DispatchState, ManifestIssued, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.processors.topics import ensure_topics
from turnledger.projections.cli import status_command
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import BatchPlan
from turnledger.projections.projector import Projector
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.snapshot import diff_snapshots, snapshot
from turnledger.replay.audit import audit
from turnledger.replay.cli import replay_app
from turnledger.replay.manifest_check import check_manifest, gather
from turnledger.replay.rebuild import project_fresh_fold, rebuild
from turnledger.topology import PROJECTED_STREAMS, Topics

pytestmark = pytest.mark.integration

LEGACY, CURRENT = "rollback#0/op-legacy", "rollback#0/op-current"


@dataclass(frozen=True)
class Processed:
    bootstrap: str
    topics: Topics
    workload: Workload
    sent: list[Sent]


async def invoke(app: typer.Typer, args: list[str]) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, app, args)


@pytest.fixture
async def processed(kafka_bootstrap: str, topic_name: Callable[[str], str]) -> Processed:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    workload = build(copies=1, global_ops=True)
    sent = await produce(
        kafka_bootstrap, topics.ingress, [(e.conversation_id, encode(e)) for e in workload.events]
    )
    assert await run_processor(kafka_bootstrap, topics, batch_max_records=25) > 100
    await settled(kafka_bootstrap, topics.outputs)
    return Processed(kafka_bootstrap, topics, workload, sent)


async def topic_records(bootstrap: str, topic: str, key: str) -> list[object]:
    return [decode(v) for k, v in await read_committed(bootstrap, topic) if k == key.encode() and v]


async def test_rollback_to_a_legacy_adapter_pauses_without_a_manifest(
    processed: Processed, redis_client: aioredis.Redis, redis_prefix: str, redis_url: str
) -> None:
    p = processed
    await Projector(redis_client, p.bootstrap, p.topics, ProjectionKeys(redis_prefix)).run_to_end()
    reader = ProjectionReader(redis_client, redis_prefix)

    history = await reader.history("rollback#0")
    assert [(b.role, b.kind) for b in history] == [("user", "text"), ("user", "retrieved_snippet")]

    legacy = await reader.find_operation(LEGACY)
    assert legacy is not None
    # the upgrade to @1 ends the conversation's pause for @0: the paused operation is cancelled
    assert (legacy.state, legacy.reason, legacy.manifest_digest) == ("CANCELLED", "PAUSE_ENDED", None)
    assert legacy.detail == f"operation {CURRENT} renders the conversation with anthropic-messages@1"

    records = await topic_records(p.bootstrap, p.topics.manifests, "rollback#0")
    issued = [r.manifest for r in records if isinstance(r, ManifestIssued)]
    assert [(m.operation_id, m.adapter) for m in issued] == [(CURRENT, "anthropic-messages@1")]
    decisions = [(r.operation_id, r.state, r.reason) for r in records if isinstance(r, DispatchDecision)]
    assert decisions == [
        (LEGACY, DispatchState.PAUSED, ReasonCode.UNSUPPORTED_KIND),
        (CURRENT, DispatchState.PREPARED, None),
        (LEGACY, DispatchState.CANCELLED, ReasonCode.PAUSE_ENDED),
    ]
    (manifest,) = issued
    assert "s1-b0" in {b.id for b in manifest.blocks}, "@1 renders the very graph @0 paused on"
    assert "Rome in May" in manifest.request_body

    current = await reader.operation("rollback#0", CURRENT)
    assert current is not None
    assert (current.state, current.reason, current.manifest_digest) == (
        "PREPARED",
        None,
        manifest.manifest_digest,
    )

    status = typer.Typer()
    status.command()(status_command)
    shown = await invoke(status, [LEGACY, "--redis-url", redis_url, "--key-prefix", redis_prefix])
    assert shown.exit_code == 0 and "CANCELLED" in shown.output and "PAUSE_ENDED" in shown.output


async def test_audit_of_the_real_processor_is_clean_then_reports_a_corrupted_record(
    processed: Processed,
) -> None:
    p = processed
    clean = await audit(p.bootstrap, p.topics)
    assert clean.ok, clean.divergences[:5]
    assert clean.ingress_records == len(p.workload.events)
    assert clean.checked == clean.expected == clean.actual > 100

    # The processor's Rejected records name their ingress record; the refold reads the same topic,
    # so the coordinates (compared byte for byte above) are the real ones.
    sent = {(s.partition, s.offset): s for s in p.sent}
    rejections = [decode(v) for _, v in await read_committed(p.bootstrap, p.topics.rejections) if v]
    assert len(rejections) >= 4
    for r in rejections:
        assert isinstance(r, Rejected) and r.source_topic == p.topics.ingress
        source = sent[(r.source_partition, r.source_offset)]
        assert source.key == r.conversation_id

    original = next(r for r in rejections if isinstance(r, Rejected) and r.conversation_id == "orphaned#0")
    tampered = original.model_copy(update={"source_offset": (original.source_offset or 0) + 1})
    producer = AIOKafkaProducer(bootstrap_servers=p.bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(p.topics.rejections, encode(tampered), key=b"orphaned#0")
    finally:
        await producer.stop()
    report = await audit(p.bootstrap, p.topics)
    assert not report.ok and len(report.divergences) == 1
    (d,) = report.divergences
    assert (d.kind, d.stream, d.key, d.index) == ("extra", "rejections", "orphaned#0", 1)
    assert d.actual is not None
    assert (d.actual.topic, d.actual.partition, d.actual.offset) == (
        p.topics.rejections,
        meta.partition,
        meta.offset,
    )
    result = await invoke(
        replay_app, ["audit", "--bootstrap", p.bootstrap, "--topic-prefix", p.topics.prefix]
    )
    assert result.exit_code == 1, result.output
    assert f"{meta.partition}]@{meta.offset}" in result.output.replace("\n", "")


async def test_replay_manifest_reproduces_every_manifest_of_the_workload(processed: Processed) -> None:
    p = processed
    expected = {
        m.manifest.manifest_digest for c in p.workload.conversations.values() for m in c.of(ManifestIssued)
    }
    evidence = await gather(p.bootstrap, p.topics)
    assert sorted(m.manifest_digest for m in evidence.manifests) == sorted(expected)
    assert len(expected) >= 15
    for m in evidence.manifests:
        check = check_manifest(
            m,
            evidence.turns.get(m.conversation_id, []),
            evidence.requests.get((m.conversation_id, m.operation_id)),
        )
        assert check.ok, (m.operation_id, check.error, [c.name for c in check.checks if not c.ok])
        assert {c.name for c in check.checks} >= {"request bytes", "request digest", "sequence digest"}

    # the CLI, by operation id and by digest
    args = ["--bootstrap", p.bootstrap, "--topic-prefix", p.topics.prefix]
    by_op = await invoke(replay_app, ["manifest", "multi-turn#0/op-2", *args])
    assert by_op.exit_code == 0 and "1 manifest(s) reproduced" in by_op.output, by_op.output
    some = sorted(expected)[0]
    by_digest = await invoke(replay_app, ["manifest", "--digest", some, *args])
    assert by_digest.exit_code == 0, by_digest.output


async def test_rebuild_after_dropping_the_projection_is_identical_and_equals_a_fresh_fold(
    processed: Processed, redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    p = processed
    keys = ProjectionKeys(redis_prefix)
    await Projector(redis_client, p.bootstrap, p.topics, keys).run_to_end()
    before = await snapshot(redis_client, redis_prefix)
    assert before
    report = await rebuild(redis_client, p.bootstrap, p.topics, keys)
    assert report.ok, report.differences[:5]
    assert report.dropped_keys > 0 and report.folded_records > 0
    assert await snapshot(redis_client, redis_prefix) == before


class Crash(Exception):
    pass


async def test_projection_equals_a_fresh_fold_after_a_crash_mid_batch_and_duplicate_delivery(
    processed: Processed, redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    """The workload already carries duplicated deltas at ingress; here the projector also crashes
    before the script call of a batch, restarts, and then gets every partition again from 0."""
    p = processed
    live = ProjectionKeys(redis_prefix + "live:")
    calls = 0

    async def crash_on_fifth(plan: BatchPlan) -> None:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise Crash("killed before EVALSHA")

    with pytest.raises(Crash):
        await Projector(
            redis_client, p.bootstrap, p.topics, live, batch_size=7, before_apply=crash_on_fifth
        ).run_to_end()
    partial = await ProjectionReader(redis_client, live.prefix).applied_offsets()
    assert partial, "four batches were applied before the crash"
    resumed = await Projector(redis_client, p.bootstrap, p.topics, live, batch_size=11).run_to_end()
    assert resumed.skipped == 0 and resumed.applied > 0

    topics = list(p.topics.by_topic(PROJECTED_STREAMS))
    zero = {TopicPartition(t, part): 0 for t in topics for part in range(3)}
    again = await Projector(redis_client, p.bootstrap, p.topics, live, batch_size=13).run_to_end(start=zero)
    total = sum([len(await read_committed(p.bootstrap, t)) for t in topics])
    assert again.applied == 0 and again.skipped == total, "duplicate delivery changes nothing"

    fresh = ProjectionKeys(redis_prefix + "fresh:")
    assert await project_fresh_fold(redis_client, p.bootstrap, p.topics, fresh) > 100
    live_snapshot = await snapshot(redis_client, live.prefix)
    assert diff_snapshots(live_snapshot, await snapshot(redis_client, fresh.prefix)) == []
    reader = ProjectionReader(redis_client, live.prefix)
    replies = [b.text for b in await reader.history("duplicated-deltas#0") if b.role == "assistant"]
    assert replies == ["one two three"], "duplicated deltas are applied once"
    assert await reader.previews("duplicated-deltas#0") == []
