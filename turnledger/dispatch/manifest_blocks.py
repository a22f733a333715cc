"""A manifest's block list, continued from the conversation's last dispatch.

A manifest lists every block of the conversation (`DispatchManifest.blocks`): a `BlockRef` each, in
the manifest's digested JSON and in its Avro record. Built from nothing, that is three Python calls
per block of the history on every dispatch: at 1,000 blocks it cost several times the render the
`RenderCache` already continues (issue 20, goal 5: a dispatch late in a long conversation should
not pay for the whole history again). `ListedBlocks` keeps, for the blocks of one dispatch, their
refs with the refs' canonical JSON and Avro; the next dispatch of the conversation whose blocks
start with those very blocks (the graph only grows) builds the three only for the new blocks and
hands the whole list on as a `SelfEncoded` (model/self_encoded.py), which the digest and the codec
take as it is.

`ListingCache` keeps one listing per conversation, least recently used out first, bounded in
bytes and in entries, and only for conversations of at least `MIN_LISTED_BLOCKS` blocks (a short
list costs little to build again, and a listing costs ~600 bytes a block, most of it the refs).
The engine owns one, as it owns its other caches; nothing in it changes a byte of any output: a
listing built from nothing is the reference, `tests/unit/dispatch/test_manifest_blocks.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.codec import default_codec
from turnledger.model.bounded_cache import BoundedCache
from turnledger.model.canonical import canonical_json
from turnledger.model.graph import Block, BlockRef
from turnledger.model.self_encoded import SelfEncoded

MIN_LISTED_BLOCKS = 64
"""A conversation's listing is kept from this many blocks on."""

_REF_BYTES = 480
"""What a kept `BlockRef` costs besides its share of the two encodings (the instance, its dict,
a tuple slot), roughly: the strings are the blocks' own."""


@dataclass(frozen=True, slots=True)
class ListedBlocks:
    """The refs of `blocks` (`refs`: a `SelfEncoded` when the codec can write a `BlockRef` here),
    with the comma-joined canonical JSON and the concatenated Avro of the refs, to continue."""

    blocks: tuple[Block, ...]
    refs: tuple[BlockRef, ...]
    json_items: bytes
    avro_items: bytes

    @property
    def held_bytes(self) -> int:
        return len(self.json_items) + len(self.avro_items) + _REF_BYTES * len(self.blocks)


NOTHING_LISTED = ListedBlocks((), (), b"", b"")


def list_blocks(blocks: tuple[Block, ...], previous: ListedBlocks = NOTHING_LISTED) -> ListedBlocks:
    """The listing of `blocks`, continuing `previous` when `blocks` start with its blocks (the same
    objects, or equal ones), else from nothing."""
    kept = len(previous.blocks)
    if kept > len(blocks) or blocks[:kept] != previous.blocks:
        previous, kept = NOTHING_LISTED, 0
    new = tuple(map(BlockRef.of, blocks[kept:]))
    refs = previous.refs + new
    json_new = canonical_json([_ref_json(ref) for ref in new])[1:-1]
    json_items = b",".join(filter(None, (previous.json_items, json_new)))
    found = default_codec().record_writer(BlockRef)
    if found is None:
        return ListedBlocks(blocks, refs, json_items, b"")
    fingerprint, write = found
    avro = bytearray(previous.avro_items)
    try:
        for ref in new:
            write(avro, ref)
    except Exception:  # off the compiled writer's path: the manifest's own encoding decides
        return ListedBlocks(blocks, refs, json_items, b"")
    avro_items = bytes(avro)
    array = _avro_array(len(refs), avro_items)
    listed = SelfEncoded(refs, b"[" + json_items + b"]", array, fingerprint)
    return ListedBlocks(blocks, listed, json_items, avro_items)


def _ref_json(ref: BlockRef) -> dict[str, str]:
    """`ref.to_json_dict()`, built from its fields (spec names, no null `callId`)."""
    fields = {"id": ref.id, "role": ref.role, "kind": ref.kind, "digest": ref.digest}
    if ref.call_id is not None:
        fields["callId"] = ref.call_id
    return fields


def _avro_array(count: int, items: bytes) -> bytes:
    """An Avro array of `count` items encoded as `items`: one block (its count, the items), then
    the end (0), as the codec writes one; an empty array is the end alone."""
    if not count:
        return b"\x00"
    z = count << 1
    head = bytearray()
    while z > 0x7F:
        head.append((z & 0x7F) | 0x80)
        z >>= 7
    head.append(z)
    return bytes(head) + items + b"\x00"


class ListingCache(BoundedCache[str, ListedBlocks]):
    """The last listing per conversation id (see the module docstring)."""

    def __init__(self, max_bytes: int = 16 << 20, max_entries: int | None = None) -> None:
        super().__init__(max_bytes, max_entries)


def manifest_refs(
    conversation_id: str, blocks: tuple[Block, ...], cache: ListingCache | None
) -> tuple[BlockRef, ...]:
    """The refs a manifest of `blocks` lists, continued from (and kept in) `cache` where it pays."""
    if cache is None or len(blocks) < MIN_LISTED_BLOCKS:
        return tuple(map(BlockRef.of, blocks))  # encoded with the manifest, as fast for a short list
    previous = cache.get(conversation_id)
    listed = list_blocks(blocks, NOTHING_LISTED if previous is None else previous)
    cache.put(conversation_id, listed)
    return listed.refs
