"""A manifest's block list continued from the conversation's last dispatch (dispatch/manifest_blocks.py).

The reference is the list built from nothing the plain way: `BlockRef.of` of every block, the
manifest's digest over its `to_json_dict()`, its record as the codec writes a plain tuple. A
listing, continued or not, must give exactly that: the same refs, the same digest, the same bytes.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import blocks_of, conversations
from tests.unit.dispatch.scenario import Conversation
from turnledger.codec import default_codec, encode
from turnledger.codec.compiled import _write_long
from turnledger.dispatch import manifest_blocks
from turnledger.dispatch.manifest_blocks import (
    MIN_LISTED_BLOCKS,
    NOTHING_LISTED,
    ListedBlocks,
    ListingCache,
    list_blocks,
    manifest_refs,
)
from turnledger.model.canonical import canonical_json
from turnledger.model.events import ManifestIssued
from turnledger.model.graph import Block, BlockRef
from turnledger.model.manifest import DispatchManifest
from turnledger.model.self_encoded import SelfEncoded


def _block(i: int, call_id: str | None = None) -> Block:
    return Block(
        id=f"b-{i}-é☃",
        turn_id=f"t-{i}",
        role="tool" if call_id else "user",
        kind="tool_result" if call_id else "text",
        revision=i,
        ordering=0,
        trust_label="user",
        digest=f"sha256:{i:064x}",
        text=f"text {i}",
        call_id=call_id,
    )


BLOCKS = tuple(_block(i, f"call-{i}" if i % 3 == 0 else None) for i in range(150))


def _avro_array(refs: tuple[BlockRef, ...]) -> bytes:
    """fastavro's encoding of the refs as an array of the shipped BlockRef schema."""
    entry = default_codec().registry.reader("turnledger.v1.BlockRef")
    assert entry is not None
    schema = parse_schema({"type": "array", "items": entry.schema})
    out = BytesIO()
    schemaless_writer(out, schema, [ref.model_dump(by_alias=True) for ref in refs])
    return out.getvalue()


def _check_reference(listed_refs: tuple[BlockRef, ...], blocks: tuple[Block, ...]) -> None:
    plain = tuple(map(BlockRef.of, blocks))
    assert type(listed_refs) is SelfEncoded
    assert listed_refs == plain
    assert [type(ref) for ref in listed_refs] == [BlockRef] * len(blocks)
    assert listed_refs.json == canonical_json([ref.to_json_dict() for ref in plain])
    assert listed_refs.avro == _avro_array(plain)
    entry = default_codec().registry.reader("turnledger.v1.BlockRef")
    assert entry is not None
    assert listed_refs.avro_fingerprint == entry.fingerprint


@pytest.mark.parametrize("count", [0, 1, 63, 64, 150])
def test_a_listing_from_nothing_is_the_refs_with_their_canonical_json_and_avro(count: int) -> None:
    _check_reference(list_blocks(BLOCKS[:count]).refs, BLOCKS[:count])


@given(st.data())
def test_a_listing_continued_at_any_cut_is_the_one_from_nothing(data: st.DataObject) -> None:
    blocks = blocks_of(data.draw(conversations()))
    cut = data.draw(st.integers(0, len(blocks)))
    earlier = list_blocks(blocks[:cut])
    continued = list_blocks(blocks, earlier)
    _check_reference(continued.refs, blocks)
    whole = list_blocks(blocks)
    assert isinstance(whole.refs, SelfEncoded) and isinstance(continued.refs, SelfEncoded)
    assert (continued.refs.json, continued.refs.avro) == (whole.refs.json, whole.refs.avro)
    assert all(a is b for a, b in zip(continued.refs, earlier.refs, strict=False))  # continued, not rebuilt


def test_a_listing_of_other_blocks_is_not_continued() -> None:
    earlier = list_blocks(BLOCKS[:80])
    edited = (*BLOCKS[:10], _block(999), *BLOCKS[11:100])
    listed = list_blocks(edited, earlier)
    _check_reference(listed.refs, edited)
    assert listed.refs[0] is not earlier.refs[0]
    shorter = list_blocks(BLOCKS[:40], earlier)
    _check_reference(shorter.refs, BLOCKS[:40])


def _manifest(blocks: tuple[BlockRef, ...]) -> DispatchManifest:
    return DispatchManifest(
        operation_id="op-1",
        conversation_id="c",
        conversation_revision=7,
        cancel_generation=0,
        sequence_digest="sha256:" + "1" * 64,
        blocks=blocks,
        adapter="anthropic-messages@2",
        adapter_digest="sha256:" + "2" * 64,
        provider="anthropic",
        model_revision="claude",
        toolset_digest="sha256:" + "3" * 64,
        max_output_tokens=1024,
        policy={"blocks": [], "a": {"z": 1, "b": "é"}},
        request_digest="sha256:" + "4" * 64,
        request_body='{"messages":[]}',
        input_tokens=12,
    )


@pytest.mark.parametrize("count", [1, 64, 150])
def test_a_manifest_sealed_with_a_listing_is_the_manifest_sealed_plain(count: int) -> None:
    plain = _manifest(tuple(map(BlockRef.of, BLOCKS[:count]))).sealed()
    listed_refs = list_blocks(BLOCKS[:count]).refs
    assert isinstance(listed_refs, SelfEncoded)
    listed = _manifest(()).sealed(listed_refs)
    assert listed.blocks is listed_refs
    assert listed == plain
    assert listed.manifest_digest == plain.manifest_digest
    assert listed.to_json_dict() == plain.to_json_dict()
    assert encode(ManifestIssued(manifest=listed, occurred_at_ms=5)) == encode(
        ManifestIssued(manifest=plain, occurred_at_ms=5)
    )


def test_the_codec_writes_a_listings_avro_only_under_its_own_item_schema() -> None:
    refs = tuple(map(BlockRef.of, BLOCKS[:70]))
    plain = encode(ManifestIssued(manifest=_manifest(refs).sealed(), occurred_at_ms=5))
    listed = list_blocks(BLOCKS[:70]).refs
    assert isinstance(listed, SelfEncoded)
    other_schema = SelfEncoded(refs, listed.json, b"\x02not these refs\x00", b"\x00" * 8)
    sealed = _manifest(()).sealed(other_schema)
    assert encode(ManifestIssued(manifest=sealed, occurred_at_ms=5)) == plain  # written ref by ref
    trusted = SelfEncoded(refs, listed.json, b"\x02" + listed.avro[1:], listed.avro_fingerprint)
    written = encode(ManifestIssued(manifest=_manifest(()).sealed(trusted), occurred_at_ms=5))
    assert written != plain and written.replace(b"\x02" + listed.avro[1:], listed.avro) == plain


def test_the_cache_keeps_long_conversations_only_and_continues_them() -> None:
    cache = ListingCache()
    short = manifest_refs("c", BLOCKS[: MIN_LISTED_BLOCKS - 1], cache)
    assert type(short) is tuple and len(cache) == 0
    first = manifest_refs("c", BLOCKS[:MIN_LISTED_BLOCKS], cache)
    _check_reference(first, BLOCKS[:MIN_LISTED_BLOCKS])
    second = manifest_refs("c", BLOCKS[:100], cache)
    _check_reference(second, BLOCKS[:100])
    assert all(a is b for a, b in zip(second, first, strict=False))
    assert len(cache) == 1
    kept = cache.get("c")
    assert kept is not None and kept.blocks == BLOCKS[:100]
    assert isinstance(kept.refs, SelfEncoded)
    assert kept.held_bytes == len(kept.refs.json) + len(kept.refs.avro) + 280 * 100
    assert manifest_refs("c", BLOCKS[:100], None) == second


def test_the_cache_is_bounded_in_bytes() -> None:
    one = list_blocks(BLOCKS[:100]).held_bytes
    cache = ListingCache(max_bytes=2 * one + 10)
    for conversation in ("a", "b", "c"):
        manifest_refs(conversation, BLOCKS[:100], cache)
    assert len(cache) == 2 and cache.get("a") is None and cache.held_bytes == 2 * one
    assert NOTHING_LISTED.held_bytes == 0


def test_prepare_lists_through_the_cache_and_the_outputs_are_those_without_it() -> None:
    plain, cached = Conversation(), Conversation(listings=ListingCache())
    for conversation in (plain, cached):
        for turn in range(MIN_LISTED_BLOCKS + 5):
            conversation.user(f"question {turn}")
            if turn >= MIN_LISTED_BLOCKS - 2:
                conversation.request(op=f"op-{turn}")
    assert cached.outputs == plain.outputs
    issued = cached.of(ManifestIssued)
    assert len(issued) == 7
    assert [type(m.manifest.blocks) for m in issued] == [tuple] + [SelfEncoded] * 6
    assert [encode(m) for m in issued] == [encode(m) for m in plain.of(ManifestIssued)]
    assert cached.listings is not None and len(cached.listings) == 1


@pytest.mark.parametrize("count", [1, 63, 64, 8127, 8128, 8191, 8192, 2**20])
def test_the_array_head_is_the_codecs_count_at_every_varint_length(count: int) -> None:
    head = bytearray()
    _write_long(head, count)
    assert manifest_blocks._avro_array(count, b"items") == bytes(head) + b"items\x00"
    assert manifest_blocks._avro_array(0, b"") == b"\x00"


def _no_writer(monkeypatch: pytest.MonkeyPatch, found: Any) -> None:
    codec = default_codec()
    monkeypatch.setattr(type(codec), "record_writer", lambda self, model: found)


def _failing(out: bytearray, ref: BlockRef) -> None:
    raise ValueError("off the compiled path")


@pytest.mark.parametrize("found", [None, (b"\x00" * 8, _failing)], ids=["no-writer", "writer-refuses"])
def test_without_a_compiled_writer_the_listing_is_the_plain_refs(
    monkeypatch: pytest.MonkeyPatch, found: Any
) -> None:
    _no_writer(monkeypatch, found)
    listed = list_blocks(BLOCKS[:70])
    assert type(listed.refs) is tuple and listed.refs == tuple(map(BlockRef.of, BLOCKS[:70]))
    assert listed.blocks is not None and listed.blocks == BLOCKS[:70]
    assert listed.held_bytes == 280 * 70
    assert type(list_blocks(BLOCKS[:80], listed).refs) is tuple
    plain, cached = Conversation(), Conversation(listings=ListingCache())
    for conversation in (plain, cached):
        for turn in range(MIN_LISTED_BLOCKS + 2):
            conversation.user(f"question {turn}")
        conversation.request(op="op-1")
    assert cached.outputs == plain.outputs
    assert [encode(m) for m in cached.of(ManifestIssued)] == [encode(m) for m in plain.of(ManifestIssued)]


def test_the_cache_is_bounded_in_entries() -> None:
    cache = ListingCache(max_entries=1)
    for conversation in ("a", "b"):
        manifest_refs(conversation, BLOCKS[:MIN_LISTED_BLOCKS], cache)
    assert len(cache) == 1 and cache.get("a") is None and cache.get("b") is not None


def test_a_listing_encoded_under_another_schema_is_not_continued() -> None:
    earlier = list_blocks(BLOCKS[:80])
    assert isinstance(earlier.refs, SelfEncoded)
    other = SelfEncoded(tuple(earlier.refs), earlier.refs.json, earlier.refs.avro, b"\x01" * 8)
    listed = list_blocks(BLOCKS[:100], ListedBlocks(earlier.blocks, other))
    _check_reference(listed.refs, BLOCKS[:100])
    assert listed.refs[0] is not earlier.refs[0]
    assert list_blocks(BLOCKS[:100], earlier).refs[0] is earlier.refs[0]
