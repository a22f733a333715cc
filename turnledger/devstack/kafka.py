"""Format and start a single-node KRaft (combined broker+controller) Kafka from the cached jars.

Ready means more than "port open": a topic can be created and a transactional producer can initialise.
That also creates `__transaction_state` up front, so the first test does not pay for it.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from aiokafka import AIOKafkaProducer, TopicPartition

from turnledger.devstack import procs
from turnledger.devstack.aio import run_sync
from turnledger.devstack.errors import DevstackError, PortInUse, ServiceNotReady
from turnledger.devstack.jars import KafkaJars, require_java
from turnledger.devstack.kafka_admin import create_topic
from turnledger.devstack.ports import free_port, port_is_free, tcp_open

READY_TOPIC = "__turnledger_ready"


@dataclass(frozen=True)
class KafkaProcess:
    pid: int
    bootstrap: str
    log: Path
    marker: str
    version: str


def cluster_id() -> str:
    """Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _template(name: str) -> str:
    return resources.files("turnledger.devstack").joinpath(name).read_text()


def render_config(workdir: Path, broker_port: int, controller_port: int) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "server.properties"
    props.write_text(
        Template(_template("server.properties")).substitute(
            broker_port=broker_port, controller_port=controller_port, log_dirs=workdir / "data"
        )
    )
    (workdir / "log4j2.properties").write_text(_template("log4j2.properties"))
    return props


BROKER_TUNING = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""A dev broker lives minutes on a small shared box: there, C2's compiling and G1's concurrent marking
took as much CPU as the broker's requests (bench/history.md, session 21: 18 of 37 s in a throughput
run). C1 only and the serial collector halve its CPU; its GC pauses stayed under 50 ms. A production
broker is tuned by whoever runs it; `TURNLEDGER_KAFKA_JVM_OPTS` takes other flags, a collector too."""
TOOL_TUNING = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""The one-shot StorageTool only needs to start fast: C1-only + serial GC halves its run time on 2 cores."""


def jvm_args(java: str, jars: KafkaJars, workdir: Path, heap: str, tuning: tuple[str, ...]) -> list[str]:
    extra = os.environ.get("TURNLEDGER_KAFKA_JVM_OPTS", "").split()
    return [
        java,
        "-Xms128m",
        f"-Xmx{heap}",
        *tuning_with(tuning, extra),
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={workdir / 'logs'}",
        "-cp",
        jars.classpath,
    ]


def tuning_with(tuning: tuple[str, ...], extra: list[str]) -> list[str]:
    """`tuning` then the user's `extra` flags, where a later flag wins; but the JVM refuses to start
    when two flags select a garbage collector ("Multiple garbage collectors selected"), so a
    collector chosen in `extra` replaces the one chosen in `tuning`."""
    if any(_selects_collector(flag) for flag in extra):
        tuning = tuple(flag for flag in tuning if not _selects_collector(flag))
    return [*tuning, *extra]


COLLECTOR_FLAGS = frozenset(
    f"-XX:+Use{name}GC" for name in ("Serial", "Parallel", "G1", "Z", "Shenandoah", "Epsilon")
)
"""The HotSpot flags that each select a garbage collector: at most one may be given."""


def _selects_collector(flag: str) -> bool:
    return flag in COLLECTOR_FLAGS


def _pick_ports(broker_port: int | None, controller_port: int | None) -> tuple[int, int]:
    for what, port in (("the Kafka broker listener", broker_port), ("the KRaft controller", controller_port)):
        if port is not None and not port_is_free(port):
            raise PortInUse(what, port)
    broker = broker_port or free_port()
    controller = controller_port or free_port()
    while controller == broker:
        controller = free_port()
    return broker, controller


def format_storage(base: list[str], props: Path, log: Path) -> None:
    with open(log, "ab") as out:
        rc = subprocess.run(
            [
                *base,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id(),
                "-c",
                str(props),
                "--standalone",
                "--ignore-formatted",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    if rc != 0:
        raise DevstackError(
            f"Formatting Kafka storage failed (kafka.tools.StorageTool exit {rc}); log: {log}\n"
            f"--- last lines of {log} ---\n{procs.tail(log)}"
        )


async def _probe(bootstrap: str) -> None:
    await create_topic(bootstrap, READY_TOPIC, exist_ok=True)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=READY_TOPIC, request_timeout_ms=10000
    )
    await producer.start()
    try:
        async with producer.transaction():
            meta = await producer.send_and_wait(READY_TOPIC, b"ready")
            await producer.send_offsets_to_transaction(
                {TopicPartition(READY_TOPIC, meta.partition): meta.offset + 1}, READY_TOPIC
            )
    finally:
        await producer.stop()


def probe_ready(bootstrap: str, timeout_s: float) -> None:
    """Raise unless a topic can be created and a transactional producer can initialise and commit.

    The committed transaction also carries a group offset, which makes the broker create
    `__consumer_offsets` and `__transaction_state` now rather than during the first test."""
    run_sync(asyncio.wait_for(_probe(bootstrap), timeout=timeout_s))


def _wait_ready(proc: KafkaProcess, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    reason = "the listener never accepted a TCP connection"
    while time.monotonic() < deadline:
        if not procs.is_alive(proc.pid):
            log_text = procs.tail(proc.log, 200)
            if "Address already in use" in log_text:
                raise PortInUse("the Kafka broker or controller", port)
            raise ServiceNotReady("Kafka", timeout_s, proc.log, procs.tail(proc.log), "the JVM exited")
        if tcp_open("127.0.0.1", port):
            try:
                probe_ready(proc.bootstrap, max(1.0, min(30.0, deadline - time.monotonic())))
                return
            except Exception as exc:
                reason = f"last readiness probe failed: {type(exc).__name__}: {exc}"
        time.sleep(0.25)
    raise ServiceNotReady("Kafka", timeout_s, proc.log, procs.tail(proc.log), reason)


def start_kafka(
    jars: KafkaJars,
    workdir: Path,
    pidfile: Path,
    heap: str = "512m",
    timeout_s: float = 120.0,
    broker_port: int | None = None,
    controller_port: int | None = None,
) -> KafkaProcess:
    """Format (idempotently) and start the broker detached; return once it is ready or raise."""
    java = require_java()
    broker, controller = _pick_ports(broker_port, controller_port)
    props = render_config(workdir, broker, controller)
    log = workdir / "kafka.log"
    if not (
        workdir / "data" / "meta.properties"
    ).exists():  # formatted already: a restart keeps its cluster id
        format_storage(jvm_args(java, jars, workdir, heap, TOOL_TUNING), props, log)
    broker_argv = [*jvm_args(java, jars, workdir, heap, BROKER_TUNING), "kafka.Kafka", str(props)]
    pid = procs.spawn_detached(broker_argv, log, pidfile, cwd=workdir)
    proc = KafkaProcess(pid, f"127.0.0.1:{broker}", log, str(props), jars.version)
    try:
        _wait_ready(proc, broker, timeout_s)
    except BaseException:
        procs.stop_pidfile(pidfile, proc.marker, grace_s=5)
        raise
    return proc
