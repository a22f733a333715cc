"""A loopback TCP proxy whose target can be switched: how a managed Redis's primary endpoint behaves in
a failover (its name moves to the new primary; connections already open stay with the node they
reached), without DNS."""

from __future__ import annotations

import asyncio
import contextlib


class SwitchableProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        """Where new connections go; connections already open keep their node."""
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def switch(self, target_port: int) -> None:
        self.target_port = target_port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in self._pipes:
            pipe.cancel()
        for pipe in list(self._pipes):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await pipe
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            pipe = asyncio.create_task(_pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        sink.close()
