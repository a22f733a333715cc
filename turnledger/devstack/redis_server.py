"""Debian's `redis-server` on a free loopback port, without persistence: the projection is rebuildable.

Besides its plaintext port, where the default user stays as it always was (no password), it has an ACL
user `turnledger` with a random password (`<work dir>/turnledger.password`, mode 0600, while Redis's
data lives) and, when openssl is installed, a TLS port with a certificate of its own CA
(`redis_tls.py`): what a managed Redis (ElastiCache with in-transit encryption and RBAC, Redis Cloud)
asks of a client, to try REDIS_URL=rediss://..., REDIS_SSL_CA_FILE and REDIS_PASSWORD_FILE against.
The user is given on the command line with the SHA-256 of its password (`#<hex>`), never the password,
so that neither the process list nor a config file holds it.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import redis

from turnledger.devstack import procs
from turnledger.devstack.credentials import stored_password
from turnledger.devstack.errors import PortInUse, RedisServerMissing, ServiceNotReady
from turnledger.devstack.ports import free_port, port_is_free
from turnledger.devstack.redis_tls import RedisTls, ensure_redis_tls
from turnledger.devstack.tls import openssl

ACL_USERNAME = "turnledger"
ACL_RULES = ("on", "~*", "&*", "+@all")
"""Every key, channel and command: the user stands for a service's login, not for a restriction."""
PASSWORD_FILE = "turnledger.password"


@dataclass(frozen=True)
class RedisTlsPort:
    """The TLS port and how a client logs in there."""

    url: str
    """`rediss://turnledger@127.0.0.1:<port>/0`: the user, never the password."""
    ca_file: Path


@dataclass(frozen=True)
class RedisProcess:
    pid: int
    url: str
    log: Path
    marker: str
    username: str
    """The ACL user (the default user is left as it is)."""
    password_file: Path
    tls: RedisTlsPort | None = None
    """None when openssl was missing: then there is no TLS port."""


def acl_user_args(username: str, password: str) -> list[str]:
    """`--user NAME on #<sha256 of the password> ~* &* +@all`: redis-server takes each rule as its own
    argument (one argument holding spaces is read as the user's name)."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    return ["--user", username, ACL_RULES[0], f"#{digest}", *ACL_RULES[1:]]


def tls_args(port: int, material: RedisTls, clients: Literal["optional", "yes"] = "optional") -> list[str]:
    """The TLS port with the server's certificate. A client may present a certificate of the same CA
    (`--tls-auth-clients optional`: one presented is verified, one of another CA refused) and need
    not, as with managed Redis, which logs clients in by password; `yes` requires one (the tests of
    mutual TLS start such a server of their own)."""
    return [
        "--tls-port", str(port),
        "--tls-cert-file", str(material.cert_file),
        "--tls-key-file", str(material.key_file),
        "--tls-ca-cert-file", str(material.ca_file),
        "--tls-auth-clients", clients,
    ]  # fmt: skip


def redis_argv(
    binary: str, port: int, workdir: Path, acl: list[str], tls: list[str] | None = None
) -> list[str]:
    return [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--dir", str(workdir),
        *acl,
        *(tls or []),
    ]  # fmt: skip


def redis_tls_client_env(
    tls_url: str | None, password_file: str | None, ca_file: str | None
) -> dict[str, str] | None:
    """The variables that point a turnledger client at the TLS port as the ACL user; None without one."""
    if tls_url is None or password_file is None or ca_file is None:
        return None
    return {"REDIS_URL": tls_url, "REDIS_PASSWORD_FILE": password_file, "REDIS_SSL_CA_FILE": ca_file}


def start_redis(
    workdir: Path,
    pidfile: Path,
    port: int | None = None,
    timeout_s: float = 20.0,
    tls_dir: Path | None = None,
) -> RedisProcess:
    """Start redis-server and wait until it answers PING on its plaintext port and, with a TLS port
    (`tls_dir` given and openssl installed), there too as the ACL user, its certificate verified."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerMissing()
    if port is not None and not port_is_free(port):
        raise PortInUse("redis-server", port)
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "redis.log"
    password_file = workdir / PASSWORD_FILE
    password = stored_password(password_file)
    tool = openssl() if tls_dir is not None else None
    tls: RedisTlsPort | None = None
    tls_argv: list[str] | None = None
    if tls_dir is not None and tool is not None:
        material = ensure_redis_tls(tls_dir, tool)
        tls_port = free_port()
        tls = RedisTlsPort(f"rediss://{ACL_USERNAME}@127.0.0.1:{tls_port}/0", material.ca_file)
        tls_argv = tls_args(tls_port, material)
    argv = redis_argv(binary, port, workdir, acl_user_args(ACL_USERNAME, password), tls_argv)
    pid = procs.spawn_detached(argv, log, pidfile, cwd=workdir)
    proc = RedisProcess(
        pid, f"redis://127.0.0.1:{port}/0", log, f"127.0.0.1:{port}", ACL_USERNAME, password_file, tls
    )
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
            if _answers(proc.url) and (tls is None or _answers(tls.url, password, tls.ca_file)):
                return proc
        except redis.RedisError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        time.sleep(0.05)
    procs.stop_pidfile(pidfile, proc.marker, grace_s=2)
    raise ServiceNotReady("Redis", timeout_s, log, procs.tail(log), reason)


def _answers(url: str, password: str | None = None, ca_file: Path | None = None) -> bool:
    """One PING; with `ca_file`, over TLS with the certificate and its host name verified."""
    tls = {} if ca_file is None else {"ssl_ca_certs": str(ca_file)}
    client = redis.Redis.from_url(url, socket_timeout=1, password=password, **tls)
    try:
        return bool(client.ping())
    finally:
        client.close()
