"""Where the devstack keeps things, and which Kafka version it runs: one place for every env variable."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from turnledger.errors import DevstackSettingsError

KAFKA_VERSIONS: tuple[str, ...] = ("4.4.0", "4.3.1")
"""Preferred first; later entries are fallbacks used when an earlier one cannot be resolved."""

LOG4J2_FOR_KAFKA: dict[str, str] = {"4.4.0": "2.25.5", "4.3.1": "2.25.4"}
"""Kafka's own log4j-core version per release (from `mvn dependency:tree`); the SLF4J binding must match."""

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
ENV_REDIS_URL = "REDIS_URL"
ENV_CACHE_DIR = "TURNLEDGER_CACHE_DIR"
ENV_STATE_DIR = "TURNLEDGER_DEVSTACK_DIR"
ENV_KAFKA_VERSION = "TURNLEDGER_KAFKA_VERSION"
ENV_BACKEND = "TURNLEDGER_DEVSTACK_BACKEND"
ENV_READY_TIMEOUT = "TURNLEDGER_KAFKA_READY_TIMEOUT"
ENV_KAFKA_HEAP = "TURNLEDGER_KAFKA_HEAP"


def _repo_root() -> Path:
    """The checkout this package is installed from (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


BACKENDS = ("auto", "local", "docker")


def _backend(raw: str) -> str:
    backend = raw.strip().lower() or "auto"
    if backend not in BACKENDS:
        raise DevstackSettingsError(f"{ENV_BACKEND}={raw!r}: use one of {', '.join(BACKENDS)}")
    return backend


def _seconds(var: str, raw: str) -> float:
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise DevstackSettingsError(f"{var}={raw!r}: a number of seconds above 0")
    return seconds


@dataclass(frozen=True)
class Settings:
    cache_root: Path
    state_dir: Path
    kafka_versions: tuple[str, ...]
    backend: str
    ready_timeout_s: float
    kafka_heap: str

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        cache_root = Path(env.get(ENV_CACHE_DIR) or Path.home() / ".cache" / "turnledger")
        state_dir = Path(env.get(ENV_STATE_DIR) or _repo_root() / ".devstack")
        pinned = env.get(ENV_KAFKA_VERSION)
        versions = (pinned,) if pinned else KAFKA_VERSIONS
        return cls(
            cache_root=cache_root.expanduser().resolve(),
            state_dir=state_dir.expanduser().resolve(),
            kafka_versions=versions,
            backend=_backend(env.get(ENV_BACKEND, "")),
            ready_timeout_s=_seconds(ENV_READY_TIMEOUT, env.get(ENV_READY_TIMEOUT, "120")),
            kafka_heap=env.get(ENV_KAFKA_HEAP, "512m"),
        )

    def kafka_cache(self, version: str) -> Path:
        return self.cache_root / f"kafka-{version}"
