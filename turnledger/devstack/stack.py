"""The local stack: one Kafka and one Redis process under a state directory, described by `stack.json`.

Layout of a state directory (default `.devstack/` in the checkout, or TURNLEDGER_DEVSTACK_DIR):
`stack.json` (endpoints and pids), `kafka.pid`, `redis.pid`, `prometheus.pid`, `kafka/`, `redis/` and
`prometheus/` (config, data, logs; Prometheus only when Debian's package is installed; `kafka/` also
holds the SASL password, `redis/` the ACL user's), `tls/` (the secured listeners' CA and certificates
and the client certificate of the mutual-TLS listener) and `redis-tls/` (Redis's TLS port's CA and
certificate, `redis_tls.py`), both of which `down` keeps.
Pytest sessions use their own `session-<pid>/` subdirectory so they never disturb a `dev up` stack,
and share the state dir's `tls/`.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from turnledger.devstack import procs
from turnledger.devstack.errors import PortInUse
from turnledger.devstack.jars import ensure_jars
from turnledger.devstack.kafka import (
    READY_MECHANISM,
    mtls_client_env,
    oauth_client_env,
    secured_client_env,
    start_kafka,
)
from turnledger.devstack.prometheus import prometheus_binary, prometheus_wanted, start_prometheus
from turnledger.devstack.redis_server import redis_tls_client_env, start_redis
from turnledger.devstack.settings import ENV_STATE_DIR, Settings
from turnledger.errors import DevstackSettingsError, redact_url

STATE_FILE = "stack.json"
SECURE_EXPORT_PREFIX = "# SASL_SSL: "
MTLS_EXPORT_PREFIX = "# SSL (mutual TLS): "
OAUTH_EXPORT_PREFIX = "# SASL_SSL OAUTHBEARER: "
REDIS_TLS_EXPORT_PREFIX = "# REDIS TLS: "
T = TypeVar("T")


@dataclass(frozen=True)
class StackState:
    bootstrap: str
    redis_url: str
    kafka_version: str | None
    kafka_pid: int | None
    kafka_marker: str | None
    redis_pid: int | None
    redis_marker: str | None
    kafka_log: str | None
    redis_log: str | None
    prometheus_url: str | None = None
    prometheus_targets: str | None = None
    """The directory of its file_sd target files (drop `<name>.json` there to be scraped)."""
    prometheus_pid: int | None = None
    prometheus_marker: str | None = None
    secure_bootstrap: str | None = None
    """The broker's SASL_SSL listener, when it is the devstack's own (never for an external broker)."""
    sasl_username: str | None = None
    sasl_password_file: str | None = None
    ssl_ca_file: str | None = None
    """The devstack's CA: it signed the broker's certificate (both TLS listeners) and the client's."""
    mtls_bootstrap: str | None = None
    """The broker's SSL listener, which requires a client certificate; None also when the devstack had
    no openssl to make one."""
    ssl_client_cert_file: str | None = None
    ssl_client_key_file: str | None = None
    oauth_bootstrap: str | None = None
    """The broker's OAUTHBEARER listener; None also when the devstack had no openssl."""
    oauth_token_file: str | None = None
    """`dev up`'s week-long token for it."""
    oauth_signing_key: str | None = None
    """The key the broker trusts tokens of (tests sign with it)."""
    redis_username: str | None = None
    """The devstack Redis's ACL user and its password's file (never for an external Redis)."""
    redis_password_file: str | None = None
    redis_tls_url: str | None = None
    """Its TLS port as `rediss://turnledger@127.0.0.1:<port>/0`; None also without openssl."""
    redis_ca_file: str | None = None
    """The CA of the TLS port's certificate (its own: `redis_tls.py`)."""

    @property
    def export_line(self) -> str:
        return export_line(self.bootstrap, self.redis_url)

    def secure_client_env(self, mechanism: str = READY_MECHANISM) -> dict[str, str] | None:
        """The variables that point a client at the SASL_SSL listener; None when there is none."""
        return secured_client_env(
            self.secure_bootstrap, self.sasl_username, self.sasl_password_file, self.ssl_ca_file, mechanism
        )

    @property
    def secure_export_line(self) -> str | None:
        """`export ...` for the SASL_SSL listener behind a `# SASL_SSL: ` prefix: the scripts that
        `grep ^export` the plain line must not also pick up this one, which moves every client over."""
        env = self.secure_client_env()
        if env is None:
            return None
        return _commented_export(SECURE_EXPORT_PREFIX, env)

    def mtls_client_env(self) -> dict[str, str] | None:
        """The variables that point a client at the mutual-TLS listener; None when there is none."""
        return mtls_client_env(
            self.mtls_bootstrap, self.ssl_ca_file, self.ssl_client_cert_file, self.ssl_client_key_file
        )

    @property
    def mtls_export_line(self) -> str | None:
        """`export ...` for the mutual-TLS listener behind a `# SSL (mutual TLS): ` prefix, for the
        same reason as `secure_export_line`'s."""
        env = self.mtls_client_env()
        return None if env is None else _commented_export(MTLS_EXPORT_PREFIX, env)

    def oauth_client_env(self) -> dict[str, str] | None:
        """The variables that point a client at the OAUTHBEARER listener with `dev up`'s token."""
        return oauth_client_env(self.oauth_bootstrap, self.ssl_ca_file, self.oauth_token_file)

    @property
    def oauth_export_line(self) -> str | None:
        """`export ...` for the OAUTHBEARER listener behind a `# SASL_SSL OAUTHBEARER: ` prefix."""
        env = self.oauth_client_env()
        return None if env is None else _commented_export(OAUTH_EXPORT_PREFIX, env)

    def redis_tls_client_env(self) -> dict[str, str] | None:
        """The variables that point a client at Redis's TLS port as the ACL user; None without one."""
        return redis_tls_client_env(self.redis_tls_url, self.redis_password_file, self.redis_ca_file)

    @property
    def redis_tls_export_line(self) -> str | None:
        """`export ...` for Redis's TLS port behind a `# REDIS TLS: ` prefix, for the same reason as
        `secure_export_line`'s."""
        env = self.redis_tls_client_env()
        return None if env is None else _commented_export(REDIS_TLS_EXPORT_PREFIX, env)

    def alive(self) -> bool:
        """Every process this stack started is still running (external endpoints count as alive)."""
        checks = [
            (self.kafka_pid, self.kafka_marker),
            (self.redis_pid, self.redis_marker),
            (self.prometheus_pid, self.prometheus_marker),
        ]
        return all(pid is None or procs.owns(pid, marker or "") for pid, marker in checks)


def export_line(bootstrap: str, redis_url: str) -> str:
    """`export KAFKA_BOOTSTRAP_SERVERS=... REDIS_URL=...`, each value quoted for the shell that `eval`s it.
    A Redis URL that holds a password (an external Redis given to `dev up`) is not printed: the line
    then exports the bootstrap alone and says why after a `#`."""
    line = f"export KAFKA_BOOTSTRAP_SERVERS={shlex.quote(bootstrap)}"
    if redact_url(redis_url) != redis_url:
        return f"{line}  # REDIS_URL holds a password, not printed: export it yourself"
    return f"{line} REDIS_URL={shlex.quote(redis_url)}"


def _commented_export(prefix: str, env: dict[str, str]) -> str:
    return prefix + "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


class LocalStack:
    def __init__(self, root: Path, tls_dir: Path | None = None) -> None:
        self.root = root
        self.tls_dir = tls_dir or root / "tls"
        """The SASL_SSL listener's certificates; a session's stack is given its state dir's."""

    @property
    def redis_tls_dir(self) -> Path:
        """Redis's TLS material, beside `tls_dir` (a session's stack shares its state dir's)."""
        return self.tls_dir.with_name("redis-tls")

    @property
    def kafka_pidfile(self) -> Path:
        return self.root / "kafka.pid"

    @property
    def redis_pidfile(self) -> Path:
        return self.root / "redis.pid"

    @property
    def prometheus_pidfile(self) -> Path:
        return self.root / "prometheus.pid"

    def state(self) -> StackState | None:
        path = self.root / STATE_FILE
        try:
            return StackState(**json.loads(path.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None
        except OSError as exc:  # the state dir is a file, the state file a directory, not ours to read
            raise DevstackSettingsError(
                f"{ENV_STATE_DIR}: cannot read {path} ({exc.strerror or exc}); point it at a directory "
                "of the devstack's own"
            ) from exc

    def running(self) -> StackState | None:
        """The recorded stack if all its processes are alive; None when nothing usable is recorded."""
        state = self.state()
        return state if state is not None and state.alive() else None

    def up(
        self,
        settings: Settings,
        external_bootstrap: str | None = None,
        external_redis: str | None = None,
        kafka_port: int | None = None,
        redis_port: int | None = None,
    ) -> StackState:
        """Start whatever is not given externally; on any failure stop what was already started."""
        current = self.running()
        if current is not None:
            return current
        self.down()
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            redis_proc = None
            if external_redis is None:
                redis_proc = _retry_port_race(
                    redis_port is None,
                    self.root / "redis",
                    lambda: start_redis(
                        self.root / "redis", self.redis_pidfile, port=redis_port, tls_dir=self.redis_tls_dir
                    ),
                )
            kafka_proc = None
            if external_bootstrap is None:
                jars = ensure_jars(settings)
                kafka_proc = _retry_port_race(
                    kafka_port is None,
                    self.root / "kafka",
                    lambda: start_kafka(
                        jars,
                        self.root / "kafka",
                        self.kafka_pidfile,
                        heap=settings.kafka_heap,
                        timeout_s=settings.ready_timeout_s,
                        broker_port=kafka_port,
                        tls_dir=self.tls_dir,
                    ),
                )
            prometheus = None
            if prometheus_wanted() and prometheus_binary() is not None:
                prometheus = _retry_port_race(
                    True,
                    self.root / "prometheus",
                    lambda: start_prometheus(self.root / "prometheus", self.prometheus_pidfile),
                )
        except BaseException:
            self.stop()  # keep the logs: the error message points at them
            raise
        secured = kafka_proc.secured if kafka_proc else None
        mtls = kafka_proc.mtls if kafka_proc else None
        bearer = kafka_proc.oauth if kafka_proc else None
        redis_tls = redis_proc.tls if redis_proc else None
        state = StackState(
            bootstrap=kafka_proc.bootstrap if kafka_proc else str(external_bootstrap),
            redis_url=redis_proc.url if redis_proc else str(external_redis),
            kafka_version=kafka_proc.version if kafka_proc else None,
            kafka_pid=kafka_proc.pid if kafka_proc else None,
            kafka_marker=kafka_proc.marker if kafka_proc else None,
            redis_pid=redis_proc.pid if redis_proc else None,
            redis_marker=redis_proc.marker if redis_proc else None,
            kafka_log=str(kafka_proc.log) if kafka_proc else None,
            redis_log=str(redis_proc.log) if redis_proc else None,
            prometheus_url=prometheus.url if prometheus else None,
            prometheus_targets=str(prometheus.targets_dir) if prometheus else None,
            prometheus_pid=prometheus.pid if prometheus else None,
            prometheus_marker=prometheus.marker if prometheus else None,
            secure_bootstrap=secured.bootstrap if secured else None,
            sasl_username=secured.username if secured else None,
            sasl_password_file=str(secured.password_file) if secured else None,
            ssl_ca_file=str(secured.ca_file) if secured else None,
            mtls_bootstrap=mtls.bootstrap if mtls else None,
            ssl_client_cert_file=str(mtls.cert_file) if mtls else None,
            ssl_client_key_file=str(mtls.key_file) if mtls else None,
            oauth_bootstrap=bearer.bootstrap if bearer else None,
            oauth_token_file=str(bearer.token_file) if bearer else None,
            oauth_signing_key=str(bearer.signing_key) if bearer else None,
            redis_username=redis_proc.username if redis_proc else None,
            redis_password_file=str(redis_proc.password_file)
            if redis_proc and redis_proc.password_file
            else None,
            redis_tls_url=redis_tls.url if redis_tls else None,
            redis_ca_file=str(redis_tls.ca_file) if redis_tls else None,
        )
        (self.root / STATE_FILE).write_text(json.dumps(asdict(state), indent=2) + "\n")
        return state

    def stop(self) -> list[str]:
        """Stop the recorded processes by pid (and process group); keep their files."""
        state = self.state()
        stopped: list[str] = []
        kafka_marker = state.kafka_marker if state and state.kafka_marker else str(self.root / "kafka")
        redis_marker = state.redis_marker if state and state.redis_marker else "redis-server"
        if procs.stop_pidfile(self.kafka_pidfile, kafka_marker):
            stopped.append("kafka")
        if procs.stop_pidfile(self.redis_pidfile, redis_marker):
            stopped.append("redis")
        prometheus_marker = (
            state.prometheus_marker
            if state and state.prometheus_marker
            else str(self.root / "prometheus" / "prometheus.yml")
        )
        if procs.stop_pidfile(self.prometheus_pidfile, prometheus_marker, grace_s=10):
            stopped.append("prometheus")
        (self.root / STATE_FILE).unlink(missing_ok=True)
        return stopped

    def down(self) -> list[str]:
        """Stop the processes, then remove their data and logs (the next `up` starts from scratch)."""
        stopped = self.stop()
        for sub in ("kafka", "redis", "prometheus"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        return stopped


def _retry_port_race(auto_ports: bool, workdir: Path, start: Callable[[], T]) -> T:
    """Retry a start whose freely chosen port was taken between choosing and binding (another process
    on the machine won the race). The work dir is wiped because Kafka's formatted storage records the
    controller endpoint. Fixed ports are the user's choice and fail at once."""
    for attempt in range(3):
        try:
            return start()
        except PortInUse:
            if not auto_ports or attempt == 2:
                raise
            shutil.rmtree(workdir, ignore_errors=True)
    raise AssertionError("unreachable")


def reap_stale_sessions(state_dir: Path) -> list[Path]:
    """Stop stacks left by pytest sessions that died without teardown (their owner pid is gone)."""
    reaped: list[Path] = []
    for session in sorted(state_dir.glob("session-*")):
        try:
            owner = int(session.name.removeprefix("session-"))
        except ValueError:
            continue
        if procs.is_alive(owner):
            continue
        LocalStack(session).down()
        shutil.rmtree(session, ignore_errors=True)
        reaped.append(session)
    return reaped
