"""Running the fold over a batch, with poisoned records isolated instead of stopping the partition."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from turnledger.processors.contract import IncrementalFold, OpenBatch, PartitionFold, PoisonHook
from turnledger.processors.errors import PoisonHookError
from turnledger.processors.store import OverlayStore
from turnledger.records import OutputRecord, SourceRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FoldOutcome:
    outputs: list[OutputRecord]
    poisoned: int


def _validated(outputs: object) -> list[OutputRecord]:
    if not isinstance(outputs, list):
        raise TypeError(f"process_batch must return a list of OutputRecord, got {type(outputs).__name__}")
    for out in outputs:
        if not isinstance(out, OutputRecord) or not isinstance(out.value, bytes):
            raise TypeError(f"process_batch returned {out!r}, not an OutputRecord with bytes value")
    return outputs


def fold_batch(
    fold: PartitionFold, records: Sequence[SourceRecord], overlay: OverlayStore, on_poison: PoisonHook
) -> FoldOutcome:
    """Run the fold over a batch, isolating records on which it raises.

    First the whole batch in one call (the fast path). If that raises, its writes are
    discarded and the batch is folded again one record at a time, each on its own
    overlay: a record that still raises has its writes discarded and is replaced by
    `on_poison(record, exc)`'s outputs; the others keep theirs. The fold must keep all
    its state in the store for this to be exact.
    """
    try:
        return FoldOutcome(_validated(fold.process_batch(records, overlay)), 0)
    except Exception as exc:
        overlay.discard()
        log.warning(
            "fold raised on a batch of %d records (%r); retrying one record at a time", len(records), exc
        )
    outputs: list[OutputRecord] = []
    poisoned = 0
    for record in records:
        layer = OverlayStore(overlay)
        try:
            produced = _validated(fold.process_batch([record], layer))
        except Exception as exc:
            layer.discard()
            poisoned += 1
            log.error(
                "poison record %s-%d@%d (%s: %s): emitting on_poison outputs",
                record.topic,
                record.partition,
                record.offset,
                type(exc).__name__,
                exc,
            )
            try:
                produced = _validated(on_poison(record, exc))
            except Exception as hook_exc:
                raise PoisonHookError(
                    f"on_poison raised {hook_exc!r} for {record.topic}-{record.partition}@{record.offset}; "
                    "the batch is not committed"
                ) from hook_exc
        else:
            layer.commit()
        outputs.extend(produced)
    return FoldOutcome(outputs, poisoned)


@dataclass(slots=True)
class FoldingBatch:
    """A batch folded while it is gathered (the window: `batch_max_ms`), its state written at its close.

    With an `IncrementalFold`, each fetch's records go into the fold's open batch as they arrive, so
    the fold overlaps the gathering (and the commit in flight before it), and what is left when the
    batch closes is the close: the state writes. Before, the whole batch was folded at its close,
    holding the event loop, the commit in flight and the fetches, while every record of the batch
    waited. A plain `PartitionFold`, or a batch whose piece or close raised, is folded whole at the
    close by `fold_batch` (its overlay's writes discarded first), which isolates poisoned records.
    Either way the batch gets the outputs and writes of folding it whole."""

    fold: PartitionFold
    on_poison: PoisonHook
    overlay: OverlayStore
    _open: OpenBatch | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if isinstance(self.fold, IncrementalFold):
            self._open = self.fold.open_batch(self.overlay)

    def fold_records(self, records: list[SourceRecord]) -> None:
        """Fold one fetch's records, the next piece of the batch (nothing until the close for a
        plain fold or after a piece raised)."""
        if self._open is None:
            return
        try:
            self._open.fold(records)
        except Exception as exc:
            self._give_up(exc)

    def outcome(self, batch: Sequence[SourceRecord]) -> FoldOutcome:
        """Close the batch, `batch` being every record gathered: its outputs and poisoned count, its
        writes in the overlay."""
        if self._open is not None:
            try:
                return FoldOutcome(_validated(self._open.close()), 0)
            except Exception as exc:
                self._give_up(exc)
        return fold_batch(self.fold, batch, self.overlay, self.on_poison)

    def _give_up(self, exc: Exception) -> None:
        log.warning("fold raised on a batch being gathered (%r); folding it whole at its close", exc)
        self._open = None
        self.overlay.discard()


@dataclass(slots=True)
class SegmentedBatch:
    """A batch folded while it is gathered, each fetch's records folded whole and written on a layer of
    the batch's overlay as they arrive (group commit). A group-commit batch is what arrived during one
    commit, so a conversation seldom comes twice in it and writing each segment at once costs little,
    while it leaves nothing but the last segment for the close. A poisoned record's isolation
    (`fold_batch`) never throws away the segments before it."""

    fold: PartitionFold
    on_poison: PoisonHook
    overlay: OverlayStore
    _outputs: list[OutputRecord] = field(init=False, default_factory=list)
    _poisoned: int = field(init=False, default=0)

    def fold_records(self, records: list[SourceRecord]) -> None:
        layer = OverlayStore(self.overlay)
        outcome = fold_batch(self.fold, records, layer, self.on_poison)
        layer.commit()
        self._outputs += outcome.outputs
        self._poisoned += outcome.poisoned

    def outcome(self, batch: Sequence[SourceRecord]) -> FoldOutcome:
        """The outputs and poisoned count of every segment (`batch`: the records they held)."""
        return FoldOutcome(self._outputs, self._poisoned)
