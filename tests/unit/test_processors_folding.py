"""Poison isolation of the fold (`processors.folding`): exact outputs, poisoned counts, writes kept, logs."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from tests.unit.test_processors_runtime import CounterBatch, CounterFold, IncrementalCounterFold, rec
from turnledger.processors.contract import StateStore
from turnledger.processors.errors import PoisonHookError
from turnledger.processors.folding import FoldingBatch, FoldOutcome, SegmentedBatch, fold_batch
from turnledger.processors.poison import json_poison_hook
from turnledger.processors.store import MemoryStateStore, OverlayStore
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Topics

LOGGER = "turnledger.processors.folding"


def out(key: str, value: bytes) -> OutputRecord:
    return OutputRecord("out", key.encode(), value)


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


class WritingFold(CounterFold):
    """CounterFold writing `poisoned:<offset>` before it raises; notes the lineage stamp each call saw."""

    def __init__(self) -> None:
        self.stamps: list[object] = []

    def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
        self.stamps.append(store.rollback_stamp)  # type: ignore[attr-defined]
        for r in records:
            if r.value and r.value.startswith(b"boom"):
                store.put(f"poisoned:{r.offset}", b"partial")
        return super().process_batch(records, store)


class Hook:
    """An `on_poison` hook answering one marker record per poisoned record, noting what it was given."""

    def __init__(self, overlay: OverlayStore | None = None) -> None:
        self.overlay = overlay
        self.calls: list[tuple[SourceRecord, str]] = []
        self.stamps: list[object] = []

    def __call__(self, record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        self.calls.append((record, f"{type(exc).__name__}: {exc}"))
        if self.overlay is not None:
            self.stamps.append(self.overlay.rollback_stamp)
        return [OutputRecord("rejected", record.key, str(record.offset).encode())]


def test_the_fast_path_keeps_its_writes_its_lineage_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    overlay = OverlayStore(MemoryStateStore())
    stamp = overlay.rollback_stamp
    hook = Hook()
    outcome = fold_batch(CounterFold(), [rec(0), rec(1, "c2")], overlay, hook)
    assert outcome == FoldOutcome([out("c1", b"c1:1"), out("c2", b"c2:1")], 0)
    assert dict(overlay.dirty) == {"c1": b"1", "c2": b"1"}
    assert overlay.rollback_stamp is stamp and hook.calls == [] and logged(caplog) == []


def test_two_poisoned_records_are_counted_replaced_in_place_and_their_writes_discarded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    base = MemoryStateStore()
    base.put("c1", b"5")
    overlay = OverlayStore(base)
    fold = WritingFold()
    hook = Hook(overlay)
    records = [rec(0), rec(1, value=b"boom"), rec(2, "c2", b"boom2"), rec(3), rec(4, "c2")]
    outcome = fold_batch(fold, records, overlay, hook)
    assert outcome == FoldOutcome(
        [
            out("c1", b"c1:6"),
            OutputRecord("rejected", b"c1", b"1"),
            OutputRecord("rejected", b"c2", b"2"),
            out("c1", b"c1:7"),
            out("c2", b"c2:1"),
        ],
        2,
    )
    assert [(r.offset, text) for r, text in hook.calls] == [(1, "ValueError: boom"), (2, "ValueError: boom")]
    # the fast path's writes and each poisoned record's own are gone; the other records' are kept
    assert dict(overlay.dirty) == {"c1": b"7", "c2": b"1"}
    assert base.get("c1") == b"5" and base.get("poisoned:1") is None
    # each poisoned record's layer is discarded (its lineage rolled back) before its hook runs
    assert len(fold.stamps) == 6
    assert hook.stamps[0] is not fold.stamps[2] and hook.stamps[1] is not fold.stamps[3]
    assert fold.stamps[1] is not fold.stamps[0]  # the whole batch's writes discarded too
    assert logged(caplog) == [
        (
            logging.WARNING,
            "fold raised on a batch of 5 records (ValueError('boom')); retrying one record at a time",
        ),
        (logging.ERROR, "poison record in-0@1 (ValueError: boom): emitting on_poison outputs"),
        (logging.ERROR, "poison record in-0@2 (ValueError: boom): emitting on_poison outputs"),
    ]


def test_a_fold_answering_what_is_not_a_list_of_output_records_is_poison_with_the_reason() -> None:
    class Answers:
        def __init__(self, answer: object) -> None:
            self.answer = answer

        def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
            return self.answer  # type: ignore[return-value]

    cases: list[tuple[object, str]] = [
        ((), "TypeError: process_batch must return a list of OutputRecord, got tuple"),
        (["x"], "TypeError: process_batch returned 'x', not an OutputRecord with bytes value"),
        (
            [OutputRecord("out", None, "text")],  # type: ignore[arg-type]
            "TypeError: process_batch returned OutputRecord(topic='out', key=None, value='text'), "
            "not an OutputRecord with bytes value",
        ),
    ]
    for answer, reason in cases:
        hook = Hook()
        outcome = fold_batch(Answers(answer), [rec(7)], OverlayStore(MemoryStateStore()), hook)
        assert outcome == FoldOutcome([OutputRecord("rejected", b"c1", b"7")], 1)
        assert [(r.offset, text) for r, text in hook.calls] == [(7, reason)]


def test_a_hook_that_raises_or_answers_garbage_stops_the_batch_with_the_cause() -> None:
    def raising(record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        raise RuntimeError("hook bug")

    def garbage(record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        return [OutputRecord("out", None, "text")]  # type: ignore[arg-type]

    records = [rec(0), rec(3, value=b"boom")]
    with pytest.raises(PoisonHookError) as raised:
        fold_batch(CounterFold(), records, OverlayStore(MemoryStateStore()), raising)
    assert str(raised.value) == (
        "on_poison raised RuntimeError('hook bug') for in-0@3; the batch is not committed"
    )
    assert isinstance(raised.value.__cause__, RuntimeError) and str(raised.value.__cause__) == "hook bug"
    with pytest.raises(PoisonHookError) as raised:
        fold_batch(CounterFold(), records, OverlayStore(MemoryStateStore()), garbage)
    assert str(raised.value) == (
        "on_poison raised TypeError(\"process_batch returned OutputRecord(topic='out', key=None, "
        "value='text'), not an OutputRecord with bytes value\") for in-0@3; the batch is not committed"
    )
    assert isinstance(raised.value.__cause__, TypeError)


def test_a_plain_fold_gathered_is_folded_only_at_the_close_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    overlay = OverlayStore(MemoryStateStore())
    stamp = overlay.rollback_stamp
    gathered = FoldingBatch(CounterFold(), Hook(), overlay)
    gathered.fold_records([rec(0)])
    assert logged(caplog) == [] and overlay.rollback_stamp is stamp and dict(overlay.dirty) == {}
    assert gathered.outcome([rec(0)]) == FoldOutcome([out("c1", b"c1:1")], 0)
    assert logged(caplog) == [] and overlay.rollback_stamp is stamp


def test_a_piece_that_raises_is_logged_and_rolls_the_lineage_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    overlay = OverlayStore(MemoryStateStore())
    stamp = overlay.rollback_stamp
    fold = IncrementalCounterFold()
    gathered = FoldingBatch(fold, Hook(), overlay)
    gathered.fold_records([rec(0)])
    assert logged(caplog) == [] and overlay.rollback_stamp is stamp
    gathered.fold_records([rec(1, value=b"boom")])
    assert overlay.rollback_stamp is not stamp
    assert logged(caplog) == [
        (
            logging.WARNING,
            "fold raised on a batch being gathered (ValueError('boom')); folding it whole at its close",
        )
    ]
    gathered.fold_records([rec(2)])  # given up: not folded into the open batch
    outcome = gathered.outcome([rec(0), rec(1, value=b"boom"), rec(2)])
    assert fold.closes == 0
    assert outcome == FoldOutcome(
        [out("c1", b"c1:1"), OutputRecord("rejected", b"c1", b"1"), out("c1", b"c1:2")], 1
    )
    # given up once: neither the later piece nor the close is tried on the open batch again
    assert logged(caplog) == [
        (
            logging.WARNING,
            "fold raised on a batch being gathered (ValueError('boom')); folding it whole at its close",
        ),
        (
            logging.WARNING,
            "fold raised on a batch of 3 records (ValueError('boom')); retrying one record at a time",
        ),
        (logging.ERROR, "poison record in-0@1 (ValueError: boom): emitting on_poison outputs"),
    ]


def test_a_close_that_raises_is_logged_once_and_its_batch_folded_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FailingClose(CounterBatch):
        def close(self) -> list[OutputRecord]:
            self.store.put("c1", b"999")
            raise RuntimeError("close failed")

    class Fold(IncrementalCounterFold):
        def open_batch(self, store: StateStore) -> CounterBatch:
            return FailingClose(self, store)

    caplog.set_level(logging.DEBUG, LOGGER)
    gathered = FoldingBatch(Fold(), Hook(), OverlayStore(MemoryStateStore()))
    gathered.fold_records([rec(0)])
    assert gathered.outcome([rec(0)]) == FoldOutcome([out("c1", b"c1:1")], 0)
    assert dict(gathered.overlay.dirty) == {"c1": b"1"}
    assert logged(caplog) == [
        (
            logging.WARNING,
            "fold raised on a batch being gathered (RuntimeError('close failed')); "
            "folding it whole at its close",
        )
    ]


def test_a_group_commit_batch_counts_every_segments_poisoned_records() -> None:
    base = MemoryStateStore()
    segments = SegmentedBatch(CounterFold(), Hook(), OverlayStore(base))
    assert segments.outcome([]) == FoldOutcome([], 0)
    segments.fold_records([rec(0, value=b"boom"), rec(1)])
    segments.fold_records([rec(2, value=b"boom")])
    segments.fold_records([rec(3, "c2")])
    assert segments.outcome([]) == FoldOutcome(
        [
            OutputRecord("rejected", b"c1", b"0"),
            out("c1", b"c1:1"),
            OutputRecord("rejected", b"c1", b"2"),
            out("c2", b"c2:1"),
        ],
        2,
    )
    assert dict(segments.overlay.dirty) == {"c1": b"1", "c2": b"1"} and base.get("c1") is None


def test_json_poison_hook_keeps_working_through_fold_batch() -> None:
    outcome = fold_batch(
        CounterFold(),
        [rec(0, value=b"boom")],
        OverlayStore(MemoryStateStore()),
        json_poison_hook(Topics("t.")),
    )
    assert outcome.poisoned == 1 and outcome.outputs[0].topic == "t.turnledger.rejections"


def test_a_batch_gathered_whole_closes_once_without_a_warning_or_a_rollback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    overlay = OverlayStore(MemoryStateStore())
    stamp = overlay.rollback_stamp
    fold = IncrementalCounterFold()
    gathered = FoldingBatch(fold, Hook(), overlay)
    gathered.fold_records([rec(0), rec(1, "c2")])
    gathered.fold_records([rec(2)])
    outcome = gathered.outcome([rec(0), rec(1, "c2"), rec(2)])
    assert outcome == FoldOutcome([out("c1", b"c1:1"), out("c2", b"c2:1"), out("c1", b"c1:2")], 0)
    assert fold.closes == 1 and dict(overlay.dirty) == {"c1": b"2", "c2": b"1"}
    assert logged(caplog) == [] and overlay.rollback_stamp is stamp
