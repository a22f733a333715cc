"""Size limits of the ledger, and the text checks the validator and the producing side share.

`Limits` is handed to the pure core (the fold, the validator, the assembler, the batch
engine); nothing reads it from the environment, so a replay folds under the limits it is
given. Crossing one is a typed rejection, never an exception:

- `max_block_bytes`, default 256 KiB: UTF-8 bytes of one block's content (text, arguments,
  signature), checked by the validator on submitted and assistant turns and by the assembler
  as deltas arrive. `BLOCK_TOO_LARGE`.
- `max_deltas_per_block`, default 65,536: content deltas (text, thinking, argument fragments,
  signatures) one streamed block may receive. `TOO_MANY_DELTAS`.
- `max_blocks_per_turn`, default 256: blocks of one submitted turn (validator) or of one
  response (assembler). `TOO_MANY_BLOCKS`.
- `max_record_bytes`, default 1 MiB: bytes of one encoded ingress record; the engine refuses
  a larger one before decoding it, the gateway client before sending it. `RECORD_TOO_LARGE`.
- `max_turn_bytes`, default 1 MiB: bytes of the encoded `CommittedTurn` record a turn would be
  written as (256 blocks of 256 KiB would be 64 MiB, past any broker's message size). The fold
  measures the record before it commits the turn: a submitted turn is rejected, an assistant
  turn refused (quarantined, the attempt UNKNOWN), nothing written. `TURN_TOO_LARGE`.
- `max_held_deltas`, default 4,096: deltas the assembler holds ahead of a sequence gap. One more
  is a violation (the attempt can no longer complete): the held deltas are dropped and so is every
  later delta ahead of the gap, so a stream that never fills its gap holds at most this many.
  `TOO_MANY_HELD_DELTAS`.

A value is at the limit when equal to it (accepted); one past it is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

AVRO_LONG_MAX = 2**63 - 1
"""The largest value of an Avro `long`: every integer of an event or output record is one."""

JSON_NESTING_MAX = 32
"""How deep a dispatch's policy, and a tool's input schema, may nest objects and arrays (the value itself
the first level). The adapters put both inside the request body they render, and canonical JSON (orjson)
writes at most 254 levels: unbounded, a policy of 253 levels was taken by the producer's encoder and
raised in the fold's render (a FOLD_FAILED), one of 255 in the encoder, one of about 1,000 out of a
recursive check. Policies nest a few levels (`additional_model_request_fields.thinking.budget_tokens`
is 3) and tool schemas a few more; 32 leaves room and refuses only what no provider takes."""

__all__ = [
    "AVRO_LONG_MAX",
    "DEFAULT_LIMITS",
    "JSON_NESTING_MAX",
    "Limits",
    "has_utf8_form",
    "is_blank",
    "json_nesting",
    "printable",
    "utf8_length",
    "utf8_size",
]


@dataclass(frozen=True, slots=True)
class Limits:
    max_block_bytes: int = 256 * 1024
    max_deltas_per_block: int = 65_536
    max_blocks_per_turn: int = 256
    max_record_bytes: int = 1024 * 1024
    """Kafka's default `max.request.size` of a producer; its broker default `message.max.bytes` is a
    little more (1,048,588), so a record the client accepts fits a default broker."""
    max_turn_bytes: int = 1024 * 1024
    """The same bound on the ledger's own CommittedTurn records (the output topics' brokers)."""
    max_held_deltas: int = 4_096


DEFAULT_LIMITS = Limits()


def has_utf8_form(text: str) -> bool:
    """False for text holding a lone surrogate (e.g. "\\ud800"): it has no UTF-8 form, so neither
    Avro nor canonical JSON can carry it."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_size(parts: Iterable[str | None]) -> int:
    """UTF-8 bytes of the parts (surrogates counted as 3 bytes each, as if they had a form)."""
    return sum(utf8_length(p) for p in parts if p)


def utf8_length(text: str | None) -> int:
    """`utf8_size((text,))` without the generator: the assembler counts every streamed fragment."""
    if not text:
        return 0
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def is_blank(text: str) -> bool:
    """Empty, or only whitespace (`str.isspace`): text a provider refuses as a content block
    (Anthropic and Bedrock: "text content blocks must contain non-whitespace text"). The one
    definition the validator, the adapters, the gateway client and `serve` share."""
    return not text or text.isspace()


def printable(text: str) -> str:
    """The text itself when it has a UTF-8 form, else with its lone surrogates escaped (for details)."""
    return text if has_utf8_form(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_nesting(value: object) -> int:
    """How many objects and arrays deep `value` nests (0 for a scalar; a mapping, list or tuple is one),
    counted without recursion: a value may nest past Python's stack."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            item = list(item.values())
        if isinstance(item, list | tuple):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in item)
    return deepest
