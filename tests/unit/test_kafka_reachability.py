"""Why no broker could be reached, in the operator's words (`kafka/reachability.py`): aiokafka's own
error says only "Unable to bootstrap from [...]", and its per-host log line is kept for DEBUG."""

from __future__ import annotations

import asyncio
import socket

import pytest

from turnledger.kafka.reachability import addresses, unreachable, words_for


def _closed_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            socket.gaierror(-2, "Name or service not known"),
            "the name does not resolve (Name or service not known)",
        ),
        (
            ConnectionRefusedError(111, "Connection refused"),
            "refused the connection (nothing listens on that port)",
        ),
        (TimeoutError(), "no answer within 2 s"),
        (OSError(101, "Network is unreachable"), "Network is unreachable"),
        (OSError(), "OSError"),
    ],
)
def test_each_error_is_said_by_the_first_rule_it_matches(error: OSError, said: str) -> None:
    assert words_for(error) == said


def test_addresses_are_host_port_pairs_an_ipv6_literal_unbracketed_and_a_malformed_one_left_out() -> None:
    assert addresses("k1:9092, [::1]:9093,nonsense,k2:x") == [("k1", 9092), ("::1", 9093)]


async def test_every_address_refused_or_unresolved_is_said_one_by_one() -> None:
    port = _closed_port()
    error = await unreachable(f"127.0.0.1:{port},nosuchhost.invalid:9092")
    assert error is not None
    assert str(error) == (
        f"KafkaConnectionError: no broker answered: 127.0.0.1:{port}: refused the connection "
        "(nothing listens on that port); nosuchhost.invalid:9092: the name does not resolve "
        "(Name or service not known)"
    )


async def test_one_address_taking_the_connection_leaves_the_clients_own_error() -> None:
    server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await unreachable(f"127.0.0.1:{_closed_port()},127.0.0.1:{port}") is None
    finally:
        server.close()
        await server.wait_closed()


async def test_a_list_with_no_address_leaves_the_clients_own_error() -> None:
    assert await unreachable("nonsense") is None
