"""The devstack's KDC (devstack/kerberos.py's `Kdc`) driving stand-ins for MIT's tools: where the tools are
looked for, what each is run with (its arguments, the realm's two configuration files, never the test's
stdin), the realm made once, a tool that fails, and the KDC's process: started in the foreground with its
pid file under the work directory, waited for on its own address, stopped and started again on the same
port, and named with its log when it exits or its port never opens. The stand-ins record each run and
act as far as `Kdc` can tell (kdb5_util makes the database file `kdc.conf` names, krb5kdc listens where
`kdc.conf` says). MIT's real tools, a broker and logins: tests/integration/test_kerberos_listener.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import string
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from turnledger.devstack import kerberos, procs
from turnledger.devstack.errors import DevstackError, ServiceNotReady
from turnledger.devstack.kerberos import Kdc, KerberosToolsMissing, client_config, kdc_config
from turnledger.devstack.ports import tcp_open

REALM = "EXAMPLE.TEST"

FAKE = """#!{python} -IS
import json, os, signal, socket, sys

signal.alarm(120)  # never outlives the test run, whatever a mutant does to stopping it
name = os.path.basename(sys.argv[0])
with open({record!r}, "a") as out:
    out.write(json.dumps({{
        "argv": sys.argv,
        "pid": os.getpid(),
        "stdin": os.readlink("/proc/self/fd/0"),
        "KRB5_CONFIG": os.environ.get("KRB5_CONFIG"),
        "KRB5_KDC_PROFILE": os.environ.get("KRB5_KDC_PROFILE"),
    }}) + "\\n")
if name in os.environ.get("FAKE_MIT_FAILS", "").split(","):
    sys.stderr.write("\\n  " + name + ": Cannot lock database while initializing  \\n")
    sys.exit(1)
profile = {{}}
for line in open(os.environ["KRB5_KDC_PROFILE"]):
    key, _, value = line.partition("=")
    profile.setdefault(key.strip(), value.strip())
if name == "kdb5_util":
    open(profile["database_name"], "x").close()
elif name == "krb5kdc":
    mode = os.environ.get("FAKE_KRB5KDC", "serve")
    host, _, port = profile["kdc_tcp_listen"].rpartition(":")
    if mode == "exit":
        sys.stderr.write("krb5kdc: Address already in use - Cannot bind server socket on ")
        sys.stderr.write(f"{{host}}.{{port}}\\n")
        sys.exit(1)
    if mode == "mute":
        signal.pause()
    server = socket.create_server((host, int(port)))
    print(f"krb5kdc: commencing operation on {{host}}.{{port}}", flush=True)
    while True:
        server.accept()[0].close()
"""
"""One script for the three tools, acting by the name it is run as; `FAKE_MIT_FAILS` names the tools
that fail, `FAKE_KRB5KDC` makes krb5kdc exit at once (`exit`) or live without listening (`mute`)."""


@dataclass
class FakeMit:
    bin: Path
    record: Path

    def path(self, name: str) -> str:
        return str(self.bin / name)

    def runs(self, name: str | None = None) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        runs = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [run for run in runs if name is None or Path(run["argv"][0]).name == name]


@pytest.fixture
def mit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMit]:
    """The stand-ins alone on PATH, and no sbin directory holding the real tools."""
    fake = FakeMit(tmp_path / "bin", tmp_path / "runs.jsonl")
    fake.bin.mkdir()
    for name in kerberos.TOOLS:
        script = fake.bin / name
        script.write_text(FAKE.format(python=sys.executable, record=str(fake.record)))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.bin))
    monkeypatch.setattr(kerberos, "_SBIN", (str(tmp_path / "no-sbin"),))
    spawned: list[int] = []
    spawn = procs.spawn_detached

    def spawn_detached(*args: Any, **kwargs: Any) -> int:
        spawned.append(spawn(*args, **kwargs))
        return spawned[-1]

    monkeypatch.setattr(procs, "spawn_detached", spawn_detached)
    yield fake
    for pid in spawned:  # whatever a test or a mutant left running
        if procs.owns(pid, str(fake.bin)):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def stdin_is_a_pipe() -> Iterator[None]:
    """The test's fd 0 a pipe nobody writes to (pytest's is /dev/null): a tool that inherited it would
    wait there for an answer to a prompt."""
    read, write = os.pipe()
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)


@dataclass
class Sleeps:
    """`kerberos.time` with its waits recorded: `monotonic` the real one, or a clock that each wait moves
    on by `step` seconds (and does not really wait)."""

    step: float | None = None
    now: float = 1_000.0
    waits: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return time.monotonic() if self.step is None else self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.step is None:
            time.sleep(seconds)
        else:
            self.now += self.step


@dataclass
class Stops:
    """`procs.stop_pidfile` as `Kdc` calls it (the pid file, the marker and the grace before SIGKILL),
    and the pid each pid file held."""

    calls: list[tuple[Path, str, float]] = field(default_factory=list)
    pids: list[int | None] = field(default_factory=list)


@pytest.fixture
def stops(monkeypatch: pytest.MonkeyPatch) -> Stops:
    stops = Stops()
    real = procs.stop_pidfile

    def stop_pidfile(pidfile: Path, marker: str, grace_s: float = 20.0) -> bool:
        stops.calls.append((pidfile, marker, grace_s))
        stops.pids.append(procs.read_pid(pidfile))
        return real(pidfile, marker, grace_s)

    monkeypatch.setattr(procs, "stop_pidfile", stop_pidfile)
    return stops


def test_mit_tools_are_looked_for_on_path_first_then_in_the_sbin_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path, sbin_a, sbin_b = tmp_path / "bin", tmp_path / "sbin-a", tmp_path / "sbin-b"
    for directory, names in ((on_path, ["kdb5_util"]), (sbin_a, []), (sbin_b, ["kdb5_util", "krb5kdc"])):
        directory.mkdir()
        for name in names:
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.setattr(kerberos, "_SBIN", (str(sbin_a), str(sbin_b)))
    assert kerberos.tool("kdb5_util") == str(on_path / "kdb5_util")
    assert kerberos.tool("krb5kdc") == str(sbin_b / "krb5kdc")
    assert kerberos.tool("kadmin.local") is None
    assert kerberos.missing_tools() == ["kadmin.local"]
    with pytest.raises(KerberosToolsMissing) as missing:
        Kdc(tmp_path / "kdc").create()
    assert str(missing.value).startswith("MIT Kerberos's kadmin.local not found: install them ")
    assert not (tmp_path / "kdc").exists()


@pytest.mark.usefixtures("stdin_is_a_pipe")
def test_the_realm_is_made_once_by_kdb5_util_with_a_random_master_password(
    tmp_path: Path, mit: FakeMit
) -> None:
    workdir = tmp_path / "devstack" / "kdc"
    kdc = Kdc(workdir, realm=REALM)
    kdc.create()
    kdc.create()
    assert sorted(os.listdir(workdir)) == ["kdc.conf", "krb5.conf", "principal"]
    assert isinstance(kdc.port, int)
    assert (workdir / "krb5.conf").read_text() == client_config(REALM, kdc.port)
    assert (workdir / "kdc.conf").read_text() == kdc_config(REALM, kdc.port, workdir)
    [run] = mit.runs()
    password = run["argv"][-1]
    assert run == {
        "argv": [mit.path("kdb5_util"), "create", "-s", "-r", REALM, "-P", password],
        "pid": run["pid"],
        "stdin": "/dev/null",
        "KRB5_CONFIG": str(workdir / "krb5.conf"),
        "KRB5_KDC_PROFILE": str(workdir / "kdc.conf"),
    }
    assert len(password) == 32 and set(password) <= set(string.ascii_letters + string.digits + "-_")
    Kdc(tmp_path / "other", realm=REALM).create()
    assert mit.runs()[1]["argv"][-1] != password


@pytest.mark.usefixtures("stdin_is_a_pipe")
def test_principals_and_their_keytabs_are_kadmin_local_queries_on_the_realm(
    tmp_path: Path, mit: FakeMit
) -> None:
    kdc = Kdc(tmp_path / "kdc", realm=REALM)
    kdc.create()
    keytab = tmp_path / "svc.keytab"
    assert kdc.add_principal("svc/127.0.0.1", keytab) == keytab
    assert kdc.export_keytab("svc/127.0.0.1", keytab) == keytab
    kdc.delete_principal("svc/127.0.0.1")
    kadmin = mit.path("kadmin.local")
    assert [run["argv"] for run in mit.runs("kadmin.local")] == [
        [kadmin, "-r", REALM, "-q", "addprinc -randkey svc/127.0.0.1"],
        [kadmin, "-r", REALM, "-q", f"ktadd -k {keytab} svc/127.0.0.1"],
        [kadmin, "-r", REALM, "-q", f"ktadd -k {keytab} svc/127.0.0.1"],
        [kadmin, "-r", REALM, "-q", "delprinc -force svc/127.0.0.1"],
    ]
    assert {(run["stdin"], run["KRB5_CONFIG"], run["KRB5_KDC_PROFILE"]) for run in mit.runs()} == {
        ("/dev/null", str(tmp_path / "kdc" / "krb5.conf"), str(tmp_path / "kdc" / "kdc.conf"))
    }


def test_a_tool_that_fails_is_a_devstack_error_with_its_first_argument_exit_status_and_words(
    tmp_path: Path, mit: FakeMit, monkeypatch: pytest.MonkeyPatch
) -> None:
    kdc = Kdc(tmp_path / "kdc", realm=REALM)
    monkeypatch.setenv("FAKE_MIT_FAILS", "kdb5_util,kadmin.local")
    with pytest.raises(DevstackError) as failed:
        kdc.create()
    assert type(failed.value) is DevstackError
    assert str(failed.value) == (
        "kdb5_util create failed (exit 1): kdb5_util: Cannot lock database while initializing"
    )
    with pytest.raises(DevstackError) as failed:
        kdc.add_principal("svc", tmp_path / "svc.keytab")
    assert str(failed.value) == (
        "kadmin.local -r failed (exit 1): kadmin.local: Cannot lock database while initializing"
    )
    assert [Path(run["argv"][0]).name for run in mit.runs()] == ["kdb5_util", "kadmin.local"]


def test_a_tool_gone_since_the_realm_was_made_is_named_alone(tmp_path: Path, mit: FakeMit) -> None:
    kdc = Kdc(tmp_path / "kdc", realm=REALM)
    kdc.create()
    (mit.bin / "kadmin.local").unlink()
    with pytest.raises(KerberosToolsMissing) as missing:
        kdc.delete_principal("svc")
    assert str(missing.value) == (
        "MIT Kerberos's kadmin.local not found: install them "
        "(apt-get install -y krb5-kdc krb5-admin-server; `make setup` does as root)."
    )
    assert mit.runs("kadmin.local") == []


def test_the_kdc_runs_in_the_foreground_until_stopped_and_starts_again_on_the_same_port(
    tmp_path: Path, mit: FakeMit, monkeypatch: pytest.MonkeyPatch, stops: Stops
) -> None:
    sleeps = Sleeps()
    monkeypatch.setattr(kerberos, "time", sleeps)
    workdir = tmp_path / "kdc"
    kdc = Kdc(workdir, realm=REALM)
    kdc.start(timeout_s=10)
    [run] = mit.runs("krb5kdc")
    assert run["argv"] == [mit.path("krb5kdc"), "-n", "-P", str(workdir / "krb5kdc.pid")]
    assert (run["KRB5_CONFIG"], run["KRB5_KDC_PROFILE"]) == (
        str(workdir / "krb5.conf"),
        str(workdir / "kdc.conf"),
    )
    assert kdc.marker == str(workdir / "krb5kdc.pid")
    assert (workdir / "krb5kdc.spawned.pid").read_text() == f"{run['pid']}\n"
    assert kdc.running and tcp_open("127.0.0.1", kdc.port)
    assert (workdir / "kdc.log").read_text() == f"krb5kdc: commencing operation on 127.0.0.1.{kdc.port}\n"
    assert sleeps.waits and set(sleeps.waits) == {0.05}  # it polled: the stand-in takes a while to start

    kdc.stop()
    assert stops.calls == [(workdir / "krb5kdc.spawned.pid", str(workdir / "krb5kdc.pid"), 5)]
    assert stops.pids == [run["pid"]] and not procs.is_alive(run["pid"]) and not kdc.running
    assert not (workdir / "krb5kdc.spawned.pid").exists()
    assert not tcp_open("127.0.0.1", kdc.port)

    kdc.start(timeout_s=10)
    assert [run["argv"][0] for run in mit.runs()] == [
        mit.path("kdb5_util"),
        mit.path("krb5kdc"),
        mit.path("krb5kdc"),
    ]
    assert kdc.running and tcp_open("127.0.0.1", kdc.port)
    kdc.stop()
    assert not kdc.running


def test_a_kdc_that_exits_is_named_with_the_last_lines_of_its_log(
    tmp_path: Path, mit: FakeMit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KRB5KDC", "exit")
    kdc = Kdc(tmp_path / "kdc", realm=REALM)
    with pytest.raises(ServiceNotReady) as failed:
        kdc.start()
    log = tmp_path / "kdc" / "kdc.log"
    assert failed.value.log == log
    assert str(failed.value) == (
        f"krb5kdc did not become ready within 30s (it exited). Its log is {log}; the process has been "
        f"stopped.\n--- last lines of {log} ---\n"
        f"krb5kdc: Address already in use - Cannot bind server socket on 127.0.0.1.{kdc.port}"
    )
    assert len(mit.runs("krb5kdc")) == 1


def test_a_kdc_whose_own_port_never_opens_is_stopped_and_named_when_the_time_is_up(
    tmp_path: Path, mit: FakeMit, monkeypatch: pytest.MonkeyPatch, stops: Stops
) -> None:
    """The default 30 s on a clock that each 50 ms poll moves on by 10 s: three polls, then the KDC is
    stopped. A socket listening at the KDC's port on ::1 is not the KDC, which listens on 127.0.0.1."""
    monkeypatch.setenv("FAKE_KRB5KDC", "mute")
    sleeps = Sleeps(step=10.0)
    monkeypatch.setattr(kerberos, "time", sleeps)
    workdir = tmp_path / "kdc"
    kdc = Kdc(workdir, realm=REALM)
    with socket.socket(socket.AF_INET6) as other:
        other.bind(("::1", kdc.port))
        other.listen()
        with pytest.raises(ServiceNotReady) as failed:
            kdc.start()
    log = workdir / "kdc.log"
    assert failed.value.log == log
    assert str(failed.value) == (
        f"krb5kdc did not become ready within 30s (its port never opened). Its log is {log}; the process "
        f"has been stopped.\n--- last lines of {log} ---\n(log is empty)"
    )
    assert sleeps.waits == [0.05, 0.05, 0.05]
    assert stops.calls == [(workdir / "krb5kdc.spawned.pid", str(workdir / "krb5kdc.pid"), 5)]
    [pid] = stops.pids  # stopped before it ran far enough to record its run, as a rule
    assert pid is not None and not procs.is_alive(pid) and not (workdir / "krb5kdc.spawned.pid").exists()
