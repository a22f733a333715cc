"""OpenAI Chat Completions streaming → normalized deltas.

Data-only SSE of `chat.completion.chunk` objects ending in `data: [DONE]`
(provider-formats §2b). There are no block events, so the parser makes them:

- block indices are allocated in order of first appearance: the text content, the
  refusal text and each `tool_calls[].index` get their own block;
- tool-call fragments are routed by `tool_calls[].index`, never by position, since
  parallel calls may interleave; a later fragment that names a *different* id for an
  index is re-announced as a second block start, which the assembler rejects
  (the "empty-arguments delta read as a new call" incident, vercel/ai #3953);
- `finish_reason` closes every open block, in block order, and is remembered;
- MESSAGE_STOP is emitted only on `[DONE]`, carrying the remembered finish reason,
  so a stream cut before `[DONE]` (even after the finish chunk) has no message stop,
  and `[DONE]` without any finish reason has a stop without a reason (MISSING_STOP).
- Only choice 0 is assembled; other choices (we never request n>1) are counted as
  unknown events. A chunk with an `error` key is a provider error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from turnledger.model.deltas import DeltaType, StopReason
from turnledger.streaming.parser import Handler, ParsedEvent, StreamParser

DONE = "[DONE]"

STOP_REASONS: Mapping[str, StopReason] = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.REFUSAL,
}

_TEXT_KEYS = ("content", "refusal")


class OpenAIChatParser(StreamParser):
    api = "openai-chat"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._started = False
        self._blocks: dict[tuple[str, int], int] = {}  # ("content"|"refusal"|"tool", index) → block
        self._call_ids: dict[int, str | None] = {}
        self._open: list[int] = []
        self._raw_stop: str | None = None

    def _on_sse(self, event: ParsedEvent) -> None:
        if event.sse.data.strip() == DONE:
            self._done()
        else:
            super()._on_sse(event)

    def _event_type(self, event: str | None, payload: Mapping[str, Any]) -> str:
        if "error" in payload and payload["error"] is not None:
            return "error"
        return str(payload.get("object", event or ""))

    def _chunk(self, payload: Mapping[str, Any]) -> None:
        if not self._started:
            self._started = True
            if self.response_handle is None and isinstance(payload.get("id"), str):
                self.response_handle = payload["id"]
            self._emit(DeltaType.MESSAGE_START, model=payload.get("model"))
        for choice in payload.get("choices") or ():
            if choice.get("index", 0) != 0:
                self.unknown_events += 1
                continue
            self._choice(choice)
        usage = payload.get("usage")
        if usage:
            self._emit(
                DeltaType.USAGE,
                input_tokens=usage.get("prompt_tokens"),
                output_tokens=usage.get("completion_tokens"),
            )

    def _choice(self, choice: Mapping[str, Any]) -> None:
        delta = choice.get("delta") or {}
        for key in _TEXT_KEYS:
            fragment = delta.get(key)
            if fragment:
                self._emit(DeltaType.TEXT_DELTA, self._text_block(key), text=str(fragment))
        for position, call in enumerate(delta.get("tool_calls") or ()):
            self._tool_fragment(int(call.get("index", position)), call)
        finish = choice.get("finish_reason")
        if finish is not None:
            self._raw_stop = str(finish)
            for block in sorted(self._open):
                self._emit(DeltaType.BLOCK_STOP, block)
            self._open.clear()

    def _text_block(self, key: str) -> int:
        block = self._blocks.get((key, 0))
        if block is None:
            block = self._new_block((key, 0))
            self._emit(DeltaType.BLOCK_START, block, block_kind="text")
        return block

    def _tool_fragment(self, index: int, call: Mapping[str, Any]) -> None:
        function = call.get("function") or {}
        call_id = call.get("id")
        block = self._blocks.get(("tool", index))
        if block is None:
            block = self._new_block(("tool", index))
            self._call_ids[index] = call_id
            self._emit(
                DeltaType.BLOCK_START,
                block,
                block_kind="tool_call",
                call_id=call_id,
                tool_name=function.get("name"),
            )
        elif call_id and call_id != self._call_ids[index]:
            self._emit(
                DeltaType.BLOCK_START,
                block,
                block_kind="tool_call",
                call_id=call_id,
                tool_name=function.get("name"),
            )
        arguments = function.get("arguments")
        if arguments:
            self._emit(DeltaType.ARGUMENT_FRAGMENT, block, text=str(arguments))

    def _new_block(self, key: tuple[str, int]) -> int:
        block = len(self._blocks)
        self._blocks[key] = block
        self._open.append(block)
        return block

    def _done(self) -> None:
        raw = self._raw_stop
        stop = None if raw is None else STOP_REASONS.get(raw, StopReason.OTHER)
        self._emit(DeltaType.MESSAGE_STOP, stop_reason=stop, raw_stop_reason=raw)

    def _error(self, payload: Mapping[str, Any]) -> None:
        error = payload.get("error") or {}
        if not isinstance(error, Mapping):
            error = {"message": str(error)}
        self._emit_error(
            str(error.get("type") or error.get("code") or "error"), str(error.get("message", "")), error
        )

    handlers: ClassVar[Mapping[str, Handler]] = {
        "chat.completion.chunk": _chunk,
        "error": _error,
    }
