"""`replay audit`'s reads (promise 5), on topics in memory: the ingress log folded again by the
processor's engine under the processor's limits and model registry, each output tied to the ingress
record of its batch, the outputs grouped per (stream, key), and the report's counts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.dispatch.scenario import Conversation
from tests.unit.replay.fake_topics import FakeTopics
from turnledger.codec import default_codec, encode
from turnledger.dispatch.engine import BatchEngine
from turnledger.model.events import DispatchDecision, DispatchState
from turnledger.model.reasons import ReasonCode
from turnledger.processors import model_registry
from turnledger.records import SourceRecord
from turnledger.replay import audit as audit_module
from turnledger.replay.audit import AuditReport, Coordinates, Divergence, audit, fold_expected, read_outputs
from turnledger.replay.memory_store import MemoryStore
from turnledger.replay.refold import FoldedBatch, FoldedOutput, refold
from turnledger.topology import OUTPUT_STREAMS, Stream, Topics

CODEC = default_codec()
INGRESS = "x.turnledger.ingress"


def _ingress(*conversations: str) -> list[SourceRecord]:
    """A user turn and a request of op-1 in each conversation, as ingress records in offset order."""
    records: list[SourceRecord] = []
    for conversation_id in conversations:
        c = Conversation(conversation_id=conversation_id)
        c.user(f"hello from {conversation_id}")
        c.request("op-1")
        for event in c.events:
            records.append(SourceRecord(INGRESS, 0, len(records), conversation_id.encode(), encode(event)))
    return records


async def _refold(
    monkeypatch: pytest.MonkeyPatch, batches: list[list[SourceRecord]], **kw: Any
) -> list[FoldedBatch]:
    topics = FakeTopics({INGRESS: batches})
    topics.install(monkeypatch, "turnledger.replay.refold")
    folded = [b async for b in refold("broker:1", Topics("x."), **kw)]
    assert topics.started == ["broker:1"] and topics.asked == [("broker:1", [INGRESS])]
    assert topics.batch_sizes == [kw.get("batch", 1000)]
    assert [c.stopped for c in topics.consumers] == [1]
    return folded


def _decisions(folded: list[FoldedBatch]) -> list[tuple[str, str, Any]]:
    """(stream, state, reason) of every DispatchDecision the refold gives."""
    return [
        (o.stream, o.record.state, o.record.reason)
        for b in folded
        for o in b.outputs
        if isinstance(o.record, DispatchDecision)
    ]


async def test_refold_gives_the_engines_outputs_each_with_the_last_record_of_its_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each batch read is folded once, in order, on one engine and store: its outputs are the
    engine's own (stream, key, bytes, record), each tied to the batch's last ingress record."""
    monkeypatch.delenv(model_registry.REGISTRY_ENV, raising=False)
    records = _ingress("A", "B")
    batches = [records[:1], records[1:3], records[3:]]
    folded = await _refold(monkeypatch, batches, batch=7)
    assert [b.ingress for b in folded] == batches
    engine, store = BatchEngine(), MemoryStore()
    for batch, got in zip(batches, folded, strict=True):
        want = engine.process_batch(batch, store)
        assert [(o.stream, o.key, o.value, o.record) for o in got.outputs] == [
            (str(w.stream), w.key, w.value, w.record) for w in want
        ]
        assert all(type(o.stream) is str and o.source is batch[-1] for o in got.outputs)
    assert _decisions(folded) == [("manifests", DispatchState.PREPARED, None)] * 2


async def test_refold_tells_the_ingress_offsets_folded_once_each_folded_batch_was_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The total first, then each count after the caller took the batch folded up to it."""
    monkeypatch.delenv(model_registry.REGISTRY_ENV, raising=False)
    records = _ingress("A", "B")
    told: list[tuple[int, int]] = []
    handled: list[tuple[int, list[tuple[int, int]]]] = []
    topics = FakeTopics({INGRESS: [records[:1], records[1:]]})
    topics.install(monkeypatch, "turnledger.replay.refold")
    async for folded in refold("b:1", Topics("x."), progress=lambda *t: told.append(t)):
        handled.append((len(folded.ingress), list(told)))
    assert len(records) == 4
    assert handled == [(1, [(0, 4)]), (3, [(0, 4), (1, 4)])]
    assert told == [(0, 4), (1, 4), (4, 4)]


async def test_refold_admits_under_the_processors_model_registry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The registry `TURNLEDGER_MODEL_REGISTRY` names, as the processor loads it: a context window
    too small for the request is TOKEN_BUDGET_EXCEEDED in the refold too."""
    small = tmp_path / "models.json"
    small.write_text(
        json.dumps({"models": {"anthropic/claude-sonnet-4": {"context_window": 10, "encoding": None}}})
    )
    monkeypatch.setenv(model_registry.REGISTRY_ENV, str(small))
    folded = await _refold(monkeypatch, [_ingress("A")])
    assert _decisions(folded) == [("manifests", DispatchState.REJECTED, ReasonCode.TOKEN_BUDGET_EXCEEDED)]


async def test_refold_folds_under_the_processors_size_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limits the TURNLEDGER_MAX_* variables set, as the processor reads them: a turn over the
    block limit is refused in the refold too, so op-1 finds an empty conversation."""
    monkeypatch.delenv(model_registry.REGISTRY_ENV, raising=False)
    monkeypatch.setenv("TURNLEDGER_MAX_BLOCK_BYTES", "4")
    folded = await _refold(monkeypatch, [_ingress("A")])
    assert _decisions(folded) == [("manifests", DispatchState.REJECTED, ReasonCode.EMPTY_SEQUENCE)]


def _output(stream: str, key: bytes | None, value: bytes, source: SourceRecord) -> FoldedOutput:
    return FoldedOutput(stream, key, value, None, source)


async def test_fold_expected_groups_outputs_per_stream_and_key_with_their_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Expected outputs in emission order per (stream, key), a keyless one under b"", each with the
    coordinates of its ingress record; the ingress records counted and reported per batch."""
    one, two = SourceRecord("in", 1, 10, b"k", b""), SourceRecord("in", 2, 20, b"k", b"")
    batches = [
        FoldedBatch([one], [_output("committed", b"k", b"v1", one), _output("rejections", None, b"v2", one)]),
        FoldedBatch([one, two, two], [_output("committed", b"k", b"v3", two)]),
    ]
    seen: list[tuple[str, Topics, bool]] = []

    async def fake_refold(bootstrap: str, topics: Topics, progress: Any) -> AsyncIterator[FoldedBatch]:
        """Tells the ingress offsets of 5 (one is a transaction marker) after each batch."""
        seen.append((bootstrap, topics, progress is None))
        if progress:
            progress(0, 5)
        for b, done in zip(batches, (1, 5), strict=True):
            yield b
            if progress:
                progress(done, 5)

    monkeypatch.setattr(audit_module, "refold", fake_refold)
    progress: list[tuple[str, int, int]] = []
    expected, ingress = await fold_expected("b:1", Topics("x."), lambda *told: progress.append(told))
    assert seen == [("b:1", Topics("x."), False)]
    assert dict(expected) == {
        ("committed", b"k"): [(b"v1", Coordinates("in", 1, 10)), (b"v3", Coordinates("in", 2, 20))],
        ("rejections", b""): [(b"v2", Coordinates("in", 1, 10))],
    }
    assert (ingress, progress) == (4, [("ingress", 0, 5), ("ingress", 1, 5), ("ingress", 5, 5)])
    assert (await fold_expected("b:1", Topics("x."))) == (expected, 4)
    assert seen[-1] == ("b:1", Topics("x."), True)


async def test_read_outputs_groups_records_per_stream_and_key_where_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every output topic is read, one after the other, the ingress topic never; records per (stream,
    key) in the order read, a keyless one under b"", a tombstone kept as None, each with its
    coordinates; the progress of each read told under its topic's name."""
    topics = FakeTopics(
        {
            f"x.turnledger.{s}": []
            for s in ("committed", "manifests", "tool-calls", "previews", "quarantine", "rejections")
        }
    )
    topics.batches["x.turnledger.committed"] = [
        [
            SourceRecord("x.turnledger.committed", 0, 3, b"k", b"a"),
            SourceRecord("x.turnledger.committed", 0, 4, None, None),
        ],
        [SourceRecord("x.turnledger.committed", 1, 0, b"k", b"b")],
    ]
    topics.batches["x.turnledger.previews"] = [[SourceRecord("x.turnledger.previews", 2, 7, b"k", b"c")]]
    topics.install(monkeypatch, "turnledger.replay.audit")
    progress: list[tuple[str, int, int]] = []
    actual = await read_outputs("b:2", Topics("x."), lambda *told: progress.append(told))
    assert dict(actual) == {
        (Stream.COMMITTED, b"k"): [
            (b"a", Coordinates("x.turnledger.committed", 0, 3)),
            (b"b", Coordinates("x.turnledger.committed", 1, 0)),
        ],
        (Stream.COMMITTED, b""): [(None, Coordinates("x.turnledger.committed", 0, 4))],
        (Stream.PREVIEWS, b"k"): [(b"c", Coordinates("x.turnledger.previews", 2, 7))],
    }
    assert progress == [
        ("x.turnledger.committed", 0, 3), ("x.turnledger.committed", 2, 3), ("x.turnledger.committed", 3, 3),
        ("x.turnledger.manifests", 0, 0),
        ("x.turnledger.tool-calls", 0, 0),
        ("x.turnledger.quarantine", 0, 0),
        ("x.turnledger.previews", 0, 1), ("x.turnledger.previews", 1, 1),
        ("x.turnledger.rejections", 0, 0),
    ]  # fmt: skip
    assert topics.asked == [("b:2", [Topics("x.").name(s)]) for s in OUTPUT_STREAMS]
    assert topics.started == ["b:2"] and [c.stopped for c in topics.consumers] == [1]
    assert dict(await read_outputs("b:2", Topics("x."))) == dict(actual)


async def test_read_outputs_stops_the_reader_when_a_topic_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing output topic is the reader's error, and the reader is stopped."""
    topics = FakeTopics({"x.turnledger.committed": []})
    topics.install(monkeypatch, "turnledger.replay.audit")
    with pytest.raises(LookupError, match=r"no topic x\.turnledger\.manifests"):
        await read_outputs("b", Topics("x."))
    assert [c.stopped for c in topics.consumers] == [1]


class _Clock:
    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def perf_counter(self) -> float:
        return self.times.pop(0)


async def test_audit_counts_both_sides_compares_them_and_times_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report counts the ingress records folded, the expected and actual records, and every
    divergence of their comparison, over the seconds between its start and its end."""
    one = SourceRecord("in", 0, 5, b"k", b"")
    sent = CODEC.encode_datum(
        CODEC.registry.reader("turnledger.v1.DispatchSent"),  # type: ignore[arg-type]
        {
            "conversationId": "k",
            "eventId": "e",
            "occurredAtMs": 5,
            "operationId": "o",
            "attemptGeneration": 1,
        },
    )

    folded_from: list[tuple[str, Topics]] = []

    async def fake_refold(bootstrap: str, topics: Topics, progress: Any) -> AsyncIterator[FoldedBatch]:
        folded_from.append((bootstrap, topics))
        progress(0, 2)
        yield FoldedBatch(
            [one, one], [_output("committed", b"k", sent, one), _output("committed", b"k", sent, one)]
        )
        progress(2, 2)

    monkeypatch.setattr(audit_module, "refold", fake_refold)
    topics = FakeTopics(
        {
            f"turnledger.{s}": []
            for s in ("committed", "manifests", "tool-calls", "previews", "quarantine", "rejections")
        }
    )
    topics.batches["turnledger.committed"] = [[SourceRecord("turnledger.committed", 0, 9, b"k", sent)]]
    topics.batches["turnledger.rejections"] = [[SourceRecord("turnledger.rejections", 0, 1, b"j", sent)]]
    topics.install(monkeypatch, "turnledger.replay.audit")
    monkeypatch.setattr(audit_module, "time", _Clock(100.0, 102.5))
    progress: list[tuple[str, int, int]] = []
    report = await audit("b", Topics(), lambda *told: progress.append(told))
    assert report == AuditReport(
        ingress_records=2,
        expected=2,
        actual=2,
        checked=3,
        divergences=[
            Divergence("missing", "committed", "k", 1, None, Coordinates("in", 0, 5)),
            Divergence("extra", "rejections", "j", 0, Coordinates("turnledger.rejections", 0, 1), None),
        ],
        seconds=2.5,
    )
    assert progress == [
        ("ingress", 0, 2), ("ingress", 2, 2),
        ("turnledger.committed", 0, 1), ("turnledger.committed", 1, 1),
        ("turnledger.manifests", 0, 0), ("turnledger.tool-calls", 0, 0), ("turnledger.quarantine", 0, 0),
        ("turnledger.previews", 0, 0),
        ("turnledger.rejections", 0, 1), ("turnledger.rejections", 1, 1),
    ]  # fmt: skip
    assert folded_from == [("b", Topics())] and topics.started == ["b"]
