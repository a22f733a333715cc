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
    assert "requires a bearer token" in result.output and "TURNLEDGER_SERVE_TOKEN" in result.output


def test_help_names_the_endpoints() -> None:
    _register()
    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0 and "Last-Event-ID" in result.output and "--token" in result.output
