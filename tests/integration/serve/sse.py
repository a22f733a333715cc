"""A minimal SSE reader for the tests: (id, event, data) frames from an httpx stream."""

from __future__ import annotations

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
    fields: dict[str, str] = {}
    async with client.stream("GET", url, headers=headers or {}, timeout=timeout) as response:
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line == "":
                if "event" in fields:
                    frames.append(Frame(fields["id"], fields["event"], orjson.loads(fields["data"])))
                    if len(frames) >= count:
                        return frames
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
    return frames
