"""A tuple of records that carries its own encodings, so a long list is not encoded again.

A manifest lists every block of its conversation (`DispatchManifest.blocks`), so a dispatch late in
a long conversation would turn the whole history into `BlockRef`s, their canonical JSON (for the
manifest's digest) and their Avro (for its record) once more, one Python call per block each time
(issue 20). `dispatch/manifest_blocks.py` builds those once per block and keeps them for the
conversation's next dispatch; a `SelfEncoded` hands them to the two places that encode the list:
`DispatchManifest.sealed` splices `json` into the digested JSON, the codec's compiled writer writes
`avro` when `avro_fingerprint` is its items' record schema (any other schema: the items are written
one by one as usual). Equal to the plain tuple of its items in every other respect.
"""

from __future__ import annotations

from typing import Any


class SelfEncoded(tuple):  # type: ignore[type-arg]
    """`tuple(items)` with `json`, the canonical JSON of the array (each item as its
    `to_json_dict()`), and `avro`, the Avro encoding of the array under the record schema whose
    CRC-64-AVRO fingerprint is `avro_fingerprint`. Whoever builds one vouches for both encodings;
    `tests/unit/dispatch/test_manifest_blocks.py` checks the builder against the encoders."""

    json: bytes
    avro: bytes
    avro_fingerprint: bytes

    def __new__(
        cls, items: tuple[Any, ...], json: bytes, avro: bytes, avro_fingerprint: bytes
    ) -> SelfEncoded:
        listed = super().__new__(cls, items)
        listed.json = json
        listed.avro = avro
        listed.avro_fingerprint = avro_fingerprint
        return listed

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (tuple(self), self.json, self.avro, self.avro_fingerprint)
