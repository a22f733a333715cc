"""Redis key names of the projection, all under one configurable prefix.

Everything the projector writes lives under `prefix`, so a rebuild can drop it with
SCAN + DEL and a verification can build a second projection beside the first under
another prefix. Single-node Redis is assumed: the per-batch Lua script touches keys
of many conversations, which Redis Cluster would only allow inside one hash slot.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_KEY_PREFIX = "tl:"
EPOCH_FIELD = "~epoch"
"""Field of the offsets hash: a token created when the hash is, gone when Redis comes back empty."""


@dataclass(frozen=True, slots=True)
class ProjectionKeys:
    prefix: str = DEFAULT_KEY_PREFIX

    @property
    def offsets(self) -> str:
        """Hash `topic:partition` -> last applied offset: the only source of truth for resuming; its
        field `EPOCH_FIELD` tells a projector whether the hash is still the one it read."""
        return f"{self.prefix}offsets"

    @property
    def stats(self) -> str:
        """Hash of counters (undecodable records, retractions, conflicts...), applied exactly once."""
        return f"{self.prefix}stats"

    @property
    def rejections(self) -> str:
        """Sorted set (score = occurred_at_ms) of Rejected records as JSON, capped."""
        return f"{self.prefix}rejections"

    @property
    def conversations(self) -> str:
        """Sorted set conversation id scored by its last committed turn or decision time (the listing)."""
        return f"{self.prefix}conversations"

    def events(self, conversation_id: str) -> str:
        """Capped Redis Stream of the conversation's live events (committed, preview, retracted, status,
        quarantined, rejected), appended by the script only for records it applies: `turnledger serve`
        reads it with XREAD BLOCK and uses its entry ids as SSE ids."""
        return f"{self.prefix}events:{conversation_id}"

    def conversation(self, conversation_id: str) -> str:
        """Hash: latest revision, turn count, last update time."""
        return f"{self.prefix}conversation:{conversation_id}"

    def history(self, conversation_id: str) -> str:
        """Hash block id -> block JSON (idempotent per block id)."""
        return f"{self.prefix}history:{conversation_id}"

    def history_order(self, conversation_id: str) -> str:
        """Sorted set block id scored by the block's ordering."""
        return f"{self.prefix}history-order:{conversation_id}"

    def operations(self, conversation_id: str) -> str:
        """Set of the operation ids of a conversation."""
        return f"{self.prefix}ops:{conversation_id}"

    def operation(self, conversation_id: str, operation_id: str) -> str:
        """Hash: the operation's status as the last DispatchDecision left it, plus its manifest."""
        return f"{self.prefix}op:{_scoped(conversation_id, operation_id)}"

    def operation_conversations(self, operation_id: str) -> str:
        """Set of the conversations that have an operation of this id, to find it by its id alone."""
        return f"{self.prefix}op-conversations:{operation_id}"

    def quarantine(self, conversation_id: str) -> str:
        """List of Quarantined records as JSON, in topic order."""
        return f"{self.prefix}quarantine:{conversation_id}"

    def previews(self, conversation_id: str, operation_id: str) -> str:
        """Hash `generation:block_index` -> preview JSON, plus `~` marker fields (see plan.py)."""
        return f"{self.prefix}preview:{_scoped(conversation_id, operation_id)}"


def _scoped(conversation_id: str, operation_id: str) -> str:
    """`conversation:operation`, unambiguous whatever the ids hold.

    Operation ids are unique within a conversation only (the fold checks nothing wider),
    so every per-operation key names its conversation too. `%` and `:` in the
    conversation id are percent-escaped, so the first `:` always ends it.
    """
    return conversation_id.replace("%", "%25").replace(":", "%3A") + ":" + operation_id
