"""The secured listeners' TLS material: a private CA, a broker certificate and a client certificate.

keytool ships with the Java the broker needs anyway, so the devstack imports no crypto library. The
material is made once per state dir (`<state dir>/tls/`) and reused while it stays valid for another
day: each keytool run is a JVM start, and a pytest session's stack (`session-<pid>/`) reuses the one
of its state dir instead of paying for it again.

`tls/` holds `ca.pem` (the CA certificate: clients' KAFKA_SSL_CA_FILE, and the mutual-TLS listener's
truststore), `broker.p12` (the broker's key and its certificate chain) and `keystore.password`, both
mode 0600, `client.pem` and `client.key` (the client certificate for CN=turnledger and its key,
unencrypted PKCS#8 PEM, mode 0600: clients' KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE) and
`not-after` (when the certificates expire, in Unix seconds). The CA's private key never leaves the
temporary directory it was made in: nothing can sign another certificate with it once the broker's
and the client's are signed.

keytool cannot write a private key out of a keystore, and Python's `ssl` can load a key only from a
PEM file, so the client's key is made by `openssl` (`genpkey`, PKCS#8 PEM on its stdout, written
straight to a 0600 file) with a certificate request (`req`) that keytool signs with the CA. On Debian,
openssl comes with any Java (openjdk-*-jre-headless needs ca-certificates-java, which needs
ca-certificates, which needs openssl), its two runs take milliseconds where each keytool run is a JVM
start, and no key is ever exported from a keystore. Without openssl the client certificate, and with
it the broker's mutual-TLS listener, is left out (`OPENSSL_MISSING`).
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
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

CLIENT_SUBJECT = "/CN=turnledger"
"""The client certificate's name: with no authorizer on the devstack broker it names nothing but who
connected (the broker's principal for it is `User:CN=turnledger`)."""
CLIENT_EXTENSIONS = ("-ext", "ku:c=digitalSignature", "-ext", "eku=clientAuth")
"""A client certificate's extensions: Java's trust manager refuses a client certificate whose extended
key usage lacks clientAuth."""
CLIENT_KEY = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
"""The client's key pair, the same curve as the others (`openssl genpkey`: OpenSSL 1.1.1 and 3.x)."""

OPENSSL_MISSING = (
    "openssl was not found on PATH: the devstack makes the client certificate of the broker's "
    "mutual-TLS listener with it, so that listener is left out. Install it (Debian/Ubuntu: "
    "`apt-get install -y openssl`)."
)

MATERIAL = ("ca.pem", "broker.p12", "keystore.password")
CLIENT_MATERIAL = ("client.pem", "client.key")


@dataclass(frozen=True)
class ClientTls:
    """A client certificate of the devstack's CA and its key, as PEM files any TLS client loads."""

    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class BrokerTls:
    ca_file: Path
    keystore: Path
    password: str
    """The PKCS12 keystore's password (for PKCS12, also its key's)."""
    client: ClientTls | None = None
    """None when openssl was missing as the material was made: then there is no mutual-TLS listener."""

    @classmethod
    def at(cls, directory: Path) -> BrokerTls:
        client = ClientTls(directory / "client.pem", directory / "client.key")
        return cls(
            directory / "ca.pem",
            directory / "broker.p12",
            (directory / "keystore.password").read_text().strip(),
            client if client.cert_file.is_file() and client.key_file.is_file() else None,
        )


def keytool() -> str:
    tool = shutil.which("keytool")
    if tool is None:
        raise KeytoolMissing()
    return tool


def openssl() -> str | None:
    """The openssl command, or None: the client certificate is optional, its listener left out then."""
    return shutil.which("openssl")


def needs_renewal(directory: Path, now: float, client: bool = False) -> bool:
    """True when the material is incomplete or expires within a day of `now`. With `client` (openssl is
    there to make it) a set without the client certificate is incomplete: it was made before openssl
    was installed, or before the devstack made one."""
    files = MATERIAL + (CLIENT_MATERIAL if client else ())
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
    dir) never sees half a set; when two made it at once, the first rename wins for both. The client
    certificate is part of the set whenever openssl is installed."""
    client_tool = openssl()
    client = client_tool is not None
    if needs_renewal(directory, time.time(), client):
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = directory.parent / f".{directory.name}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            _make(staging, keytool(), client_tool)
            install_set(staging / "out", directory, lambda there: needs_renewal(there, time.time(), client))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return BrokerTls.at(directory)


def install_set(made: Path, directory: Path, stale: Callable[[Path], bool]) -> None:
    """Put the new set `made` in place of an expiring (or incomplete) one, or keep a valid set another
    process just put there (a rename onto a non-empty directory fails). `stale(directory)`: the set
    there must be made anew."""
    if directory.exists() and stale(directory):
        retired = directory.parent / f".{directory.name}-retired-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(directory, retired)
        shutil.rmtree(retired, ignore_errors=True)
    try:
        os.rename(made, directory)
    except OSError:
        if stale(directory):  # not a concurrent maker's complete set: ours then
            raise


def _make(staging: Path, tool: str, client_tool: str | None) -> None:
    """CA and broker key pairs, the broker's certificate signed by the CA, its chain in the keystore:
    five keytool runs, two at a time (the CA's key pair beside the broker's; the CA's export beside
    the broker's request and signing). With `client_tool` (openssl) also the client's key and request,
    made while the CA's key pair is, and its certificate, signed after the CA's export: a sixth
    keytool run, beside the broker's signing, while the CA's key still exists."""
    staging.mkdir(mode=0o700)
    out = staging / "out"
    out.mkdir(mode=0o700)  # opened to others (for ca.pem) once the keys in it are 0600
    started = time.time()  # the certificates' validity counts from a moment after this
    password = new_password()
    write_private(out / "keystore.password", password + "\n")
    ca, broker = _store(staging / "ca.p12"), _store(out / "broker.p12")
    run = functools.partial(_keytool, tool, staging, password)
    validity = ("-validity", str(VALIDITY_DAYS))
    with ThreadPoolExecutor(max_workers=1) as pool:
        ca_made = pool.submit(run, "-genkeypair", "-alias", "ca", *ca, *KEY, *validity, *CA_PROFILE)
        client_request = _client_request(client_tool, staging, out / "client.key") if client_tool else None
        run("-genkeypair", "-alias", "broker", *broker, *KEY, *validity, "-dname", "CN=localhost")
        ca_made.result()
        beside = pool.submit(_export_ca_and_sign_client, run, ca, out, client_request)
        request = run("-certreq", "-alias", "broker", *broker)
        signed = run("-gencert", "-rfc", "-alias", "ca", *ca, *validity, *LEAF_EXTENSIONS, stdin=request)
        beside.result()
    chain = staging / "chain.pem"
    chain.write_bytes(signed + (out / "ca.pem").read_bytes())
    run("-importcert", "-noprompt", "-alias", "broker", *broker, "-file", str(chain))
    (out / "broker.p12").chmod(0o600)
    out.chmod(0o755)
    (out / "not-after").write_text(f"{started + VALIDITY_DAYS * 86400:.0f}\n")


def _export_ca_and_sign_client(
    run: Callable[..., bytes], ca: tuple[str, ...], out: Path, client_request: bytes | None
) -> None:
    """`ca.pem`, then (with a request) `client.pem`, signed by the CA's key in its keystore: one after
    the other, so that no more than two keytool JVMs run at once on a small box."""
    run("-exportcert", "-rfc", "-alias", "ca", *ca, "-file", str(out / "ca.pem"))
    if client_request is not None:
        validity = ("-validity", str(VALIDITY_DAYS))
        signed = run(
            "-gencert", "-rfc", "-alias", "ca", *ca, *validity, *CLIENT_EXTENSIONS, stdin=client_request
        )
        (out / "client.pem").write_bytes(signed)


def _client_request(tool: str, staging: Path, key_file: Path) -> bytes:
    """The client's key, written to `key_file` (mode 0600 from its creation: openssl prints it, an
    unencrypted PKCS#8 PEM, and write_private writes it), and its certificate request (PEM), for
    keytool to sign."""
    key = _run([tool, "genpkey", *CLIENT_KEY], staging, "openssl genpkey")
    write_private(key_file, key.decode("ascii"))
    request = [tool, "req", "-new", "-key", str(key_file), "-subj", CLIENT_SUBJECT]
    return _run(request, staging, "openssl req")


PASSWORD_VARIABLE = "TURNLEDGER_KEYSTORE_PASSWORD"
"""keytool reads the store password from this variable (`-storepass:env`), not from its arguments,
which any process on the machine can read."""


def _store(path: Path) -> tuple[str, ...]:
    return ("-keystore", str(path), "-storetype", "PKCS12", "-storepass:env", PASSWORD_VARIABLE)


def _keytool(tool: str, staging: Path, password: str, *args: str, stdin: bytes | None = None) -> bytes:
    """One keytool run; its stdout, or a DevstackError with what it said."""
    argv = [tool, *KEYTOOL_TUNING, *args]
    return _run(argv, staging, f"keytool {args[0]}", stdin, {PASSWORD_VARIABLE: password})


def _run(
    argv: list[str], staging: Path, what: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> bytes:
    """One run of a certificate tool in `staging`; its stdout, or a DevstackError with what it said."""
    run = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        cwd=staging,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=120,
    )
    if run.returncode != 0:
        said = (run.stderr or run.stdout).decode(errors="replace").strip()
        raise DevstackError(
            f"{what} failed (exit {run.returncode}) while making the certificates of the broker's "
            f"secured listeners in {staging}: {said}"
        )
    return run.stdout
