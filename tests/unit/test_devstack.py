"""Devstack pieces that need no broker: settings, config rendering, pid handling and the typed errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from turnledger.devstack import jars, kafka, procs, redis_server
from turnledger.devstack.errors import (
    JavaMissing,
    MavenDownloadFailed,
    MavenMissing,
    PortInUse,
    RedisServerMissing,
)
from turnledger.devstack.session import choose_backend
from turnledger.devstack.settings import Settings
from turnledger.devstack.tls import BrokerTls

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TURNLEDGER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("TURNLEDGER_KAFKA_VERSION", raising=False)
    return Settings.from_env()


def test_settings_follow_env(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.kafka_cache("4.4.0") == tmp_path / "cache" / "kafka-4.4.0"
    assert settings.state_dir == tmp_path / "state"
    assert settings.kafka_versions == ("4.4.0", "4.3.1")
    monkeypatch.setenv("TURNLEDGER_KAFKA_VERSION", "4.3.1")
    assert Settings.from_env().kafka_versions == ("4.3.1",)


def test_pom_pins_kafka_log4j_binding_and_plugin() -> None:
    root = ET.fromstring(jars.pom_text())
    deps = {d.findtext("m:artifactId", namespaces=POM_NS) for d in root.iterfind(".//m:dependency", POM_NS)}
    assert deps == {"kafka_2.13", "log4j-slf4j-impl"}
    plugin = root.find(".//m:plugin", POM_NS)
    assert plugin is not None and plugin.findtext("m:version", namespaces=POM_NS) == "3.8.1"
    assert root.findtext(".//m:properties/m:kafka.version", namespaces=POM_NS) == "4.4.0"


def test_cluster_id_has_kafka_uuid_shape() -> None:
    for _ in range(200):
        cid = kafka.cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_render_config_fills_every_placeholder(tmp_path: Path) -> None:
    tls = BrokerTls(tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "broker.p12", "store-secret")
    props = kafka.render_config(tmp_path, 19092, 19093, 19094, "sasl-secret", tls).read_text()
    assert "$" not in props
    assert (
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,SASL_SSL://127.0.0.1:19094"
        in props
    )
    assert "controller.quorum.bootstrap.servers=127.0.0.1:19093" in props
    assert f"log.dirs={tmp_path / 'data'}" in props
    for key in (
        "offsets.topic.num.partitions=1",
        "transaction.state.log.num.partitions=1",
        "group.initial.rebalance.delay.ms=0",
    ):
        assert key in props
    assert (tmp_path / "log4j2.properties").exists()


def test_fixed_kafka_port_in_use_is_a_typed_error(bound_port: int) -> None:
    with pytest.raises(PortInUse, match=str(bound_port)):
        kafka._pick_ports(bound_port, None)


def test_fixed_redis_port_in_use_is_a_typed_error(bound_port: int, tmp_path: Path) -> None:
    if not redis_server.shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    with pytest.raises(PortInUse, match="already in use"):
        redis_server.start_redis(tmp_path, tmp_path / "redis.pid", port=bound_port)


def test_missing_tools_are_typed_errors(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(JavaMissing, match="Java 17"):
        jars.require_java()
    with pytest.raises(MavenMissing, match="mvn"):
        jars.ensure_jars(settings)
    with pytest.raises(RedisServerMissing, match="apt-get install -y redis-server"):
        redis_server.start_redis(tmp_path, tmp_path / "redis.pid")


def test_maven_failure_names_versions_and_log(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    mvn = fake_bin / "mvn"
    mvn.write_text("#!/bin/sh\necho 'Could not resolve dependencies: network is unreachable'\nexit 1\n")
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    with pytest.raises(MavenDownloadFailed) as info:
        jars.ensure_jars(settings)
    message = str(info.value)
    assert "4.4.0, 4.3.1" in message and "network is unreachable" in message
    assert str(settings.kafka_cache("4.3.1") / "mvn.log") in message
    assert not (settings.kafka_cache("4.4.0") / jars.MARKER).exists()


def test_stop_pid_kills_the_whole_group_and_refuses_foreign_pids(tmp_path: Path) -> None:
    marker = f"devstack-test-{os.getpid()}"
    script = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(child.pid, flush=True)
        time.sleep(120)  # {marker}
        """
    )
    log, pidfile = tmp_path / "svc.log", tmp_path / "svc.pid"
    pid = procs.spawn_detached([sys.executable, "-c", script, marker], log, pidfile)
    deadline = time.monotonic() + 10
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(log.read_text().split()[0])
    assert procs.read_pid(pidfile) == pid and procs.owns(pid, marker) and procs.is_alive(child)
    assert os.getpgid(pid) == pid

    assert not procs.stop_pid(pid, "some-other-service")
    assert procs.is_alive(pid)

    assert procs.stop_pidfile(pidfile, marker, grace_s=5)
    deadline = time.monotonic() + 5
    while (procs.is_alive(pid) or procs.is_alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs.is_alive(pid) and not procs.is_alive(child)
    assert not pidfile.exists()


def test_backend_choice_is_explicit_and_falls_back_to_local(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_BACKEND", "docker")
    assert choose_backend(Settings.from_env()) == "docker"
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_BACKEND", "auto")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    assert choose_backend(Settings.from_env()) == "local"


def test_java_major_parses_version_banners(tmp_path: Path) -> None:
    for banner, major in (('openjdk version "17.0.12" 2024-07-16', 17), ('java version "1.8.0_412"', 8)):
        fake = tmp_path / f"java{major}"
        fake.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
        fake.chmod(0o755)
        assert jars.java_major(str(fake)) == major


def test_compose_file_declares_kafka_redis_and_the_turnledger_services() -> None:
    yaml = pytest.importorskip("yaml")
    compose_file = Path(__file__).resolve().parents[2] / "compose.yaml"
    services = yaml.safe_load(compose_file.read_text())["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert {"redis", "processor", "projector", "worker", "tool-executor", "fake-provider"} <= set(services)
    monitoring = ("prometheus", "grafana")
    commands = {
        name: services[name]["command"][:2]
        for name in services
        if name not in ("kafka", "redis", *monitoring)
    }
    assert commands == {
        "processor": ["turnledger", "process"],
        "projector": ["turnledger", "project"],
        "worker": ["turnledger", "worker"],
        "tool-executor": ["turnledger", "tool-executor"],
        "fake-provider": ["turnledger", "fake-provider"],
        "serve": ["turnledger", "serve"],
    }
    assert "--create-topics" in services["processor"]["command"]
    # serve binds 0.0.0.0 in its container, so it needs the token; its page is published on loopback only
    assert services["serve"]["environment"]["TURNLEDGER_SERVE_TOKEN"] == "${TURNLEDGER_SERVE_TOKEN:-}"
    assert services["serve"]["ports"] == ["127.0.0.1:8765:8765"]
    # every turnledger service serves /metrics on 9400; Prometheus scrapes them, Grafana shows the dashboard
    assert services["processor"]["environment"]["TURNLEDGER_METRICS_PORT"] == "9400"
    assert services["prometheus"]["volumes"] == ["./deploy/prometheus:/etc/prometheus:ro"]
    assert (
        "./deploy/grafana/turnledger.json:/var/lib/grafana/dashboards/turnledger.json:ro"
        in services["grafana"]["volumes"]
    )
    # the fake provider binds loopback only: it lives in the worker's network namespace
    assert services["fake-provider"]["network_mode"] == "service:worker"
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        checked = subprocess.run(
            ["docker", "compose", "-f", str(compose_file), "config", "-q"], capture_output=True, check=False
        )
        assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]),
        (["-XX:+UseG1GC"], ["-XX:TieredStopAtLevel=1", "-XX:+UseG1GC"]),
        (
            ["-XX:TieredStopAtLevel=4", "-XX:+UseParallelGC", "-Xmx1g"],
            ["-XX:TieredStopAtLevel=1", "-XX:TieredStopAtLevel=4", "-XX:+UseParallelGC", "-Xmx1g"],
        ),
        (
            ["-XX:+UseStringDeduplication"],
            ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:+UseStringDeduplication"],
        ),
    ],
)
def test_a_collector_in_the_users_jvm_opts_replaces_ours(extra: list[str], expected: list[str]) -> None:
    assert kafka.tuning_with(kafka.BROKER_TUNING, extra) == expected


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM")
def test_the_jvm_starts_with_a_collector_from_the_users_jvm_opts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ours (the broker's and the storage tool's serial collector) next to the user's choice: the JVM
    would refuse two collectors ("Multiple garbage collectors selected")."""
    fake_jars = jars.KafkaJars(version="test", libs=tmp_path)
    for ours, theirs in ((kafka.BROKER_TUNING, "-XX:+UseG1GC"), (kafka.TOOL_TUNING, "-XX:+UseParallelGC")):
        monkeypatch.setenv("TURNLEDGER_KAFKA_JVM_OPTS", theirs)
        argv = kafka.jvm_args(shutil.which("java") or "java", fake_jars, tmp_path, "256m", ours)
        run = subprocess.run([*argv, "-version"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert argv.count(theirs) == 1
