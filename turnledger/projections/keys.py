"""Redis key names of the projection, all under one configurable prefix.

Everything the projector writes lives under `prefix`, so a rebuild can drop it with
SCAN + DEL (only the names this module makes: `is_key_under`, so that a projection under `tl:v2:` is not
taken for part of one under `tl:`) and a verification can build a second projection beside the first
under another prefix. The per-batch Lua script touches keys of many conversations, which a Redis
Cluster allows only inside one hash slot: on a cluster (`one_slot`) every key starts with the
prefix as a hash tag (`{tl:}history:c-1`, `redisconn.cluster.slot_base`), so the whole projection
shares one slot. `base` is what every key starts with, the prefix or its tagged form.

One slot is one shard of the cluster. A projection too large or too busy for one shard is split in
`shards` slot groups (`--shards N`, a cluster only): a conversation's keys all live in the group
`shard_of` its id picks (`{tl:#3}history:c-1`), and each group is a projection of its own, with its
offsets hash, epoch, counters, rejections and listing, applied by its own script call
(`projections/shards.py`). The per-conversation key methods pick the group themselves; what a group
holds for all its conversations (`offsets`, `stats`, `rejections`, `conversations`,
`operation_conversations`) is asked of each group (`groups`), and readers merge it. The group count is
kept in the projection (`layout`), so that every reader and writer finds it there.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from turnledger.errors import ProjectionError, RedisSettingsError
from turnledger.redisconn.cluster import RedisClient, is_cluster, slot_base

DEFAULT_KEY_PREFIX = "tl:"
EPOCH_FIELD = "~epoch"
"""Field of the offsets hash: a token created when the hash is, gone when Redis comes back empty."""
MAX_SHARDS = 1024
SHARD_MARK = "#"
"""Between the prefix and the group number in a group's hash tag (`{tl:#3}`)."""
WHOLE_NAMES = frozenset({"offsets", "stats", "rejections", "conversations", "layout"})
"""What follows `base` in the keys a projection (or a slot group) names whole."""
KINDS = (
    "events:",
    "conversation:",
    "history:",
    "history-order:",
    "ops:",
    "op:",
    "op-conversations:",
    "quarantine:",
    "preview:",
)
"""What follows `base` in the keys a projection names by a kind and an id."""


def shard_of(conversation_id: str | None, shards: int) -> int:
    """The slot group of a conversation: CRC-32 of its id (UTF-8) modulo the group count, so any
    process, in any language, finds it; records of no conversation go to group 0."""
    if shards == 1 or conversation_id is None:
        return 0
    return zlib.crc32(conversation_id.encode("utf-8")) % shards


def shard_base(prefix: str, shard: int) -> str:
    """What every key of group `shard` starts with: `{<prefix>#<shard>}`."""
    return "{" + prefix + SHARD_MARK + str(shard) + "}"


@dataclass(frozen=True, slots=True)
class ProjectionKeys:
    prefix: str = DEFAULT_KEY_PREFIX
    one_slot: bool = False
    """Every key in the hash slot of the prefix (a Redis Cluster)."""
    shards: int = 1
    """Slot groups the projection is split in (module docstring); more than one only on a cluster."""
    base: str = field(init=False, repr=False, compare=False)
    """What every key starts with: the prefix, or on a cluster its hash-tagged form. Split in groups,
    what the projection's `layout` starts with; each group's keys start with their own."""
    groups: tuple[ProjectionKeys, ...] = field(init=False, repr=False, compare=False)
    """The keys of each slot group, as a projection of its own; `(self,)` when not split."""

    def __post_init__(self) -> None:
        if self.one_slot and SHARD_MARK in self.prefix:
            raise RedisSettingsError(
                f"key prefix {self.prefix!r}: on a Redis Cluster {SHARD_MARK!r} marks a slot group's number "
                "in a projection's keys ({tl:#3}), so a prefix holding it could name another projection's "
                "group; use a prefix without it"
            )
        object.__setattr__(self, "base", slot_base(self.prefix) if self.one_slot else self.prefix)
        if self.shards == 1:
            object.__setattr__(self, "groups", (self,))
            return
        if not 1 < self.shards <= MAX_SHARDS:
            raise RedisSettingsError(f"--shards: from 1 to {MAX_SHARDS} slot groups, not {self.shards}")
        if not self.one_slot:
            raise RedisSettingsError(
                f"--shards {self.shards}: slot groups spread a projection over the shards of a Redis "
                "Cluster (REDIS_URL=redis+cluster://HOST:PORT); a single Redis holds it whole, so use 1"
            )
        if self.base == self.prefix:  # the prefix fixes a hash tag of its own: one slot for every group
            raise RedisSettingsError(
                f"key prefix {self.prefix!r} fixes its own hash tag, which would put every slot group in "
                "one slot: use a prefix without braces (such as 'tl:') with --shards"
            )
        groups = tuple(ProjectionKeys(shard_base(self.prefix, i)) for i in range(self.shards))
        object.__setattr__(self, "groups", groups)

    @classmethod
    def of(cls, prefix: str, client: RedisClient, shards: int = 1) -> ProjectionKeys:
        """The keys of the projection under `prefix` as `client`'s Redis must hold them."""
        return cls(prefix, one_slot=is_cluster(client), shards=shards)

    def beside(self, prefix: str) -> ProjectionKeys:
        """Another projection's keys in the same Redis (a verification's), split alike."""
        return ProjectionKeys(prefix, one_slot=self.one_slot, shards=self.shards)

    @property
    def split(self) -> bool:
        return self.shards > 1

    @property
    def layout(self) -> str:
        """String: the projection's slot group count, set by the first projector (`shards.py`)."""
        return f"{self.base}layout"

    def group_of(self, conversation_id: str | None) -> ProjectionKeys:
        """The keys of the slot group that holds `conversation_id`."""
        return self.groups[shard_of(conversation_id, self.shards)]

    def _whole(self, name: str) -> str:
        if self.split:
            raise ProjectionError(
                f"the projection under {self.prefix!r} is split in {self.shards} slot groups, each with "
                f"its own {name}: ask each of `groups`"
            )
        return f"{self.base}{name}"

    def _of(self, conversation_id: str) -> str:
        """What the keys of `conversation_id` start with: `base`, or its slot group's."""
        return self.groups[shard_of(conversation_id, self.shards)].base if self.split else self.base

    @property
    def offsets(self) -> str:
        """Hash `topic:partition` -> last applied offset: the only source of truth for resuming; its
        field `EPOCH_FIELD` tells a projector whether the hash is still the one it read."""
        return self._whole("offsets")

    @property
    def stats(self) -> str:
        """Hash of counters (undecodable records, retractions, conflicts...), applied exactly once."""
        return self._whole("stats")

    @property
    def rejections(self) -> str:
        """Sorted set (score = occurred_at_ms) of Rejected records as JSON, capped."""
        return self._whole("rejections")

    @property
    def conversations(self) -> str:
        """Sorted set conversation id scored by its last committed turn or decision time (the listing)."""
        return self._whole("conversations")

    def events(self, conversation_id: str) -> str:
        """Capped Redis Stream of the conversation's live events (committed, preview, retracted, status,
        quarantined, rejected), appended by the script only for records it applies: `turnledger serve`
        reads it with XREAD BLOCK and uses its entry ids as SSE ids."""
        return f"{self._of(conversation_id)}events:{conversation_id}"

    def conversation(self, conversation_id: str) -> str:
        """Hash: latest revision, turn count, last update time."""
        return f"{self._of(conversation_id)}conversation:{conversation_id}"

    def history(self, conversation_id: str) -> str:
        """Hash block id -> block JSON (idempotent per block id)."""
        return f"{self._of(conversation_id)}history:{conversation_id}"

    def history_order(self, conversation_id: str) -> str:
        """Sorted set block id scored by the block's ordering."""
        return f"{self._of(conversation_id)}history-order:{conversation_id}"

    def operations(self, conversation_id: str) -> str:
        """Set of the operation ids of a conversation."""
        return f"{self._of(conversation_id)}ops:{conversation_id}"

    def operation(self, conversation_id: str, operation_id: str) -> str:
        """Hash: the operation's status as the last DispatchDecision left it, plus its manifest."""
        return f"{self._of(conversation_id)}op:{_scoped(conversation_id, operation_id)}"

    def operation_conversations(self, operation_id: str) -> str:
        """Set of the conversations that have an operation of this id, to find it by its id alone (in
        a split projection, each group's holds its own conversations)."""
        return self._whole(f"op-conversations:{operation_id}")

    def quarantine(self, conversation_id: str) -> str:
        """List of Quarantined records as JSON, in topic order."""
        return f"{self._of(conversation_id)}quarantine:{conversation_id}"

    def previews(self, conversation_id: str, operation_id: str) -> str:
        """Hash `generation:block_index` -> preview JSON, plus `~` marker fields (see plan.py)."""
        return f"{self._of(conversation_id)}preview:{_scoped(conversation_id, operation_id)}"


def is_key_under(base: str, key: str) -> bool:
    """Whether `key` is a key the projection (or slot group) whose keys start with `base` names.

    A prefix is matched as a string, so on a single Redis the keys of a projection under `tl:v2:` also
    start with `tl:`; only their names tell them apart (`tl:v2:history:c-1` is not a key of `tl:`). A
    prefix that is another's followed by a kind (`tl:op:` beside `tl:`) cannot be told apart.
    """
    if not key.startswith(base):
        return False
    name = key[len(base) :]
    return name in WHOLE_NAMES or name.startswith(KINDS)


def _scoped(conversation_id: str, operation_id: str) -> str:
    """`conversation:operation`, unambiguous whatever the ids hold.

    Operation ids are unique within a conversation only (the fold checks nothing wider),
    so every per-operation key names its conversation too. `%` and `:` in the
    conversation id are percent-escaped, so the first `:` always ends it.
    """
    return conversation_id.replace("%", "%25").replace(":", "%3A") + ":" + operation_id
