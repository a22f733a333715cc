"""What the store holds of a conversation's state: snapshot values built and compared in place, and
`Stored`, the engine's record of them.

Every value is a `ConversationSnapshot` (conversation id, format, part) whose part comes last, so a
value is a prefix fixed per conversation and format, the part's length, then the part: `encode_part`
builds it and `holds` compares it without the codec. `Stored` keeps the parts as JSON, to tell what
a write changes and whether the store still holds them (`Stored.current`). The layout of the parts:
`state_layout.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from turnledger.codec import UnencodableRecord, default_codec
from turnledger.codec.compiled import long_bytes
from turnledger.codec.models import NAMESPACE
from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.state_keys import CONTENTS_INFIX, SPLIT_FORMAT
from turnledger.errors import StateFormatError
from turnledger.model.events import ConversationSnapshot
from turnledger.sequence.graph_state import GraphState

_SNAPSHOT_RECORD = f"{NAMESPACE}.{ConversationSnapshot.__name__}"


class StateDecodeError(StateFormatError):
    """A changelog value that is not a ConversationSnapshot of a known format."""


class StateLayoutError(StateDecodeError):
    """A head whose parts are missing, or a part under a key of another conversation."""


@dataclass(frozen=True, slots=True)
class GraphParts:
    """A graph as the head and its runs hold it: computed once per graph (a turn), reused after."""

    graph: GraphState
    head: bytes
    """The graph's JSON with no blocks (and no indexes when the runs hold them)."""
    runs: dict[int, bytes]
    """Start of each run → its part: the run's blocks, and its entries of the indexes."""
    split: bool
    """The runs hold the indexes (the head does not)."""
    keyed: dict[str, bytes]
    """The runs under their keys (`blocks_key`), in order: as a state's parts hold them."""


@dataclass(slots=True)
class Stored:
    """What the store holds of one conversation, as read or last written: the JSON in each key's
    value (to tell what changed), not the value itself (to tell whether the store still holds it).

    A value is the snapshot encoding of (conversation id, format, JSON), the JSON last, so it is
    `snapshot_base(...)`, the JSON's length, then the JSON (`holds`): keeping both the values and
    their JSON kept every cached state's changelog twice (~3.3 KB of a small conversation, issue 20).
    A value read that is not that encoding of its JSON (another writer's bytes) is kept as read in
    `raw`, and compared whole."""

    conversation_id: str = ""
    format_version: int = SPLIT_FORMAT
    """Every key of one conversation holds one format (a split state's, or one whole state)."""
    parts: dict[str, bytes] = field(default_factory=dict)
    graph: GraphParts | None = None
    raw: dict[str, bytes] | None = None
    source: ConversationState | None = None
    """The state `parts` were computed from by `write_state` (None when they were read): its parts are
    exactly `state_parts(source)`, so the next state's are those with only what changed redone."""

    def current(self, get: Callable[[str], bytes | None]) -> bool:
        """Does the store still hold exactly these values (no aborted batch's state in between)?

        `holds` inlined, with the base's length computed once: a cached state's every key is checked
        on every batch that loads it (~14 keys a conversation, ~4% of the engine's CPU, issue 20).

        Content chunks are not checked: the part that counts them is (the operation's progress; its
        own part in format 5), and it decides them. A chunk is written or deleted only by a write
        that also writes that part with other chunk counts (a chunk is written when it fills, every
        chunk is rebuilt or deleted with a change of the counts), in the same batch; so a batch whose
        writes the store lost left that part other than these bytes. And equal bytes of the part
        (its chunk counts, the rest of the content, the assembler's next sequence) come from the
        same log, whose fold gave the same content.
        Checking them cost one read per chunk per record of a streaming answer (+12% of the
        engine's instructions at 20 s answers)."""
        parts = self.parts
        if not parts:
            return True
        base = snapshot_base(self.conversation_id, self.format_version)
        if self.raw is not None:
            return self._current_with_raw(get, base, self.raw)
        size = len(base)
        chunks = self.conversation_id + CONTENTS_INFIX
        for key, part in parts.items():
            if key.startswith(chunks):
                continue
            held = get(key)
            n = len(part)
            length = long_bytes(n)
            if (
                held is None
                or len(held) != size + len(length) + n
                or not held.startswith(base)
                or not held.startswith(length, size)
                or not held.endswith(part)
            ):
                return False
        return True

    def _current_with_raw(
        self, get: Callable[[str], bytes | None], base: bytes, raw: dict[str, bytes]
    ) -> bool:
        """`current` of a state some of whose values were read as other bytes than their encoding."""
        for key, part in self.parts.items():
            held = get(key)
            if held is None:
                return False
            expected = raw.get(key)
            if not (holds(held, base, part) if expected is None else held == expected):
                return False
        return True


@cache
def _snapshot_header() -> bytes:
    entry = default_codec().registry.reader(_SNAPSHOT_RECORD)
    if entry is None:  # pragma: no cover - the shipped schemas hold it
        raise UnencodableRecord(f"no schema for {_SNAPSHOT_RECORD}")
    return bytes(entry.header)


def snapshot_base(conversation_id: str, format_version: int) -> bytes:
    """What every snapshot of this conversation and format starts with: the single-object header,
    the conversation id and the format (the schema's first two fields)."""
    cid = conversation_id.encode("utf-8")
    return b"".join((_snapshot_header(), long_bytes(len(cid)), cid, long_bytes(format_version)))


def holds(value: bytes, base: bytes, part: bytes) -> bool:
    """Is `value` exactly `encode_part(...)` of `part` (`base`: `snapshot_base` of its conversation
    and format)? The bytes field, last, is its length then `part`: compared in place, unbuilt."""
    length = long_bytes(len(part))
    return (
        len(value) == len(base) + len(length) + len(part)
        and value.startswith(base)
        and value.startswith(length, len(base))
        and value.endswith(part)
    )


def encode_part(conversation_id: str, format_version: int, part: bytes, base: bytes | None = None) -> bytes:
    """`encode(ConversationSnapshot(...))`, built in place: the schema's fields are the conversation
    id, the format and the part (Avro bytes: its length, then it), in that order, so the value is
    `snapshot_base(...)` (`base`, when the caller has it) then the part's length and the part, as
    `holds` reads it. `tests/unit/dispatch/test_stored.py` checks it against the codec's encoding
    and decoding; going through the codec cost ~3 µs a key (2% of the engine, issue 20)."""
    if base is None:
        base = snapshot_base(conversation_id, format_version)
    return b"".join((base, long_bytes(len(part)), part))
