"""Running the fold over a batch, with poisoned records isolated instead of stopping the partition."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from turnledger.processors.contract import PartitionFold, PoisonHook
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
