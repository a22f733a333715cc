"""What one render leaves for the next render of the same conversation: the rendered prefix.

A conversation's next request repeats its previous one almost entirely, so a dispatch late in
a long conversation should not pay for its whole history again. `RenderedPrefix` holds what
the render of a sequence produced that the render of a longer sequence with the same blocks
in front reuses as it is: the canonical bytes of the turns, the system parts set aside, the
facts about the history the body depends on (scoped input, tool names), and the SHA-256 state
over the body up to the end of those turns. The next render renders only the new blocks and
hashes only the new bytes (`AdapterBase.render`).

When the prefix may be reused (`continues`): the new blocks start with an assistant block the
adapter renders, the prefix ends with a user or tool block it renders (so no new turn can
merge into the prefix's last turn, and the new blocks start a new role run), every tool
result in it has the tool role, and no call id of the new blocks is one of the prefix's (so
placing results never moves a new block into the prefix, nor a prefix block out of it). Then
build(prefix + new) is the prefix's turns followed by build(new)'s, the scoped-input notice
and stub tools decided over both: for the five APIs' turn folds, whose only carry between
role runs is the last turn a run of the same API role may merge into. The tests render every
cut of generated conversations both ways and compare the bytes. Anything else is rendered
from the start. The digest does not rest on that argument: the saved hash state is only
continued over a body that starts with exactly the bytes it covers.

`RenderCache` keeps one prefix per (adapter, conversation), least recently used out first,
bounded in bytes. The engine owns one, as it owns its other caches; the core holds none, and
nothing in it changes a byte of any output (a render with an empty cache is the reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnledger.adapters.kinds import TOOL, TOOL_CALL, TOOL_RESULT
from turnledger.model.bounded_cache import BoundedCache
from turnledger.model.graph import SCOPED_INPUT_KINDS, Block

if TYPE_CHECKING:
    from hashlib import _Hash

Part = dict[str, Any]

_ENTRY_BYTES = 512
"""What one cached prefix costs beyond its bytes (the entry, its tuples and set), roughly."""


@dataclass(frozen=True, slots=True)
class BlockFacts:
    """What a render needs to know about blocks besides their parts, found in one pass."""

    call_ids: frozenset[str]
    """The call ids the blocks' calls and results are placed by (`place_results`)."""
    tool_role_results: bool
    """Every result has the tool role (the validator's rule; only tool-role blocks are ever placed
    out of order, which the cut conditions rely on)."""
    scoped: bool
    tool_blocks: bool


def facts_of(blocks: tuple[Block, ...]) -> BlockFacts:
    call_ids: set[str] = set()
    tool_role_results = True
    scoped = tool_blocks = False
    for b in blocks:
        kind = b.kind
        if kind == TOOL_CALL:
            call_ids.add(b.call_id or "")
            tool_blocks = True
        elif kind == TOOL_RESULT:
            if b.call_id is not None:
                call_ids.add(b.call_id)
            tool_role_results = tool_role_results and b.role == TOOL
            tool_blocks = True
        elif kind in SCOPED_INPUT_KINDS:
            scoped = True
    return BlockFacts(frozenset(call_ids), tool_role_results, scoped, tool_blocks)


@dataclass(frozen=True)
class RenderedPrefix:
    """The reusable part of one render of `blocks` (see the module docstring)."""

    blocks: tuple[Block, ...]
    open_end: bool
    """A render of these blocks followed by a rendered assistant block may start from here."""
    call_ids: frozenset[str]
    hashed: bytes
    """The body up to the end of its turns (the closing `]` left out): what `hash_state` covers."""
    turns_at: int
    """Where the turns of the blocks (the notice excluded) start in `hashed`."""
    hash_state: _Hash | None
    system: tuple[Part, ...] = ()
    """The system parts the API sets aside, the notice excluded."""
    scoped: bool = False
    tool_blocks: bool = False
    tool_names: tuple[str, ...] = ()
    """Tool names of the calls and results, first-seen order (kept for layouts with stub tools only)."""

    @property
    def turns(self) -> memoryview:
        """The canonical JSON of the turns, comma-joined, without brackets (a view: no copy)."""
        return memoryview(self.hashed)[self.turns_at :]

    @property
    def held_bytes(self) -> int:
        """The bytes and the tuple this entry holds; the blocks are the conversation state's own."""
        return len(self.hashed) + 8 * len(self.blocks) + _ENTRY_BYTES


EMPTY = RenderedPrefix(
    blocks=(), open_end=True, call_ids=frozenset(), hashed=b"", turns_at=0, hash_state=None
)


class RenderCache(BoundedCache[tuple[str, str], RenderedPrefix]):
    """The last rendered prefix per (adapter id, conversation id), bounded in bytes and in entries,
    LRU first out.

    The byte bound counts the body bytes and the block tuple of each entry, not the blocks: those
    are the conversation state's, which the engine holds while the conversation is in its state
    cache. An entry that outlives its state keeps the blocks (and the hash state) alive on its own,
    a few KB each, which the byte bound does not see: with many small conversations the byte bound
    alone let ~50k entries per engine stay (issue 20: 100k conversations, about 180 MB of entries
    whose states were long evicted). `max_entries` bounds that: the engine passes the size of its
    state cache, so an entry outlives its state only briefly.
    """

    def __init__(self, max_bytes: int = 32 << 20, max_entries: int | None = None) -> None:
        super().__init__(max_bytes, max_entries)
