"""Bedrock ConverseStream → normalized deltas.

Transport: AWS event-stream binary framing (eventstream.py), one JSON payload per
message, named by the `:event-type` header; `:message-type: exception` messages are
provider errors. `feed_event` also takes the decoded form boto3 yields,
`{"contentBlockDelta": {...}}`, or a payload with an explicit event name.

ConverseStream has no response id in the stream: pass the `x-amzn-RequestId` header
as `response_handle`. Text and reasoning blocks have no `contentBlockStart`, so the
first delta of an unseen index starts its block.

`metadata` (usage) follows `messageStop` as the stream's last event (API_runtime_ConverseStreamOutput).
The message stop is held until then and emitted with the usage (or by `flush` when the stream ends
without it): a final delta goes to the ledger at once (gateway/pump.py) and the fold settles the
attempt on it, so a usage delta after it arrived for a committed operation and was quarantined
(AFTER_COMMIT) on every answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import orjson

from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.streaming.eventstream import EventStreamDecoder, EventStreamError, EventStreamMessage
from turnledger.streaming.parser import MALFORMED_EVENT, Handler, StreamParser

STOP_REASONS: Mapping[str, StopReason] = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "guardrail_intervened": StopReason.REFUSAL,
    "content_filtered": StopReason.REFUSAL,
}


class BedrockConverseParser(StreamParser):
    api = "bedrock-converse"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._frames = EventStreamDecoder()
        self._blocks: set[int] = set()
        self._unmodelled_blocks: set[int] = set()
        self._held_stop: dict[str, Any] | None = None  # the message stop's fields, until `metadata`

    def feed(self, data: bytes) -> list[NormalizedDelta]:
        error: EventStreamError | None = None
        try:
            messages: Sequence[EventStreamMessage] = self._frames.feed(data)
        except EventStreamError as exc:
            messages, error = exc.decoded, exc  # the messages before the bad bytes count, however cut
        for message in messages:
            event = message.headers.get(":event-type") or message.headers.get(":exception-type")
            if message.headers.get(":message-type") == "exception":
                self._emit_error(
                    str(message.headers.get(":exception-type") or "exception"),
                    message.payload.decode("utf-8", "replace")[:200],
                )
                continue
            try:
                payload = orjson.loads(message.payload)  # as `parse_event`: no lone surrogates
            except ValueError:
                self._emit_undecodable(message.payload.decode("utf-8", "replace"))
                continue
            self._dispatch(event, payload)
        if error is not None:
            self._emit_error(MALFORMED_EVENT, str(error))
        return self._drain()

    def flush(self) -> list[NormalizedDelta]:
        self._release_stop()
        return super().flush()

    def _dispatch(self, event: str | None, payload: Mapping[str, Any]) -> None:
        if event is None and len(payload) == 1:
            ((event, inner),) = payload.items()
            payload = inner if isinstance(inner, Mapping) else {}
        if event is not None and event.endswith("Exception"):
            self._emit_error(event, str(payload.get("message", ""))[:200])
            return
        super()._dispatch(event, payload)

    def _event_type(self, event: str | None, payload: Mapping[str, Any]) -> str:
        return event or ""

    def _message_start(self, payload: Mapping[str, Any]) -> None:
        self._emit(DeltaType.MESSAGE_START)

    def _block_start(self, payload: Mapping[str, Any]) -> None:
        index = int(payload["contentBlockIndex"])
        start = payload.get("start") or {}
        tool = start.get("toolUse")
        self._blocks.add(index)
        if tool is not None:
            self._emit(
                DeltaType.BLOCK_START,
                index,
                block_kind="tool_call",
                call_id=tool.get("toolUseId"),
                tool_name=tool.get("name"),
            )
        else:
            self._emit(DeltaType.BLOCK_START, index, block_kind=next(iter(start), "unknown"))

    def _block_delta(self, payload: Mapping[str, Any]) -> None:
        index = int(payload["contentBlockIndex"])
        delta = payload.get("delta") or {}
        if "text" in delta:
            self._ensure(index, "text")
            self._emit(DeltaType.TEXT_DELTA, index, text=str(delta["text"]))
        elif "toolUse" in delta:
            self._emit(DeltaType.ARGUMENT_FRAGMENT, index, text=str(delta["toolUse"].get("input", "")))
        elif "reasoningContent" in delta:
            reasoning = delta["reasoningContent"]
            if "redactedContent" in reasoning:
                self._unmodelled(index, "redactedContent")
                return
            self._ensure(index, "thinking")
            if "text" in reasoning:
                self._emit(DeltaType.THINKING_DELTA, index, text=str(reasoning["text"]))
            if "signature" in reasoning:
                self._emit(DeltaType.SIGNATURE, index, text=str(reasoning["signature"]))
        else:
            self.unknown_events += 1

    def _unmodelled(self, index: int, kind: str) -> None:
        """A block of a kind we do not model (redacted reasoning: encrypted data the next request would
        have to return as it came) is started with its raw kind, so the assembler refuses the answer
        (UNKNOWN_KIND) instead of committing it without that block; started already, it is started
        twice, which it refuses too. Its content is not kept: the answer cannot commit."""
        if index in self._unmodelled_blocks:
            return
        self._unmodelled_blocks.add(index)
        self._blocks.add(index)
        self._emit(DeltaType.BLOCK_START, index, block_kind=kind)

    def _ensure(self, index: int, kind: str) -> None:
        if index not in self._blocks:
            self._blocks.add(index)
            self._emit(DeltaType.BLOCK_START, index, block_kind=kind)

    def _block_stop(self, payload: Mapping[str, Any]) -> None:
        self._emit(DeltaType.BLOCK_STOP, int(payload["contentBlockIndex"]))

    def _message_stop(self, payload: Mapping[str, Any]) -> None:
        raw = payload.get("stopReason")
        stop = None if raw is None else STOP_REASONS.get(str(raw), StopReason.OTHER)
        self._release_stop()  # a second stop follows the first, as it came
        self._held_stop = {"stop_reason": stop, "raw_stop_reason": None if raw is None else str(raw)}

    def _metadata(self, payload: Mapping[str, Any]) -> None:
        usage = payload.get("usage") or {}
        tokens: dict[str, Any] = {
            "input_tokens": usage.get("inputTokens"),
            "output_tokens": usage.get("outputTokens"),
        }
        if self._held_stop is None:
            self._emit(DeltaType.USAGE, **tokens)
            return
        self._release_stop(**tokens)

    def _release_stop(self, **tokens: Any) -> None:
        if self._held_stop is not None:
            fields, self._held_stop = self._held_stop, None
            self._emit(DeltaType.MESSAGE_STOP, **fields, **tokens)

    handlers: ClassVar[Mapping[str, Handler]] = {
        "messageStart": _message_start,
        "contentBlockStart": _block_start,
        "contentBlockDelta": _block_delta,
        "contentBlockStop": _block_stop,
        "messageStop": _message_stop,
        "metadata": _metadata,
    }
