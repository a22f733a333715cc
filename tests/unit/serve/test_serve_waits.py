"""`turnledger serve` waits at start for Redis, then for Kafka (`serve/cli.py`: `ride_out`), logging what
it waits for and how to fix it, as the other services do; `--max-outage S` bounds the wait (then the
outage's one line, `turnledger serve: ...`, and exit 2), and SIGTERM or Ctrl-C while it waits ends it
with 0, no traceback. It exited 2 at once when either was unreachable at start.

The command runs in a subprocess against 127.0.0.1:1 (nothing listens there); Kafka's wait needs a
Redis that answers, a fake one in a thread of this test (`fake_redis`: RESP3's HELLO, PING, +OK to
the rest)."""

from __future__ import annotations

import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOWN = "127.0.0.1:1"
REDIS_DOWN = f"redis://{DOWN}/0"
REDIS_FIX = (
    "Start the local stack with `turnledger dev up`, or set REDIS_URL (or --redis-url) to a reachable Redis, "
    "e.g. redis://127.0.0.1:6379/0."
)
KAFKA_FIX = (
    "Start the local stack with `turnledger dev up` and export KAFKA_BOOTSTRAP_SERVERS, or set "
    "KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) to a reachable broker list host:port[,host:port]."
)
WAITS_FOR_REDIS = f"WARNING turnledger.retry: waiting for Redis at {REDIS_DOWN} to serve the API (attempt 1, "
WAITS_FOR_KAFKA = (
    f"WARNING turnledger.retry: waiting for Kafka at {DOWN} to start serve's ingress producer (attempt 1, "
)


_REPLIES = {b"PING": b"+PONG\r\n", b"HELLO": b"%1\r\n$5\r\nproto\r\n:3\r\n"}
"""HELLO: the RESP3 handshake our clients open with, answered with the one field redis-py checks."""


class _RespHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while line := self.rfile.readline():
            if not line.startswith(b"*"):
                return
            words = []
            for _ in range(int(line[1:])):
                size = int(self.rfile.readline()[1:])
                words.append(self.rfile.read(size + 2)[:-2])
            self.wfile.write(_REPLIES.get(words[0].upper(), b"+OK\r\n"))


@pytest.fixture
def fake_redis() -> Iterator[str]:
    """The URL of a Redis that answers every command (enough for `connect`'s PING)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _RespHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{server.server_address[1]}/0"
    finally:
        server.shutdown()
        server.server_close()


class Serve:
    """`turnledger serve --port 0 ARGS` in a subprocess, its stderr in a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.stderr = tmp_path / "serve.err"
        self.stdout = tmp_path / "serve.out"
        env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000", "PYTHONUNBUFFERED": "1"}
        env.pop("TURNLEDGER_METRICS_PORT", None)
        with self.stderr.open("wb") as err, self.stdout.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "turnledger", "serve", "--port", "0", *args],
                cwd=REPO,
                stdout=out,
                stderr=err,
                env=env,
            )

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def wait_until(self, holds: Callable[[str], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not holds(self.err()):
            assert self.proc.poll() is None, (
                f"serve exited {self.proc.returncode} before {what}:\n{self.err()}"
            )
            assert time.monotonic() < deadline, f"no {what} after {timeout_s}s:\n{self.err()}"
            time.sleep(0.05)

    def exit_code(self, timeout_s: float = 60) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"serve did not exit within {timeout_s}s:\n{self.err()}") from None


def test_redis_unreachable_for_longer_than_max_outage_is_its_one_line_after_waiting(tmp_path: Path) -> None:
    serve = Serve(tmp_path, "--redis-url", REDIS_DOWN, "--bootstrap", DOWN, "--max-outage", "1")
    assert serve.exit_code() == 2, serve.err()
    said = serve.err()
    assert WAITS_FOR_REDIS in said
    assert (
        f"ERROR turnledger.retry: gave up waiting for Redis at {REDIS_DOWN} to serve the API after " in said
    )
    last = said.splitlines()[-1]
    assert last.startswith(
        f"turnledger serve: Redis is not reachable at '{REDIS_DOWN}' (ConnectionError: Error 111 connecting"
    )
    assert last.endswith(REDIS_FIX)
    assert "Traceback" not in said
    assert "waiting for Kafka" not in said
    assert serve.stdout.read_text() == ""


def test_kafka_unreachable_for_longer_than_max_outage_is_its_one_line_after_waiting(
    tmp_path: Path, fake_redis: str
) -> None:
    serve = Serve(tmp_path, "--redis-url", fake_redis, "--bootstrap", DOWN, "--max-outage", "1")
    assert serve.exit_code() == 2, serve.err()
    said = serve.err()
    assert WAITS_FOR_KAFKA in said
    assert "waiting for Redis" not in said
    last = said.splitlines()[-1]
    assert last.startswith(
        f"turnledger serve: Kafka is not reachable at '{DOWN}' while trying to start the ingress producer "
        "(KafkaConnectionError: "
    )
    assert last.endswith(KAFKA_FIX)
    assert "Traceback" not in said
    assert "aiokafka" not in said, "the Kafka client's own line for the connection it could not make"
    assert serve.stdout.read_text() == ""


def test_log_level_debug_shows_the_kafka_clients_own_line_for_the_connection_it_could_not_make(
    tmp_path: Path, fake_redis: str
) -> None:
    args = ["--redis-url", fake_redis, "--bootstrap", DOWN, "--max-outage", "0", "--log-level", "debug"]
    serve = Serve(tmp_path, *args)
    assert serve.exit_code() == 2, serve.err()
    assert f'DEBUG aiokafka: Unable connect to "{DOWN}": [Errno 111] Connect call failed' in serve.err()
    assert serve.err().splitlines()[-1].startswith(f"turnledger serve: Kafka is not reachable at '{DOWN}'")


@pytest.mark.parametrize(
    ("down", "waits", "sig"),
    [("redis", WAITS_FOR_REDIS, signal.SIGTERM), ("kafka", WAITS_FOR_KAFKA, signal.SIGINT)],
    ids=["redis-down-SIGTERM", "kafka-down-SIGINT"],
)
def test_a_signal_while_it_waits_ends_it_with_0_and_no_traceback(
    tmp_path: Path, fake_redis: str, down: str, waits: str, sig: signal.Signals
) -> None:
    redis_url = REDIS_DOWN if down == "redis" else fake_redis
    serve = Serve(tmp_path, "--redis-url", redis_url, "--bootstrap", DOWN)
    serve.wait_until(lambda said: waits in said, "wait logged")
    serve.proc.send_signal(sig)
    assert serve.exit_code(timeout_s=20) == 0, serve.err()
    said = serve.err()
    assert f"INFO turnledger.shutdown: received {sig.name}: turnledger serve is stopping" in said
    assert "Traceback" not in said
    assert serve.stdout.read_text() == ""
