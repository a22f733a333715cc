"""The projector on the real broker and Redis: exactly once across duplicates, crashes and rebuilds."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer, TopicPartition

from tests.integration.projections.workload import conversation, produce, settled, workload
from turnledger.model.events import PreviewRetracted, PreviewUpdated
from turnledger.model.reasons import ReasonCode
from turnledger.processors.topics import ensure_topics
from turnledger.projections.direct import project_records
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import BatchPlan
from turnledger.projections.projector import Projector
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.snapshot import diff_snapshots, drop_prefix, snapshot
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

CONVERSATIONS = 12


class Crash(Exception):
    pass


@pytest.fixture
async def stack(
    kafka_bootstrap: str, topic_name: Callable[[str], str], redis_client: aioredis.Redis, redis_prefix: str
) -> tuple[str, Topics, aioredis.Redis, str]:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    records = workload(CONVERSATIONS)
    await produce(
        kafka_bootstrap, topics, records, per_transaction=7, abort_every=3, transactional_id=topics.prefix
    )
    await settled(kafka_bootstrap, topics.outputs)
    # the reference: the same records projected directly, under a second prefix
    await project_records(redis_client, ProjectionKeys(redis_prefix + "ref:"), records)
    return kafka_bootstrap, topics, redis_client, redis_prefix


def projector(stack: tuple[str, Topics, aioredis.Redis, str], **kw: object) -> Projector:
    bootstrap, topics, redis, prefix = stack
    return Projector(redis, bootstrap, topics, ProjectionKeys(prefix + "live:"), **kw)  # type: ignore[arg-type]


async def assert_equals_reference(redis: aioredis.Redis, prefix: str) -> None:
    live, ref = await snapshot(redis, prefix + "live:"), await snapshot(redis, prefix + "ref:")
    assert live, "the projection is empty"
    assert diff_snapshots(live, ref) == []


async def test_projection_equals_reference_and_replay_from_zero_is_a_no_op(stack) -> None:  # type: ignore[no-untyped-def]
    _, topics, redis, prefix = stack
    first = await projector(stack, batch_size=5).run_to_end()
    assert first.applied == len(workload(CONVERSATIONS)) and first.undecodable == 0  # aborted data never seen
    await assert_equals_reference(redis, prefix)
    before = await snapshot(redis, prefix + "live:")
    offsets = await ProjectionReader(redis, prefix + "live:").applied_offsets()

    # duplicate delivery: every partition again from offset 0, against the same Redis
    zero = {
        TopicPartition(t, p): 0
        for t in (topics.committed, topics.manifests, topics.previews, topics.quarantine, topics.rejections)
        for p in range(3)
    }
    again = await projector(stack, batch_size=4).run_to_end(start=zero)
    assert again.applied == 0 and again.skipped == first.applied
    assert await snapshot(redis, prefix + "live:") == before
    assert await ProjectionReader(redis, prefix + "live:").applied_offsets() == offsets


async def test_crash_before_evalsha_then_restart_resumes_from_redis_offsets(stack) -> None:  # type: ignore[no-untyped-def]
    _, _, redis, prefix = stack
    calls = 0

    async def crash_on_fourth(plan: BatchPlan) -> None:
        nonlocal calls
        calls += 1
        if calls == 4:
            raise Crash("killed before EVALSHA")

    with pytest.raises(Crash):
        await projector(stack, batch_size=3, before_apply=crash_on_fourth).run_to_end()
    partial = await ProjectionReader(redis, prefix + "live:").applied_offsets()
    assert partial, "three batches were applied before the crash"
    resumed = await projector(stack, batch_size=50).run_to_end()
    assert resumed.skipped == 0, "a restart starts after the applied offsets: nothing is delivered twice"
    await assert_equals_reference(redis, prefix)


async def test_zombie_projectors_in_parallel_converge(stack) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    _, _, redis, prefix = stack
    a, b = projector(stack, batch_size=2), projector(stack, batch_size=3)
    sa, sb = await asyncio.gather(a.run_to_end(), b.run_to_end())
    assert sa.applied + sb.applied == len(workload(CONVERSATIONS))
    await assert_equals_reference(redis, prefix)
    events = await live_events(redis, prefix + "live:")
    kinds = [fields[b"type"] for entries in events.values() for _, fields in entries]
    assert kinds.count(b"committed") == sum(1 for r in workload(CONVERSATIONS) if r[0] == "committed")


async def test_drop_prefix_then_rebuild_is_identical(stack) -> None:  # type: ignore[no-untyped-def]
    _, _, redis, prefix = stack
    await projector(stack).run_to_end()
    before = await snapshot(redis, prefix + "live:")
    dropped = await drop_prefix(redis, prefix + "live:")
    assert dropped > 0 and await snapshot(redis, prefix + "live:") == {}
    assert await redis.exists(prefix + "ref:offsets"), "dropping one prefix leaves the other alone"
    await projector(stack).run_to_end()
    assert await snapshot(redis, prefix + "live:") == before


async def test_dropping_a_prefix_leaves_a_projection_under_a_longer_one_whole(stack) -> None:  # type: ignore[no-untyped-def]
    _, _, redis, prefix = stack
    await projector(stack).run_to_end()
    await project_records(redis, ProjectionKeys(prefix + "live:v2:"), workload(CONVERSATIONS))
    longer = await snapshot(redis, prefix + "live:v2:")
    assert longer and await snapshot(redis, prefix + "live:") == await snapshot(redis, prefix + "ref:")
    await redis.set(prefix + "live:not-ours", "x")

    dropped = await drop_prefix(redis, prefix + "live:")

    assert dropped > len(longer)
    assert await snapshot(redis, prefix + "live:") == {}
    assert await snapshot(redis, prefix + "live:v2:") == longer
    assert await redis.get(prefix + "live:not-ours") == b"x"


async def test_undecodable_record_is_counted_not_fatal(stack) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topics, redis, prefix = stack
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topics.committed, b"\xc3\x01not avro", key=b"conv-0")
    finally:
        await producer.stop()
    stats = await projector(stack).run_to_end()
    assert stats.undecodable == 1
    reader = ProjectionReader(redis, prefix + "live:")
    assert (await reader.stats())["undecodable:committed"] == 1
    assert (await reader.applied_offsets())[f"{topics.committed}:{meta.partition}"] == meta.offset
    assert len(await reader.history("conv-0")) == 3


async def test_reader_views(stack) -> None:  # type: ignore[no-untyped-def]
    _, _, redis, prefix = stack
    await projector(stack).run_to_end()
    reader = ProjectionReader(redis, prefix + "live:")
    history = await reader.history("conv-3")
    assert [(b.role, b.text) for b in history] == [
        ("system", "be brief"),
        ("user", "hi"),
        ("assistant", "Hi there!"),
    ]
    assert await reader.revision("conv-3") == 2
    op = await reader.operation("conv-3", "conv-3-op1")
    assert op is not None and op.state == "COMMITTED" and op.generation == 2
    assert op.manifest_digest == "sha256:m1" and op.created_at_ms == 4001 and op.updated_at_ms == 4011
    assert op.fields["conflicts"] == "1" and op.reason is None
    previews = await reader.previews("conv-3")
    assert [(p.operation_id, p.text) for p in previews] == [("conv-3-op2", "Thinking")]
    quarantine = await reader.quarantine("conv-3")
    assert [q.event_id for q in quarantine] == ["conv-3-e12"]
    rejections = await reader.rejections("conv-3")
    assert len(rejections) == 1 and rejections[0].source_offset == 4000
    assert len(await reader.rejections(limit=5)) == 5
    assert await reader.operation("conv-3", "nope") is None


async def test_operations_of_the_same_id_in_two_conversations_stay_apart(  # type: ignore[no-untyped-def]
    redis_client, redis_prefix
) -> None:
    """Operation ids are unique per conversation only; `a:b` / `a` are escaped so keys cannot collide."""
    from tests.integration.projections.workload import _decision
    from turnledger.model.events import DispatchState as S
    from turnledger.projections.errors import AmbiguousOperationError

    records = [
        ("manifests", _decision("a:b", "op-1", S.PREPARED, None, 10)),
        ("manifests", _decision("a", "b:op-1", S.REJECTED, None, 11, reason="EMPTY_SEQUENCE")),
        ("manifests", _decision("conv-2", "op-1", S.PREPARED, None, 12)),
        ("manifests", _decision("conv-2", "op-1", S.DISPATCHING, S.PREPARED, 13, attempt_generation=1)),
    ]
    await project_records(redis_client, ProjectionKeys(redis_prefix), records)
    reader = ProjectionReader(redis_client, redis_prefix)

    first, second = await reader.operation("a:b", "op-1"), await reader.operation("conv-2", "op-1")
    assert first is not None and (first.conversation, first.state, first.generation) == ("a:b", "PREPARED", 0)
    assert second is not None and (second.conversation, second.state, second.generation) == (
        "conv-2",
        "DISPATCHING",
        1,
    )
    escaped = await reader.operation("a", "b:op-1")
    assert escaped is not None and (escaped.state, escaped.reason) == ("REJECTED", "EMPTY_SEQUENCE")
    assert [op.operation_id for op in await reader.operations("conv-2")] == ["op-1"]

    assert await reader.conversations_of_operation("op-1") == ["a:b", "conv-2"]
    with pytest.raises(AmbiguousOperationError, match="exists in 2 conversations"):
        await reader.find_operation("op-1")
    found = await reader.find_operation("op-1", conversation="conv-2")
    assert found is not None and found.state == "DISPATCHING"
    only = await reader.find_operation("b:op-1")
    assert only is not None and only.conversation == "a"
    assert await reader.find_operation("op-9") is None


async def live_events(
    redis: aioredis.Redis, prefix: str
) -> dict[str, list[tuple[bytes, dict[bytes, bytes]]]]:
    """Every conversation's live event stream (entry ids included)."""
    out = {}
    async for key in redis.scan_iter(match=prefix + "events:*"):
        out[key.decode()] = await redis.xrange(key)
    return out


async def test_live_events_are_appended_once_and_never_by_a_replay(stack) -> None:  # type: ignore[no-untyped-def]
    _, topics, redis, prefix = stack
    await projector(stack, batch_size=5).run_to_end()
    events = await live_events(redis, prefix + "live:")
    assert len(events) == CONVERSATIONS
    committed = [r for r in workload(CONVERSATIONS) if r[0] == "committed"]
    kinds = [fields[b"type"] for entries in events.values() for _, fields in entries]
    assert kinds.count(b"committed") == len(committed)
    assert set(kinds) <= {b"committed", b"preview", b"retracted", b"status", b"quarantined", b"rejected"}
    zero = {
        TopicPartition(t, p): 0
        for t in (topics.committed, topics.manifests, topics.previews, topics.quarantine, topics.rejections)
        for p in range(3)
    }
    await projector(stack, batch_size=3).run_to_end(start=zero)
    assert await live_events(redis, prefix + "live:") == events


async def test_a_generation_read_again_after_its_retraction_shows_its_new_preview(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    """A replay under the same idempotency key retracts the generation's previews and streams it anew:
    the retraction drops the old text, the previews after it (same topic, in order) are shown."""
    conv, op = "conv-replay", "conv-replay-op2"
    records = conversation(conv)
    retract = PreviewRetracted(
        conversation_id=conv, operation_id=op, attempt_generation=1, reason=ReasonCode.STREAM_DISCONNECTED,
        occurred_at_ms=90_000,
    )  # fmt: skip
    again = PreviewUpdated(
        conversation_id=conv, operation_id=op, attempt_generation=1, block_index=0, text="Again",
        through_sequence=0, occurred_at_ms=90_001,
    )  # fmt: skip
    keys = ProjectionKeys(redis_prefix)
    reader = ProjectionReader(redis_client, redis_prefix)
    await project_records(redis_client, keys, [*records, ("previews", retract)])
    assert await reader.previews(conv) == []
    await drop_prefix(redis_client, redis_prefix)
    await project_records(redis_client, keys, [*records, ("previews", retract), ("previews", again)])
    assert [(p.operation_id, p.text) for p in await reader.previews(conv)] == [(op, "Again")]
