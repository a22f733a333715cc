"""Every command ends an outage it gave up on (Kafka or Redis unreachable for longer than --max-outage,
or at all for a one-shot command) with one line, `turnledger COMMAND: MESSAGE`, exit 2; and none writes
aiokafka's own line for the bootstrap connection it could not make (`Unable connect to "host:port":
...`), which that line restates with what was tried and how to fix it, unless --log-level DEBUG asks for
it (`cli_logging`). `project`, `history`, the replay commands and `serve` said the message alone, and
the long-running commands wrote aiokafka's ERROR line before each of their own.

Each command runs in a subprocess against 127.0.0.1:1, where nothing listens."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from turnledger.cli_logging import KAFKA_CLIENT_LOGGER, RestatedClientLines

REPO = Path(__file__).resolve().parents[2]
DOWN = "127.0.0.1:1"
REDIS_DOWN = f"redis://{DOWN}/0"
KAFKA_LINE = f"Kafka is not reachable at '{DOWN}' while trying to "
FIXES = (
    " to a reachable Redis, e.g. redis://127.0.0.1:6379/0.",
    " to a reachable broker list host:port[,host:port].",
)
"""How each outage line ends: the fix it names."""
REFUSED = "refused the connection (nothing listens on that port)"
REDIS_LINE = f"Redis is not reachable at '{REDIS_DOWN}' (ConnectionError: Error 111 connecting to {DOWN}."

COMMANDS = [
    (["process", "--bootstrap", DOWN, "--max-outage", "0"], "process", KAFKA_LINE),
    (["worker", "--bootstrap", DOWN, "--max-outage", "0", "--journal-dir", "{tmp}"], "worker", KAFKA_LINE),
    (["tool-executor", "--bootstrap", DOWN, "--max-outage", "0"], "tool-executor", KAFKA_LINE),
    (["project", "--redis-url", REDIS_DOWN, "--bootstrap", DOWN, "--max-outage", "0"], "project", REDIS_LINE),
    (["project", "--redis-url", REDIS_DOWN, "--bootstrap", DOWN, "--until-caught-up"], "project", REDIS_LINE),
    (
        ["serve", "--port", "0", "--redis-url", REDIS_DOWN, "--bootstrap", DOWN, "--max-outage", "0"],
        "serve",
        REDIS_LINE,
    ),
    (["history", "c", "--redis-url", REDIS_DOWN], "history", REDIS_LINE),
    (["metrics", "--bootstrap", DOWN], "metrics", KAFKA_LINE),
    (["replay", "audit", "--bootstrap", DOWN], "replay audit", KAFKA_LINE),
    (["legacy", "record", "{tmp}/legacy.jsonl", "--bootstrap", DOWN], "legacy record", KAFKA_LINE),
]


def _run(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`turnledger ARGS` (`{tmp}` in them: `tmp_path`) on an 80-column console, without the machine's
    stack variables."""
    (tmp_path / "legacy.jsonl").write_text('{"conversationId": "c", "operationId": "o", "response": "x"}\n')
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    for name in ("TURNLEDGER_METRICS_PORT", "KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "turnledger", *(arg.format(tmp=tmp_path) for arg in args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "command", "line"), COMMANDS, ids=[" ".join(args[:2]).split(" -")[0] for args, _, _ in COMMANDS]
)
def test_the_outage_given_up_on_is_the_commands_one_line_without_the_clients_own(
    tmp_path: Path, args: list[str], command: str, line: str
) -> None:
    done = _run(tmp_path, args)
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"turnledger {command}: {line}"), done.stderr
    assert last.endswith(FIXES), "one line, not cut at the console's width"
    if line == KAFKA_LINE:  # why, which aiokafka's line (now DEBUG) said and its error does not
        assert f"(KafkaConnectionError: no broker answered: {DOWN}: {REFUSED}). " in last
    assert "aiokafka" not in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_the_projector_says_what_it_follows_in_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, ["project", "--redis-url", REDIS_DOWN, "--bootstrap", DOWN, "--max-outage", "0"])
    assert done.stderr.splitlines()[0] == (
        f"projecting {DOWN} -> {REDIS_DOWN} (keys 'tl:') in consumer group 'turnledger-projector'; "
        "Ctrl-C to stop"
    )


BOOTSTRAP_FAILURE = 'Unable connect to "%s:%s": %s'


@pytest.fixture
def client_level() -> Iterator[Callable[[int], None]]:
    """Sets aiokafka's logger's level (through `setLevel`, which empties its cache of answers), put
    back after the test."""
    logger = logging.getLogger(KAFKA_CLIENT_LOGGER)
    before = logger.level
    yield logger.setLevel
    logger.setLevel(before)


def _record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(KAFKA_CLIENT_LOGGER, level, "client.py", 216, msg, ("k", 9092, "refused"), None)


@pytest.mark.parametrize(("level", "passed"), [(logging.INFO, False), (logging.DEBUG, True)])
def test_the_clients_bootstrap_failure_is_a_debug_line(
    client_level: Callable[[int], None], level: int, passed: bool
) -> None:
    client_level(level)
    record = _record(BOOTSTRAP_FAILURE)
    assert RestatedClientLines().filter(record) is passed
    assert (record.levelno, record.levelname, record.getMessage()) == (
        logging.DEBUG,
        "DEBUG",
        'Unable connect to "k:9092": refused',
    )


@pytest.mark.parametrize(
    "msg", ["Unable connect to node with id %s: %s", 'Unable to request metadata from "%s:%s": %s', "%s%s%s"]
)
def test_the_clients_other_lines_pass_as_they_are(client_level: Callable[[int], None], msg: str) -> None:
    client_level(logging.INFO)
    record = _record(msg, logging.WARNING)
    assert RestatedClientLines().filter(record) is True
    assert (record.levelno, record.levelname) == (logging.WARNING, "WARNING")


NOT_SET = [
    (["project"], "project"),
    (["history", "c"], "history"),
    (["status", "op"], "status"),
    (["serve"], "serve"),
]


@pytest.mark.parametrize(("args", "command"), NOT_SET, ids=[command for _, command in NOT_SET])
def test_a_missing_redis_url_is_said_by_the_command_in_one_line(
    monkeypatch: pytest.MonkeyPatch, args: list[str], command: str
) -> None:
    """As the worker says a missing bootstrap: `turnledger worker: no Kafka bootstrap servers. ...`."""
    from typer.testing import CliRunner

    from turnledger.cli import _register, app

    if not app.registered_groups:
        _register()
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"turnledger {command}: REDIS_URL is not set. Set REDIS_URL or pass --redis-url; for a local stack "
        "run `turnledger dev up` and export the variables it prints.\n",
    )
