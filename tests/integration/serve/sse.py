"""A minimal SSE reader for the tests: (id, event, data) frames from an httpx stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson


@dataclass(frozen=True)
class Frame:
    id: str
    event: str
    data: dict[str, Any]


async def read_frames(
    client: httpx.AsyncClient,
    url: str,
    count: int,
    headers: dict[str, str] | None = None,
    timeout: float = 20,
) -> list[Frame]:
    """The first `count` event frames of the stream at `url` (comments and `retry:` skipped); then the
    connection is closed, as a browser that goes away would."""
    frames: list[Frame] = []
    async with client.stream("GET", url, headers=headers or {}, timeout=timeout) as response:
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        async for frame in frames_of(response):
            frames.append(frame)
            if len(frames) >= count:
                return frames
    return frames


async def frames_of(response: httpx.Response) -> AsyncIterator[Frame]:
    """Each event frame of `response`'s body until it ends (an event without an id has id "")."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields:
                yield Frame(fields.get("id", ""), fields["event"], orjson.loads(fields["data"]))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
