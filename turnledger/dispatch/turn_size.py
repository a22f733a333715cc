"""The size of a committed turn as it will be written, checked before the turn is committed.

Each block is bounded (`max_block_bytes`) and so is their number (`max_blocks_per_turn`), but their
product is not: 256 blocks of 256 KiB are 64 MiB, and a CommittedTurn is one Kafka record. So the fold
encodes the record it is about to emit and refuses the turn when it is past `max_turn_bytes`
(TURN_TOO_LARGE), before the state moves: nothing is written that no broker would take, and a
replay, encoding the same record, decides the same.

The bytes measured are the record's bytes: `EncodedRecords` keeps them for the engine, which writes
them instead of encoding the same turn a second time.
"""

from __future__ import annotations

from turnledger.codec import encode
from turnledger.model.base import Frozen
from turnledger.model.events import CommittedTurn
from turnledger.model.limits import Limits


class EncodedRecords:
    """Output records the fold already encoded, by identity, until the engine takes their bytes.

    One per batch (the engine's): an entry keeps its record alive, so its id cannot be reused by
    another record while the entry exists, and `take` pops it. `take` of a record never encoded
    here encodes it: the bytes are `encode(record)` either way.
    """

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: dict[int, tuple[Frozen, bytes]] = {}

    def encode(self, record: Frozen) -> bytes:
        data = encode(record)
        self._records[id(record)] = (record, data)
        return data

    def take(self, record: Frozen) -> bytes:
        entry = self._records.pop(id(record), None)
        if entry is not None and entry[0] is record:
            return entry[1]
        return encode(record)


def turn_too_large(turn: CommittedTurn, limits: Limits, encoded: EncodedRecords | None = None) -> str | None:
    """Why the turn may not be written (its encoded size past the limit), else None. `encoded`: where
    to keep the turn's bytes for the engine."""
    size = len(encode(turn) if encoded is None else encoded.encode(turn))
    if size <= limits.max_turn_bytes:
        return None
    return f"committed turn record of {size} bytes, at most {limits.max_turn_bytes}"
