"""Shared fixtures: the real Kafka broker and Redis (through the devstack) and per-test isolation helpers.

The stack is started at most once per session and only when a test asks for it, so unit-only runs stay fast.
Set KAFKA_BOOTSTRAP_SERVERS / REDIS_URL to use existing services, or run `turnledger dev up` once to have
every later pytest run reuse that stack (no broker start per run).
"""

from __future__ import annotations

import locale
import os
import re
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from hypothesis import Phase
from hypothesis import settings as hypothesis_settings

from turnledger.devstack.prometheus import private_prometheus, prometheus_binary
from turnledger.devstack.session import Endpoints, session_endpoints
from turnledger.devstack.settings import Settings

pytest_plugins = ["tests.watchdog"]

hypothesis_settings.register_profile(
    "mutation", phases=[Phase.explicit, Phase.generate], database=None, deadline=None
)
"""`--hypothesis-profile mutation` (`make mutation`, `tests/mutation_import_screen.py`): a mutant is killed
by the first failing example, so the minutes hypothesis can spend shrinking it buy nothing there."""

STACK_FIXTURES = frozenset({"devstack", "kafka_bootstrap", "redis_url", "redis_client", "redis_prefix"})


def skip_unless_installed(what: str, how: str) -> None:
    """Skip a test whose real part (a browser, Prometheus) is not installed; in CI (`CI=true`, set by
    `.ci/run`) fail instead, since `make test` installs them there and a skip would hide the test."""
    message = f"{what} is not installed ({how}; `make setup` installs it as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Any test that touches the real stack is an integration test, whether or not it says so."""
    for item in items:
        if STACK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def bound_port() -> Iterator[int]:
    """A loopback port some socket is listening on for the test's length (a port in use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """The test's process in a locale that is not UTF-8, as under `LANG=en_US.ISO-8859-1` (Python
    coerces only the C locale of a process's start to UTF-8): a file read without naming its encoding
    is read as ASCII here."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


@pytest.fixture(scope="session")
def devstack() -> Iterator[Endpoints]:
    with session_endpoints() as endpoints:
        yield endpoints


@pytest.fixture(scope="session")
def prometheus(devstack: Endpoints) -> Iterator[tuple[str, Path]]:
    """(URL, file_sd targets directory) of a real Prometheus scraping every second: the stack's, else a
    private one for the session; skipped when Debian's `prometheus` is not installed (`make` installs it)."""
    if devstack.prometheus_url and devstack.prometheus_targets:
        yield devstack.prometheus_url, Path(devstack.prometheus_targets)
        return
    if prometheus_binary() is None:
        skip_unless_installed("Debian's prometheus", "apt-get install -y --no-install-recommends prometheus")
    workdir = Settings.from_env().state_dir / f"prometheus-{os.getpid()}"
    with private_prometheus(workdir) as proc:
        yield proc.url, proc.targets_dir


@pytest.fixture(scope="session")
def kafka_bootstrap(devstack: Endpoints) -> str:
    return devstack.bootstrap


@pytest.fixture(scope="session")
def redis_url(devstack: Endpoints) -> str:
    return devstack.redis_url


def _slug(request: pytest.FixtureRequest) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name).strip("-")[:60]


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Factory of topic names unique to this test run: `topic_name("in")` -> `t-<test>-<rand>-in`."""
    run = uuid.uuid4().hex[:8]
    base = f"t-{_slug(request)}-{run}"

    def make(suffix: str = "") -> str:
        return f"{base}-{suffix}" if suffix else base

    return make


@pytest.fixture
def redis_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix no other test uses; keys under it are deleted after the test by `redis_client`."""
    return f"test:{_slug(request)}:{uuid.uuid4().hex[:8]}:"


@pytest.fixture
async def redis_client(redis_url: str, redis_prefix: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    try:
        yield client
    finally:
        keys = [key async for key in client.scan_iter(match=f"{redis_prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
