"""A Redis Sentinel on a loopback port, speaking just enough RESP2 and RESP3 for redis-py's Sentinel client
and for `redisconn.sentinel_probe`, with the logins a real one answers with `requirepass` in its
sentinel.conf: `-NOAUTH` to a command before a login, `-WRONGPASS` to a wrong password, Redis's `-ERR AUTH
<password> called without any password configured ...` to a password it has none for; and `SENTINEL
MASTERS`, `SENTINEL GET-MASTER-ADDR-BY-NAME` for the services it monitors.

It may also stand for what is no sentinel, or one that will not serve us: a plain Redis (`-ERR unknown
command 'SENTINEL' ...`, as a redis-server out of sentinel mode answers), a sentinel whose user may not run
SENTINEL commands (`-NOPERM`), and, to a TLS ClientHello, which is no command, a plaintext port that
closes the connection, one that waits for the rest of the line, or one that answers Redis's protocol
error and closes (`on_tls`).

`served_in_a_thread` serves one on an event loop of its own, for a command that runs its own loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from tests.unit.tls_servers import HOST, Handler

NOAUTH = "NOAUTH Authentication required."
NOAUTH_HELLO = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH "
    "<user> <pass> option can be used to authenticate the client and select the RESP protocol version at "
    "the same time"
)
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
PROTOCOL_ERROR = "ERR Protocol error: unbalanced quotes in request"
NOPERM = "NOPERM User default has no permissions to run the '{}' command"
NO_PASSWORD_SET = (
    "ERR AUTH <password> called without any password configured for the default user. Are you sure "
    "your configuration is correct?"
)


@dataclass
class FakeSentinel:
    """`password`: its `requirepass` (None: none); `monitors`: service -> the primary's address; `down`:
    the services whose primary it sees down (`s_down,o_down`); `sentinel`: False for a plain Redis, to
    which SENTINEL is an unknown command; `may_ask`: False when its default user may not run SENTINEL
    commands; `on_tls`: what it does with bytes that are no command: "close", "wait" (for more) or
    "error" (answer `PROTOCOL_ERROR`, then close);
    `commands`: what it was sent, in order."""

    password: str | None = None
    monitors: dict[str, tuple[str, int]] = field(default_factory=dict)
    down: frozenset[str] = frozenset()
    sentinel: bool = True
    may_ask: bool = True
    on_tls: Literal["close", "wait", "error"] = "close"
    commands: list[list[str]] = field(default_factory=list)

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = _Session(logged_in=self.password is None)
        try:
            while (command := await _read_command(reader, self.on_tls)) is not None:
                self.commands.append(command)
                writer.write(self._reply(session, command))
                await writer.drain()
            if self.on_tls == "error" and not reader.at_eof():
                writer.write(_error(PROTOCOL_ERROR))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a client that leaves its connection open until the test's loop ends
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    def _reply(self, session: _Session, command: list[str]) -> bytes:
        name = command[0].upper() if command else ""
        words = [part.upper() for part in command]
        if name == "AUTH":
            return self._auth(session, command[-1], single=len(command) == 2)
        if name == "HELLO":
            if "AUTH" in words:
                refused = self._auth(session, command[words.index("AUTH") + 2], single=False)
                if refused != b"+OK\r\n":
                    return refused
            if not session.logged_in:
                return _error(NOAUTH_HELLO)
            session.resp3 = command[1:2] == ["3"]
            hello = {"server": "redis", "version": "7.2.4", "proto": 3 if session.resp3 else 2}
            return session.map(hello)
        if not session.logged_in:
            return _error(NOAUTH)
        if name == "PING":
            return b"+PONG\r\n"
        if name == "CLIENT":
            return b"+OK\r\n"
        if name == "SENTINEL" and not self.sentinel:
            return _unknown(command)
        if name == "SENTINEL" and not self.may_ask:
            return _error(NOPERM.format("|".join(command[:2]).lower()))
        if words[:2] == ["SENTINEL", "GET-MASTER-ADDR-BY-NAME"] and len(command) == 3:
            address = self.monitors.get(command[2])
            return session.null() if address is None else _array([address[0], str(address[1])])
        if words[:2] == ["SENTINEL", "MASTERS"]:
            states = [session.map(self._state(service, *at)) for service, at in self.monitors.items()]
            return f"*{len(states)}\r\n".encode() + b"".join(states)
        return _unknown(command)

    def _auth(self, session: _Session, given: str, *, single: bool) -> bytes:
        if self.password is None:
            return _error(NO_PASSWORD_SET) if single else b"+OK\r\n"  # HELLO AUTH: a nopass user takes any
        if given != self.password:
            return _error(WRONGPASS)
        session.logged_in = True
        return b"+OK\r\n"

    def _state(self, service: str, host: str, port: int) -> dict[str, str | int]:
        flags = "master,s_down,o_down" if service in self.down else "master"
        return {"name": service, "ip": host, "port": str(port), "flags": flags, "num-other-sentinels": "0"}


@dataclass
class _Session:
    logged_in: bool
    resp3: bool = False

    def map(self, fields: dict[str, str | int]) -> bytes:
        pairs = [item for key, value in fields.items() for item in (key, value)]
        head = f"%{len(fields)}\r\n" if self.resp3 else f"*{len(pairs)}\r\n"
        return head.encode() + b"".join(_value(item) for item in pairs)

    def null(self) -> bytes:
        return b"_\r\n" if self.resp3 else b"*-1\r\n"


def _value(item: str | int) -> bytes:
    if isinstance(item, int):
        return f":{item}\r\n".encode()
    return f"${len(item.encode())}\r\n".encode() + item.encode() + b"\r\n"


def _array(items: list[str]) -> bytes:
    return f"*{len(items)}\r\n".encode() + b"".join(_value(item) for item in items)


def _error(text: str) -> bytes:
    return f"-{text}\r\n".encode()


def _unknown(command: list[str]) -> bytes:
    """Redis's words for a command it does not have."""
    args = "".join(f"'{arg}' " for arg in command[1:])
    return _error(f"ERR unknown command '{command[0] if command else ''}', with args beginning with: {args}")


async def _read_command(reader: asyncio.StreamReader, on_tls: str) -> list[str] | None:
    """One command, a RESP array or inline; None at the client's close, or at bytes that are no command
    (a TLS ClientHello): at once, or with `on_tls` "wait" once the client closes."""
    first = await reader.read(1)
    if first and not 0x20 <= first[0] < 0x7F:
        if on_tls == "wait":
            await reader.read()
        return None
    line = first + await reader.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.decode().split()
    parts = []
    for _ in range(int(line[1:])):
        size = int((await reader.readline())[1:])
        parts.append((await reader.readexactly(size + 2))[:-2].decode())
    return parts


@contextlib.contextmanager
def served_in_a_thread(handler: Handler) -> Iterator[int]:
    """`handler` on a loopback port, served by an event loop of its own in a thread, for a block that runs
    a loop of its own (a command's entry point); the port. Its connections are cancelled at the end."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(asyncio.start_server(handler, HOST, 0), loop).result(5)

    async def close() -> None:
        server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await server.wait_closed()

    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        asyncio.run_coroutine_threadsafe(close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
