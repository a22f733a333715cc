"""The block assembler: a deterministic fold from normalized deltas to one outcome.

It is the commit boundary of the spec's "Streaming blocks can be committed only when
complete": text is a revocable preview until its block stop AND the message stop;
tool arguments stay in a private buffer until their block stop, and become a
candidate only if strict JSON parsing, JSON-Schema validation and callId
validation pass (strict_arguments.py). `finish()` returns `Complete` with every block, or
`Incomplete` with none, never a part.

Ordering and deduplication. Deltas are applied strictly in `delta_sequence` order
from `start_sequence` on. A delta at or below the applied (or acknowledged)
sequence is a duplicate and is dropped; one ahead of a gap is held until the gap
fills; a gap still open at `finish()` is STREAM_INCOMPLETE. Because application is
contiguous, the sequence alone identifies an applied delta within the bound
(handle, generation), so no set of seen keys has to be kept (and snapshotted).

Runs. A delta with `following_texts` stands for itself and the content deltas after it
(`streaming/runs.py`): `feed_pieces` applies them one by one, each as if fed alone, without
building a delta for those that apply in order. A delta with `following_texts` that is not a valid
run head (a text, thinking or argument fragment with a text and no other field) is a violation
(MALFORMED_BLOCK), and its pieces are fed as the deltas they spell.

Binding. The assembler belongs to one (response handle, generation): given to the
constructor, or taken from the first delta fed. Deltas of any other pair are
FOREIGN and not applied: the dispatch layer quarantines them.

Protocol violations (a delta for a block never started or already stopped, content
after the message stop, a second block start, a block kind we do not model) are
recorded, first one wins, and make the outcome Incomplete; the fold never raises
on input, since it runs inside the partition processor.

Size limits (`model/limits.py`, given to the constructor): a block past `max_blocks_per_turn`
is TOO_MANY_BLOCKS and never opened; a content delta past `max_deltas_per_block` is
TOO_MANY_DELTAS, and one that would take the block's content past `max_block_bytes` is
BLOCK_TOO_LARGE; either is a violation and its content is dropped, so a runaway stream holds
at most the limits in memory. A delta that would be held past `max_held_deltas` ahead of a gap is
TOO_MANY_HELD_DELTAS (REFUSED): the held deltas are dropped, and every later one ahead of the gap.

Refusals. A message stopped for a refusal (`StopReason.REFUSAL`: Anthropic's `refusal`, OpenAI's
`content_filter`, Gemini's SAFETY and kin, a Bedrock guardrail) is PROVIDER_REFUSED, with none of
its blocks: what came before the stop is a partial answer the provider withdrew, and Anthropic asks
that the context be reset after it, since a history that keeps it meets the same refusal again
(https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals).

Output limit. A message stopped by the output limit (`StopReason.MAX_TOKENS`) keeps text as it was cut,
but a tool call that is open, last or whose arguments do not parse, and an answer with nothing visible,
are OUTPUT_LIMIT_REACHED (`_cut_by_the_limit`), the detail saying what was cut and what the client can do
(`LIMIT_ADVICE`). TRUNCATED_ARGUMENTS is left to arguments cut at any other stop. An answer with nothing
visible (`is_visible`) at any other stop is Complete: the fold ends it EMPTY_RESPONSE, nothing of it
committed (`lifecycle.NOTHING_VISIBLE`).

Counters for metrics: `duplicates_dropped`, `previews_retracted` (text blocks whose
preview was retracted), `unknown_events` (unknown block kinds), and
`partial_tool_dispatches`: a final guard re-checks every tool call of a Complete
against the rules above and counts (and refuses) any that slipped through. It is
0 by construction, and the tests assert it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from turnledger.model.canonical import digest_of
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.limits import DEFAULT_LIMITS, Limits, is_blank, utf8_length, utf8_size
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition
from turnledger.streaming.outcomes import (
    AssemblyOutcome,
    CandidateBlock,
    Complete,
    FeedResult,
    FeedStatus,
    Incomplete,
)
from turnledger.streaming.runs import expand_piece, is_run_head
from turnledger.streaming.strict_arguments import ArgumentError, parse_strict, validate_arguments

SNAPSHOT_VERSION = 1
RAISE_THE_LIMIT = "raise maxOutputTokens"
LIMIT_ADVICE: Mapping[str | None, str] = {
    "model_context_window_exceeded": "the context window is full: send less history",
}
"""What the client can do about an answer cut at the output limit, by the provider's stop where
raising `maxOutputTokens` would not help (the same request meets the same limit: it is not sent again)."""
KNOWN_KINDS = frozenset({"text", "thinking", "tool_call"})
_CONTENT_TYPES: Mapping[DeltaType, str] = {
    DeltaType.TEXT_DELTA: "text",
    DeltaType.THINKING_DELTA: "thinking",
    DeltaType.ARGUMENT_FRAGMENT: "tool_call",
}


def is_visible(kind: str, text: str) -> bool:
    """Does a block of `kind` with `text` show the client anything: a tool call, or text that is not
    blank (`is_blank`)? Thinking never does. An answer with no visible block is refused at the output
    limit (`BlockAssembler._cut_by_the_limit`) and commits nothing at any other stop (the fold's
    `lifecycle.NOTHING_VISIBLE`)."""
    return kind == "tool_call" or (kind == "text" and not is_blank(text))


@dataclass
class _Block:
    kind: str
    call_id: str | None = None
    tool_name: str | None = None
    parts: list[str] = field(default_factory=list)  # text, thinking, or private argument buffer
    text: str = ""  # the preview of a text block (kept whole: the final content, and previews' suffixes)
    shown: int = 0  # code points of `text` already previewed (a snapshot omits it when all of it)
    signature: str | None = None
    stopped: bool = False
    item_id: str | None = None  # the provider's id of the item, from the block start (Responses reasoning)
    deltas: int = 0  # content deltas received (text, thinking, argument fragments, signatures)
    size: int = 0  # UTF-8 bytes of the content and signature (recomputed on restore)

    def content(self) -> str:
        return self.text if self.kind == "text" else "".join(self.parts)

    def to_json(self, index: int) -> dict[str, Any]:
        data = {
            "index": index,
            "kind": self.kind,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "content": self.content(),
            "signature": self.signature,
            "stopped": self.stopped,
            "deltas": self.deltas,
        }
        if self.shown != len(self.text):
            data["shown"] = self.shown  # only when not all of it: the usual snapshot is unchanged
        if self.item_id is not None:
            data["item_id"] = self.item_id  # only where there is one: every other snapshot is unchanged
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Block:
        kind = str(data["kind"])
        content = str(data["content"])
        block = cls(
            kind,
            data["call_id"],
            data["tool_name"],
            signature=data["signature"],
            stopped=data["stopped"],
            item_id=data.get("item_id"),  # absent: none (every snapshot before item ids)
        )
        if kind == "text":
            block.text = content
            block.shown = int(data.get("shown", len(content)))  # absent: all of it (every earlier snapshot)
        elif content:
            block.parts.append(content)
        block.deltas = int(data.get("deltas", 0))  # snapshots before size limits did not count them
        block.size = utf8_size((content, block.signature))
        return block


class BlockAssembler:
    def __init__(
        self,
        tools: Mapping[str, ToolDefinition],
        *,
        response_handle: str | None = None,
        generation: int | None = None,
        start_sequence: int = 0,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._tools = tools
        self._limits = limits
        self.response_handle = response_handle
        self.generation = generation
        self._next = start_sequence
        self._held: dict[int, NormalizedDelta] = {}
        self._blocks: dict[int, _Block] = {}
        self._started = False
        self._stopped = False
        self._stop_reason: StopReason | None = None
        self._raw_stop: str | None = None
        self._model: str | None = None
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._error: tuple[str, str] | None = None
        self._violation: tuple[ReasonCode, str] | None = None
        self._closed: tuple[ReasonCode, str] | None = None  # discard() reason
        self._finished = False
        self._retracted = False
        self.duplicates_dropped = 0
        self.previews_retracted = 0
        self.partial_tool_dispatches = 0
        self.unknown_events = 0

    # -- feeding -----------------------------------------------------------------------

    def feed(self, delta: NormalizedDelta) -> FeedResult:
        updates: dict[int, str] = {}
        status = self.feed_into(delta, updates)
        return FeedResult(status, updates)

    def feed_into(self, delta: NormalizedDelta, updates: dict[int, str]) -> FeedStatus:
        """`feed()` that writes the preview updates into the caller's `updates` instead of a new
        `FeedResult`: the dispatch fold feeds every delta of an event and coalesces the previews,
        so it needs neither a result object nor a fresh dict per delta. Only an ACCEPTED delta
        writes into `updates`. A run is fed piece by piece (`feed_pieces`): ACCEPTED if a piece
        was, else HELD if a piece was, else the last piece's status.
        """
        if delta.following_texts:
            statuses = [status for _, status in self.feed_pieces(delta, updates)]
            for status in (FeedStatus.ACCEPTED, FeedStatus.HELD):
                if status in statuses:
                    return status
            return statuses[-1]
        if delta.response_handle != self.response_handle or delta.generation != self.generation:
            if self.response_handle is not None and self.generation is not None:
                return FeedStatus.FOREIGN
            self.response_handle, self.generation = delta.response_handle, delta.generation
        if self._finished or self._closed is not None:
            return FeedStatus.LATE
        sequence = delta.delta_sequence
        if sequence < self._next or sequence in self._held:
            self.duplicates_dropped += 1
            return FeedStatus.DUPLICATE
        if sequence > self._next:
            return self._hold(delta)
        self._apply(delta, updates)
        while self._next in self._held:
            self._apply(self._held.pop(self._next), updates)
        return FeedStatus.ACCEPTED

    def feed_pieces(self, run: NormalizedDelta, updates: dict[int, str]) -> Iterator[tuple[int, FeedStatus]]:
        """Feed the deltas `run` stands for one after another, as `feed_into` of each would, and
        yield after one or more of them (sequence of the last one, status): every piece fed since
        the previous yield had that status, and `updates` holds what they wrote. The caller does
        per yield what it does per delta.

        The usual run, in order with nothing held, on an open block of its kind and within the
        limits as a whole, is applied at once (`_apply_run`: one yield). Otherwise each piece in
        order with nothing held is applied from the run's fields without building its delta (the
        same checks, in the same order, as `feed_into` of it), and any other piece is built
        (`expand_piece`) and fed."""
        head = is_run_head(run)
        if not head and self._may_apply(run):
            self._violate(
                ReasonCode.MALFORMED_BLOCK,
                f"a run of {len(run.following_texts or ()) + 1} {run.type} deltas from {run.delta_sequence}",
            )
        index, kind, first = run.block_index, run.type, run.delta_sequence
        texts = (run.text or "", *(run.following_texts or ()))
        if head and self._in_order(run, first) and self._apply_run(index, kind, texts, updates):
            yield first + len(texts) - 1, FeedStatus.ACCEPTED
            return
        for offset, text in enumerate(texts):
            sequence = first + offset
            if head and self._in_order(run, sequence):
                self._next = sequence + 1
                self._content(index, kind, text, updates)
                yield sequence, FeedStatus.ACCEPTED
            else:
                yield sequence, self.feed_into(expand_piece(run, offset), updates)

    def _in_order(self, run: NormalizedDelta, sequence: int) -> bool:
        """Would `feed_into` apply the piece at `sequence` at once: the next one, nothing held, of this
        stream, which still takes deltas?"""
        return (
            sequence == self._next
            and not self._held
            and run.response_handle == self.response_handle
            and run.generation == self.generation
            and not self._finished
            and self._closed is None
        )

    def _apply_run(
        self, index: int, kind: DeltaType, texts: tuple[str, ...], updates: dict[int, str]
    ) -> bool:
        """Apply every piece of a run at once, if each would be applied whole one by one: the block is
        open and of the run's kind, and the run as a whole stays within the limits (so does each
        piece before it); else change nothing and return False (the caller goes piece by piece)."""
        block = self._blocks.get(index)
        if block is None or block.stopped or self._stopped or block.kind != _CONTENT_TYPES[kind]:
            return False
        size = block.size + sum(map(utf8_length, texts))
        deltas = block.deltas + len(texts)
        if deltas > self._limits.max_deltas_per_block or size > self._limits.max_block_bytes:
            return False
        self._next += len(texts)
        block.deltas, block.size = deltas, size
        if block.kind == "text":
            block.text += "".join(texts)
            updates[index] = block.text
        else:
            block.parts.extend(texts)
        return True

    def _may_apply(self, delta: NormalizedDelta) -> bool:
        """Is `delta` of this assembler's stream (or the one to bind it), while it takes deltas?"""
        unbound = self.response_handle is None or self.generation is None
        ours = unbound or (delta.response_handle, delta.generation) == (self.response_handle, self.generation)
        return ours and not self._finished and self._closed is None

    def _hold(self, delta: NormalizedDelta) -> FeedStatus:
        """Keep a delta ahead of the gap, up to `max_held_deltas`. Past it the attempt cannot complete
        (TOO_MANY_HELD_DELTAS): what is held is dropped, and so is every later delta ahead of the gap."""
        limit = self._limits.max_held_deltas
        if self._violation is not None and self._violation[0] is ReasonCode.TOO_MANY_HELD_DELTAS:
            return FeedStatus.REFUSED
        if len(self._held) >= limit:
            self._violate(
                ReasonCode.TOO_MANY_HELD_DELTAS,
                f"delta {delta.delta_sequence} would be held delta {len(self._held) + 1} "
                f"ahead of the gap at {self._next}, at most {limit}",
            )
            if self._violation is not None and self._violation[0] is ReasonCode.TOO_MANY_HELD_DELTAS:
                self._held.clear()
            return FeedStatus.REFUSED
        self._held[delta.delta_sequence] = delta
        return FeedStatus.HELD

    def _apply(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        self._next = delta.delta_sequence + 1
        _APPLY[delta.type](self, delta, updates)

    def _violate(self, reason: ReasonCode, detail: str) -> None:
        if self._violation is None:
            self._violation = (reason, detail)

    def _open_block(self, delta: NormalizedDelta, what: str) -> _Block | None:
        return self._open_block_at(delta.block_index, what)

    def _open_block_at(self, index: int, what: str) -> _Block | None:
        """The started, not yet stopped block a content delta targets (else a violation).

        `what` may be the delta's `DeltaType`: a StrEnum formats as its value, so the
        detail is the same text without paying for `.value` on every applied delta.
        """
        block = self._blocks.get(index)
        if block is None or block.stopped or self._stopped:
            state = "never started" if block is None else "stopped" if block.stopped else "after message stop"
            self._violate(ReasonCode.MALFORMED_BLOCK, f"{what} for block {index}: {state}")
            return None
        return block

    def _on_message_start(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        if self._started:
            self._violate(ReasonCode.MALFORMED_BLOCK, "second message start")
        self._started = True
        self._model = delta.model
        self._on_usage(delta, updates)

    def _on_block_start(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        index = delta.block_index
        kind = delta.block_kind or ""
        existing = self._blocks.get(index)
        if existing is not None:
            reason = (
                ReasonCode.CALL_ID_INVALID
                if delta.call_id != existing.call_id
                else ReasonCode.MALFORMED_BLOCK
            )
            self._violate(
                reason, f"block {index} started twice (call ids {existing.call_id!r}, {delta.call_id!r})"
            )
            return
        if self._stopped:
            self._violate(ReasonCode.MALFORMED_BLOCK, f"block {index} started after message stop")
        if kind not in KNOWN_KINDS:
            self.unknown_events += 1
            self._violate(ReasonCode.UNKNOWN_KIND, f"block {index} has kind {kind!r}")
        limit = self._limits.max_blocks_per_turn
        if len(self._blocks) >= limit:
            self._violate(
                ReasonCode.TOO_MANY_BLOCKS, f"block {index} is block {len(self._blocks) + 1}, at most {limit}"
            )
            return
        self._blocks[index] = _Block(kind, delta.call_id, delta.tool_name, item_id=delta.item_id)

    def _within_limits(self, block: _Block, index: int, fragment: str | None) -> bool:
        """Count one content delta of the block; False (and a violation, the content dropped) past a limit."""
        block.deltas += 1
        if block.deltas > self._limits.max_deltas_per_block:
            self._violate(
                ReasonCode.TOO_MANY_DELTAS,
                f"block {index} received {block.deltas} deltas, at most {self._limits.max_deltas_per_block}",
            )
            return False
        size = block.size + utf8_length(fragment)
        if size > self._limits.max_block_bytes:
            self._violate(
                ReasonCode.BLOCK_TOO_LARGE,
                f"block {index} reached {size} bytes, at most {self._limits.max_block_bytes}",
            )
            return False
        block.size = size
        return True

    def _on_content(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        self._content(delta.block_index, delta.type, delta.text or "", updates)

    def _content(self, index: int, kind: DeltaType, fragment: str, updates: dict[int, str]) -> None:
        """A content delta's fragment for block `index` (text, thinking or argument, by `kind`)."""
        block = self._open_block_at(index, kind)
        if block is None:
            return
        if block.kind != _CONTENT_TYPES[kind] and block.kind in KNOWN_KINDS:
            self._violate(ReasonCode.MALFORMED_BLOCK, f"{kind.value} for {block.kind} block {index}")
            return
        if not self._within_limits(block, index, fragment):
            return
        if block.kind == "text":
            block.text += fragment
            updates[index] = block.text
        else:
            block.parts.append(fragment)

    def _on_signature(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        block = self._open_block(delta, "signature")
        if block is None:
            return
        previous = utf8_length(block.signature)
        block.size -= previous
        if self._within_limits(block, delta.block_index, delta.text):
            block.signature = delta.text  # a signature is whole: the last one wins, as in the SDKs
        else:
            block.size += previous

    def _on_block_stop(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        block = self._open_block(delta, "block stop")
        if block is not None:
            block.stopped = True

    def _on_message_stop(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        if self._stopped:
            self._violate(ReasonCode.MALFORMED_BLOCK, "second message stop")
            return
        self._stopped = True
        self._stop_reason = delta.stop_reason
        self._raw_stop = delta.raw_stop_reason
        self._on_usage(delta, updates)

    def _on_usage(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        # provider usage counts are cumulative totals: overwrite, never add
        if delta.input_tokens is not None:
            self._input_tokens = delta.input_tokens
        if delta.output_tokens is not None:
            self._output_tokens = delta.output_tokens

    def _on_error(self, delta: NormalizedDelta, updates: dict[int, str]) -> None:
        if self._error is None:
            self._error = (delta.error_type or "error", delta.error_message or "")

    # -- resumption and ending --------------------------------------------------------

    def resume(self, last_acked_sequence: int) -> None:
        """Continue the same generation after a reconnect: deltas <= the ack are duplicates.

        An ack beyond what this assembler applied means deltas it never saw were
        acknowledged; it cannot assemble around them, so that is STREAM_INCOMPLETE.
        """
        if last_acked_sequence >= self._next:
            self._violate(
                ReasonCode.STREAM_INCOMPLETE,
                f"acknowledged sequence {last_acked_sequence} beyond applied {self._next - 1}",
            )
            self._next = last_acked_sequence + 1
        for sequence in [s for s in self._held if s <= last_acked_sequence]:
            del self._held[sequence]
        updates: dict[int, str] = {}
        while self._next in self._held:
            self._apply(self._held.pop(self._next), updates)

    def discard(self, reason: ReasonCode = ReasonCode.STREAM_DISCONNECTED, detail: str = "") -> Incomplete:
        """A non-resumable break: drop every candidate of this attempt, retract previews."""
        if self._closed is None and not self._finished:
            self._closed = (reason, detail or "attempt discarded")
        return self._incomplete(*(self._closed or (reason, detail)))

    def take_preview(self, index: int) -> tuple[int, str]:
        """The text block's preview not yet shown, as (offset in code points, appended text); what it
        returns counts as shown from then on, so the next one starts where this one ends."""
        block = self._blocks[index]
        offset = block.shown
        block.shown = len(block.text)
        return offset, block.text[offset:]

    def previews(self) -> dict[int, str]:
        """Text shown so far, revocable; empty once retracted."""
        if self._retracted:
            return {}
        return {i: b.text for i, b in sorted(self._blocks.items()) if b.kind == "text" and b.text}

    @staticmethod
    def snapshot_has_previews(snapshot: Mapping[str, Any]) -> bool:
        """`bool(restore(snapshot, tools).previews())`, read off the snapshot without restoring it."""
        return not snapshot["retracted"] and any(
            block["kind"] == "text" and block["content"] for block in snapshot["blocks"]
        )

    def finish(self) -> AssemblyOutcome:
        """The outcome of the stream as fed so far; the attempt is over afterwards."""
        self._finished = True
        failure = self._closed or self._failure()
        if failure is not None:
            return self._incomplete(*failure)
        blocks = self._candidates()
        if isinstance(blocks, tuple):
            return self._guarded(blocks)
        return self._incomplete(blocks.reason, blocks.detail)

    def _incomplete(self, reason: ReasonCode, detail: str) -> Incomplete:
        shown = sum(1 for b in self._blocks.values() if b.kind == "text" and b.text)
        if not self._retracted:
            self._retracted = True
            self.previews_retracted += shown
        return Incomplete(reason, detail, retract_previews=shown > 0)

    def _failure(self) -> tuple[ReasonCode, str] | None:
        """Why the stream as a whole cannot commit, before looking at tool calls."""
        if self._error is not None:
            return ReasonCode.PROVIDER_ERROR, f"{self._error[0]}: {self._error[1]}"
        if self._held:
            return (
                ReasonCode.STREAM_INCOMPLETE,
                f"sequence gap: next {self._next}, held from {min(self._held)}",
            )
        if self._violation is not None:
            return self._violation
        if not self._started:
            return ReasonCode.STREAM_INCOMPLETE, "no message start"
        if not self._stopped or self._stop_reason is None:
            open_blocks = sorted(i for i, b in self._blocks.items() if not b.stopped)
            what = "message stop" if not self._stopped else "stop reason"
            return ReasonCode.MISSING_STOP, f"no {what}; open blocks {open_blocks}"
        if self._stop_reason is StopReason.ERROR:
            return ReasonCode.PROVIDER_ERROR, f"stopped with {self._raw_stop}"
        if self._stop_reason is StopReason.REFUSAL:
            return ReasonCode.PROVIDER_REFUSED, f"stopped with {self._raw_stop}, a refusal"
        if self._stop_reason is StopReason.MAX_TOKENS:
            cut = self._cut_by_the_limit()
            if cut is not None:
                advice = LIMIT_ADVICE.get(self._raw_stop, RAISE_THE_LIMIT)
                return ReasonCode.OUTPUT_LIMIT_REACHED, f"{cut}; {advice}"
        open_blocks = sorted(i for i, b in self._blocks.items() if not b.stopped)
        if open_blocks:
            return ReasonCode.STREAM_INCOMPLETE, f"message stopped with open blocks {open_blocks}"
        return None

    def _cut_by_the_limit(self) -> str | None:
        """What the output limit cut, if the answer cannot commit as cut: a tool call that is open,
        unparsable (its arguments cut: the parse error is kept) or last, or an answer with nothing
        visible (`is_visible`: no tool call, no text that is not blank), cut while the model was still
        reasoning. Committed, such thinking would be a turn that renders to nothing: the next request merged
        the user's turns around it, or sent an assistant message of thinking alone (at any other stop the
        fold commits nothing of it: `lifecycle.NOTHING_VISIBLE`). An answer with no block at all is the
        same cut with the reasoning hidden (OpenAI's reasoning models, Gemini without `includeThoughts`),
        so it is refused alike, not an empty answer."""
        tools = {i: b for i, b in self._blocks.items() if b.kind == "tool_call"}
        for index, block in sorted(tools.items()):
            if not block.stopped:
                return f"tool block {index} open at {self._raw_stop}"
            try:
                parse_strict(block.content())
            except ArgumentError as exc:
                return f"tool block {index} at {self._raw_stop}: {exc.detail}"
        if self._blocks and max(self._blocks) in tools:
            return f"last block is a tool call at {self._raw_stop}"
        if not any(is_visible(b.kind, b.text) for b in self._blocks.values()):
            reached = f"limit reached at {self._raw_stop} while the model was still reasoning"
            return f"{reached}: nothing visible to commit"
        return None

    def _candidates(self) -> tuple[CandidateBlock, ...] | ArgumentError:
        candidates: list[CandidateBlock] = []
        call_ids: set[str] = set()
        for index, block in sorted(self._blocks.items()):
            if block.kind != "tool_call":
                candidates.append(
                    CandidateBlock(
                        index,
                        block.kind,
                        text=block.content(),
                        signature=block.signature,
                        item_id=block.item_id,
                    )
                )
                continue
            try:
                candidates.append(self._tool_call(index, block, call_ids))
            except ArgumentError as exc:
                return ArgumentError(exc.reason, f"tool block {index}: {exc.detail}")
        return tuple(candidates)

    def _tool_call(self, index: int, block: _Block, call_ids: set[str]) -> CandidateBlock:
        # a call without a name is no call of any tool, even of one a toolset names ""
        tool = self._tools.get(block.tool_name) if block.tool_name else None
        if tool is None:
            raise ArgumentError(ReasonCode.UNKNOWN_TOOL, f"tool {block.tool_name!r} is not in the toolset")
        if not block.call_id:
            raise ArgumentError(ReasonCode.CALL_ID_INVALID, "call id missing")
        if block.call_id in call_ids:
            raise ArgumentError(
                ReasonCode.CALL_ID_INVALID, f"call id {block.call_id!r} repeated in the response"
            )
        call_ids.add(block.call_id)
        raw = block.content()
        valid = validate_arguments(raw, tool.input_schema)
        return CandidateBlock(
            index,
            "tool_call",
            call_id=block.call_id,
            tool_name=block.tool_name,
            arguments=raw,
            argument_digest=valid.digest,
            schema_digest=tool.schema_digest,
            signature=block.signature,
        )

    def _guarded(self, blocks: tuple[CandidateBlock, ...]) -> AssemblyOutcome:
        """Last line of defence: no tool call leaves unless every commit rule holds again."""
        for candidate in blocks:
            if candidate.kind == "tool_call" and not self._committable(candidate):
                self.partial_tool_dispatches += 1
                return self._incomplete(
                    ReasonCode.INCOMPLETE_ARGUMENTS, f"guard: block {candidate.block_index}"
                )
        assert (
            self.response_handle is not None and self.generation is not None and self._stop_reason is not None
        )
        return Complete(
            blocks,
            self._stop_reason,
            self.response_handle,
            self.generation,
            raw_stop_reason=self._raw_stop,
            input_tokens=self._input_tokens,
            output_tokens=self._output_tokens,
            model=self._model,
        )

    def _committable(self, candidate: CandidateBlock) -> bool:
        block = self._blocks[candidate.block_index]
        if not (self._stopped and block.stopped and candidate.arguments is not None and candidate.call_id):
            return False
        try:
            return digest_of(parse_strict(candidate.arguments)) == candidate.argument_digest
        except (ArgumentError, ValueError):
            return False

    # -- snapshot ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-compatible state; `restore(snapshot(), tools)` gives an equal assembler."""
        return {
            "v": SNAPSHOT_VERSION,
            "response_handle": self.response_handle,
            "generation": self.generation,
            "next_sequence": self._next,
            "held": [self._held[s].model_dump(mode="json") for s in sorted(self._held)],
            "blocks": [b.to_json(i) for i, b in sorted(self._blocks.items())],
            "started": self._started,
            "stopped": self._stopped,
            "stop_reason": self._stop_reason,
            "raw_stop_reason": self._raw_stop,
            "model": self._model,
            "input_tokens": self._input_tokens,
            "output_tokens": self._output_tokens,
            "error": list(self._error) if self._error else None,
            "violation": list(self._violation) if self._violation else None,
            "closed": list(self._closed) if self._closed else None,
            "finished": self._finished,
            "retracted": self._retracted,
            "counters": {
                "duplicates_dropped": self.duplicates_dropped,
                "previews_retracted": self.previews_retracted,
                "partial_tool_dispatches": self.partial_tool_dispatches,
                "unknown_events": self.unknown_events,
            },
        }

    @classmethod
    def restore(
        cls,
        snapshot: Mapping[str, Any],
        tools: Mapping[str, ToolDefinition],
        limits: Limits = DEFAULT_LIMITS,
    ) -> BlockAssembler:
        if snapshot.get("v") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported assembler snapshot version {snapshot.get('v')!r}")
        self = cls(
            tools,
            response_handle=snapshot["response_handle"],
            generation=snapshot["generation"],
            start_sequence=snapshot["next_sequence"],
            limits=limits,
        )
        for data in snapshot["held"]:
            delta = NormalizedDelta.model_validate(data)
            self._held[delta.delta_sequence] = delta
        self._blocks = {int(b["index"]): _Block.from_json(b) for b in snapshot["blocks"]}
        self._started = snapshot["started"]
        self._stopped = snapshot["stopped"]
        stop = snapshot["stop_reason"]
        self._stop_reason = None if stop is None else StopReason(stop)
        self._raw_stop = snapshot["raw_stop_reason"]
        self._model = snapshot["model"]
        self._input_tokens = snapshot["input_tokens"]
        self._output_tokens = snapshot["output_tokens"]
        self._error = _pair(snapshot["error"])
        violation = snapshot["violation"]
        self._violation = None if violation is None else (ReasonCode(violation[0]), str(violation[1]))
        closed = snapshot["closed"]
        self._closed = None if closed is None else (ReasonCode(closed[0]), str(closed[1]))
        self._finished = snapshot["finished"]
        self._retracted = snapshot["retracted"]
        for name, value in snapshot["counters"].items():
            setattr(self, name, int(value))
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlockAssembler) and self.snapshot() == other.snapshot()

    __hash__ = None  # type: ignore[assignment]


def _pair(value: Any) -> tuple[str, str] | None:
    return None if value is None else (str(value[0]), str(value[1]))


_APPLY: Mapping[DeltaType, Callable[[BlockAssembler, NormalizedDelta, dict[int, str]], None]] = {
    DeltaType.MESSAGE_START: BlockAssembler._on_message_start,
    DeltaType.BLOCK_START: BlockAssembler._on_block_start,
    DeltaType.TEXT_DELTA: BlockAssembler._on_content,
    DeltaType.THINKING_DELTA: BlockAssembler._on_content,
    DeltaType.ARGUMENT_FRAGMENT: BlockAssembler._on_content,
    DeltaType.SIGNATURE: BlockAssembler._on_signature,
    DeltaType.BLOCK_STOP: BlockAssembler._on_block_stop,
    DeltaType.MESSAGE_STOP: BlockAssembler._on_message_stop,
    DeltaType.USAGE: BlockAssembler._on_usage,
    DeltaType.PROVIDER_ERROR: BlockAssembler._on_error,
}
