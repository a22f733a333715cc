"""The size of a committed turn as it will be written, checked before the turn is committed.

Each block is bounded (`max_block_bytes`) and so is their number (`max_blocks_per_turn`), but their
product is not: 256 blocks of 256 KiB are 64 MiB, and a CommittedTurn is one Kafka record. So the fold
encodes the record it is about to emit and refuses the turn when it is past `max_turn_bytes`
(TURN_TOO_LARGE), before the state moves: nothing is written that no broker would take, and a
replay, encoding the same record, decides the same.
"""

from __future__ import annotations

from turnledger.codec import encode
from turnledger.model.events import CommittedTurn
from turnledger.model.limits import Limits


def turn_too_large(turn: CommittedTurn, limits: Limits) -> str | None:
    """Why the turn may not be written (its encoded size past the limit), else None."""
    size = len(encode(turn))
    if size <= limits.max_turn_bytes:
        return None
    return f"committed turn record of {size} bytes, at most {limits.max_turn_bytes}"
