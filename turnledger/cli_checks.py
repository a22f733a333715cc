"""Checks of command-line values that several commands share, as typer callbacks: a bad value is a
usage error (exit 2) naming the option, never a traceback later; and the commands' shared quieting of
client logs."""

from __future__ import annotations

import logging
import math
import re
import socket
from pathlib import Path
from typing import Annotated

import typer
from aiokafka.conn import get_ip_port_afi

from turnledger.host_names import is_host_name
from turnledger.topology import Stream, Topics

MAX_PORT = 65_535

LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")

WORKER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A worker's id names its journal file (`<journal-dir>/<id>.jsonl`) and the leases it holds: an empty
id would own nothing (the fold checks no lease of an empty owner) and a path would put the journal
elsewhere."""


SESSION_TIMEOUT_MAX_MS = 2**31 - 1
"""The JoinGroup request carries the session timeout as a signed 32-bit integer."""

SessionTimeoutMs = Annotated[
    int,
    typer.Option(
        "--session-timeout-ms",
        min=1,
        max=SESSION_TIMEOUT_MAX_MS,
        help="Consumer group: a member silent for this long is declared dead and its partitions move to "
        "the others. The broker refuses one outside its group.min.session.timeout.ms.."
        "group.max.session.timeout.ms (6000..1800000 by default).",
    ),
]
"""`--session-timeout-ms` of every consumer group (`worker`, `process`, `project`, `tool-executor`). The
broker's range is the broker's setting, which an operator may lower or raise (a test broker often lowers
the minimum), so no bound of it holds for every broker: only what no broker takes (below 1 ms, or more
than the request's 32 bits hold) is refused here. Each group's heartbeat must also be below it
(`kafka/group_timing.py`)."""


def finite(value: float) -> float:
    """A float option: a number, not `nan` or `inf`, which click's ranges let through (`nan` compares
    false with either bound) and which would fail later, or never, where the value is used."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value!r} is not a finite number")
    return value


def log_level(value: str) -> str:
    """`--log-level`: one of Python's level names, in any case; the name in capitals."""
    level = value.upper()
    if level not in LOG_LEVELS or not isinstance(logging.getLevelName(level), int):
        raise typer.BadParameter(f"{value!r} is not a logging level: use one of {', '.join(LOG_LEVELS)}")
    return level


LogLevel = Annotated[str, typer.Option(help="Python logging level.", callback=log_level)]
"""`--log-level` of the long-running commands (`cli_logging.configure`)."""


def worker_id(value: str) -> str:
    """`--worker-id` (and `--recorder-id`): letters, digits, `.`, `_` and `-`, at most 128."""
    if not WORKER_ID.fullmatch(value):
        raise typer.BadParameter(
            f"{value!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit, at most 128)"
        )
    return value


_USER_INFO = re.compile(r"[^,/@]*@")


def without_user_info(text: str) -> str:
    """`text` as a refusal shows it: what stands before an `@` (`user:password@` in a URL pasted as a
    broker list) as `***@`."""
    return _USER_INFO.sub("***@", text)


def bootstrap(value: str | None) -> str | None:
    """`--bootstrap` (or KAFKA_BOOTSTRAP_SERVERS): `host[:port]` entries as aiokafka reads them
    (`[v6]:port` for IPv6 literals), each port from 1 to 65535 and each host an IP address or a host
    name (`host_names.is_host_name`); unset passes (each command says how to set it). Checked here because the
    Kafka client parses it only as it connects, with a bare `ValueError` or `OverflowError`, and takes
    any text for a host: `PLAINTEXT://k:9092` (a listener as the broker's settings write it) was waited
    for as an outage for ever."""
    if value is None:
        return None
    for entry in value.split(","):
        try:
            host, port, family = get_ip_port_afi(entry)
            read = bool(host) and 0 < port <= MAX_PORT
        except ValueError:
            read = False
        if not read:
            raise _bootstrap_refusal(entry, value, f"each port from 1 to {MAX_PORT}")
        if family == socket.AF_UNSPEC and not is_host_name(host):
            raise _bootstrap_refusal(
                entry, value, "each host a host name or IP address (no scheme, user or path)"
            )
    return value


def _bootstrap_refusal(entry: str, value: str, rule: str) -> typer.BadParameter:
    shown_entry, shown_value = without_user_info(entry.strip()), without_user_info(value)
    return typer.BadParameter(f"{shown_entry!r} in {shown_value!r}: expected host:port[,host:port], {rule}")


TOPIC_NAME_MAX = 249
"""Kafka's longest topic name (`org.apache.kafka.common.internals.Topic`)."""
TOPIC_PREFIX_CHARACTERS = re.compile(r"[A-Za-z0-9._-]*")
"""What a Kafka topic name may hold; the prefix is the start of every name."""
TOPIC_PREFIX_MAX = TOPIC_NAME_MAX - max(len(Topics().name(stream)) for stream in Stream)


def topic_prefix(value: str) -> str:
    """`--topic-prefix`: characters a topic name takes, short enough for the longest of ours. Anything
    else makes names no broker creates: the processor and the projector waited for ever for topics
    that cannot exist, `--create-topics` included."""
    if not TOPIC_PREFIX_CHARACTERS.fullmatch(value) or len(value) > TOPIC_PREFIX_MAX:
        raise typer.BadParameter(
            f"{value!r}: a topic name takes letters, digits, '.', '_' and '-' only, and a prefix at most "
            f"{TOPIC_PREFIX_MAX} of them (Kafka's {TOPIC_NAME_MAX} less our longest name)"
        )
    return value


MANIFEST_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
"""A manifest's digest as the ledger writes it (`model/canonical.py`) and `status` shows it."""


def manifest_digest(value: str | None) -> str | None:
    """`--digest`: `sha256:` and 64 lowercase hex digits. Anything else matches no manifest, which was
    said only after reading three topics to their end."""
    if value is not None and not MANIFEST_DIGEST.fullmatch(value):
        raise typer.BadParameter(f"{value!r}: expected sha256: and 64 lowercase hex digits")
    return value


def made_directory(path: Path, option: str) -> Path:
    """`path` made a directory (with its parents) for `option`, or a usage error saying why not (it is a
    file, it cannot be written)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot make {path} a directory: {exc}", param_hint=option) from exc
    return path


def key_prefix(value: str) -> str:
    """`--key-prefix`: not empty, or the projection's keys would sit at the top of the database among
    any other application's, and a rebuild would have no prefix to drop by."""
    if not value:
        raise typer.BadParameter("must not be empty (the default is 'tl:')")
    return value


def quiet_kafka_client_logs() -> None:
    """In a one-shot command that configured no logging, aiokafka's own lines (a refused connection it
    retries) would reach stderr through Python's last-resort handler before the command's one line."""
    if not logging.getLogger().handlers:
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
