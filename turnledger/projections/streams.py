"""Logical output streams and their physical topics.

The stream names are the dispatch engine's `OutputStream` values; they are repeated
here as strings so the projection does not import the dispatch layer.
"""

from __future__ import annotations

from turnledger.processors.topics import Topics

OUTPUT_STREAMS = ("committed", "manifests", "tool-calls", "previews", "quarantine", "rejections")
PROJECTED_STREAMS = ("committed", "manifests", "quarantine", "previews", "rejections")


def topic_for(topics: Topics, stream: str) -> str:
    return {
        "committed": topics.committed,
        "manifests": topics.manifests,
        "tool-calls": topics.tool_calls,
        "previews": topics.previews,
        "quarantine": topics.quarantine,
        "rejections": topics.rejections,
    }[stream]


def stream_of_topic(topics: Topics, streams: tuple[str, ...] = OUTPUT_STREAMS) -> dict[str, str]:
    """Physical topic -> stream name, for `streams`."""
    return {topic_for(topics, s): s for s in streams}
