"""The secured listener's TLS material: a private CA and a broker certificate, made with `keytool`.

keytool ships with the Java the broker needs anyway, so the devstack imports no crypto library. The
material is made once per state dir (`<state dir>/tls/`) and reused while it stays valid for another
day: each keytool run is a JVM start, and a pytest session's stack (`session-<pid>/`) reuses the one
of its state dir instead of paying for it again.

`tls/` holds `ca.pem` (the CA certificate: clients' KAFKA_SSL_CA_FILE), `broker.p12` (the broker's key
and its certificate chain) and `keystore.password`, both mode 0600, and `not-after` (when the
certificates expire, in Unix seconds). The CA's private key never leaves the temporary directory it
was made in: nothing can sign another certificate with it once the broker's is signed.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from turnledger.devstack.credentials import new_password, write_private
from turnledger.devstack.errors import DevstackError, KeytoolMissing

VALIDITY_DAYS = 365
RENEW_WITHIN_S = 24 * 3600
"""Material expiring sooner than this is made anew: a stack started now must outlive a working day."""

BROKER_SAN = "IP:127.0.0.1,DNS:localhost"
"""The names clients verify: the devstack advertises 127.0.0.1; `localhost` for users who type it."""

KEYTOOL_TUNING = ("-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC")
"""keytool is a one-shot JVM like the StorageTool: C1 only and the serial collector make it start fast."""

KEY = ("-keyalg", "EC", "-groupname", "secp256r1")
"""EC P-256: generated in milliseconds where RSA takes a noticeable share of a keytool run; every TLS
stack in use (Java, OpenSSL behind Python's ssl) accepts it."""

CA_PROFILE = (
    "-dname",
    "CN=turnledger devstack CA",
    "-ext",
    "bc:c=ca:true",
    "-ext",
    "ku:c=keyCertSign,cRLSign",
)
"""The CA's name and a proper CA's extensions (critical basicConstraints CA:true, keyUsage
keyCertSign): strict verifiers (OpenSSL's X509_STRICT, Python 3.13's default) refuse a leaf whose
issuer lacks them."""

LEAF_EXTENSIONS = ("-ext", f"SAN={BROKER_SAN}", "-ext", "ku:c=digitalSignature", "-ext", "eku=serverAuth")


@dataclass(frozen=True)
class BrokerTls:
    ca_file: Path
    keystore: Path
    password: str
    """The PKCS12 keystore's password (for PKCS12, also its key's)."""

    @classmethod
    def at(cls, directory: Path) -> BrokerTls:
        return cls(
            directory / "ca.pem",
            directory / "broker.p12",
            (directory / "keystore.password").read_text().strip(),
        )


def keytool() -> str:
    tool = shutil.which("keytool")
    if tool is None:
        raise KeytoolMissing()
    return tool


def needs_renewal(directory: Path, now: float) -> bool:
    """True when the material is incomplete or expires within a day of `now`."""
    files = ("ca.pem", "broker.p12", "keystore.password")
    if not all((directory / name).is_file() for name in files):
        return True
    try:
        not_after = float((directory / "not-after").read_text())
    except (FileNotFoundError, ValueError):
        return True
    return not_after - now < RENEW_WITHIN_S


def ensure_broker_tls(directory: Path) -> BrokerTls:
    """The material in `directory`, made first when missing or expiring. Made in a sibling temporary
    directory and renamed into place whole, so a concurrent reader (another session of the same state
    dir) never sees half a set; when two made it at once, the first rename wins for both."""
    if needs_renewal(directory, time.time()):
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = directory.parent / f".{directory.name}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            _make(staging, keytool())
            _install(staging / "out", directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return BrokerTls.at(directory)


def _install(made: Path, directory: Path) -> None:
    """Put the new set in place of an expiring one, or keep a valid set another process just put
    there (a rename onto a non-empty directory fails)."""
    if directory.exists() and needs_renewal(directory, time.time()):
        retired = directory.parent / f".{directory.name}-retired-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(directory, retired)
        shutil.rmtree(retired, ignore_errors=True)
    try:
        os.rename(made, directory)
    except OSError:
        if needs_renewal(directory, time.time()):  # not a concurrent maker's complete set: ours then
            raise


def _make(staging: Path, tool: str) -> None:
    """CA and broker key pairs, the broker's certificate signed by the CA, its chain in the keystore:
    five keytool runs, the first two side by side and the CA's export beside the signing."""
    staging.mkdir(mode=0o700)
    out = staging / "out"
    out.mkdir(mode=0o700)  # opened to others (for ca.pem) once the keystore in it is 0600
    started = time.time()  # the certificates' validity counts from a moment after this
    password = new_password()
    write_private(out / "keystore.password", password + "\n")
    ca, broker = _store(staging / "ca.p12"), _store(out / "broker.p12")
    run = functools.partial(_run, tool, staging, password)
    validity = ("-validity", str(VALIDITY_DAYS))
    with ThreadPoolExecutor(max_workers=2) as pool:
        ca_made = pool.submit(run, "-genkeypair", "-alias", "ca", *ca, *KEY, *validity, *CA_PROFILE)
        run("-genkeypair", "-alias", "broker", *broker, *KEY, *validity, "-dname", "CN=localhost")
        ca_made.result()
        exported = pool.submit(run, "-exportcert", "-rfc", "-alias", "ca", *ca, "-file", str(out / "ca.pem"))
        request = run("-certreq", "-alias", "broker", *broker)
        signed = run("-gencert", "-rfc", "-alias", "ca", *ca, *validity, *LEAF_EXTENSIONS, stdin=request)
        exported.result()
    chain = staging / "chain.pem"
    chain.write_bytes(signed + (out / "ca.pem").read_bytes())
    run("-importcert", "-noprompt", "-alias", "broker", *broker, "-file", str(chain))
    (out / "broker.p12").chmod(0o600)
    out.chmod(0o755)
    (out / "not-after").write_text(f"{started + VALIDITY_DAYS * 86400:.0f}\n")


PASSWORD_VARIABLE = "TURNLEDGER_KEYSTORE_PASSWORD"
"""keytool reads the store password from this variable (`-storepass:env`), not from its arguments,
which any process on the machine can read."""


def _store(path: Path) -> tuple[str, ...]:
    return ("-keystore", str(path), "-storetype", "PKCS12", "-storepass:env", PASSWORD_VARIABLE)


def _run(tool: str, staging: Path, password: str, *args: str, stdin: bytes | None = None) -> bytes:
    """One keytool run; its stdout, or a DevstackError with what it said."""
    run = subprocess.run(
        [tool, *KEYTOOL_TUNING, *args],
        input=stdin,
        capture_output=True,
        cwd=staging,
        env={**os.environ, PASSWORD_VARIABLE: password},
        check=False,
        timeout=120,
    )
    if run.returncode != 0:
        said = (run.stderr or run.stdout).decode(errors="replace").strip()
        raise DevstackError(
            f"keytool {args[0]} failed (exit {run.returncode}) while making the certificates of the "
            f"broker's SASL_SSL listener in {staging}: {said}"
        )
    return run.stdout
