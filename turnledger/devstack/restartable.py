"""A private Kafka broker and Redis on fixed ports that can be stopped and started again, for outage tests.

The shared stack (`session.py`) must never be restarted under other people's tests. These start
their own processes under a work directory, on ports chosen once, so that clients configured with
the address before the service runs (a service started while Kafka is down) and clients that ride
out a restart find it again at the same place. The broker keeps its data across restarts (its
storage is formatted once); Redis runs without persistence, as the devstack's does, so a restarted
Redis is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from turnledger.devstack import procs
from turnledger.devstack.jars import KafkaJars, ensure_jars
from turnledger.devstack.kafka import ExtraListener, KafkaProcess, start_kafka
from turnledger.devstack.ports import PortSource, free_port
from turnledger.devstack.redis_server import RedisProcess, start_redis
from turnledger.devstack.settings import Settings


class RestartableKafka:
    def __init__(
        self,
        workdir: Path,
        settings: Settings | None = None,
        extra_listeners: Sequence[ExtraListener] = (),
        port: PortSource = free_port,
    ) -> None:
        """`extra_listeners`: listeners beyond the devstack's own (a Kerberos one), each on its port;
        `port`: where its five ports come from (`ports.PortPool.take` for a range no one else takes)."""
        self.workdir = workdir
        self.settings = settings or Settings.from_env()
        self.extra_listeners = tuple(extra_listeners)
        picked: list[int] = []
        while len(picked) < 5:
            candidate = port()
            if candidate not in picked:
                picked.append(candidate)
        self.broker_port, self.controller_port, self.secure_port, self.mtls_port, self.oauth_port = picked
        self.bootstrap = f"127.0.0.1:{self.broker_port}"
        self._jars: KafkaJars | None = None
        self._process: KafkaProcess | None = None

    @property
    def pidfile(self) -> Path:
        return self.workdir / "kafka.pid"

    @property
    def running(self) -> bool:
        return self._process is not None and procs.owns(self._process.pid, self._process.marker)

    def start(self) -> None:
        """Start (format on first use) and return once a transactional producer can commit."""
        self._jars = self._jars or ensure_jars(self.settings)
        self._process = start_kafka(
            self._jars,
            self.workdir / "kafka",
            self.pidfile,
            heap=self.settings.kafka_heap,
            timeout_s=self.settings.ready_timeout_s,
            broker_port=self.broker_port,
            controller_port=self.controller_port,
            secure_port=self.secure_port,
            mtls_port=self.mtls_port,
            oauth_port=self.oauth_port,
            extra_listeners=self.extra_listeners,
        )

    def stop(self) -> None:
        """SIGTERM (a clean broker shutdown), SIGKILL after the grace period; the data stays."""
        if self._process is not None:
            procs.stop_pidfile(self.pidfile, self._process.marker)
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def crash_restart(self) -> None:
        """SIGKILL the broker (no shutdown sequence) and start it again; the data stays."""
        if self._process is not None:
            procs.kill_pidfile(self.pidfile, self._process.marker)
            self._process = None
        self.start()

    def __enter__(self) -> RestartableKafka:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


class RestartableRedis:
    def __init__(self, workdir: Path, port: PortSource = free_port) -> None:
        """`port`: where its port comes from (`ports.PortPool.take` for a range no one else takes)."""
        self.workdir = workdir
        self.port = port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: RedisProcess | None = None

    @property
    def pidfile(self) -> Path:
        return self.workdir / "redis.pid"

    def start(self) -> None:
        self._process = start_redis(self.workdir / "redis", self.pidfile, port=self.port)

    def stop(self) -> None:
        if self._process is not None:
            procs.stop_pidfile(self.pidfile, self._process.marker, grace_s=5)
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> RestartableRedis:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
