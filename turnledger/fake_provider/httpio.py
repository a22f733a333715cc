"""Minimal HTTP/1.1 on asyncio streams: read one request, write a JSON or a chunked SSE response.

One request per connection (`Connection: close`): the fake provider's faults are per connection (a
disconnect must not poison a pooled keep-alive connection), and clients open a new one per request anyway.
Streams use chunked transfer encoding like the real providers, so a disconnect mid-body is an
*incomplete* body for the client (httpx raises RemoteProtocolError), not a clean end of stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024


class MalformedRequest(Exception):
    """The bytes on the socket are not an HTTP/1.1 request we accept."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names; last value wins
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """Read one request; None when the peer closed before sending anything."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise MalformedRequest("connection closed inside the request head") from None
    except asyncio.LimitOverrunError:
        raise MalformedRequest("request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise MalformedRequest(f"bad request line {lines[0]!r}") from None
    if not version.startswith("HTTP/1."):
        raise MalformedRequest(f"unsupported version {version!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise MalformedRequest(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    body = b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise MalformedRequest("bad content-length") from None
        if length < 0 or length > MAX_BODY_BYTES:
            raise MalformedRequest("content-length out of range")
        body = await reader.readexactly(length)
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    return HttpRequest(method.upper(), url.path, query, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        total += size
        if total > MAX_BODY_BYTES:
            raise MalformedRequest("body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


NONSTANDARD_REASONS = {529: "Overloaded"}
"""Statuses a provider sends that `http.HTTPStatus` does not know (Anthropic's 529)."""


def reason_phrase(status: int) -> str:
    """The status line's reason phrase; a status nobody named gets its class's (`Client Error`)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return NONSTANDARD_REASONS.get(status, "Client Error" if status < 500 else "Server Error")


@dataclass
class ResponseWriter:
    """Writes exactly one response; counts the body bytes it has put on the wire (dechunked)."""

    writer: asyncio.StreamWriter
    extra_headers: dict[str, str] = field(default_factory=dict)
    reader: asyncio.StreamReader | None = None
    """The connection's read side (`client_closed` waits on it)."""
    body_bytes_sent: int = 0
    started: bool = False
    stream_content_type: str = "text/event-stream; charset=utf-8"

    def _head(self, status: int, headers: dict[str, str]) -> bytes:
        reason = reason_phrase(status)
        merged = {**headers, **self.extra_headers, "connection": "close"}
        lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in merged.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send_json(self, status: int, obj: Any, *, cut_at: int | None = None) -> None:
        """A JSON response; with `cut_at`, only that many body bytes are sent (the caller then closes)."""
        body = orjson.dumps(obj)
        self.started = True
        self.writer.write(
            self._head(status, {"content-type": "application/json", "content-length": str(len(body))})
        )
        sent = body if cut_at is None else body[:cut_at]
        self.writer.write(sent)
        self.body_bytes_sent += len(sent)
        await self.writer.drain()

    async def start_stream(self) -> None:
        self.started = True
        self.writer.write(
            self._head(
                200,
                {
                    "content-type": self.stream_content_type,
                    "cache-control": "no-cache",
                    "transfer-encoding": "chunked",
                },
            )
        )
        await self.writer.drain()

    async def write_chunk(self, data: bytes) -> None:
        """One chunk; may be a partial SSE event (the disconnect fault cuts anywhere)."""
        if not data:
            return
        self.writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.body_bytes_sent += len(data)
        await self.writer.drain()

    async def write_partial_chunk(self, data: bytes) -> None:
        """Announce a chunk of len(data)+1 bytes but send only `data`: the body is cut inside a chunk.

        Used by the disconnect fault so that the client can never mistake the cut for a complete chunk.
        """
        self.writer.write(f"{len(data) + 1:x}\r\n".encode() + data)
        self.body_bytes_sent += len(data)
        await self.writer.drain()

    async def client_closed(self, within_s: float | None) -> bool:
        """Send nothing and wait: True once the client has closed the connection, False when `within_s`
        seconds passed first (None: wait for the client). One request per connection: whatever else the
        client sends is read and ignored."""
        if self.reader is None:
            raise RuntimeError("client_closed needs the connection's reader")
        reader = self.reader

        async def until_eof() -> None:
            with contextlib.suppress(ConnectionError):
                while await reader.read(4096):
                    pass

        try:
            await asyncio.wait_for(until_eof(), within_s)
        except TimeoutError:
            return False
        return True

    async def end_stream(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()
