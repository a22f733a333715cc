"""OpenAI Responses streaming → normalized deltas.

Typed SSE, event name = `data.type`, every event numbered by `sequence_number`
(provider-formats §2c). Block mapping, allocated in order of first appearance:

- a `message` item's content parts (`output_text`, `refusal`) → one text block
  each, started by `content_part.added` and stopped by `content_part.done`;
- a `function_call` item → a tool_call block (call id = `call_id`, not the `fc_` id)
  from `output_item.added` to `output_item.done`;
- a `reasoning` item → a thinking block: summary/reasoning text deltas are its text
  (parts concatenated), its `encrypted_content` (complete only on
  `output_item.done`) is its signature, its `rs_` id its item id (the next request
  names the item by it);
- any other item or part type (built-in tool calls, …) → a block of that raw kind,
  which the assembler refuses to commit.

`response.completed` is the message stop (stop reason tool_use when the output
has a function call, end_turn otherwise); `response.incomplete` is a message stop
whose reason comes from `incomplete_details.reason`; `response.failed` and `error`
are provider errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from turnledger.model.deltas import DeltaType, StopReason
from turnledger.streaming.parser import Handler, StreamParser

INCOMPLETE_REASONS: Mapping[str, StopReason] = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSAL,
}

PART_KINDS: Mapping[str, str] = {"output_text": "text", "refusal": "text"}

TEXT_DELTAS: Mapping[str, DeltaType] = {
    "response.output_text.delta": DeltaType.TEXT_DELTA,
    "response.refusal.delta": DeltaType.TEXT_DELTA,
    "response.reasoning_summary_text.delta": DeltaType.THINKING_DELTA,
    "response.reasoning_text.delta": DeltaType.THINKING_DELTA,
}

# Known events that carry nothing the assembler needs (the `.done` ones repeat the full
# text the deltas already built).
IGNORED = frozenset(
    {
        "response.queued",
        "response.in_progress",
        "response.output_text.done",
        "response.refusal.done",
        "response.function_call_arguments.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.done",
        "response.output_text.annotation.added",
    }
)


class OpenAIResponsesParser(StreamParser):
    api = "openai-responses"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._blocks: dict[tuple[int, int], int] = {}  # (output_index, content_index) → block
        self._item_kinds: dict[int, str] = {}
        self._has_call = False

    def _block(self, output_index: int, content_index: int = -1) -> int:
        return self._blocks[(output_index, content_index)]

    def _start(self, key: tuple[int, int], **fields: Any) -> None:
        block = len(self._blocks)
        self._blocks[key] = block
        self._emit(DeltaType.BLOCK_START, block, **fields)

    def _created(self, payload: Mapping[str, Any]) -> None:
        response = payload.get("response") or {}
        if self.response_handle is None and isinstance(response.get("id"), str):
            self.response_handle = response["id"]
        self._emit(DeltaType.MESSAGE_START, model=response.get("model"))

    def _item_added(self, payload: Mapping[str, Any]) -> None:
        output_index = int(payload["output_index"])
        item = payload.get("item") or {}
        kind = str(item.get("type"))
        self._item_kinds[output_index] = kind
        if kind == "message":
            return  # its blocks are its content parts
        if kind == "function_call":
            self._has_call = True
            self._start(
                (output_index, -1),
                block_kind="tool_call",
                call_id=item.get("call_id"),
                tool_name=item.get("name"),
            )
            if item.get("arguments"):
                self._emit(
                    DeltaType.ARGUMENT_FRAGMENT, self._block(output_index), text=str(item["arguments"])
                )
            return
        if kind == "reasoning":
            item_id = item.get("id")
            self._start(
                (output_index, -1),
                block_kind="thinking",
                item_id=item_id if isinstance(item_id, str) else None,
            )
            return
        self._start((output_index, -1), block_kind=kind)

    def _part_added(self, payload: Mapping[str, Any]) -> None:
        key = (int(payload["output_index"]), int(payload["content_index"]))
        part = payload.get("part") or {}
        raw = str(part.get("type"))
        self._start(key, block_kind=PART_KINDS.get(raw, raw))

    def _part_done(self, payload: Mapping[str, Any]) -> None:
        key = (int(payload["output_index"]), int(payload["content_index"]))
        self._emit(DeltaType.BLOCK_STOP, self._blocks[key])

    def _text_delta(self, payload: Mapping[str, Any]) -> None:
        output_index = int(payload["output_index"])
        type_ = TEXT_DELTAS[str(payload["type"])]
        if type_ is DeltaType.THINKING_DELTA:
            block = self._block(output_index)
        else:
            block = self._block(output_index, int(payload["content_index"]))
        self._emit(type_, block, text=str(payload.get("delta", "")))

    def _arguments_delta(self, payload: Mapping[str, Any]) -> None:
        block = self._block(int(payload["output_index"]))
        self._emit(DeltaType.ARGUMENT_FRAGMENT, block, text=str(payload.get("delta", "")))

    def _item_done(self, payload: Mapping[str, Any]) -> None:
        output_index = int(payload["output_index"])
        if self._item_kinds.get(output_index) == "message":
            return
        block = self._block(output_index)
        item = payload.get("item") or {}
        if item.get("encrypted_content"):
            self._emit(DeltaType.SIGNATURE, block, text=str(item["encrypted_content"]))
        self._emit(DeltaType.BLOCK_STOP, block)

    def _completed(self, payload: Mapping[str, Any]) -> None:
        response = payload.get("response") or {}
        self._usage(response)
        stop = StopReason.TOOL_USE if self._has_call else StopReason.END_TURN
        self._emit(
            DeltaType.MESSAGE_STOP, stop_reason=stop, raw_stop_reason=str(response.get("status", "completed"))
        )

    def _incomplete(self, payload: Mapping[str, Any]) -> None:
        response = payload.get("response") or {}
        self._usage(response)
        raw = str((response.get("incomplete_details") or {}).get("reason", "incomplete"))
        self._emit(
            DeltaType.MESSAGE_STOP,
            stop_reason=INCOMPLETE_REASONS.get(raw, StopReason.OTHER),
            raw_stop_reason=raw,
        )

    def _usage(self, response: Mapping[str, Any]) -> None:
        usage = response.get("usage")
        if usage:
            self._emit(
                DeltaType.USAGE,
                input_tokens=usage.get("input_tokens"),
                output_tokens=usage.get("output_tokens"),
            )

    def _failed(self, payload: Mapping[str, Any]) -> None:
        error = (payload.get("response") or {}).get("error") or {}
        self._emit_error(str(error.get("code") or "response.failed"), str(error.get("message", "")), error)

    def _error(self, payload: Mapping[str, Any]) -> None:
        self._emit_error(str(payload.get("code") or "error"), str(payload.get("message", "")), payload)

    handlers: ClassVar[Mapping[str, Handler]] = {
        "response.created": _created,
        "response.output_item.added": _item_added,
        "response.content_part.added": _part_added,
        "response.content_part.done": _part_done,
        **dict.fromkeys(TEXT_DELTAS, _text_delta),
        "response.function_call_arguments.delta": _arguments_delta,
        "response.output_item.done": _item_done,
        "response.completed": _completed,
        "response.incomplete": _incomplete,
        "response.failed": _failed,
        "error": _error,
    }
    ignored = IGNORED
