"""A private MIT Kerberos realm (its KDC on a loopback port) and a Kafka listener that logs in with it.

On-prem Kafka (Cloudera, many banks) authenticates with Kerberos: SASL/GSSAPI. The shared devstack
does not offer it (a KDC is one more process, MIT's KDC one more package), so a test that needs it
makes its own realm under its work directory, with MIT's own tools, as an administrator does:
`kdb5_util create` (a throwaway master password), principals with random keys and their keytabs by
`kadmin.local` (it works on the database file: no admin server runs), and `krb5kdc -n` (in the
foreground, so that its pid is the one we started and stop). The KDC takes TCP only, on a port picked
free (`kdc_listen` empty; the clients' `udp_preference_limit = 1` makes MIT's library and Java's go
there first), and names are never canonicalized through DNS, so a service on 127.0.0.1 is
`kafka/127.0.0.1@REALM` whatever the machine's resolver says.

`kafka_listener` is the broker's side: a SASL_PLAINTEXT listener with GSSAPI, whose JAAS login is
Java's own `Krb5LoginModule` with the broker's keytab. The JVM reads the realm's `krb5.conf` from
`-Djava.security.krb5.conf`, which the listener carries as a JVM option (`kafka.ExtraListener`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from turnledger.devstack import procs
from turnledger.devstack.errors import DevstackError, ServiceNotReady
from turnledger.devstack.kafka import ExtraListener
from turnledger.devstack.ports import free_port, tcp_open

REALM = "TURNLEDGER.TEST"
SERVICE = "kafka"
"""The broker's service name: its principal is `kafka/<host>@REALM`, Kafka's and aiokafka's default."""
TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local")
PACKAGES = "krb5-kdc krb5-admin-server"
"""Debian's packages of `TOOLS` (`kadmin.local` is in krb5-admin-server)."""
_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def tool(name: str) -> str | None:
    """Where MIT's tool `name` is: the KDC's tools live in sbin, which a user's PATH may lack."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))


def missing_tools() -> list[str]:
    return [name for name in TOOLS if tool(name) is None]


class KerberosToolsMissing(DevstackError):
    def __init__(self, missing: list[str]) -> None:
        super().__init__(
            f"MIT Kerberos's {', '.join(missing)} not found: install them "
            f"(apt-get install -y {PACKAGES}; `make setup` does as root)."
        )


class Kdc:
    """A realm under `workdir`, made on the first `start`; its KDC stopped and started again at will
    on the same port (the database stays), so a test can take it away from clients that know it."""

    def __init__(self, workdir: Path, realm: str = REALM) -> None:
        self.workdir = workdir
        self.realm = realm
        self.port = free_port()
        self.krb5_conf = workdir / "krb5.conf"
        self.kdc_conf = workdir / "kdc.conf"
        self.log = workdir / "kdc.log"
        self._pidfile = workdir / "krb5kdc.pid"
        self._own_pidfile = workdir / "krb5kdc.spawned.pid"

    @property
    def marker(self) -> str:
        """In the KDC's command line (its `-P` pid file is under `workdir`): `procs` signals only it."""
        return str(self._pidfile)

    def _env(self) -> dict[str, str]:
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    def _run(self, name: str, *args: str) -> str:
        path = tool(name)
        if path is None:
            raise KerberosToolsMissing([name])
        run = subprocess.run(
            [path, *args],
            env={**os.environ, **self._env()},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise DevstackError(f"{name} {args[0]} failed (exit {run.returncode}): {run.stderr.strip()}")
        return run.stdout

    def create(self) -> None:
        """The configuration files and the realm's database (once)."""
        missing = missing_tools()
        if missing:
            raise KerberosToolsMissing(missing)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.krb5_conf.write_text(client_config(self.realm, self.port))
        self.kdc_conf.write_text(kdc_config(self.realm, self.port, self.workdir))
        if not (self.workdir / "principal").exists():
            self._run("kdb5_util", "create", "-s", "-r", self.realm, "-P", secrets.token_urlsafe(24))

    def add_principal(self, name: str, keytab: Path) -> Path:
        """`name` with a random key, exported to `keytab` (which is added to)."""
        self._run("kadmin.local", "-r", self.realm, "-q", f"addprinc -randkey {name}")
        return self.export_keytab(name, keytab)

    def export_keytab(self, name: str, keytab: Path) -> Path:
        """`name`'s keys into `keytab`. kadmin's `ktadd` draws new random keys: every keytab exported
        before for `name` is stale from now on (a wrong keytab, as after a password change)."""
        self._run("kadmin.local", "-r", self.realm, "-q", f"ktadd -k {keytab} {name}")
        return keytab

    def delete_principal(self, name: str) -> None:
        self._run("kadmin.local", "-r", self.realm, "-q", f"delprinc -force {name}")

    def principal(self, name: str) -> str:
        return f"{name}@{self.realm}"

    @property
    def running(self) -> bool:
        pid = procs.read_pid(self._own_pidfile)
        return pid is not None and procs.owns(pid, self.marker)

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the KDC (making the realm on first use); return once it accepts TCP connections."""
        self.create()
        krb5kdc = tool("krb5kdc")
        assert krb5kdc is not None
        pid = procs.spawn_detached(
            [krb5kdc, "-n", "-P", str(self._pidfile)], self.log, self._own_pidfile, env=self._env()
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not procs.is_alive(pid):
                raise ServiceNotReady("krb5kdc", timeout_s, self.log, procs.tail(self.log), "it exited")
            if tcp_open("127.0.0.1", self.port):
                return
            time.sleep(0.05)
        procs.stop_pidfile(self._own_pidfile, self.marker, grace_s=5)
        raise ServiceNotReady("krb5kdc", timeout_s, self.log, procs.tail(self.log), "its port never opened")

    def stop(self) -> None:
        procs.stop_pidfile(self._own_pidfile, self.marker, grace_s=5)

    def client_env(self, keytab: Path, ccache: Path) -> dict[str, str]:
        """MIT krb5's own variables for a client that gets its tickets with `keytab` (the library does
        that itself: KRB5_CLIENT_KTNAME) and keeps them in `ccache`, in this realm."""
        return {
            "KRB5_CONFIG": str(self.krb5_conf),
            "KRB5_CLIENT_KTNAME": f"FILE:{keytab}",
            "KRB5CCNAME": f"FILE:{ccache}",
        }

    def kafka_listener(self, name: str, port: int, keytab: Path) -> ExtraListener:
        """A SASL_PLAINTEXT listener `name` on `port` taking GSSAPI logins for the broker principal
        `kafka/127.0.0.1@REALM`, whose keys are in `keytab`."""
        principal = self.principal(f"{SERVICE}/127.0.0.1")
        prefix = f"listener.name.{name.lower()}."
        jaas = (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
            f'keyTab="{keytab}" principal="{principal}" serviceName="{SERVICE}";'
        )
        return ExtraListener(
            name=name,
            protocol="SASL_PLAINTEXT",
            port=port,
            settings=(
                f"{prefix}sasl.enabled.mechanisms=GSSAPI",
                f"{prefix}gssapi.sasl.jaas.config={jaas}",
            ),
            jvm_options=(f"-Djava.security.krb5.conf={self.krb5_conf}",),
        )


def client_config(realm: str, port: int) -> str:
    """`krb5.conf` for the realm's clients, the broker's JVM among them: the KDC by address, no DNS."""
    return f"""[libdefaults]
  default_realm = {realm}
  dns_lookup_realm = false
  dns_lookup_kdc = false
  dns_canonicalize_hostname = false
  rdns = false
  udp_preference_limit = 1
  max_retries = 1
[realms]
  {realm} = {{
    kdc = 127.0.0.1:{port}
  }}
"""


def kdc_config(realm: str, port: int, workdir: Path) -> str:
    """`kdc.conf`: the database, its stash and the log under `workdir`; TCP on `port` only."""
    return f"""[kdcdefaults]
  kdc_listen = ""
  kdc_tcp_listen = 127.0.0.1:{port}
[realms]
  {realm} = {{
    database_name = {workdir / "principal"}
    key_stash_file = {workdir / "stash"}
    acl_file = {workdir / "kadm5.acl"}
  }}
[logging]
  kdc = FILE:{workdir / "kdc.log"}
"""
