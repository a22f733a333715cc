"""Batching bounds, fold isolation, ids and CLI parsing of the runtime, without a broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import typer

from turnledger.processors.batching import collect_batch
from turnledger.processors.cli import parse_partitions
from turnledger.processors.config import ProcessorConfig, transactional_id
from turnledger.processors.contract import StateStore
from turnledger.processors.errors import PoisonHookError
from turnledger.processors.folding import FoldingBatch, SegmentedBatch, fold_batch
from turnledger.processors.partition import _timed
from turnledger.processors.poison import json_poison_hook
from turnledger.processors.store import MemoryStateStore, OverlayStore
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Topics


def rec(offset: int, key: str = "c1", value: bytes = b"v") -> SourceRecord:
    return SourceRecord("in", 0, offset, key.encode(), value, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ScriptedFetch:
    """Records arrive at scripted times; a fetch waits (on the fake clock) up to its timeout for them."""

    def __init__(self, arrivals: list[tuple[float, SourceRecord]], clock: FakeClock) -> None:
        self.arrivals = sorted(arrivals, key=lambda a: a[0])
        self.clock = clock
        self.calls: list[tuple[int, int]] = []

    async def __call__(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        self.calls.append((timeout_ms, max_records))
        if not any(t <= self.clock.now for t, _ in self.arrivals):
            nxt = self.arrivals[0][0] if self.arrivals else float("inf")
            self.clock.now = min(nxt, self.clock.now + timeout_ms / 1000)
        ready = [r for t, r in self.arrivals if t <= self.clock.now][:max_records]
        self.arrivals = self.arrivals[len(ready) :]
        return ready


async def test_batch_stops_at_max_records_and_asks_only_for_the_rest() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(i)) for i in range(3)] + [(0.01, rec(i)) for i in range(3, 10)], clock)
    batch = await collect_batch(fetch, max_records=5, max_ms=1000, stop=asyncio.Event(), clock=clock)
    assert [r.offset for r in batch] == [0, 1, 2, 3, 4]
    assert [c[1] for c in fetch.calls] == [5, 2]


async def test_batch_closes_at_max_ms_after_first_record() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.03 * (i + 1), rec(i)) for i in range(100)], clock)
    batch = await collect_batch(fetch, max_records=500, max_ms=100, stop=asyncio.Event(), clock=clock)
    # the first record (t=0.03) opens the window until t=0.13: records at 0.06, 0.09 and 0.12 fit
    assert [r.offset for r in batch] == [0, 1, 2, 3]
    assert clock.now == pytest.approx(0.13, abs=0.002)


async def test_group_commit_closes_the_batch_once_the_previous_commit_has_ended() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.01 * (i + 1), rec(i)) for i in range(100)], clock)
    commit_ends_at = 0.034
    batch = await collect_batch(
        fetch,
        max_records=500,
        max_ms=100,
        stop=asyncio.Event(),
        clock=clock,
        close_when=lambda: clock.now >= commit_ends_at,
        close_poll_ms=5,
    )
    # opened at t=0.01 by record 0; polled every 5 ms, the batch sees the commit (ended at 0.034) at t=0.035
    # and closes with what arrived until then, long before its 100 ms window
    assert [r.offset for r in batch] == [0, 1, 2]
    assert clock.now == pytest.approx(0.035, abs=0.001)
    assert all(timeout <= 5 for timeout, _ in fetch.calls[1:])


async def test_group_commit_with_nothing_in_flight_takes_what_the_first_fetch_brings() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.0, rec(0)), (0.0, rec(1)), (0.001, rec(2))], clock)
    batch = await collect_batch(
        fetch, max_records=10, max_ms=100, stop=asyncio.Event(), clock=clock, close_when=lambda: True
    )
    assert [r.offset for r in batch] == [0, 1]
    assert len(fetch.calls) == 1


async def test_group_commit_still_closes_at_max_ms_when_the_commit_never_ends() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([(0.03 * (i + 1), rec(i)) for i in range(100)], clock)
    batch = await collect_batch(
        fetch, max_records=500, max_ms=100, stop=asyncio.Event(), clock=clock, close_when=lambda: False
    )
    assert [r.offset for r in batch] == [0, 1, 2, 3]
    assert clock.now == pytest.approx(0.13, abs=0.002)


async def test_idle_poll_returns_empty_so_caller_can_check_stop() -> None:
    clock = FakeClock()
    fetch = ScriptedFetch([], clock)
    assert await collect_batch(fetch, max_records=10, max_ms=100, stop=asyncio.Event(), clock=clock) == []
    assert len(fetch.calls) == 1


async def test_stop_returns_the_open_batch_without_waiting() -> None:
    clock = FakeClock()
    stop = asyncio.Event()
    fetch = ScriptedFetch([(0.0, rec(0)), (0.0, rec(1)), (0.001, rec(2))], clock)

    async def fetch_then_stop(timeout_ms: int, max_records: int) -> list[SourceRecord]:
        records = await fetch(timeout_ms, max_records)
        stop.set()
        return records

    batch = await collect_batch(fetch_then_stop, max_records=10, max_ms=10_000, stop=stop, clock=clock)
    assert [r.offset for r in batch] == [0, 1]
    assert len(fetch.calls) == 1


class CounterFold:
    """Counts records per key; raises on values starting with b'boom'."""

    def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
        out = []
        for r in records:
            if r.value and r.value.startswith(b"boom"):
                raise ValueError("boom")
            key = (r.key or b"").decode()
            count = int(store.get(key) or b"0") + 1
            store.put(key, str(count).encode())
            out.append(OutputRecord("out", r.key, f"{key}:{count}".encode()))
        return out


def test_fold_batch_fast_path() -> None:
    overlay = OverlayStore(MemoryStateStore())
    outcome = fold_batch(CounterFold(), [rec(0), rec(1)], overlay, json_poison_hook(Topics("t.")))
    assert [o.value for o in outcome.outputs] == [b"c1:1", b"c1:2"]
    assert outcome.poisoned == 0
    assert dict(overlay.dirty) == {"c1": b"2"}


def test_fold_batch_isolates_poison_and_keeps_other_records_exact() -> None:
    base = MemoryStateStore()
    base.put("c1", b"5")
    overlay = OverlayStore(base)
    records = [rec(0), rec(1, "c2"), rec(2, value=b"boom"), rec(3)]
    outcome = fold_batch(CounterFold(), records, overlay, json_poison_hook(Topics("t.")))
    assert outcome.poisoned == 1
    assert [(o.topic, o.value) for o in outcome.outputs[:2]] == [("out", b"c1:6"), ("out", b"c2:1")]
    rejection = outcome.outputs[2]
    assert rejection.topic == "t.turnledger.rejections"
    assert b'"offset":2' in rejection.value and b"ValueError: boom" in rejection.value
    assert outcome.outputs[3].value == b"c1:7"
    assert dict(overlay.dirty) == {"c1": b"7", "c2": b"1"}
    assert base.get("c1") == b"5"


class IncrementalCounterFold(CounterFold):
    """CounterFold taking a batch in pieces: counts kept in the open batch, written at its close."""

    def __init__(self) -> None:
        self.closes = 0

    def open_batch(self, store: StateStore) -> CounterBatch:
        return CounterBatch(self, store)


class CounterBatch:
    def __init__(self, fold: IncrementalCounterFold, store: StateStore) -> None:
        self.owner, self.store = fold, store
        self.counts: dict[str, int] = {}
        self.outputs: list[OutputRecord] = []

    def fold(self, records: Sequence[SourceRecord]) -> None:
        for r in records:
            if r.value and r.value.startswith(b"boom"):
                raise ValueError("boom")
            key = (r.key or b"").decode()
            count = self.counts.get(key, int(self.store.get(key) or b"0")) + 1
            self.counts[key] = count
            self.outputs.append(OutputRecord("out", r.key, f"{key}:{count}".encode()))

    def close(self) -> list[OutputRecord]:
        self.owner.closes += 1
        for key, count in self.counts.items():
            self.store.put(key, str(count).encode())
        return self.outputs


def _fold_whole(
    fold: CounterFold, records: list[SourceRecord], base: MemoryStateStore
) -> tuple[list[bytes], dict]:
    """The batch folded whole by `fold_batch`: its output values and its writes."""
    overlay = OverlayStore(base)
    outcome = fold_batch(fold, records, overlay, json_poison_hook(Topics("t.")))
    return [o.value for o in outcome.outputs], dict(overlay.dirty)


def test_a_batch_folded_as_it_arrives_writes_only_at_its_close_what_folding_it_whole_writes() -> None:
    base = MemoryStateStore()
    base.put("c1", b"5")
    pieces = [[rec(0), rec(1, "c2")], [rec(2)], [rec(3, "c2"), rec(4)]]
    fold = IncrementalCounterFold()
    gathered = FoldingBatch(fold, json_poison_hook(Topics("t.")), OverlayStore(base))
    for piece in pieces:
        gathered.fold_records(piece)
    assert dict(gathered.overlay.dirty) == {} and fold.closes == 0  # nothing written before the close
    outcome = gathered.outcome([r for piece in pieces for r in piece])
    assert fold.closes == 1 and outcome.poisoned == 0
    values = [o.value for o in outcome.outputs]
    assert values == [b"c1:6", b"c2:1", b"c1:7", b"c2:2", b"c1:8"]
    assert dict(gathered.overlay.dirty) == {"c1": b"8", "c2": b"2"}
    assert (values, dict(gathered.overlay.dirty)) == _fold_whole(
        CounterFold(), [r for p in pieces for r in p], base
    )
    assert base.get("c1") == b"5"


def test_a_piece_that_raises_has_the_batch_folded_whole_at_its_close_with_the_poison_isolated() -> None:
    base = MemoryStateStore()
    base.put("c1", b"5")
    pieces = [[rec(0), rec(1, "c2")], [rec(2, value=b"boom"), rec(3)], [rec(4, "c2")]]
    fold = IncrementalCounterFold()
    gathered = FoldingBatch(fold, json_poison_hook(Topics("t.")), OverlayStore(base))
    for piece in pieces:
        gathered.fold_records(piece)
    records = [r for piece in pieces for r in piece]
    outcome = gathered.outcome(records)
    assert fold.closes == 0  # the open batch was given up at the piece that raised
    assert outcome.poisoned == 1
    values = [o.value for o in outcome.outputs]
    assert values[:2] == [b"c1:6", b"c2:1"] and values[3:] == [b"c1:7", b"c2:2"]
    assert b'"offset":2' in values[2]
    assert dict(gathered.overlay.dirty) == {"c1": b"7", "c2": b"2"}
    assert (values, dict(gathered.overlay.dirty)) == _fold_whole(CounterFold(), records, base)


def test_a_close_that_raises_discards_the_pieces_writes_and_folds_the_batch_whole() -> None:
    class FailingClose(CounterBatch):
        def close(self) -> list[OutputRecord]:
            self.store.put("c1", b"999")  # a partial write, which must not survive
            raise RuntimeError("close failed")

    class Fold(IncrementalCounterFold):
        def open_batch(self, store: StateStore) -> CounterBatch:
            return FailingClose(self, store)

    base = MemoryStateStore()
    gathered = FoldingBatch(Fold(), json_poison_hook(Topics("t.")), OverlayStore(base))
    gathered.fold_records([rec(0), rec(1)])
    outcome = gathered.outcome([rec(0), rec(1)])
    assert [o.value for o in outcome.outputs] == [b"c1:1", b"c1:2"] and outcome.poisoned == 0
    assert dict(gathered.overlay.dirty) == {"c1": b"2"}


def test_a_plain_fold_is_folded_whole_when_the_batch_closes() -> None:
    class Counting(CounterFold):
        calls: list[int] = []

        def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
            self.calls.append(len(records))
            return super().process_batch(records, store)

    fold = Counting()
    gathered = FoldingBatch(fold, json_poison_hook(Topics("t.")), OverlayStore(MemoryStateStore()))
    gathered.fold_records([rec(0)])
    gathered.fold_records([rec(1, "c2")])
    assert fold.calls == []
    outcome = gathered.outcome([rec(0), rec(1, "c2")])
    assert fold.calls == [2] and [o.value for o in outcome.outputs] == [b"c1:1", b"c2:1"]


def test_a_group_commit_batch_keeps_the_segments_before_a_poisoned_record() -> None:
    base = MemoryStateStore()
    base.put("c1", b"5")
    segments = SegmentedBatch(IncrementalCounterFold(), json_poison_hook(Topics("t.")), OverlayStore(base))
    segments.fold_records([rec(0), rec(1, "c2")])
    assert dict(segments.overlay.dirty) == {"c1": b"6", "c2": b"1"}  # each segment written at once
    segments.fold_records([rec(2, value=b"boom"), rec(3)])
    segments.fold_records([rec(4, "c2")])
    records = [rec(0), rec(1, "c2"), rec(2, value=b"boom"), rec(3), rec(4, "c2")]
    outcome = segments.outcome(records)
    assert outcome.poisoned == 1
    values = [o.value for o in outcome.outputs]
    assert values[:2] == [b"c1:6", b"c2:1"] and values[3:] == [b"c1:7", b"c2:2"]
    assert b'"offset":2' in values[2]
    assert dict(segments.overlay.dirty) == {"c1": b"7", "c2": b"2"}
    assert base.get("c1") == b"5"
    assert (values, dict(segments.overlay.dirty)) == _fold_whole(CounterFold(), records, base)


def test_fold_batch_hook_failure_is_not_swallowed() -> None:
    def broken(record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        raise RuntimeError("hook bug")

    with pytest.raises(PoisonHookError):
        fold_batch(CounterFold(), [rec(0, value=b"boom")], OverlayStore(MemoryStateStore()), broken)


def test_fold_returning_garbage_counts_as_poison() -> None:
    class Garbage:
        def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
            return [OutputRecord("out", None, "text")]  # type: ignore[arg-type]

    outcome = fold_batch(Garbage(), [rec(0)], OverlayStore(MemoryStateStore()), json_poison_hook(Topics()))
    assert outcome.poisoned == 1 and outcome.outputs[0].topic == "turnledger.rejections"


def test_transactional_id_is_a_function_of_the_partition() -> None:
    assert transactional_id("app", "p.turnledger.ingress", 3) == "app-p.turnledger.ingress-3"
    assert transactional_id("app", "t", 0) != transactional_id("app", "t", 1)


def test_config_defaults_and_validation() -> None:
    cfg = ProcessorConfig(bootstrap="x:1", app_id="a")
    assert (cfg.batch_max_records, cfg.batch_max_ms, cfg.offsets_group) == (500, 100, "a")
    with pytest.raises(ValueError):
        ProcessorConfig(bootstrap="x:1", batch_max_records=0)


def test_topics_with_prefix() -> None:
    t = Topics("run1.")
    assert t.ingress == "run1.turnledger.ingress"
    assert t.tool_calls == "run1.turnledger.tool-calls"
    assert len(set(t.all)) == 8 and t.all[0] == t.ingress and t.all[-1] == t.changelog


def test_parse_partitions() -> None:
    assert parse_partitions("all") is None
    assert parse_partitions("2,0, 1") == [0, 1, 2]
    assert parse_partitions("0-2,5") == [0, 1, 2, 5]
    assert parse_partitions("99999") == [99_999]
    assert parse_partitions("99998-99999") == [99_998, 99_999]
    with pytest.raises(typer.BadParameter):
        parse_partitions("x")


@pytest.mark.parametrize("value", ["x", "3-1,5", "0-100000000", "-1", "-1-2", "1-x"])
def test_a_partition_range_that_is_not_low_to_high_within_bounds_is_refused(value: str) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        parse_partitions(value)
    assert str(refused.value) == (
        f"expected 'all' or e.g. '0,1,2' / '0-3' (ranges low to high, at most 99999), got {value!r}"
    )


@pytest.mark.parametrize("value", ["100000", "5,100000", ","])
def test_partition_numbers_out_of_bounds_or_none_are_refused(value: str) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        parse_partitions(value)
    assert str(refused.value) == f"expected 'all' or partition numbers from 0 to 99999, got {value!r}"


def test_partitions_are_checked_before_the_state_dir_is_made(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    state = tmp_path / "new-state"
    args = ["--bootstrap", "127.0.0.1:1", "--partitions", "a", "--state-dir", str(state)]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 2 and not state.exists()


def _cli() -> typer.Typer:
    from turnledger.processors.cli import process

    app = typer.Typer()
    app.command()(process)
    return app


def test_cli_without_bootstrap_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    result = CliRunner().invoke(_cli(), ["--partitions", "0"])
    assert result.exit_code == 2
    assert "turnledger dev up" in result.output and "KAFKA_BOOTSTRAP_SERVERS" in result.output


@pytest.mark.parametrize("ownership", [[], ["--partitions", "all"]], ids=["group", "static"])
def test_cli_unreachable_kafka_past_max_outage_is_a_clear_error(ownership: list[str]) -> None:
    from typer.testing import CliRunner

    fold = "tests.unit.test_processors_runtime:_counter_factory"
    args = ["--bootstrap", "127.0.0.1:1", "--fold", fold, "--max-outage", "0.5", *ownership]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 2, result.output
    assert "not reachable at '127.0.0.1:1'" in result.output and "turnledger dev up" in result.output


def test_cli_rejects_a_heartbeat_not_below_the_session_timeout() -> None:
    from typer.testing import CliRunner

    args = ["--bootstrap", "127.0.0.1:1", "--session-timeout-ms", "6000", "--heartbeat-interval-ms", "6000"]
    result = CliRunner().invoke(_cli(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "--heartbeat-interval-ms 6000 must be below --session-timeout-ms 6000" in result.output


def test_cli_rejects_a_bad_fold_spec() -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(_cli(), ["--bootstrap", "127.0.0.1:1", "--fold", "no.such.module:f"])
    assert result.exit_code == 2


def _counter_factory(topics: Topics, partition: int) -> CounterFold:
    return CounterFold()


def test_key_partition_matches_aiokafkas_default_partitioner() -> None:
    from aiokafka.partitioner import DefaultPartitioner

    from turnledger.processors.writer import key_partition

    for i in range(500):
        key = f"conv-{i}".encode()
        for n in (1, 2, 3, 12):
            assert key_partition(key, n) == DefaultPartitioner()(key, list(range(n)), list(range(n)))


def test_a_kept_store_is_rolled_back_for_the_folds_cache() -> None:
    """A term that keeps its store replaces the rollback stamp: the overlays the last term left behind
    may hold states the engine cached (processors/store.py, `Lineage`)."""
    from turnledger.processors.partition import PartitionProcessor

    processor = PartitionProcessor(
        ProcessorConfig(bootstrap="x:1"), 0, lambda _: CounterFold(), lambda _: json_poison_hook
    )
    store = processor.store = MemoryStateStore()
    store.put("a", b"1")
    before = store.rollback_stamp
    left_behind = OverlayStore(store)
    left_behind.put("a", b"2")  # folded, never committed nor discarded
    assert left_behind.rollback_stamp is before
    assert processor._keep_store() == "kept the state of its previous term (1 keys)"
    assert store.rollback_stamp is not before


async def test_a_commit_is_timed_inside_its_task_not_until_it_is_awaited() -> None:
    release = asyncio.Event()
    started = time.monotonic()
    task = asyncio.ensure_future(_timed(release.wait()))
    release.set()
    while not task.done():
        await asyncio.sleep(0.001)
    ended = time.monotonic()
    await asyncio.sleep(0.2)  # the next batch being gathered and folded before the commit is awaited
    assert await task <= ended - started
