"""Redis key names of the projection, all under one configurable prefix.

Everything the projector writes lives under `prefix`, so a rebuild can drop it with
SCAN + DEL and a verification can build a second projection beside the first under
another prefix. The per-batch Lua script touches keys of many conversations, which a Redis
Cluster allows only inside one hash slot: on a cluster (`one_slot`) every key starts with the
prefix as a hash tag (`{tl:}history:c-1`, `redisconn.cluster.slot_base`), so the whole projection
shares one slot. `base` is what every key starts with, the prefix or its tagged form.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnledger.redisconn.cluster import RedisClient, is_cluster, slot_base

DEFAULT_KEY_PREFIX = "tl:"
EPOCH_FIELD = "~epoch"
"""Field of the offsets hash: a token created when the hash is, gone when Redis comes back empty."""


@dataclass(frozen=True, slots=True)
class ProjectionKeys:
    prefix: str = DEFAULT_KEY_PREFIX
    one_slot: bool = False
    """Every key in the hash slot of the prefix (a Redis Cluster)."""
    base: str = field(init=False, repr=False, compare=False)
    """What every key starts with: the prefix, or on a cluster its hash-tagged form."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", slot_base(self.prefix) if self.one_slot else self.prefix)

    @classmethod
    def of(cls, prefix: str, client: RedisClient) -> ProjectionKeys:
        """The keys of the projection under `prefix` as `client`'s Redis must hold them."""
        return cls(prefix, one_slot=is_cluster(client))

    def beside(self, prefix: str) -> ProjectionKeys:
        """Another projection's keys in the same Redis (a verification's)."""
        return ProjectionKeys(prefix, one_slot=self.one_slot)

    @property
    def offsets(self) -> str:
        """Hash `topic:partition` -> last applied offset: the only source of truth for resuming; its
        field `EPOCH_FIELD` tells a projector whether the hash is still the one it read."""
        return f"{self.base}offsets"

    @property
    def stats(self) -> str:
        """Hash of counters (undecodable records, retractions, conflicts...), applied exactly once."""
        return f"{self.base}stats"

    @property
    def rejections(self) -> str:
        """Sorted set (score = occurred_at_ms) of Rejected records as JSON, capped."""
        return f"{self.base}rejections"

    @property
    def conversations(self) -> str:
        """Sorted set conversation id scored by its last committed turn or decision time (the listing)."""
        return f"{self.base}conversations"

    def events(self, conversation_id: str) -> str:
        """Capped Redis Stream of the conversation's live events (committed, preview, retracted, status,
        quarantined, rejected), appended by the script only for records it applies: `turnledger serve`
        reads it with XREAD BLOCK and uses its entry ids as SSE ids."""
        return f"{self.base}events:{conversation_id}"

    def conversation(self, conversation_id: str) -> str:
        """Hash: latest revision, turn count, last update time."""
        return f"{self.base}conversation:{conversation_id}"

    def history(self, conversation_id: str) -> str:
        """Hash block id -> block JSON (idempotent per block id)."""
        return f"{self.base}history:{conversation_id}"

    def history_order(self, conversation_id: str) -> str:
        """Sorted set block id scored by the block's ordering."""
        return f"{self.base}history-order:{conversation_id}"

    def operations(self, conversation_id: str) -> str:
        """Set of the operation ids of a conversation."""
        return f"{self.base}ops:{conversation_id}"

    def operation(self, conversation_id: str, operation_id: str) -> str:
        """Hash: the operation's status as the last DispatchDecision left it, plus its manifest."""
        return f"{self.base}op:{_scoped(conversation_id, operation_id)}"

    def operation_conversations(self, operation_id: str) -> str:
        """Set of the conversations that have an operation of this id, to find it by its id alone."""
        return f"{self.base}op-conversations:{operation_id}"

    def quarantine(self, conversation_id: str) -> str:
        """List of Quarantined records as JSON, in topic order."""
        return f"{self.base}quarantine:{conversation_id}"

    def previews(self, conversation_id: str, operation_id: str) -> str:
        """Hash `generation:block_index` -> preview JSON, plus `~` marker fields (see plan.py)."""
        return f"{self.base}preview:{_scoped(conversation_id, operation_id)}"


def _scoped(conversation_id: str, operation_id: str) -> str:
    """`conversation:operation`, unambiguous whatever the ids hold.

    Operation ids are unique within a conversation only (the fold checks nothing wider),
    so every per-operation key names its conversation too. `%` and `:` in the
    conversation id are percent-escaped, so the first `:` always ends it.
    """
    return conversation_id.replace("%", "%25").replace(":", "%3A") + ":" + operation_id
