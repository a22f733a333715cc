"""How the long-running commands log (`process`, `project`, `worker`, `tool-executor`, `serve`): one
format, the level `--log-level` names, and the Kafka client's lines that the command's own restate kept
for DEBUG."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

KAFKA_CLIENT_LOGGER = "aiokafka"

RESTATED_CLIENT_LINES = ('Unable connect to "',)
"""The starts of aiokafka's messages (as logged, before their arguments) that a command's own lines say
better: its failed bootstrap connection (`Unable connect to "host:port": [Errno 111] ...`, logged at
ERROR for each host), which ends in the `KafkaConnectionError` that the command's wait and its final
outage line name, with what it tried and how to fix it. Logged at DEBUG instead, so said only when
`--log-level DEBUG` asks for it. aiokafka's other lines (a lost connection to a known node, a
coordinator moving) are kept: nothing of ours restates them."""


class RestatedClientLines(logging.Filter):
    """On aiokafka's logger: the `RESTATED_CLIENT_LINES` become DEBUG records, passed on only when that
    logger is enabled for DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith(RESTATED_CLIENT_LINES)):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def configure(level: str, log_format: str = FORMAT) -> None:
    """Log to stderr at `level` (a name `cli_checks.log_level` took) in `log_format`, the Kafka client's
    restated lines at DEBUG."""
    logging.basicConfig(level=level.upper(), format=log_format)
    client = logging.getLogger(KAFKA_CLIENT_LOGGER)
    if not any(isinstance(f, RestatedClientLines) for f in client.filters):
        client.addFilter(RestatedClientLines())
