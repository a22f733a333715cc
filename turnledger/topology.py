"""Every topic of turnledger in one table: its logical stream, its physical name, its settings.

The data flow of docs/architecture.md, as data. Each layer names streams (`Stream.MANIFESTS`) and asks
`Topics` for the physical name; topic creation reads the settings from `TOPOLOGY`. Pure:
no Kafka here, so the core (the dispatch engine names its output streams) may import it.

Ingress and changelog have the same partition count: the changelog record of a
conversation is written to the partition number of the input partition that owns it,
and restore reads exactly that partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_PREVIEWS_RETENTION_MS = 3_600_000


class Stream(StrEnum):
    INGRESS = "ingress"
    COMMITTED = "committed"
    MANIFESTS = "manifests"
    TOOL_CALLS = "tool-calls"
    PREVIEWS = "previews"
    QUARANTINE = "quarantine"
    REJECTIONS = "rejections"
    CHANGELOG = "changelog"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    stream: Stream
    written_by: str
    """`producers` (ingress), `processor output` or `processor state`."""
    projected: bool
    """Does the projector apply it to Redis?"""
    compacted: bool = False
    """cleanup.policy=compact: only the latest record per key is needed."""
    retention_ms: int | None = None
    """None: the broker's default."""
    same_partitions_as_ingress: bool = False
    purpose: str = ""


TOPOLOGY: tuple[TopicSpec, ...] = (  # in the order the projector applies its streams
    TopicSpec(Stream.INGRESS, "producers", False, purpose="every event, key = conversation id"),
    TopicSpec(Stream.COMMITTED, "processor output", True, purpose="committed turns with their revision"),
    TopicSpec(Stream.MANIFESTS, "processor output", True, purpose="manifests and every CAS decision"),
    TopicSpec(Stream.TOOL_CALLS, "processor output", False, purpose="calls of canonical responses"),
    TopicSpec(Stream.QUARANTINE, "processor output", True, purpose="late blocks, kept for audit"),
    TopicSpec(
        Stream.PREVIEWS,
        "processor output",
        True,
        retention_ms=DEFAULT_PREVIEWS_RETENTION_MS,
        purpose="revocable previews and retractions: never history, so short-lived",
    ),
    TopicSpec(Stream.REJECTIONS, "processor output", True, purpose="typed rejections with reason codes"),
    TopicSpec(
        Stream.CHANGELOG,
        "processor state",
        False,
        compacted=True,
        same_partitions_as_ingress=True,
        purpose="the fold's state per conversation, restored on assignment",
    ),
)

SPEC_OF: Mapping[Stream, TopicSpec] = {spec.stream: spec for spec in TOPOLOGY}
OUTPUT_STREAMS: tuple[Stream, ...] = tuple(s.stream for s in TOPOLOGY if s.written_by == "processor output")
PROJECTED_STREAMS: tuple[Stream, ...] = tuple(s.stream for s in TOPOLOGY if s.projected)


def topic_settings(spec: TopicSpec, retention_ms: Mapping[Stream, int] | None = None) -> dict[str, str]:
    """The configs to create `spec`'s topic with, `retention_ms` overriding the table's; the rest
    take the broker's defaults."""
    configs: dict[str, str] = {}
    if spec.compacted:
        configs["cleanup.policy"] = "compact"
    retention = (retention_ms or {}).get(spec.stream, spec.retention_ms)
    if retention is not None:
        configs["retention.ms"] = str(retention)
    return configs


@dataclass(frozen=True, slots=True)
class Topics:
    """Physical topic names: `prefix` is prepended verbatim (tests use a unique one per run)."""

    prefix: str = ""

    def name(self, stream: Stream | str) -> str:
        return f"{self.prefix}turnledger.{Stream(stream).value}"

    def by_topic(self, streams: Iterable[Stream] = Stream) -> dict[str, Stream]:
        """Physical topic name → the stream it carries, for `streams` (in their order)."""
        return {self.name(s): s for s in streams}

    @property
    def ingress(self) -> str:
        return self.name(Stream.INGRESS)

    @property
    def committed(self) -> str:
        return self.name(Stream.COMMITTED)

    @property
    def manifests(self) -> str:
        return self.name(Stream.MANIFESTS)

    @property
    def tool_calls(self) -> str:
        return self.name(Stream.TOOL_CALLS)

    @property
    def previews(self) -> str:
        return self.name(Stream.PREVIEWS)

    @property
    def quarantine(self) -> str:
        return self.name(Stream.QUARANTINE)

    @property
    def rejections(self) -> str:
        return self.name(Stream.REJECTIONS)

    @property
    def changelog(self) -> str:
        return self.name(Stream.CHANGELOG)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self.name(s) for s in OUTPUT_STREAMS)

    @property
    def all(self) -> tuple[str, ...]:
        return tuple(self.name(spec.stream) for spec in TOPOLOGY)
