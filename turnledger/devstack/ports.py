"""Loopback port helpers."""

from __future__ import annotations

import socket
import time


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
