"""Debian's `prometheus` on a free loopback port, scraping whatever the targets directory lists.

The stack starts it when the binary is present (`make` installs the package like redis-server). It
scrapes every second (`scrape_interval: 1s`) the targets of `file_sd` JSON files in its targets
directory, which it re-reads when they change: a test or an operator drops
`[{"targets": ["127.0.0.1:PORT"], "labels": {"service": "processor"}}]` there and the next scrapes
include it. Its HTTP API (`/api/v1/query`) is what the tests compare with `turnledger metrics`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from turnledger.devstack import procs
from turnledger.devstack.errors import PortInUse, PrometheusMissing, ServiceNotReady
from turnledger.devstack.ports import free_port, port_is_free

ENV_PROMETHEUS = "TURNLEDGER_PROMETHEUS"
"""Set to 0 to have the stack start no Prometheus even when the binary is installed."""


def prometheus_wanted() -> bool:
    return os.environ.get(ENV_PROMETHEUS, "1").strip().lower() not in ("0", "false", "no")


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


@dataclass(frozen=True)
class PrometheusProcess:
    pid: int
    url: str
    targets_dir: Path
    log: Path
    marker: str


def scrape_config(targets_dir: Path) -> str:
    """The whole configuration (YAML is a superset of JSON, so it is written as JSON)."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "turnledger",
                "file_sd_configs": [{"files": [str(targets_dir / "*.json")], "refresh_interval": "1s"}],
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def write_targets(
    targets_dir: Path,
    name: str,
    targets: Mapping[str, Sequence[str]],
    labels: Mapping[str, str] | None = None,
) -> Path:
    """`targets`: service label → host:port list, each group with `labels` too. Written atomically
    (Prometheus watches the directory)."""
    groups = [
        {"targets": list(hosts), "labels": {**(labels or {}), "service": service}}
        for service, hosts in targets.items()
    ]
    path = targets_dir / f"{name}.json"
    tmp = targets_dir / f".{name}.json.tmp"
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)
    return path


def start_prometheus(
    workdir: Path, pidfile: Path, port: int | None = None, timeout_s: float = 30.0
) -> PrometheusProcess:
    binary = prometheus_binary()
    if binary is None:
        raise PrometheusMissing()
    if port is not None and not port_is_free(port):
        raise PortInUse("prometheus", port)
    port = port or free_port()
    targets = workdir / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(scrape_config(targets))
    log = workdir / "prometheus.log"
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
    ]
    pid = procs.spawn_detached(argv, log, pidfile, cwd=workdir)
    proc = PrometheusProcess(pid, f"http://127.0.0.1:{port}", targets, log, str(config))
    deadline = time.monotonic() + timeout_s
    reason = "no answer on /-/ready"
    while time.monotonic() < deadline:
        if not procs.is_alive(pid):
            reason = "prometheus exited"
            if "address already in use" in procs.tail(log):
                procs.stop_pidfile(pidfile, proc.marker, grace_s=2)
                raise PortInUse("prometheus", port)
            break
        try:
            with urllib.request.urlopen(f"{proc.url}/-/ready", timeout=1) as answer:
                if answer.status == 200:
                    return proc
        except (urllib.error.URLError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    procs.stop_pidfile(pidfile, proc.marker, grace_s=2)
    raise ServiceNotReady("Prometheus", timeout_s, log, procs.tail(log), reason)


@contextlib.contextmanager
def private_prometheus(workdir: Path) -> Iterator[PrometheusProcess]:
    """A Prometheus of this process alone, stopped and removed at the end."""
    pidfile = workdir / "prometheus.pid"
    proc = start_prometheus(workdir, pidfile)
    try:
        yield proc
    finally:
        procs.stop_pidfile(pidfile, proc.marker, grace_s=10)
        shutil.rmtree(workdir, ignore_errors=True)
