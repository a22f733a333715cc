"""Endpoints for one process's lifetime (pytest session, `turnledger demo`), in order of preference.

1. KAFKA_BOOTSTRAP_SERVERS / REDIS_URL from the environment: used as is, nothing started.
2. A stack recorded by `turnledger dev up` whose processes are alive: reused, which keeps local test
   iterations fast (no broker start per run). Not under CI (CI set), where start-up itself is under test.
3. Otherwise a private stack is started and stopped again on exit: local processes by default, Docker
   containers when the backend says so (see `choose_backend`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from turnledger.devstack.containers import container_stack, docker_available
from turnledger.devstack.jars import cached
from turnledger.devstack.settings import ENV_BOOTSTRAP, ENV_REDIS_URL, Settings
from turnledger.devstack.stack import LocalStack, reap_stale_sessions


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


def dev_up_broker_pid(bootstrap: str, settings: Settings | None = None) -> int | None:
    """The pid of the running `dev up` stack's broker when it is the one at `bootstrap` (its
    `export` line was run), else None."""
    recorded = LocalStack((settings or Settings.from_env()).state_dir).running()
    return recorded.kafka_pid if recorded is not None and recorded.bootstrap == bootstrap else None


@contextmanager
def session_endpoints(settings: Settings | None = None) -> Iterator[Endpoints]:
    settings = settings or Settings.from_env()
    env_bootstrap = os.environ.get(ENV_BOOTSTRAP) or None
    env_redis = os.environ.get(ENV_REDIS_URL) or None
    if env_bootstrap and env_redis:
        yield Endpoints(
            env_bootstrap, env_redis, "env", broker_pid=dev_up_broker_pid(env_bootstrap, settings)
        )
        return
    recorded = None if in_ci() else LocalStack(settings.state_dir).running()
    if recorded is not None:
        yield Endpoints(
            env_bootstrap or recorded.bootstrap,
            env_redis or recorded.redis_url,
            f"dev up ({settings.state_dir})",
            recorded.prometheus_url,
            recorded.prometheus_targets,
            None if env_bootstrap else recorded.kafka_pid,
        )
        return
    if choose_backend(settings) == "docker":
        with container_stack(need_kafka=env_bootstrap is None, need_redis=env_redis is None) as (b, r):
            yield Endpoints(env_bootstrap or str(b), env_redis or str(r), "docker")
        return
    reap_stale_sessions(settings.state_dir)
    stack = LocalStack(settings.state_dir / f"session-{os.getpid()}")
    try:
        state = stack.up(settings, external_bootstrap=env_bootstrap, external_redis=env_redis)
        yield Endpoints(
            state.bootstrap,
            state.redis_url,
            f"local session ({stack.root})",
            state.prometheus_url,
            state.prometheus_targets,
            state.kafka_pid,
        )
    finally:
        stack.down()
        shutil.rmtree(stack.root, ignore_errors=True)
