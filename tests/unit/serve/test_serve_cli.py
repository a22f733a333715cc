from __future__ import annotations

from typer.testing import CliRunner

from turnledger.cli import _register, app
from turnledger.serve.app import is_loopback


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.8.0.1"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.org"))


def test_a_non_loopback_address_without_a_token_is_refused_before_connecting() -> None:
    _register()
    result = CliRunner().invoke(
        app,
        ["serve", "--host", "0.0.0.0", "--redis-url", "redis://127.0.0.1:1/0", "--bootstrap", "127.0.0.1:1"],
        env={"TURNLEDGER_SERVE_TOKEN": ""},
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "turnledger serve: binding '0.0.0.0' (not a loopback address) requires a "
    )
    assert result.stderr.count("\n") == 1 and "TURNLEDGER_SERVE_TOKEN" in result.stderr


def test_help_names_the_endpoints() -> None:
    _register()
    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0 and "Last-Event-ID" in result.output and "--token" in result.output


class _Bound:
    """What `page_url` reads of a started uvicorn server: its first socket's address."""

    def __init__(self, port: int) -> None:
        socket = type("S", (), {"getsockname": lambda self: ("127.0.0.1", port)})()
        self.servers = [type("L", (), {"sockets": [socket]})()]


def test_the_printed_address_never_carries_the_token() -> None:
    from turnledger.serve.cli import page_url

    assert page_url(_Bound(8765), "127.0.0.1", None) == "http://127.0.0.1:8765/"  # type: ignore[arg-type]
    shown = page_url(_Bound(8765), "::1", "s3cret-token")  # type: ignore[arg-type]
    assert shown == ("http://[::1]:8765/ (open it with ?token= and the token, or send Authorization: Bearer)")


def test_the_access_log_keeps_token_equals_stars() -> None:
    import logging

    from turnledger.serve.cli import TokenRedactingFilter, redact_access_log

    path = "/api/conversations/c-1/events?token=s3cret-token&x=1"
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "h.py", 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", path, "1.1", 200), None,
    )  # fmt: skip
    assert TokenRedactingFilter().filter(record) is True
    assert record.getMessage() == (
        '127.0.0.1:5000 - "GET /api/conversations/c-1/events?token=***&x=1 HTTP/1.1" 200'
    )
    plain = logging.LogRecord("uvicorn.access", logging.INFO, "h.py", 1, "GET /?TOKEN=abc", None, None)
    TokenRedactingFilter().filter(plain)
    assert plain.getMessage() == "GET /?TOKEN=***"
    redact_access_log()
    redact_access_log()
    access = logging.getLogger("uvicorn.access")
    assert sum(isinstance(f, TokenRedactingFilter) for f in access.filters) == 1
