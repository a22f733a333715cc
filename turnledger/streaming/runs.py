"""Runs: consecutive content deltas of one block carried as one `NormalizedDelta` (issue 20).

A stream of 60 tokens/s that the worker flushes every 100 ms puts ~6 text deltas in every
StreamDeltas record, each a whole delta of 17 fields on the wire, decoded, and fed to the
assembler one by one. A *run* is the first of them with `following_texts` holding the texts of the
others: the same deltas, written, read and applied with a fraction of the work.

Rules kept:

- a run stands for exactly the deltas it was made of, `expand(merge_runs(ds)) == ds` delta for
  delta (their dedup keys included), so the spec's deduplication by (handle, generation, block,
  sequence) holds piece by piece;
- deltas join a run only when they differ in nothing but their sequence (+1 each) and their text:
  one handle, generation, block and type (text, thinking or argument fragment), a text on each,
  every other field absent (`joins`);
- the assembler applies a run exactly as it would apply its deltas one after another
  (`BlockAssembler.feed_pieces`); a delta with `following_texts` that is not a valid run head is a
  protocol violation there (MALFORMED_BLOCK), never a guess at what it meant.

Pure: used by the gateway client (`merge_runs`, on the way out) and the assembler (`expand_piece`).
"""

from __future__ import annotations

from collections.abc import Iterable

from turnledger.model.deltas import DeltaType, NormalizedDelta

RUN_TYPES = frozenset({DeltaType.TEXT_DELTA, DeltaType.THINKING_DELTA, DeltaType.ARGUMENT_FRAGMENT})

_ABSENT_IN_A_RUN = (
    "block_kind",
    "call_id",
    "tool_name",
    "stop_reason",
    "raw_stop_reason",
    "input_tokens",
    "output_tokens",
    "error_type",
    "error_message",
    "model",
)


def is_run_head(delta: NormalizedDelta) -> bool:
    """May this delta carry `following_texts` (or be extended by the next delta)? A content delta
    with a text and no other optional field."""
    if delta.type not in RUN_TYPES or delta.text is None:
        return False
    fields = delta.__dict__
    return all(fields[name] is None for name in _ABSENT_IN_A_RUN)


def joins(head: NormalizedDelta, following: int, delta: NormalizedDelta) -> bool:
    """Does `delta` continue the run of `head` that has `following` texts so far?"""
    return (
        delta.delta_sequence == head.delta_sequence + following + 1
        and delta.type is head.type
        and delta.block_index == head.block_index
        and delta.response_handle == head.response_handle
        and delta.generation == head.generation
        and is_run_head(delta)
    )


def merge_runs(deltas: Iterable[NormalizedDelta]) -> tuple[NormalizedDelta, ...]:
    """`deltas` with each maximal sequence of joining deltas (`joins`) made one run; every other
    delta as it is."""
    out: list[NormalizedDelta] = []
    texts: list[str] = []  # following texts of the open run, out[-1]
    head_ok = False
    for delta in deltas:
        if head_ok and joins(out[-1], len(texts), delta):
            assert delta.text is not None
            texts.append(delta.text)
            texts.extend(delta.following_texts or ())
            continue
        _close(out, texts)
        out.append(delta)
        texts = list(delta.following_texts or ())
        head_ok = is_run_head(delta)
    _close(out, texts)
    return tuple(out)


def _close(out: list[NormalizedDelta], texts: list[str]) -> None:
    if out and len(texts) != len(out[-1].following_texts or ()):
        out[-1] = out[-1].model_copy(update={"following_texts": texts})


def expand_piece(run: NormalizedDelta, index: int) -> NormalizedDelta:
    """The `index`th delta a run stands for (0: the head without its following texts)."""
    if index == 0:
        return run.model_copy(update={"following_texts": None})
    assert run.following_texts is not None
    return run.model_copy(
        update={
            "delta_sequence": run.delta_sequence + index,
            "text": run.following_texts[index - 1],
            "following_texts": None,
        }
    )


def delta_count(deltas: Iterable[NormalizedDelta]) -> int:
    """How many deltas these stand for, each run counted as the deltas it merged: what a record
    says of its deltas must not depend on whether the worker merged them."""
    return sum(1 + len(delta.following_texts or ()) for delta in deltas)


def expand(delta: NormalizedDelta) -> list[NormalizedDelta]:
    """The deltas a run stands for, in order (a plain delta: itself)."""
    if not delta.following_texts:
        return [delta]
    return [expand_piece(delta, i) for i in range(len(delta.following_texts) + 1)]
