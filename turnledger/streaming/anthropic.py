"""Anthropic Messages SSE → normalized deltas.

Event order (provider-formats §2a): message_start, per block content_block_start /
content_block_delta… / content_block_stop, message_delta (stop reason, cumulative
usage), message_stop; `ping` anywhere; `error` possibly after an HTTP 200.

Mapping decisions:
- MESSAGE_STOP is emitted on `message_stop`, carrying the stop reason remembered
  from `message_delta`: a stream cut between the two has no message stop.
- A tool_use block whose `input_json_delta`s were all empty keeps the `input` of its
  `content_block_start` (that is how a call without arguments streams, and what the
  SDK accumulator ends with); we emit that input's canonical JSON as the one
  argument fragment just before the block stop.
- Block types we do not model (server_tool_use, redacted_thinking, …) are started
  with their raw type as `block_kind`, so the assembler refuses to commit a response
  it only half understands rather than silently dropping a block.
- Delta types we do not model (citations_delta, …) are counted in `unknown_events`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from turnledger.model.canonical import canonical_json
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.streaming.parser import Handler, StreamParser

STOP_REASONS: Mapping[str, StopReason] = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSE,
}

BLOCK_KINDS: Mapping[str, str] = {"text": "text", "thinking": "thinking", "tool_use": "tool_call"}

DELTA_TYPES: Mapping[str, tuple[DeltaType, str]] = {
    "text_delta": (DeltaType.TEXT_DELTA, "text"),
    "input_json_delta": (DeltaType.ARGUMENT_FRAGMENT, "partial_json"),
    "thinking_delta": (DeltaType.THINKING_DELTA, "thinking"),
    "signature_delta": (DeltaType.SIGNATURE, "signature"),
}


class AnthropicMessagesParser(StreamParser):
    api = "anthropic-messages"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._raw_stop: str | None = None
        # tool blocks that have not yet received a non-empty fragment → their start input
        self._start_inputs: dict[int, Any] = {}

    def _message_start(self, payload: Mapping[str, Any]) -> None:
        message = payload.get("message") or {}
        if self.response_handle is None and isinstance(message.get("id"), str):
            self.response_handle = message["id"]
        usage = message.get("usage") or {}
        self._emit(
            DeltaType.MESSAGE_START,
            model=message.get("model"),
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
        )

    def _block_start(self, payload: Mapping[str, Any]) -> None:
        index = int(payload["index"])
        block = payload.get("content_block") or {}
        raw_type = str(block.get("type"))
        kind = BLOCK_KINDS.get(raw_type, raw_type)
        if kind == "tool_call":
            self._start_inputs[index] = block.get("input", {})
            self._emit(
                DeltaType.BLOCK_START,
                index,
                block_kind=kind,
                call_id=block.get("id"),
                tool_name=block.get("name"),
            )
            return
        self._emit(DeltaType.BLOCK_START, index, block_kind=kind)
        initial = (
            block.get("text") if kind == "text" else block.get("thinking") if kind == "thinking" else None
        )
        if initial:
            self._emit(
                DeltaType.TEXT_DELTA if kind == "text" else DeltaType.THINKING_DELTA, index, text=initial
            )

    def _block_delta(self, payload: Mapping[str, Any]) -> None:
        index = int(payload["index"])
        delta = payload.get("delta") or {}
        mapped = DELTA_TYPES.get(str(delta.get("type")))
        if mapped is None:
            self.unknown_events += 1
            return
        type_, field = mapped
        text = str(delta.get(field, ""))
        if type_ is DeltaType.ARGUMENT_FRAGMENT and text:
            self._start_inputs.pop(index, None)
        self._emit(type_, index, text=text)

    def _block_stop(self, payload: Mapping[str, Any]) -> None:
        index = int(payload["index"])
        if index in self._start_inputs:
            start_input = self._start_inputs.pop(index)
            self._emit(DeltaType.ARGUMENT_FRAGMENT, index, text=canonical_json(start_input).decode())
        self._emit(DeltaType.BLOCK_STOP, index)

    def _message_delta(self, payload: Mapping[str, Any]) -> None:
        delta = payload.get("delta") or {}
        if delta.get("stop_reason") is not None:
            self._raw_stop = str(delta["stop_reason"])
        usage = payload.get("usage") or {}
        self._emit(
            DeltaType.USAGE, input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens")
        )

    def _message_stop(self, payload: Mapping[str, Any]) -> None:
        raw = self._raw_stop
        stop = None if raw is None else STOP_REASONS.get(raw, StopReason.OTHER)
        self._emit(DeltaType.MESSAGE_STOP, stop_reason=stop, raw_stop_reason=raw)

    def _error(self, payload: Mapping[str, Any]) -> None:
        error = payload.get("error") or {}
        if not isinstance(error, Mapping):
            error = {"message": str(error)}
        self._emit_error(str(error.get("type") or "error"), str(error.get("message", "")), error)

    handlers: ClassVar[Mapping[str, Handler]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "content_block_stop": _block_stop,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
        "error": _error,
    }
    ignored = frozenset({"ping"})
