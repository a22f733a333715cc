"""The read side: typed views of the projection for the CLI and for services."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from turnledger.model.events import Quarantined, Rejected
from turnledger.model.graph import Block
from turnledger.projections.errors import AmbiguousOperationError
from turnledger.projections.keys import DEFAULT_KEY_PREFIX, ProjectionKeys
from turnledger.projections.plan import COMMITTED_MARKER, PREVIEW_TEXT_SUFFIX
from turnledger.projections.replies import bytes_hash, bytes_list, bytes_set, scored_list, text_or_none
from turnledger.projections.shards import applied_offsets_of, discover
from turnledger.redisconn.cluster import RedisClient


@dataclass(frozen=True, slots=True)
class OperationStatus:
    operation_id: str
    conversation: str | None
    state: str | None
    previous_state: str | None
    generation: int
    manifest_digest: str | None
    reason: str | None
    detail: str | None
    created_at_ms: int | None
    updated_at_ms: int | None
    fields: dict[str, str]
    """Everything the projection holds for the operation (request digest, adapter, counters...)."""

    def to_json(self) -> dict[str, Any]:
        return {"operationId": self.operation_id, **self.fields}


@dataclass(frozen=True, slots=True)
class Preview:
    conversation_id: str
    operation_id: str
    attempt_generation: int
    block_index: int
    text: str
    through_sequence: int
    occurred_at_ms: int
    committed: bool = False

    @property
    def length(self) -> int:
        """Code points of the text: the offset at which the next preview record of the block appends."""
        return len(self.text)


_TEXT_SUFFIX = PREVIEW_TEXT_SUFFIX.encode()


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)


class ProjectionReader:
    def __init__(
        self, redis: RedisClient, prefix: str = DEFAULT_KEY_PREFIX, keys: ProjectionKeys | None = None
    ) -> None:
        """The projection under `prefix`, as one slot group unless `keys` says otherwise: `open`
        finds out from Redis."""
        self.redis = redis
        self.keys = keys or ProjectionKeys.of(prefix, redis)

    @classmethod
    async def open(cls, redis: RedisClient, prefix: str = DEFAULT_KEY_PREFIX) -> ProjectionReader:
        """A reader of the projection under `prefix` as Redis holds it (split in slot groups or not:
        `shards.discover`)."""
        return cls(redis, prefix, await discover(prefix, redis))

    async def history(self, conversation: str) -> list[Block]:
        """Committed blocks in conversation order."""
        ids = bytes_list(await self.redis.zrange(self.keys.history_order(conversation), 0, -1))
        if not ids:
            return []
        values = await self.redis.hmget(self.keys.history(conversation), ids)
        return [Block.model_validate_json(v) for v in values if v is not None]

    async def knows(self, conversation: str) -> bool:
        """Whether the projection holds anything of `conversation`: its live events (every record of it
        the projector applies appends one, a rejected submission's too) or its operations (a manifest,
        which appends none). Known with no committed turn is an empty history; unknown is an id the
        projection never saw (or another key prefix's)."""
        keys = (self.keys.events(conversation), self.keys.operations(conversation))
        return bool(await self.redis.exists(*keys))

    async def revision(self, conversation: str) -> int | None:
        return _int(text_or_none(await self.redis.hget(self.keys.conversation(conversation), "revision")))

    async def conversations_of_operation(self, op_id: str) -> list[str]:
        """The conversations that have an operation of this id (usually one)."""
        members: set[bytes] = set()
        for group in self.keys.groups:
            members |= bytes_set(await self.redis.smembers(group.operation_conversations(op_id)))
        return sorted(m.decode() for m in members)

    async def find_operation(self, op_id: str, conversation: str | None = None) -> OperationStatus | None:
        """The operation of this id in `conversation`, or in the only conversation that has one.

        Raises AmbiguousOperationError when no conversation is named and several have the id.
        """
        if conversation is None:
            conversations = await self.conversations_of_operation(op_id)
            if len(conversations) > 1:
                raise AmbiguousOperationError(op_id, conversations)
            if not conversations:
                return None
            conversation = conversations[0]
        return await self.operation(conversation, op_id)

    async def operation(self, conversation: str, op_id: str) -> OperationStatus | None:
        raw = bytes_hash(await self.redis.hgetall(self.keys.operation(conversation, op_id)))
        if not raw:
            return None
        f = {k.decode(): v.decode() for k, v in raw.items()}
        return OperationStatus(
            operation_id=op_id,
            conversation=f.get("conversation"),
            state=f.get("state"),
            previous_state=f.get("previous_state"),
            generation=int(f.get("generation", "0")),
            manifest_digest=f.get("manifest_digest"),
            reason=f.get("reason"),
            detail=f.get("detail"),
            created_at_ms=_int(f.get("created_at_ms")),
            updated_at_ms=_int(f.get("updated_at_ms")),
            fields=dict(sorted(f.items())),
        )

    async def operations(self, conversation: str) -> list[OperationStatus]:
        ids = sorted(
            m.decode() for m in bytes_set(await self.redis.smembers(self.keys.operations(conversation)))
        )
        found = [await self.operation(conversation, op_id) for op_id in ids]
        return [op for op in found if op is not None]

    async def quarantine(self, conversation: str) -> list[Quarantined]:
        values = bytes_list(await self.redis.lrange(self.keys.quarantine(conversation), 0, -1))
        return [Quarantined.model_validate_json(v) for v in values]

    async def previews(self, conversation: str) -> list[Preview]:
        """Current (unretracted, uncommitted) previews of every operation of the conversation."""
        out: list[Preview] = []
        ids = sorted(
            m.decode() for m in bytes_set(await self.redis.smembers(self.keys.operations(conversation)))
        )
        for op_id in ids:
            raw = bytes_hash(await self.redis.hgetall(self.keys.previews(conversation, op_id)))
            if COMMITTED_MARKER.encode() in raw:
                continue
            for name, value in raw.items():
                if name.startswith(b"~") or name.endswith(_TEXT_SUFFIX):
                    continue
                data = orjson.loads(value)
                # the text in its own field (appended to in place); in the value itself before that
                text = raw.get(name + _TEXT_SUFFIX)
                out.append(
                    Preview(
                        conversation_id=conversation,
                        operation_id=op_id,
                        attempt_generation=data["attemptGeneration"],
                        block_index=data["blockIndex"],
                        text=data.get("text", "") if text is None else text.decode("utf-8"),
                        through_sequence=data["throughSequence"],
                        occurred_at_ms=data["occurredAtMs"],
                    )
                )
        return sorted(out, key=lambda p: (p.operation_id, p.attempt_generation, p.block_index))

    async def rejections(self, conversation: str | None = None, limit: int = 100) -> list[Rejected]:
        """Newest first; filtered by conversation when given (scans the capped log: of the
        conversation's slot group, or of every group merged by time)."""
        groups = self.keys.groups if conversation is None else (self.keys.group_of(conversation),)
        scored: list[tuple[float, bytes]] = []
        for group in groups:
            rows = scored_list(await self.redis.zrevrange(group.rejections, 0, -1, withscores=True))
            scored += [(score, value) for value, score in rows]
        if len(groups) > 1:
            scored.sort(reverse=True)  # as ZREVRANGE orders one group: by score, then member, descending
        out: list[Rejected] = []
        for _, value in scored:
            rejected = Rejected.model_validate_json(value)
            if conversation is None or rejected.conversation_id == conversation:
                out.append(rejected)
                if len(out) >= limit:
                    break
        return out

    async def stats(self) -> dict[str, int]:
        """The counters, summed over the slot groups."""
        total: dict[str, int] = {}
        for group in self.keys.groups:
            for name, value in bytes_hash(await self.redis.hgetall(group.stats)).items():
                total[name.decode()] = total.get(name.decode(), 0) + int(value)
        return dict(sorted(total.items()))

    async def applied_offsets(self) -> dict[str, int]:
        """Where the projection stands: each partition's applied offset (the lowest of the groups')."""
        return await applied_offsets_of(self.redis, self.keys)
