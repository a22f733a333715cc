"""Where `turnledger serve` listens (`serve/cli.py`, `listening_sockets`): the sockets are bound before
anything connects, and an address that cannot be listened on is a usage error naming --host and --port
(exit 2). uvicorn bound them itself, after Redis and Kafka, and a port taken or a name that does not
resolve ended in `SystemExit(3)` out of its task, a traceback; a label the idna codec refuses in a
`UnicodeError` traceback."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner

from turnledger.cli import _register, app
from turnledger.serve.cli import listening_sockets


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_a_free_port_is_bound_on_the_host_s_address() -> None:
    sockets = listening_sockets("127.0.0.1", 0)
    try:
        assert [sock.getsockname()[0] for sock in sockets] == ["127.0.0.1"]
        assert sockets[0].getsockname()[1] > 0
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("not..a..host", "encoding with 'idna' codec failed (UnicodeError: label empty or too long)"),
        ("k" * 64, "encoding with 'idna' codec failed (UnicodeError: label too long)"),
    ],
)
def test_a_host_the_resolver_cannot_encode_is_a_usage_error(host: str, why: str) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        listening_sockets(host, 8765)
    assert str(refused.value) == f"cannot listen on {host}:8765: {why}"


def test_a_port_taken_is_a_usage_error(taken_port: int) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        listening_sockets("127.0.0.1", taken_port)
    assert str(refused.value) == f"cannot listen on 127.0.0.1:{taken_port}: Address already in use"


def test_serve_says_so_before_connecting_exit_2(taken_port: int) -> None:
    if not app.registered_groups:
        _register()
    args = [
        "serve",
        "--port",
        str(taken_port),
        "--redis-url",
        "redis://127.0.0.1:1/0",
        "--bootstrap",
        "127.0.0.1:1",
    ]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert (
        f"Invalid value for --host / --port: cannot listen on 127.0.0.1:{taken_port}: Address already in use"
    ) in result.output
    assert "Redis" not in result.output
