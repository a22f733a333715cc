"""Previews carry only the text appended at an offset; the projection (the real script on Redis) keeps
the whole text, appends only at exactly the length it holds, and never shows a text with a hole."""

from __future__ import annotations

import orjson
import pytest
import redis.asyncio as aioredis

from turnledger.model.events import CommittedTurn, PreviewRetracted, PreviewUpdated
from turnledger.model.reasons import ReasonCode
from turnledger.projections.direct import DirectProjector
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.reader import ProjectionReader

pytestmark = pytest.mark.integration

CONV, OP = "conv-p", "conv-p-op1"


def preview(text: str, offset: int, seq: int, gen: int = 1, block: int = 0) -> tuple[str, PreviewUpdated]:
    return (
        "previews",
        PreviewUpdated(
            conversation_id=CONV, operation_id=OP, attempt_generation=gen, block_index=block, text=text,
            through_sequence=seq, occurred_at_ms=1_000 + seq, text_offset=offset,
        ),
    )  # fmt: skip


HE, LL, O_EMOJI, BANG = preview("He", 0, 2), preview("ll", 2, 3), preview("o 🎉", 4, 4), preview("!", 7, 5)


async def shown(redis: aioredis.Redis, prefix: str) -> list[tuple[int, int, str, int]]:
    return [
        (p.attempt_generation, p.block_index, p.text, p.through_sequence)
        for p in await ProjectionReader(redis, prefix).previews(CONV)
    ]


async def announced(redis: aioredis.Redis, prefix: str) -> list[tuple[str, int, int]]:
    """The preview events of the conversation's live stream: (appended text, offset, length)."""
    entries = await redis.xrange(ProjectionKeys(prefix).events(CONV))
    out = []
    for _, fields in entries:
        if fields[b"type"] == b"preview":
            data = orjson.loads(fields[b"data"])
            out.append((data["text"], data["textOffset"], data["length"]))
    return out


async def gaps(redis: aioredis.Redis, prefix: str) -> int:
    return (await ProjectionReader(redis, prefix).stats()).get("preview_gaps", 0)


async def test_appended_previews_build_the_whole_text_and_the_stream_carries_only_what_was_appended(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    direct = DirectProjector(redis_client, ProjectionKeys(redis_prefix), batch=2)
    assert await direct.apply([HE, LL, O_EMOJI, BANG]) == 4
    assert await shown(redis_client, redis_prefix) == [(1, 0, "Hello 🎉!", 5)]
    assert await announced(redis_client, redis_prefix) == [
        ("He", 0, 2),
        ("ll", 2, 4),
        ("o 🎉", 4, 7),
        ("!", 7, 8),
    ]
    assert await gaps(redis_client, redis_prefix) == 0


async def test_a_preview_delivered_again_at_new_offsets_is_not_appended_twice(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    """Exactly once beyond the applied offsets: the same records again (a producer's retry, a re-fold
    written again) end at or before the length held, so nothing is appended or announced."""
    direct = DirectProjector(redis_client, ProjectionKeys(redis_prefix))
    await direct.apply([HE, LL])
    await direct.apply([HE, LL, O_EMOJI])  # new (synthetic) offsets: only the offset guard can refuse them
    assert await shown(redis_client, redis_prefix) == [(1, 0, "Hello 🎉", 4)]
    assert [a[0] for a in await announced(redis_client, redis_prefix)] == ["He", "ll", "o 🎉"]
    assert await gaps(redis_client, redis_prefix) == 0


async def test_a_missed_preview_is_a_gap_and_the_text_shown_stays_a_true_prefix(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    direct = DirectProjector(redis_client, ProjectionKeys(redis_prefix))
    await direct.apply([HE, O_EMOJI, BANG])  # "ll" never seen (topic retention, a lost record)
    assert await shown(redis_client, redis_prefix) == [(1, 0, "He", 2)]
    assert [a[0] for a in await announced(redis_client, redis_prefix)] == ["He"]
    assert await gaps(redis_client, redis_prefix) == 2
    # the next read of the block from its start (offset 0: a whole text) replaces it
    await direct.apply([preview("Hello 🎉!?", 0, 6)])
    assert await shown(redis_client, redis_prefix) == [(1, 0, "Hello 🎉!?", 6)]


async def test_a_projection_started_mid_stream_shows_no_preview_rather_than_a_tail(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    direct = DirectProjector(redis_client, ProjectionKeys(redis_prefix))
    await direct.apply([LL, O_EMOJI])
    assert await shown(redis_client, redis_prefix) == []
    assert await announced(redis_client, redis_prefix) == []
    assert await gaps(redis_client, redis_prefix) == 2


async def test_a_whole_text_preview_of_the_earlier_schema_version_replaces_and_is_appended_to(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    """Records of the earlier version decode at offset 0 with the whole text: each one replaces."""
    direct = DirectProjector(redis_client, ProjectionKeys(redis_prefix))
    await direct.apply([preview("He", 0, 2), preview("Hell", 0, 3), preview("o", 4, 4)])
    assert await shown(redis_client, redis_prefix) == [(1, 0, "Hello", 4)]


async def test_a_retraction_then_a_new_read_starts_from_offset_zero_and_a_commit_refuses_later_ones(
    redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    direct = DirectProjector(redis_client, ProjectionKeys(redis_prefix))
    retract = PreviewRetracted(
        conversation_id=CONV, operation_id=OP, attempt_generation=1, reason=ReasonCode.STREAM_DISCONNECTED,
        occurred_at_ms=2_000,
    )  # fmt: skip
    await direct.apply([HE, LL, ("previews", retract), LL])
    assert await shown(redis_client, redis_prefix) == []  # "ll" at 2 after the retraction: a gap
    await direct.apply([preview("Hi", 0, 2), preview(" all", 2, 3, block=1)])
    assert await shown(redis_client, redis_prefix) == [(1, 0, "Hi", 2)]
    committed = CommittedTurn(
        conversation_id=CONV, revision=2, turn_id=f"{OP}#1", source_event_id="e9", operation_id=OP,
        attempt_generation=1, blocks=(), occurred_at_ms=3_000,
    )  # fmt: skip
    await direct.apply([("committed", committed), preview(" there", 2, 4)])
    assert await shown(redis_client, redis_prefix) == []
    assert await gaps(redis_client, redis_prefix) == 2
