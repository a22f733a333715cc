"""The TLS material of the devstack Redis's TLS port: a CA of its own and a server certificate, by openssl.

redis-server (Debian's is built with TLS) reads PEM files, which openssl writes directly: three runs of
a few milliseconds, no JVM. The set is made once per state dir and reused while it stays valid for
another day (`tls.RENEW_WITHIN_S`), like the broker's.

It lives in `<state dir>/redis-tls/`, beside the broker's `tls/` and not in it: `tls.ensure_broker_tls`
replaces `tls/` whole when the broker's set is incomplete or expiring, which on a fresh state dir is
right after Redis (started first) made its set, and would take a running Redis's CA file with it.

`redis-tls/` holds `ca.pem` (the CA certificate: clients' REDIS_SSL_CA_FILE), `server.pem` (for
IP:127.0.0.1 and DNS:localhost, with the CA's certificate after it), `server.key` (unencrypted, mode
0600), a client certificate the same CA signed, `client.pem` and `client.key` (mode 0600: clients'
REDIS_SSL_CERT_FILE and REDIS_SSL_KEY_FILE, for mutual TLS), and `not-after` (Unix seconds). The CA's
key never leaves the temporary directory it was made in: nothing can sign another certificate with it
once the server's and the client's are signed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from turnledger.devstack.errors import DevstackError
from turnledger.devstack.tls import BROKER_SAN, RENEW_WITHIN_S, VALIDITY_DAYS, install_set

MATERIAL = ("ca.pem", "server.pem", "server.key", "client.pem", "client.key", "not-after")
KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
"""EC P-256, as the broker's: made in milliseconds, accepted by OpenSSL on both ends."""
CA_SUBJECT = "/CN=turnledger devstack Redis CA"
CA_EXTENSIONS = (
    "-addext",
    "basicConstraints=critical,CA:true",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
)
"""A proper CA's extensions, which strict verifiers (X509_STRICT, Python 3.13's default) require."""
SERVER_EXTENSIONS = (
    f"subjectAltName={BROKER_SAN}\n"
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=serverAuth\n"
    "subjectKeyIdentifier=hash\n"
    "authorityKeyIdentifier=keyid,issuer\n"
)
"""The server certificate's names (the devstack's Redis is reached at 127.0.0.1; `localhost` for users
who type it) and the key identifiers X509_STRICT requires of a certificate a CA issued."""
CLIENT_SUBJECT = "/CN=turnledger"
CLIENT_EXTENSIONS = (
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=clientAuth\n"
    "subjectKeyIdentifier=hash\n"
    "authorityKeyIdentifier=keyid,issuer\n"
)
"""A certificate a client presents (`clientAuth`); Redis checks only that the CA signed it."""

OPENSSL_MISSING_FOR_REDIS = (
    "openssl was not found on PATH: the devstack makes the certificate of Redis's TLS port with it, so "
    "that port is left out. Install it (Debian/Ubuntu: `apt-get install -y openssl`)."
)


@dataclass(frozen=True)
class RedisTls:
    ca_file: Path
    cert_file: Path
    key_file: Path
    client_cert_file: Path
    client_key_file: Path

    @classmethod
    def at(cls, directory: Path) -> RedisTls:
        return cls(*(directory / name for name in MATERIAL[:5]))


def needs_renewal(directory: Path, now: float) -> bool:
    """True when the set is incomplete or expires within a day of `now`."""
    if not all((directory / name).is_file() for name in MATERIAL):
        return True
    try:
        not_after = float((directory / "not-after").read_text())
    except ValueError:
        return True
    return not_after - now < RENEW_WITHIN_S


def ensure_redis_tls(directory: Path, openssl: str) -> RedisTls:
    """The set in `directory`, made first when missing or expiring: in a sibling temporary directory,
    renamed into place whole, so another session of the same state dir never reads half a set; when
    two made one at once, the first rename wins for both."""
    if needs_renewal(directory, time.time()):
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = directory.parent / f".{directory.name}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            _make(staging, openssl)
            install_set(staging / "out", directory, lambda there: needs_renewal(there, time.time()))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return RedisTls.at(directory)


def _make(staging: Path, openssl: str) -> None:
    """The CA (key and self-signed certificate), then for the server and for a client a key and request
    and the certificate the CA signed: five openssl runs in `staging` (mode 0700, so no key is
    readable by others while it is written)."""
    staging.mkdir(mode=0o700)
    out = staging / "out"
    out.mkdir(mode=0o700)
    started = time.time()
    days = ("-days", str(VALIDITY_DAYS))
    ca_key, ca_pem = staging / "ca.key", out / "ca.pem"
    _run(staging, openssl, "req", "-x509", *KEY, "-keyout", str(ca_key), "-out", str(ca_pem), *days,
         "-subj", CA_SUBJECT, *CA_EXTENSIONS)  # fmt: skip
    for name, subject, extensions in (
        ("server", "/CN=localhost", SERVER_EXTENSIONS),
        ("client", CLIENT_SUBJECT, CLIENT_EXTENSIONS),
    ):
        key, request, extfile = out / f"{name}.key", staging / f"{name}.csr", staging / f"{name}.ext"
        _run(staging, openssl, "req", "-new", *KEY, "-keyout", str(key), "-out", str(request),
             "-subj", subject)  # fmt: skip
        key.chmod(0o600)
        extfile.write_text(extensions)
        signed = staging / f"{name}-only.pem"
        serial = ("-CAcreateserial", "-CAserial", str(staging / "ca.srl"))
        _run(staging, openssl, "x509", "-req", "-in", str(request), "-CA", str(ca_pem), "-CAkey", str(ca_key),
             *serial, *days, "-extfile", str(extfile), "-out", str(signed))  # fmt: skip
        (out / f"{name}.pem").write_bytes(signed.read_bytes() + ca_pem.read_bytes())
    (out / "not-after").write_text(f"{started + VALIDITY_DAYS * 86400:.0f}\n")
    out.chmod(0o755)  # opened to others (for ca.pem) once the key in it is 0600


def _run(staging: Path, openssl: str, *args: str) -> None:
    """One openssl run in `staging`, or a DevstackError with what it said."""
    run = subprocess.run(
        [openssl, *args], capture_output=True, cwd=staging, stdin=subprocess.DEVNULL, check=False, timeout=60
    )
    if run.returncode != 0:
        said = (run.stderr or run.stdout).decode(errors="replace").strip()
        raise DevstackError(
            f"openssl {args[0]} failed (exit {run.returncode}) while making the certificate of Redis's TLS "
            f"port in {staging}: {said}"
        )
