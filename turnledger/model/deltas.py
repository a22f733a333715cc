"""Normalized stream deltas: what every provider stream parser produces.

One shape for all providers so that the assembler, the ingress topic and the
dispatch fold never see a provider's wire format. The dedup key is
(response_handle, generation, block_index, delta_sequence); `delta_sequence`
increases by one per delta within one (handle, generation) stream, in stream order.
"""

from __future__ import annotations

from enum import StrEnum

from turnledger.model.base import Frozen


class DeltaType(StrEnum):
    MESSAGE_START = "message_start"
    BLOCK_START = "block_start"
    TEXT_DELTA = "text_delta"
    THINKING_DELTA = "thinking_delta"
    SIGNATURE = "signature"
    ARGUMENT_FRAGMENT = "argument_fragment"
    BLOCK_STOP = "block_stop"
    MESSAGE_STOP = "message_stop"
    USAGE = "usage"
    PROVIDER_ERROR = "provider_error"


class StopReason(StrEnum):
    """Provider stop reasons mapped onto one set (the raw value travels in `raw_stop_reason`)."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    REFUSAL = "refusal"
    PAUSE = "pause"
    ERROR = "error"
    OTHER = "other"


MESSAGE_LEVEL_INDEX = -1


class NormalizedDelta(Frozen):
    response_handle: str
    generation: int
    block_index: int
    delta_sequence: int
    type: DeltaType
    block_kind: str | None = None  # on block_start: text / thinking / tool_call
    call_id: str | None = None
    tool_name: str | None = None
    text: str | None = None  # text, thinking, argument fragment or signature payload
    stop_reason: StopReason | None = None
    raw_stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    model: str | None = None
    following_texts: list[str] | None = None
    """A run (`streaming/runs.py`): the texts of the deltas after this one, at the next sequences, of
    the same type and block. None or empty: this delta alone. A list, not a tuple: a dump of it is
    an Avro datum as it is (fastavro reads a tuple in a union as its branch notation); never
    changed in place."""
    item_id: str | None = None
    """On block_start: the provider's own id of the item the block is, where the next request must
    name it (OpenAI Responses: a reasoning item's `rs_` id)."""

    @property
    def dedup_key(self) -> tuple[str, int, int, int]:
        return (self.response_handle, self.generation, self.block_index, self.delta_sequence)

    @property
    def last_sequence(self) -> int:
        """The sequence of the last delta this one stands for (itself, or the end of its run)."""
        following = self.following_texts
        return self.delta_sequence + len(following) if following else self.delta_sequence
