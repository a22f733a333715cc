"""`turnledger demo --log-file`: the services' INFO lines go to the file, stderr keeps only warnings."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnledger.cli import _register, app
from turnledger.demo.cli import configure_logging


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {h: h.level for h in handlers}
    named = {name: logging.getLogger(name).level for name in ("aiokafka", "httpx")}
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    for handler, was in levels.items():
        handler.setLevel(was)
    for name, was in named.items():
        logging.getLogger(name).setLevel(was)


def test_the_log_file_gets_info_and_the_console_only_warnings(tmp_path: Path, root_logging: None) -> None:
    path = tmp_path / "demo.log"
    configure_logging(path)
    worker = logging.getLogger("turnledger.gateway.worker")
    worker.info("op-1: adopting abandoned work")
    worker.warning("op-2 generation 1: no verdict within 60.0s")
    logging.getLogger("httpx").info("HTTP Request: POST http://127.0.0.1/v1/messages")
    logging.getLogger("aiokafka").error("NotLeaderForPartitionError")
    for handler in logging.getLogger().handlers:
        handler.flush()
    lines = [line.split(" ", 2)[2] for line in path.read_text().splitlines()]
    assert lines == [
        "INFO turnledger.gateway.worker: op-1: adopting abandoned work",
        "WARNING turnledger.gateway.worker: op-2 generation 1: no verdict within 60.0s",
    ]
    consoles = [h for h in logging.getLogger().handlers if not isinstance(h, logging.FileHandler)]
    assert consoles and all(h.level == logging.WARNING for h in consoles)


def test_the_option_is_documented() -> None:
    if not app.registered_groups:
        _register()
    result = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--log-file" in result.output and "not final" in result.output
