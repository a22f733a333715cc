"""`replay audit`: does the ingress log, folded again, give exactly the records on the output topics?

Expected records come from the engine, actual ones from the six output topics
(read_committed). They are compared byte for byte as sequences per (stream,
conversation key): conversation order is what the processor guarantees, while the
interleaving of conversations on a topic depends on partitioning and batching.

A record written before a schema change carries the older version's fingerprint, so its
bytes differ from the re-fold's. It still matches when it decodes (resolved into the
current schema, `codec.history`) to the same record as the expected one; such records are
counted apart (`older_versions`), everything else that differs is a divergence.

Previews changed meaning with their schema: the earlier `PreviewUpdated` carried the whole text
so far, the current one the text appended at `textOffset`. An earlier-version preview therefore
matches when it equals the expected one with the expected sequence's text accumulated up to it
(the whole text at offset 0), which `_WholePreviews` rebuilds while the comparison walks on.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from turnledger.codec import Codec, CodecError, default_codec
from turnledger.codec.registry import HEADER_SIZE
from turnledger.kafka.reading import NamedProgress, partitions_of, read_to_end, start_reader, told_as
from turnledger.replay.refold import refold
from turnledger.topology import OUTPUT_STREAMS, Topics

SequenceKey = tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class Coordinates:
    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class Divergence:
    kind: str  # "differs" | "missing" | "extra"
    stream: str
    key: str
    index: int
    """Position within the (stream, key) sequence."""
    actual: Coordinates | None
    """Where the divergent record is on its output topic (None when it is missing)."""
    source: Coordinates | None
    """The ingress record whose batch produced the expected record (None when extra)."""


@dataclass
class AuditReport:
    ingress_records: int = 0
    expected: int = 0
    actual: int = 0
    checked: int = 0
    older_versions: int = 0
    """Records equal to the expected ones but written with an older schema version."""
    divergences: list[Divergence] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.divergences


async def read_outputs(
    bootstrap: str, topics: Topics, progress: NamedProgress | None = None
) -> dict[SequenceKey, list[tuple[bytes | None, Coordinates]]]:
    """The records of the output topics per (stream, key), where each is. The topics are read one
    after the other, each to its end as it is when its read begins, so that `progress` is told the
    offsets read of each under its topic's name."""
    streams = topics.by_topic(OUTPUT_STREAMS)
    actual: dict[SequenceKey, list[tuple[bytes | None, Coordinates]]] = defaultdict(list)
    consumer = await start_reader(bootstrap)
    try:
        for topic, stream in streams.items():
            partitions = await partitions_of(consumer, bootstrap, [topic])
            async for batch in read_to_end(consumer, partitions, progress=told_as(progress, topic)):
                for r in batch:
                    actual[(stream, r.key or b"")].append(
                        (r.value, Coordinates(r.topic, r.partition, r.offset))
                    )
    finally:
        await consumer.stop()
    return actual


async def fold_expected(
    bootstrap: str, topics: Topics, progress: NamedProgress | None = None
) -> tuple[dict[SequenceKey, list[tuple[bytes, Coordinates]]], int]:
    """Expected output sequences per (stream, key), and the number of ingress records folded;
    `progress`: the ingress offsets folded, as "ingress"."""
    expected: dict[SequenceKey, list[tuple[bytes, Coordinates]]] = defaultdict(list)
    ingress = 0
    async for folded in refold(bootstrap, topics, progress=told_as(progress, "ingress")):
        ingress += len(folded.ingress)
        for o in folded.outputs:
            src = Coordinates(o.source.topic, o.source.partition, o.source.offset)
            expected[(o.stream, o.key or b"")].append((o.value, src))
    return expected, ingress


async def audit(bootstrap: str, topics: Topics, progress: NamedProgress | None = None) -> AuditReport:
    """Fold the ingress log, read the output topics, compare. Both are read up to their last stable
    offsets at the time of reading: audit a quiet system (or expect divergences at the tail).
    `progress` is told the offsets of each read: "ingress" (folded), then each output topic (read)
    under its name."""
    began = time.perf_counter()
    report = AuditReport()
    expected, report.ingress_records = await fold_expected(bootstrap, topics, progress)
    actual = await read_outputs(bootstrap, topics, progress)
    report.expected = sum(len(v) for v in expected.values())
    report.actual = sum(len(v) for v in actual.values())
    compare(expected, actual, report)
    report.seconds = time.perf_counter() - began
    return report


def compare(
    expected: dict[SequenceKey, list[tuple[bytes, Coordinates]]],
    actual: dict[SequenceKey, list[tuple[bytes | None, Coordinates]]],
    report: AuditReport,
    codec: Codec | None = None,
) -> None:
    """Pairwise per (stream, key): same index, same record; the surplus on either side is missing/extra."""
    codec = codec or default_codec()
    for seq_key in sorted(set(expected) | set(actual)):
        stream, key = seq_key
        exp, act = expected.get(seq_key, []), actual.get(seq_key, [])
        whole = _WholePreviews(codec, exp)
        for i in range(max(len(exp), len(act))):
            e = exp[i] if i < len(exp) else None
            a = act[i] if i < len(act) else None
            report.checked += 1
            if e is not None and a is not None:
                if e[0] == a[0]:
                    continue
                if a[0] is not None and (
                    same_record_older_version(codec, e[0], a[0]) or whole.matches_older(i, a[0])
                ):
                    report.older_versions += 1
                else:
                    report.divergences.append(Divergence("differs", stream, _text(key), i, a[1], e[1]))
            elif e is not None:
                report.divergences.append(Divergence("missing", stream, _text(key), i, None, e[1]))
            elif a is not None:
                report.divergences.append(Divergence("extra", stream, _text(key), i, a[1], None))


def same_record_older_version(codec: Codec, expected: bytes, actual: bytes) -> bool:
    """Is `actual` the expected record, written with another (older) version of its schema?"""
    if expected[:HEADER_SIZE] == actual[:HEADER_SIZE]:
        return False  # same writer schema: the bytes had to be equal
    try:
        return codec.decode_datum(actual) == codec.decode_datum(expected)
    except CodecError:
        return False


PREVIEW_UPDATED = "turnledger.v1.PreviewUpdated"


class _WholePreviews:
    """The expected previews of one sequence with their whole text, decoded only once asked for.

    Walks the expected records forward (the comparison asks in increasing index order), keeping
    the text each (operation, generation, block) has so far, so a sequence is decoded at most once.
    """

    def __init__(self, codec: Codec, expected: list[tuple[bytes, Coordinates]]) -> None:
        self.codec, self.expected, self.next = codec, expected, 0
        self.texts: dict[tuple[Any, Any, Any], str] = {}
        self.current: dict[str, Any] | None = None

    def _whole(self, index: int) -> dict[str, Any] | None:
        while self.next <= index:
            name, datum = self.codec.decode_datum(self.expected[self.next][0])
            self.next += 1
            self.current = None
            if name != PREVIEW_UPDATED:
                continue
            block = (datum["operationId"], datum["attemptGeneration"], datum["blockIndex"])
            held, offset = self.texts.get(block, ""), datum["textOffset"]
            if offset > len(held):
                self.texts.pop(block, None)  # cannot happen in a fold; then nothing matches it
                continue
            self.texts[block] = text = held[:offset] + datum["text"]
            self.current = {**datum, "text": text, "textOffset": 0}
        return self.current if self.next == index + 1 else None

    def matches_older(self, index: int, actual: bytes) -> bool:
        """Is `actual` an earlier-version preview holding the whole text of expected record `index`?"""
        if index >= len(self.expected):
            return False
        try:
            name, datum = self.codec.decode_datum(actual)
            if name != PREVIEW_UPDATED or actual[:HEADER_SIZE] == self.expected[index][0][:HEADER_SIZE]:
                return False
            return datum == self._whole(index)
        except CodecError:
            return False


def _text(key: bytes) -> str:
    return key.decode("utf-8", errors="replace")
