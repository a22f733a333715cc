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
list costs little to build again, and a listing costs ~520 bytes a block: the ref, its JSON, its Avro).
The engine owns one, as it owns its other caches; nothing in it changes a byte of any output: a
listing built from nothing is the reference, `tests/unit/dispatch/test_manifest_blocks.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.codec import default_codec
from turnledger.codec.compiled import long_bytes
from turnledger.model.bounded_cache import BoundedCache
from turnledger.model.canonical import canonical_json
from turnledger.model.graph import Block, BlockRef
from turnledger.model.self_encoded import SelfEncoded

MIN_LISTED_BLOCKS = 64
"""A conversation's listing is kept from this many blocks on."""

_REF_BYTES = 280
"""What a kept `BlockRef` costs besides its JSON and Avro (the instance, its dict, a tuple slot):
measured ~270 with tracemalloc at 1,000 blocks; the strings are the blocks' own."""


@dataclass(frozen=True, slots=True)
class ListedBlocks:
    """The refs of `blocks`: a `SelfEncoded` carrying their canonical JSON and Avro when the codec can
    write a `BlockRef` here (what the next listing continues), else a plain tuple."""

    blocks: tuple[Block, ...]
    refs: tuple[BlockRef, ...]

    @property
    def held_bytes(self) -> int:
        refs = self.refs
        encoded = len(refs.json) + len(refs.avro) if type(refs) is SelfEncoded else 0
        return encoded + _REF_BYTES * len(self.blocks)


NOTHING_LISTED = ListedBlocks((), ())


def list_blocks(blocks: tuple[Block, ...], previous: ListedBlocks = NOTHING_LISTED) -> ListedBlocks:
    """The listing of `blocks`, continuing `previous` when `blocks` start with its blocks (the same
    objects, or equal ones) and its encodings are of the codec's current `BlockRef` schema, else from
    nothing. The earlier JSON and Avro are copied once, into the new list's."""
    found = default_codec().record_writer(BlockRef)
    if found is None:
        return ListedBlocks(blocks, tuple(map(BlockRef.of, blocks)))
    fingerprint, write = found
    earlier, kept = previous.refs, len(previous.blocks)
    if (
        type(earlier) is not SelfEncoded
        or earlier.avro_fingerprint != fingerprint
        or kept > len(blocks)
        or blocks[:kept] != previous.blocks
    ):
        earlier, kept = _NO_REFS, 0
    new = tuple(map(BlockRef.of, blocks[kept:]))
    avro = bytearray(_avro_items(earlier))
    try:
        for ref in new:
            write(avro, ref)
    except Exception:  # off the compiled writer's path: the manifest's own encoding decides
        return ListedBlocks(blocks, tuple(map(BlockRef.of, blocks)))
    refs = earlier + new
    json_new = canonical_json([_ref_json(ref) for ref in new])[1:-1]
    json = b"".join((memoryview(earlier.json)[:-1], b"," if kept and new else b"", json_new, b"]"))
    return ListedBlocks(blocks, SelfEncoded(refs, json, _avro_array(len(refs), avro), fingerprint))


_NO_REFS = SelfEncoded((), b"[]", b"\x00", b"")


def _avro_items(refs: SelfEncoded) -> memoryview:
    """The Avro of the array's items: its encoding (`_avro_array`) without the head and the end."""
    if not refs:
        return memoryview(b"")
    return memoryview(refs.avro)[len(long_bytes(len(refs))) : -1]


def _ref_json(ref: BlockRef) -> dict[str, str]:
    """`ref.to_json_dict()`, built from its fields (spec names, no null `callId`)."""
    fields = {"id": ref.id, "role": ref.role, "kind": ref.kind, "digest": ref.digest}
    if ref.call_id is not None:
        fields["callId"] = ref.call_id
    return fields


def _avro_array(count: int, items: bytes | bytearray) -> bytes:
    """An Avro array of `count` items encoded as `items`: one block (its count, the items), then
    the end (0), as the codec writes one; an empty array is the end alone."""
    if not count:
        return b"\x00"
    return b"".join((long_bytes(count), items, b"\x00"))


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
