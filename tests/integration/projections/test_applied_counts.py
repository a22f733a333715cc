"""The live metrics count what the projection script applied: a batch delivered again counts nothing."""

from __future__ import annotations

import redis.asyncio as aioredis

from turnledger.codec import encode
from turnledger.model.base import Frozen
from turnledger.model.events import PreviewRetracted, Rejected
from turnledger.model.reasons import ReasonCode
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.plan import DecodedRecord
from turnledger.projections.projector import Projector, ProjectorStats
from turnledger.records import SourceRecord
from turnledger.topology import Topics


def _raw(topic: str, offset: int) -> SourceRecord:
    record: Frozen
    if "rejections" in topic:
        record = Rejected(conversation_id="c1", reason=ReasonCode.ORPHANED_RESULT)
    else:
        record = PreviewRetracted(
            conversation_id="c1", operation_id="op-1", attempt_generation=1,
            reason=ReasonCode.STREAM_DISCONNECTED, occurred_at_ms=offset,
        )  # fmt: skip
    return SourceRecord(topic=topic, partition=0, offset=offset, key=b"c1", value=encode(record))


async def test_a_redelivered_batch_reaches_on_applied_only_with_its_new_records(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    topics = Topics("counted-")
    seen: list[list[DecodedRecord]] = []
    projector = Projector(
        redis_client, "unused:9092", topics, ProjectionKeys(redis_prefix), on_applied=seen.append
    )
    await projector.applier.load()
    first = [_raw(topics.rejections, 0), _raw(topics.previews, 0), _raw(topics.previews, 1)]
    stats = ProjectorStats()
    await projector.apply(first, stats)
    # the same records again (a restart before the offsets were read, a second projector), plus a new one
    await projector.apply([*first, _raw(topics.previews, 2)], stats)
    assert [[(d.stream, d.offset) for d in batch] for batch in seen] == [
        [("rejections", 0), ("previews", 0), ("previews", 1)],
        [("previews", 2)],
    ]
    assert (stats.applied, stats.skipped) == (4, 3)
