"""`PortPool`: the ports of services that restart on their port, from a range no one else takes."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.integration.worker_ports import worker_range
from turnledger.devstack import ports
from turnledger.devstack.ports import PortPool, free_port
from turnledger.errors import DevstackError


def _ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@pytest.fixture
def listening() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def _listen(port: int, held: list[socket.socket]) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    held.append(sock)


def test_ports_come_in_order_each_once_a_round() -> None:
    ports = _ports(3)
    pool = PortPool(ports)
    assert [pool.take() for _ in range(4)] == [*ports, ports[0]]


def test_a_port_in_use_is_passed_over(listening: list[socket.socket]) -> None:
    ports = _ports(3)
    _listen(ports[1], listening)
    pool = PortPool(ports)
    assert [pool.take(), pool.take(), pool.take()] == [ports[0], ports[2], ports[0]]


def test_a_pool_with_no_free_port_says_which_range(listening: list[socket.socket]) -> None:
    (port,) = _ports(1)
    _listen(port, listening)
    with pytest.raises(DevstackError) as refused:
        PortPool([port]).take()
    assert str(refused.value) == f"no free port among the 1 from {port} to {port}"


def test_an_empty_pool_is_refused() -> None:
    with pytest.raises(DevstackError, match=r"^a port pool needs at least one port$"):
        PortPool([])


@pytest.mark.parametrize(
    ("worker", "first"),
    [("gw0", 10_000), ("gw1", 11_000), ("gw9", 19_000), ("gw12", 12_000), ("master", 10_000)],
)
def test_each_worker_has_a_range_below_the_cluster_nodes_and_the_ephemeral_ports(
    worker: str, first: int
) -> None:
    assert worker_range(worker) == range(first, first + 1_000)


def test_a_listener_is_open_and_a_closed_port_is_not(listening: list[socket.socket]) -> None:
    open_port, closed_port = _ports(2)
    _listen(open_port, listening)
    assert (ports.tcp_open("127.0.0.1", open_port), ports.tcp_open("127.0.0.1", closed_port)) == (True, False)


def test_a_listener_that_takes_no_more_connections_is_given_up_after_the_timeout(
    listening: list[socket.socket],
) -> None:
    """Its accept queue full, Linux drops the SYN: only the timeout ends the attempt (without one it
    would wait out the kernel's retries, minutes)."""
    (port,) = _ports(1)
    _listen(port, listening)
    listening[0].listen(0)
    for _ in range(8):  # fill the queue: until a connection itself waits
        try:
            listening.append(socket.create_connection(("127.0.0.1", port), timeout=0.5))
        except TimeoutError:
            break
    else:
        pytest.fail("the listener's queue never filled")
    began = time.monotonic()
    assert ports.tcp_open("127.0.0.1", port, timeout=0.3) is False
    assert 0.25 <= time.monotonic() - began < 10


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_wait_tcp_tries_every_tenth_of_a_second_until_open(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, answers, asked = _Clock(), iter([False, False, True]), []

    def tcp_open(host: str, port: int) -> bool:
        asked.append((host, port))
        return next(answers)

    monkeypatch.setattr(ports, "time", clock)
    monkeypatch.setattr(ports, "tcp_open", tcp_open)
    assert ports.wait_tcp("127.0.0.9", 1234, deadline=101.0) is True
    assert asked == [("127.0.0.9", 1234)] * 3
    assert clock.slept == [0.1, 0.1]


def test_wait_tcp_gives_up_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(ports, "time", clock)
    monkeypatch.setattr(ports, "tcp_open", lambda host, port: False)
    assert ports.wait_tcp("127.0.0.1", 1, deadline=100.35) is False
    assert clock.slept == [0.1, 0.1, 0.1, 0.1]
    assert ports.wait_tcp("127.0.0.1", 1, deadline=clock.now) is False
    assert len(clock.slept) == 4


def test_a_port_is_given_half_a_second_to_answer_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[tuple[str, int], float | None]] = []

    def refuse(address: tuple[str, int], timeout: float | None = None) -> socket.socket:
        asked.append((address, timeout))
        raise ConnectionRefusedError

    monkeypatch.setattr(ports.socket, "create_connection", refuse)
    assert ports.tcp_open("127.0.0.1", 7) is False
    assert ports.tcp_open("127.0.0.1", 8, timeout=2.5) is False
    assert asked == [(("127.0.0.1", 7), 0.5), (("127.0.0.1", 8), 2.5)]
