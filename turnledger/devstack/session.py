"""Endpoints for one process's lifetime (pytest session, `turnledger demo`), in order of preference.

1. KAFKA_BOOTSTRAP_SERVERS / REDIS_URL from the environment: used as is, nothing started.
2. A stack recorded by `turnledger dev up` whose processes are alive: reused, which keeps local test
   iterations fast (no broker start per run). Not under CI (CI set), where start-up itself is under test.
3. Otherwise a private stack is started and stopped again on exit: local processes by default, Docker
   containers when the backend says so (see `choose_backend`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from turnledger.devstack.containers import container_stack, docker_available
from turnledger.devstack.jars import cached
from turnledger.devstack.kafka import READY_MECHANISM, mtls_client_env, oauth_client_env, secured_client_env
from turnledger.devstack.redis_server import redis_tls_client_env
from turnledger.devstack.settings import ENV_BOOTSTRAP, ENV_REDIS_URL, Settings
from turnledger.devstack.stack import LocalStack, StackState, reap_stale_sessions


@dataclass(frozen=True)
class Endpoints:
    bootstrap: str
    redis_url: str
    source: str
    """Human-readable origin: "env", "dev up (<dir>)", "local session (<dir>)", "docker" or a mix."""
    prometheus_url: str | None = None
    prometheus_targets: str | None = None
    """The stack's Prometheus and its file_sd targets directory, when the stack started one."""
    broker_pid: int | None = None
    """The broker's process id when it is the devstack's own, started here or by `dev up` (the
    benchmarks report its CPU beside the processor's); None for any other broker."""
    secure_bootstrap: str | None = None
    """The broker's SASL_SSL listener and how to log in to it (user, password file, CA), when the
    broker is the local devstack's own; None for an external or a Docker broker."""
    sasl_username: str | None = None
    sasl_password_file: str | None = None
    ssl_ca_file: str | None = None
    mtls_bootstrap: str | None = None
    """The broker's SSL listener that requires a client certificate, and the devstack's client
    certificate and key (PEM files), under the same conditions; None also without openssl."""
    ssl_client_cert_file: str | None = None
    ssl_client_key_file: str | None = None
    oauth_bootstrap: str | None = None
    """The broker's OAUTHBEARER listener, `dev up`'s token for it and the key the broker trusts tokens
    of, under the same conditions."""
    oauth_token_file: str | None = None
    oauth_signing_key: str | None = None
    redis_username: str | None = None
    """The Redis's ACL user, its password's file, its TLS port (`rediss://`) and that port's CA, when the
    Redis is the local devstack's own; the TLS port None also without openssl."""
    redis_password_file: str | None = None
    redis_tls_url: str | None = None
    redis_ca_file: str | None = None

    def secure_client_env(self, mechanism: str = READY_MECHANISM) -> dict[str, str] | None:
        """The KAFKA_* variables that point a client at the SASL_SSL listener; None without one."""
        return secured_client_env(
            self.secure_bootstrap, self.sasl_username, self.sasl_password_file, self.ssl_ca_file, mechanism
        )

    def mtls_client_env(self) -> dict[str, str] | None:
        """The KAFKA_* variables that point a client at the mutual-TLS listener; None without one."""
        return mtls_client_env(
            self.mtls_bootstrap, self.ssl_ca_file, self.ssl_client_cert_file, self.ssl_client_key_file
        )

    def oauth_client_env(self) -> dict[str, str] | None:
        """The KAFKA_* variables that point a client at the OAUTHBEARER listener; None without one."""
        return oauth_client_env(self.oauth_bootstrap, self.ssl_ca_file, self.oauth_token_file)

    def redis_tls_client_env(self) -> dict[str, str] | None:
        """The REDIS_* variables that point a client at Redis's TLS port as the ACL user; None without."""
        return redis_tls_client_env(self.redis_tls_url, self.redis_password_file, self.redis_ca_file)

    def with_redis_of(self, stack: StackState | None) -> Endpoints:
        """These endpoints plus what only the devstack's own Redis has: its ACL user, its TLS port."""
        if stack is None:
            return self
        return replace(
            self,
            redis_username=stack.redis_username,
            redis_password_file=stack.redis_password_file,
            redis_tls_url=stack.redis_tls_url,
            redis_ca_file=stack.redis_ca_file,
        )

    def with_broker_of(self, stack: StackState | None) -> Endpoints:
        """These endpoints plus what only the devstack's own broker has: its pid, its secured listeners."""
        if stack is None:
            return self
        return replace(
            self,
            broker_pid=stack.kafka_pid,
            secure_bootstrap=stack.secure_bootstrap,
            sasl_username=stack.sasl_username,
            sasl_password_file=stack.sasl_password_file,
            ssl_ca_file=stack.ssl_ca_file,
            mtls_bootstrap=stack.mtls_bootstrap,
            ssl_client_cert_file=stack.ssl_client_cert_file,
            ssl_client_key_file=stack.ssl_client_key_file,
            oauth_bootstrap=stack.oauth_bootstrap,
            oauth_token_file=stack.oauth_token_file,
            oauth_signing_key=stack.oauth_signing_key,
        )


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def local_prereqs_missing(settings: Settings) -> list[str]:
    missing = [tool for tool in ("java", "redis-server") if shutil.which(tool) is None]
    if cached(settings) is None and shutil.which("mvn") is None:
        missing.append("mvn")
    return missing


def choose_backend(settings: Settings) -> str:
    """ "local" or "docker". Explicit setting wins; "auto" prefers the local processes (the tested path)
    and uses Docker only when a local prerequisite is missing and the daemon answers."""
    if settings.backend in ("local", "docker"):
        return settings.backend
    if not local_prereqs_missing(settings):
        return "local"
    return "docker" if docker_available() else "local"


def dev_up_stack(bootstrap: str, settings: Settings | None = None) -> StackState | None:
    """The running `dev up` stack when its broker is the one at `bootstrap` (its `export` line was
    run), else None."""
    recorded = LocalStack((settings or Settings.from_env()).state_dir).running()
    return recorded if recorded is not None and recorded.bootstrap == bootstrap else None


def dev_up_redis(redis_url: str, settings: Settings | None = None) -> StackState | None:
    """The running `dev up` stack when its Redis is the one at `redis_url`, else None."""
    recorded = LocalStack((settings or Settings.from_env()).state_dir).running()
    return recorded if recorded is not None and recorded.redis_url == redis_url else None


def dev_up_broker_pid(bootstrap: str, settings: Settings | None = None) -> int | None:
    """The pid of the running `dev up` stack's broker when it is the one at `bootstrap`, else None."""
    stack = dev_up_stack(bootstrap, settings)
    return stack.kafka_pid if stack is not None else None


@contextmanager
def one_start_at_a_time(state_dir: Path) -> Iterator[None]:
    """Hold the state dir's start lock: sessions that start at once (`make test`'s integration pass runs
    one per pytest-xdist worker) share the TLS material and the jars beside their own dirs, which the
    first to start makes; a second must not read them half-written or make them again."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / "start.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def session_endpoints(settings: Settings | None = None) -> Iterator[Endpoints]:
    settings = settings or Settings.from_env()
    env_bootstrap = os.environ.get(ENV_BOOTSTRAP) or None
    env_redis = os.environ.get(ENV_REDIS_URL) or None
    if env_bootstrap and env_redis:
        endpoints = Endpoints(env_bootstrap, env_redis, "env")
        yield endpoints.with_broker_of(dev_up_stack(env_bootstrap, settings)).with_redis_of(
            dev_up_redis(env_redis, settings)
        )
        return
    recorded = None if in_ci() else LocalStack(settings.state_dir).running()
    if recorded is not None:
        endpoints = Endpoints(
            env_bootstrap or recorded.bootstrap,
            env_redis or recorded.redis_url,
            f"dev up ({settings.state_dir})",
            recorded.prometheus_url,
            recorded.prometheus_targets,
        )
        yield endpoints.with_broker_of(
            recorded if env_bootstrap in (None, recorded.bootstrap) else None
        ).with_redis_of(recorded if env_redis in (None, recorded.redis_url) else None)
        return
    if choose_backend(settings) == "docker":
        with container_stack(need_kafka=env_bootstrap is None, need_redis=env_redis is None) as (b, r):
            yield Endpoints(env_bootstrap or str(b), env_redis or str(r), "docker")
        return
    stack = LocalStack(settings.state_dir / f"session-{os.getpid()}", tls_dir=settings.state_dir / "tls")
    try:
        with one_start_at_a_time(settings.state_dir):
            reap_stale_sessions(settings.state_dir)
            state = stack.up(settings, external_bootstrap=env_bootstrap, external_redis=env_redis)
        yield (
            Endpoints(
                state.bootstrap,
                state.redis_url,
                f"local session ({stack.root})",
                state.prometheus_url,
                state.prometheus_targets,
            )
            .with_broker_of(state)
            .with_redis_of(state)
        )
    finally:
        stack.down()
        shutil.rmtree(stack.root, ignore_errors=True)
