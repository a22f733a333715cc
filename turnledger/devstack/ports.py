"""Loopback port helpers."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence

from turnledger.errors import DevstackError

PortSource = Callable[[], int]
"""Where a service that restarts on the port it was given takes that port (`free_port` by default)."""


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1; a tiny race remains, which start-up detects."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Could a server listen on `port` now? With SO_REUSEADDR, as Kafka (the JVM) and redis-server
    bind: connections of a stopped server lingering in TIME_WAIT do not block its restart on the same
    port, a socket still listening there does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def tcp_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_tcp(host: str, port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if tcp_open(host, port):
            return True
        time.sleep(0.1)
    return False


class PortPool:
    """Ports handed out from a fixed range, each one free when handed out and not handed out again
    until the range has gone round: for services that are stopped and started again on their port.

    A port `free_port` hands out is one of the kernel's ephemeral ports, which any other process's
    `free_port` or outgoing connection may take while the service is down between its stop and its
    start; a range of its own, below the ephemeral ones, leaves no one to take it (the tests give each
    pytest-xdist worker one: `tests/integration/worker_ports.py`)."""

    def __init__(self, ports: Sequence[int]) -> None:
        if not ports:
            raise DevstackError("a port pool needs at least one port")
        self._ports = ports
        self._next = 0

    def take(self) -> int:
        for step in range(len(self._ports)):
            port = self._ports[(self._next + step) % len(self._ports)]
            if port_is_free(port):
                self._next = (self._next + step + 1) % len(self._ports)
                return port
        raise DevstackError(
            f"no free port among the {len(self._ports)} from {self._ports[0]} to {self._ports[-1]}"
        )
