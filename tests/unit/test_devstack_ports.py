"""`PortPool`: the ports of services that restart on their port, from a range no one else takes."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.integration.worker_ports import worker_range
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
