"""Which endpoints a pytest session or the demo gets: env first, then a `dev up` stack, else its own."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnledger.devstack import procs
from turnledger.devstack.cli import dev_app
from turnledger.devstack.session import Endpoints, dev_up_broker_pid, one_start_at_a_time, session_endpoints
from turnledger.devstack.settings import Settings
from turnledger.devstack.stack import LocalStack, reap_stale_sessions


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("CI", raising=False)
    return tmp_path / "state"


def _wait_until_owned(pid: int, marker: str, timeout_s: float = 30.0) -> None:
    """Popen returns once the child's exec has closed its pipes, which is a moment before the kernel
    sets the new program's arguments: `/proc/<pid>/cmdline` can read empty then, and `owns` says no.
    CI failed a test once on a fake service whose marker was not yet readable."""
    deadline = time.monotonic() + timeout_s
    while not procs.owns(pid, marker):
        assert time.monotonic() < deadline, f"pid {pid} never showed {marker!r}: {procs.cmdline(pid)!r}"
        time.sleep(0.01)


SECURED = {
    "secure_bootstrap": "127.0.0.1:3333",
    "sasl_username": "turnledger",
    "sasl_password_file": "/state/kafka/sasl.password",
    "ssl_ca_file": "/state/tls/ca.pem",
    "mtls_bootstrap": "127.0.0.1:4444",
    "ssl_client_cert_file": "/state/tls/client.pem",
    "ssl_client_key_file": "/state/tls/client.key",
}


def _secured(endpoints: Endpoints) -> dict[str, str | None]:
    return {name: getattr(endpoints, name) for name in SECURED}


@pytest.fixture
def fake_services(state_dir: Path) -> Iterator[dict[str, object]]:
    """Two sleeping processes standing in for a recorded Kafka and Redis."""
    state_dir.mkdir(parents=True)
    markers = {"kafka": f"fake-kafka-{id(state_dir)}", "redis": f"fake-redis-{id(state_dir)}"}
    pids = {
        name: procs.spawn_detached(
            [sys.executable, "-c", "import time; time.sleep(60)", marker],
            state_dir / f"{name}.log",
            state_dir / f"{name}.pid",
        )
        for name, marker in markers.items()
    }
    for name, marker in markers.items():
        _wait_until_owned(pids[name], marker)
    record: dict[str, object] = {
        "bootstrap": "127.0.0.1:1111",
        "redis_url": "redis://127.0.0.1:2222/0",
        "kafka_version": "4.4.0",
        "kafka_pid": pids["kafka"],
        "kafka_marker": markers["kafka"],
        "redis_pid": pids["redis"],
        "redis_marker": markers["redis"],
        "kafka_log": None,
        "redis_log": None,
        **SECURED,
    }
    yield record
    for name, marker in markers.items():
        procs.stop_pid(pids[name], marker, grace_s=2)


def test_env_variables_win_and_start_nothing(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker:9092")
    monkeypatch.setenv("REDIS_URL", "redis://cache:6379/0")
    with session_endpoints() as endpoints:
        assert (endpoints.bootstrap, endpoints.redis_url, endpoints.source) == (
            "broker:9092",
            "redis://cache:6379/0",
            "env",
        )
    assert not state_dir.exists()


def test_running_dev_up_stack_is_reused(state_dir: Path, fake_services: dict[str, object]) -> None:
    (state_dir / "stack.json").write_text(json.dumps(fake_services))
    with session_endpoints() as endpoints:
        assert endpoints.bootstrap == "127.0.0.1:1111" and endpoints.redis_url == "redis://127.0.0.1:2222/0"
        assert endpoints.source.startswith("dev up")
        assert endpoints.broker_pid == fake_services["kafka_pid"]
        assert _secured(endpoints) == SECURED
        env = endpoints.secure_client_env()
        assert env is not None and env["KAFKA_BOOTSTRAP_SERVERS"] == "127.0.0.1:3333"
    assert LocalStack(state_dir).running() is not None, "reusing must not stop the dev up stack"


def test_env_naming_the_dev_up_broker_gets_its_pid(
    state_dir: Path, fake_services: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmarks measure the broker's CPU only when it is the devstack's own."""
    (state_dir / "stack.json").write_text(json.dumps(fake_services))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:2222/0")
    pids, listeners = {}, {}
    for bootstrap in ("127.0.0.1:1111", "elsewhere:9092"):
        monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
        with session_endpoints() as endpoints:
            assert endpoints.source == "env"
            pids[bootstrap] = endpoints.broker_pid
            listeners[bootstrap] = endpoints.secure_bootstrap
    assert pids == {"127.0.0.1:1111": fake_services["kafka_pid"], "elsewhere:9092": None}
    assert listeners == {"127.0.0.1:1111": "127.0.0.1:3333", "elsewhere:9092": None}, (
        "the SASL_SSL listener only of the devstack's own broker"
    )
    assert dev_up_broker_pid("127.0.0.1:1111") == fake_services["kafka_pid"]


def test_a_dev_up_stack_beside_another_broker_lends_no_secured_listener(
    state_dir: Path, fake_services: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis from the recorded stack, Kafka from the environment: the listener is not that broker's."""
    (state_dir / "stack.json").write_text(json.dumps(fake_services))
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
    with session_endpoints() as endpoints:
        assert endpoints.bootstrap == "elsewhere:9092" and endpoints.redis_url == "redis://127.0.0.1:2222/0"
        assert endpoints.broker_pid is None and set(_secured(endpoints).values()) == {None}


def test_ci_never_reuses_a_dev_up_stack(
    state_dir: Path, fake_services: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    (state_dir / "stack.json").write_text(json.dumps(fake_services))
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "ci-broker:9092")
    monkeypatch.setenv("REDIS_URL", "redis://ci-redis:6379/0")
    with session_endpoints() as endpoints:
        assert endpoints.source == "env"
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS")
    monkeypatch.setattr("turnledger.devstack.session.choose_backend", lambda settings: "docker")
    monkeypatch.setattr("turnledger.devstack.session.container_stack", _fake_containers, raising=True)
    with session_endpoints() as endpoints:
        assert endpoints.source == "docker" and endpoints.bootstrap == "container:9092"
        assert endpoints.secure_client_env() is None and set(_secured(endpoints).values()) == {None}
        assert endpoints.redis_url == "redis://ci-redis:6379/0", "a service given by env is not started"


@contextmanager
def _fake_containers(need_kafka: bool, need_redis: bool) -> Iterator[tuple[str | None, str | None]]:
    yield ("container:9092" if need_kafka else None), ("redis://container/0" if need_redis else None)


def test_dead_recorded_stack_is_not_reused(state_dir: Path, fake_services: dict[str, object]) -> None:
    procs.stop_pid(int(str(fake_services["redis_pid"])), str(fake_services["redis_marker"]), grace_s=2)
    (state_dir / "stack.json").write_text(json.dumps(fake_services))
    assert LocalStack(state_dir).running() is None


def test_stale_session_of_a_dead_pytest_is_reaped(state_dir: Path) -> None:
    owner_files = (state_dir / "owner.log", state_dir / "owner.pid")
    dead_owner = procs.spawn_detached([sys.executable, "-c", "pass"], *owner_files)
    while procs.is_alive(dead_owner):
        time.sleep(0.02)
    session = state_dir / f"session-{dead_owner}"
    orphan = procs.spawn_detached(
        [sys.executable, "-c", "import time; time.sleep(60)", str(session / "kafka")],
        session / "kafka.log",
        session / "kafka.pid",
    )
    _wait_until_owned(orphan, str(session / "kafka"))
    assert reap_stale_sessions(Settings.from_env().state_dir) == [session]
    # `owns`, not `is_alive`: with pid_max at 32768 and CI's thread churn, the pid of the orphan
    # (stopped and reaped) may already be another task's; its command line says whether it is ours.
    assert not procs.owns(orphan, str(session / "kafka")) and not session.exists()


def test_dev_reap_stops_the_stack_of_a_dead_session_and_leaves_a_live_one(state_dir: Path) -> None:
    """`make test` runs `turnledger dev reap` after its integration pass: a worker the watchdog ended
    with `os._exit` leaves its session's stack running, which nothing else would stop until the next
    session starts. A live session's stack (this process's pid) stays."""
    owner_files = (state_dir / "owner.log", state_dir / "owner.pid")
    dead_owner = procs.spawn_detached([sys.executable, "-c", "pass"], *owner_files)
    while procs.is_alive(dead_owner):
        time.sleep(0.02)
    dead, live = state_dir / f"session-{dead_owner}", state_dir / f"session-{os.getpid()}"
    orphan = procs.spawn_detached(
        [sys.executable, "-c", "import time; time.sleep(60)", str(dead / "kafka")],
        dead / "kafka.log",
        dead / "kafka.pid",
    )
    live.mkdir()
    _wait_until_owned(orphan, str(dead / "kafka"))
    result = CliRunner().invoke(dev_app, ["reap"])
    assert result.exit_code == 0, result.output
    assert result.output == f"Reaped the stack of a test session that is gone: {dead}\n"
    assert not procs.owns(orphan, str(dead / "kafka")) and not dead.exists()
    assert live.is_dir()
    again = CliRunner().invoke(dev_app, ["reap"])
    assert (again.exit_code, again.output) == (0, "No stack of a finished test session was left running.\n")


def test_dev_reap_without_a_state_dir_reaps_nothing(state_dir: Path) -> None:
    result = CliRunner().invoke(dev_app, ["reap"])
    assert (result.exit_code, result.output) == (0, "No stack of a finished test session was left running.\n")
    assert not state_dir.exists()


def test_a_second_start_waits_for_the_first_to_finish(state_dir: Path) -> None:
    """Two sessions starting at once (the integration pass's pytest-xdist workers) take turns: the
    second enters only after the first has left, so it finds the shared TLS material whole."""
    events: list[str] = []
    first_in, second_tried = threading.Event(), threading.Event()

    def first() -> None:
        with one_start_at_a_time(state_dir):
            events.append("first in")
            first_in.set()
            assert second_tried.wait(10)
            time.sleep(0.2)
            events.append("first out")

    def second() -> None:
        assert first_in.wait(10)
        second_tried.set()
        with one_start_at_a_time(state_dir):
            events.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert events == ["first in", "first out", "second in"]
    assert reap_stale_sessions(state_dir) == [], "the lock file is no session"
