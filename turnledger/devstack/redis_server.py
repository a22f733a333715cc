"""Debian's `redis-server` on a free loopback port, without persistence: the projection is rebuildable."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from turnledger.devstack import procs
from turnledger.devstack.errors import PortInUse, RedisServerMissing, ServiceNotReady
from turnledger.devstack.ports import free_port, port_is_free


@dataclass(frozen=True)
class RedisProcess:
    pid: int
    url: str
    log: Path
    marker: str


def start_redis(
    workdir: Path, pidfile: Path, port: int | None = None, timeout_s: float = 20.0
) -> RedisProcess:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerMissing()
    if port is not None and not port_is_free(port):
        raise PortInUse("redis-server", port)
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "redis.log"
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        str(workdir),
    ]
    pid = procs.spawn_detached(argv, log, pidfile, cwd=workdir)
    proc = RedisProcess(pid, f"redis://127.0.0.1:{port}/0", log, f"127.0.0.1:{port}")
    deadline = time.monotonic() + timeout_s
    reason = "no PING reply"
    while time.monotonic() < deadline:
        if not procs.is_alive(pid):
            reason = "redis-server exited"
            if "Address already in use" in procs.tail(log):
                procs.stop_pidfile(pidfile, proc.marker, grace_s=2)
                raise PortInUse("redis-server", port)
            break
        try:
            client = redis.Redis.from_url(proc.url, socket_timeout=1)
            try:
                if client.ping():
                    return proc
            finally:
                client.close()
        except redis.RedisError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        time.sleep(0.05)
    procs.stop_pidfile(pidfile, proc.marker, grace_s=2)
    raise ServiceNotReady("Redis", timeout_s, log, procs.tail(log), reason)
