"""Gemini `streamGenerateContent?alt=sse` → normalized deltas.

Each `data:` is a whole GenerateContentResponse (provider-formats §2d). There are no
block events and no end event: the chunk carrying `finishReason` ends the message.

Mapping decisions:
- consecutive text parts of the same kind (thought or not) across chunks form one
  block; a part of another kind, or a function call, closes it;
- a `functionCall` part arrives whole: block start + one argument fragment (the
  canonical JSON of `args`) + block stop;
- a `thoughtSignature` is a SIGNATURE delta on the block of the part that carried
  it, including the empty text part of the last chunk (dropping it would lose the
  signature the next request must return), and a part with a `thoughtSignature` and no
  data at all, which is that empty text part without its `text` key;
- Gemini call ids are optional. A call without one gets the deterministic id
  `gemini:<responseId>:<block index>` (SYNTHETIC_CALL_ID_PREFIX), so that every
  committed call has an id that is unique within the turn; an adapter rendering a
  Gemini request must leave ids with this prefix out (and match by position);
- `finishReason` closes the open block, emits usage and the message stop;
  `promptFeedback.blockReason` without candidates is a refusal stop;
- a part of a kind not modelled (an image, executed code) is a block of that kind, refused by the
  assembler (UNKNOWN_KIND) rather than dropped;
- only candidate 0 is assembled; other candidates are counted as unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from turnledger.model.canonical import canonical_json
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.streaming.parser import Handler, StreamParser

SYNTHETIC_CALL_ID_PREFIX = "gemini:"

STOP_REASONS: Mapping[str, StopReason] = {
    "STOP": StopReason.END_TURN,
    "MAX_TOKENS": StopReason.MAX_TOKENS,
    "SAFETY": StopReason.REFUSAL,
    "RECITATION": StopReason.REFUSAL,
    "BLOCKLIST": StopReason.REFUSAL,
    "PROHIBITED_CONTENT": StopReason.REFUSAL,
    "SPII": StopReason.REFUSAL,
    "IMAGE_SAFETY": StopReason.REFUSAL,
    "MALFORMED_FUNCTION_CALL": StopReason.ERROR,
    "UNEXPECTED_TOOL_CALL": StopReason.ERROR,
    "TOO_MANY_TOOL_CALLS": StopReason.ERROR,
}

SIGNATURE_ONLY_KEYS = frozenset({"thought", "thoughtSignature"})
"""The keys of a part that carries a signature and nothing it signs: the last chunk of a Gemini 3
answer may end with one (https://docs.apiyi.com/en/api-capabilities/gemini/response-handling)."""


class GeminiParser(StreamParser):
    api = "gemini"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._started = False
        self._blocks = 0
        self._open: tuple[int, str] | None = None  # (block, kind) of the open text/thinking block
        self._has_call = False

    def _event_type(self, event: str | None, payload: Mapping[str, Any]) -> str:
        return "error" if payload.get("error") else "chunk"

    def _chunk(self, payload: Mapping[str, Any]) -> None:
        if not self._started:
            self._started = True
            if self.response_handle is None and isinstance(payload.get("responseId"), str):
                self.response_handle = payload["responseId"]
            self._emit(DeltaType.MESSAGE_START, model=payload.get("modelVersion"))
        candidates = payload.get("candidates") or ()
        for position, candidate in enumerate(candidates):
            if candidate.get("index", position) != 0:
                self.unknown_events += 1
                continue
            for part in (candidate.get("content") or {}).get("parts") or ():
                self._part(part)
            if candidate.get("finishReason"):
                self._finish(str(candidate["finishReason"]), payload)
        blocked = (payload.get("promptFeedback") or {}).get("blockReason")
        if blocked and not candidates:
            self._finish(str(blocked), payload, StopReason.REFUSAL)

    def _part(self, part: Mapping[str, Any]) -> None:
        if "functionCall" in part:
            self._function_call(part)
        elif "text" in part or _signature_only(part):
            kind = "thinking" if part.get("thought") else "text"
            block = self._text_block(kind)
            if part.get("text"):
                delta = DeltaType.THINKING_DELTA if kind == "thinking" else DeltaType.TEXT_DELTA
                self._emit(delta, block, text=str(part["text"]))
            self._signature(block, part)
        else:
            self._unmodelled(part)

    def _unmodelled(self, part: Mapping[str, Any]) -> None:
        """A part of a kind the graph has no block for (`inlineData`, `executableCode`,
        `codeExecutionResult`, ...): a block of that kind, which the assembler refuses (UNKNOWN_KIND),
        as Anthropic's parser does with a block type it does not model. Counted unknown and dropped, it
        let the answer commit without it. A part with nothing in it is only counted."""
        kinds = sorted(part.keys() - SIGNATURE_ONLY_KEYS)
        if not kinds:
            self.unknown_events += 1
            return
        self._close()
        block = self._new_block()
        self._emit(DeltaType.BLOCK_START, block, block_kind=kinds[0])
        self._emit(DeltaType.BLOCK_STOP, block)

    def _text_block(self, kind: str) -> int:
        if self._open is not None and self._open[1] == kind:
            return self._open[0]
        self._close()
        block = self._new_block()
        self._open = (block, kind)
        self._emit(DeltaType.BLOCK_START, block, block_kind=kind)
        return block

    def _function_call(self, part: Mapping[str, Any]) -> None:
        self._close()
        call = part["functionCall"]
        block = self._new_block()
        self._has_call = True
        call_id = call.get("id") or f"{SYNTHETIC_CALL_ID_PREFIX}{self.response_handle or ''}:{block}"
        self._emit(
            DeltaType.BLOCK_START, block, block_kind="tool_call", call_id=call_id, tool_name=call.get("name")
        )
        self._emit(DeltaType.ARGUMENT_FRAGMENT, block, text=canonical_json(call.get("args") or {}).decode())
        self._signature(block, part)
        self._emit(DeltaType.BLOCK_STOP, block)

    def _signature(self, block: int, part: Mapping[str, Any]) -> None:
        if part.get("thoughtSignature"):
            self._emit(DeltaType.SIGNATURE, block, text=str(part["thoughtSignature"]))

    def _new_block(self) -> int:
        block = self._blocks
        self._blocks += 1
        return block

    def _close(self) -> None:
        if self._open is not None:
            self._emit(DeltaType.BLOCK_STOP, self._open[0])
            self._open = None

    def _finish(self, raw: str, payload: Mapping[str, Any], stop: StopReason | None = None) -> None:
        self._close()
        usage = payload.get("usageMetadata")
        if usage:
            self._emit(
                DeltaType.USAGE,
                input_tokens=usage.get("promptTokenCount"),
                output_tokens=usage.get("candidatesTokenCount"),
            )
        if stop is None:
            stop = STOP_REASONS.get(raw, StopReason.OTHER)
            if stop is StopReason.END_TURN and self._has_call:
                stop = StopReason.TOOL_USE
        self._emit(DeltaType.MESSAGE_STOP, stop_reason=stop, raw_stop_reason=raw)

    def _error(self, payload: Mapping[str, Any]) -> None:
        error = payload.get("error") or {}
        self._emit_error(
            str(error.get("status") or error.get("code") or "error"), str(error.get("message", "")), error
        )

    handlers: ClassVar[Mapping[str, Handler]] = {"chunk": _chunk, "error": _error}


def _signature_only(part: Mapping[str, Any]) -> bool:
    return bool(part.get("thoughtSignature")) and part.keys() <= SIGNATURE_ONLY_KEYS
