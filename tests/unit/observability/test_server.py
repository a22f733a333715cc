"""The metrics and health server: /metrics in Prometheus text format, /healthz, /readyz with its reason."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, generate_latest

from turnledger.errors import MetricsServeError
from turnledger.observability.server import MetricsPort, MetricsServer, Readiness, always_ready, serving


async def test_metrics_health_and_readiness_answer_what_the_service_says() -> None:
    registry = CollectorRegistry()
    counter = Counter("turnledger_test_things", "Things.", ["kind"], registry=registry)
    counter.labels("a").inc(3)
    waiting: list[str | None] = ["partitions [1] are restoring their state"]
    server = MetricsServer(0, lambda: waiting[0], registry=registry)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            metrics = await http.get("/metrics")
            assert metrics.status_code == 200
            assert metrics.headers["content-type"].startswith("text/plain; version=")
            assert 'turnledger_test_things_total{kind="a"} 3.0' in metrics.text.splitlines()
            health = await http.get("/healthz")
            assert (health.status_code, health.text) == (200, "ok\n")
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.text) == (
                503,
                "not ready: partitions [1] are restoring their state\n",
            )
            waiting[0] = None
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.text) == (200, "ready\n")
            missing = await http.get("/nothing")
            assert missing.status_code == 404
            post = await http.post("/metrics")
            assert post.status_code == 405
    finally:
        await server.close()


async def test_port_zero_serves_nothing() -> None:
    async with serving(0) as server:
        assert server is None


# ------------------------------------------------------------------------- the answers, exactly

PLAIN = "text/plain; charset=utf-8"


def test_respond_answers_each_path_with_its_status_type_and_body() -> None:
    registry = CollectorRegistry()
    Counter("turnledger_test_answers", "Answers.", registry=registry).inc(2)
    waiting: list[str | None] = ["the changelog of partition 3"]
    server = MetricsServer(0, lambda: waiting[0], host="127.0.0.1", registry=registry)
    status, ctype, body = server.respond("/metrics")
    assert (status, ctype) == (200, CONTENT_TYPE_LATEST)
    assert body == generate_latest(registry) and b"turnledger_test_answers_total 2.0\n" in body
    assert server.respond("/healthz") == (200, PLAIN, b"ok\n")
    assert server.respond("/readyz") == (503, PLAIN, b"not ready: the changelog of partition 3\n")
    waiting[0] = None
    assert server.respond("/readyz") == (200, PLAIN, b"ready\n")
    assert server.respond("/") == (404, PLAIN, b"not found: try /metrics, /healthz or /readyz\n")
    assert server.respond("/healthz/") == (404, PLAIN, b"not found: try /metrics, /healthz or /readyz\n")


def test_a_query_string_does_not_change_the_answer() -> None:
    server = MetricsServer(0, lambda: "x", host="127.0.0.1", registry=CollectorRegistry())
    assert server.respond("/healthz?verbose=1") == (200, PLAIN, b"ok\n")
    assert server.respond("/readyz?a=1?b=2") == (503, PLAIN, b"not ready: x\n")
    assert server.respond("/nothing?/healthz") == (
        404,
        PLAIN,
        b"not found: try /metrics, /healthz or /readyz\n",
    )


def test_metrics_default_to_the_default_registry_and_the_service_to_always_ready() -> None:
    server = MetricsServer(0, host="127.0.0.1")
    assert server.registry is REGISTRY
    assert server.ready is always_ready and always_ready() is None
    assert server.respond("/readyz") == (200, PLAIN, b"ready\n")


def test_the_host_is_the_one_given_then_the_variable_then_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNLEDGER_METRICS_HOST", raising=False)
    assert MetricsServer(9100).host == "127.0.0.1"
    monkeypatch.setenv("TURNLEDGER_METRICS_HOST", "0.0.0.0")
    assert MetricsServer(9100).host == "0.0.0.0"
    assert MetricsServer(9100, host="::1").host == "::1"
    monkeypatch.setenv("TURNLEDGER_METRICS_HOST", "")
    assert MetricsServer(9100).host == "127.0.0.1"
    assert MetricsServer(9100).port == 9100


def test_the_metrics_port_option_has_its_flag_variable_range_and_help() -> None:
    info = MetricsPort.__metadata__[0]
    assert (info.default, *info.param_decls) == ("--metrics-port",)  # under Annotated, `default` is the flag
    assert (info.envvar, info.min, info.max) == ("TURNLEDGER_METRICS_PORT", 0, 65535)
    assert info.help == (
        "Serve Prometheus metrics on /metrics, liveness on /healthz and readiness on /readyz on this port "
        "(0: off). Binds 127.0.0.1, or $TURNLEDGER_METRICS_HOST (e.g. 0.0.0.0 in a container)."
    )


# ------------------------------------------------------------------- one connection, over fakes


class ScriptedReader:
    """The lines a client sends; reading past them: a client that sends nothing more (the read times out)."""

    def __init__(self, *lines: bytes) -> None:
        self.lines = list(lines)

    async def readline(self) -> bytes:
        if not self.lines:
            raise TimeoutError
        return self.lines.pop(0)


class RecordingWriter:
    def __init__(self, closing_error: BaseException | None = None) -> None:
        self.written = b""
        self.drained_with = b""
        self.closed = False
        self.closing_error = closing_error

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        self.drained_with = self.written

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        assert self.closed
        if self.closing_error is not None:
            raise self.closing_error


async def _exchange(*lines: bytes, ready: Readiness = always_ready) -> RecordingWriter:
    server = MetricsServer(0, ready, host="127.0.0.1", registry=CollectorRegistry())
    writer = RecordingWriter()
    await server._serve(ScriptedReader(*lines), writer)  # type: ignore[arg-type]
    assert writer.closed
    return writer


def _answer(status: str, body: bytes, *, length: int | None = None) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body) if length is None else length}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


async def test_a_get_is_answered_whole_and_drained_after_the_headers_blank_line() -> None:
    writer = await _exchange(b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n", b"Accept: */*\r\n", b"\r\n")
    assert writer.written == _answer("200 OK", b"ok\n")
    assert writer.drained_with == writer.written


async def test_a_bare_newline_also_ends_the_headers() -> None:
    writer = await _exchange(b"GET /healthz HTTP/1.1\n", b"Host: x\n", b"\n")
    assert writer.written == _answer("200 OK", b"ok\n")


async def test_a_client_that_closes_after_its_headers_is_answered() -> None:
    writer = await _exchange(b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n", b"")
    assert writer.written == _answer("200 OK", b"ok\n")


async def test_a_request_line_without_a_version_is_answered() -> None:
    writer = await _exchange(b"GET /healthz\r\n", b"\r\n")
    assert writer.written == _answer("200 OK", b"ok\n")


async def test_head_gets_the_headers_of_the_answer_without_its_body() -> None:
    writer = await _exchange(b"HEAD /readyz HTTP/1.1\r\n", b"\r\n", ready=lambda: "restoring")
    assert writer.written == _answer("503 Service Unavailable", b"", length=len(b"not ready: restoring\n"))


async def test_each_status_has_its_reason_phrase() -> None:
    not_found = await _exchange(b"GET /nothing HTTP/1.1\r\n", b"\r\n")
    assert not_found.written == _answer("404 Not Found", b"not found: try /metrics, /healthz or /readyz\n")
    waiting = await _exchange(b"GET /readyz HTTP/1.1\r\n", b"\r\n", ready=lambda: "restoring")
    assert waiting.written == _answer("503 Service Unavailable", b"not ready: restoring\n")


@pytest.mark.parametrize(
    "request_line",
    [
        b"POST /healthz HTTP/1.1\r\n",
        b"DELETE /metrics HTTP/1.1\r\n",
        b"GET\r\n",
        b"\r\n",
        b"get /healthz HTTP/1.1\r\n",
    ],
    ids=["post", "delete", "no-path", "empty", "lower-case"],
)
async def test_anything_but_a_get_or_head_of_a_path_is_refused(request_line: bytes) -> None:
    writer = await _exchange(request_line, b"\r\n")
    assert writer.written == _answer("405 Method Not Allowed", b"only GET\n")


async def test_the_request_line_is_read_as_latin_1() -> None:
    writer = await _exchange(b"GET /caf\xe9 HTTP/1.1\r\n", b"\r\n")
    assert writer.written == _answer("404 Not Found", b"not found: try /metrics, /healthz or /readyz\n")


async def test_every_read_waits_at_most_ten_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts: list[float | None] = []
    wait_for = asyncio.wait_for

    async def recording_wait_for(awaitable: Awaitable[bytes], timeout: float | None) -> bytes:
        timeouts.append(timeout)
        return await wait_for(awaitable, timeout)

    monkeypatch.setattr(asyncio, "wait_for", recording_wait_for)
    await _exchange(b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n")
    assert timeouts == [10, 10, 10]


async def test_a_client_that_never_finishes_its_headers_is_closed_unanswered() -> None:
    writer = await _exchange(b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n")
    assert writer.written == b""


@pytest.mark.parametrize(
    "error",
    [ConnectionResetError("reset"), asyncio.IncompleteReadError(b"GE", 10)],
    ids=["reset", "cut-short"],
)
async def test_a_connection_lost_while_reading_is_closed_quietly(error: BaseException) -> None:
    class FailingReader:
        async def readline(self) -> bytes:
            raise error

    server = MetricsServer(0, host="127.0.0.1", registry=CollectorRegistry())
    writer = RecordingWriter()
    await server._serve(FailingReader(), writer)  # type: ignore[arg-type]
    assert (writer.written, writer.closed) == (b"", True)


async def test_a_connection_lost_while_closing_is_no_error() -> None:
    server = MetricsServer(0, host="127.0.0.1", registry=CollectorRegistry())
    writer = RecordingWriter(closing_error=BrokenPipeError("gone"))
    await server._serve(ScriptedReader(b"GET /healthz HTTP/1.1\r\n", b"\r\n"), writer)  # type: ignore[arg-type]
    assert writer.written == _answer("200 OK", b"ok\n")


# ---------------------------------------------------------------------- the server's life, on loopback


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _get(port: int, path: str, host: str = "127.0.0.1") -> bytes:
    async with asyncio.timeout(5):  # a server that never answers fails the test instead of hanging it
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        answer = await reader.read()
        writer.close()
        await writer.wait_closed()
    return answer


async def test_start_binds_the_host_and_port_given_and_logs_where(caplog: pytest.LogCaptureFixture) -> None:
    port = _free_port()
    server = MetricsServer(port, lambda: "later", host="127.0.0.1", registry=CollectorRegistry())
    with caplog.at_level(logging.INFO, logger="turnledger.observability.server"):
        await server.start()
    try:
        assert server.port == port
        assert await _get(port, "/readyz") == _answer("503 Service Unavailable", b"not ready: later\n")
        assert [r.getMessage() for r in caplog.records] == [
            f"metrics on http://127.0.0.1:{port}/metrics (health: /healthz, /readyz)"
        ]
    finally:
        await server.close()


async def test_start_binds_only_the_host_given() -> None:
    server = MetricsServer(0, host="127.0.0.2", registry=CollectorRegistry())
    await server.start()
    try:
        assert await _get(server.port, "/healthz", host="127.0.0.2") == _answer("200 OK", b"ok\n")
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", server.port)
    finally:
        await server.close()


async def test_port_zero_to_start_is_the_port_the_system_chose() -> None:
    server = MetricsServer(0, host="127.0.0.1", registry=CollectorRegistry())
    await server.start()
    try:
        assert server.port > 0
        assert await _get(server.port, "/healthz") == _answer("200 OK", b"ok\n")
    finally:
        await server.close()


async def test_a_closed_server_refuses_connections_and_closes_again_quietly() -> None:
    server = MetricsServer(0, host="127.0.0.1", registry=CollectorRegistry())
    await server.close()  # never started: nothing to close
    await server.start()
    port = server.port
    await server.close()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    await server.close()


async def test_serving_a_port_runs_a_server_with_the_services_readiness_for_the_block() -> None:
    port = _free_port()
    async with serving(port, lambda: "partitions [2]") as server:
        assert server is not None and server.port == port
        assert await _get(port, "/readyz") == _answer(
            "503 Service Unavailable", b"not ready: partitions [2]\n"
        )
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_serving_a_port_is_always_ready_unless_told() -> None:
    port = _free_port()
    async with serving(port) as server:
        assert server is not None
        assert await _get(port, "/readyz") == _answer("200 OK", b"ready\n")


async def test_serving_no_port_serves_nothing() -> None:
    async with serving(None) as server:
        assert server is None


async def test_a_port_already_taken_is_a_metrics_serve_error_saying_what_to_change() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = MetricsServer(port, host="127.0.0.1", registry=CollectorRegistry())
        with pytest.raises(MetricsServeError) as caught:
            await asyncio.wait_for(server.start(), 10)
    assert str(caught.value) == (
        f"cannot serve metrics on 127.0.0.1:{port} (error while attempting to bind on address "
        f"('127.0.0.1', {port}): address already in use): pick another --metrics-port "
        "($TURNLEDGER_METRICS_PORT, 0: off) or host ($TURNLEDGER_METRICS_HOST)"
    )
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.parametrize(
    ("host", "why"), [("not..a..host", "label empty or too long"), ("k" * 64, "label too long")]
)
async def test_a_host_the_resolver_cannot_encode_is_a_metrics_serve_error_saying_what_to_change(
    host: str, why: str
) -> None:
    """The `idna` codec's `UnicodeError` (a label empty or longer than 63) was a traceback, exit 1, in every
    service given TURNLEDGER_METRICS_HOST so."""
    server = MetricsServer(_free_port(), host=host, registry=CollectorRegistry())
    with pytest.raises(MetricsServeError) as caught:
        await asyncio.wait_for(server.start(), 10)
    assert str(caught.value) == (
        f"cannot serve metrics on {host}:{server.port} (encoding with 'idna' codec failed (UnicodeError: "
        f"{why})): pick another --metrics-port ($TURNLEDGER_METRICS_PORT, 0: off) or host "
        "($TURNLEDGER_METRICS_HOST)"
    )


def test_the_commands_say_it_in_one_line_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnledger import cli

    def taken() -> None:
        raise MetricsServeError("cannot serve metrics on 127.0.0.1:1 (in use): pick another")

    monkeypatch.setattr(cli, "app", taken)
    monkeypatch.setattr(cli, "_register", lambda: None)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
