"""The devstack's token issuer for the broker's OAUTHBEARER listener: a signing key, its JWKS, signed
JWTs, and an OAuth 2.0 token endpoint (client-credentials grant) to fetch them from.

The broker validates tokens as a managed cluster's does, with Kafka's own
`OAuthBearerValidatorCallbackHandler` (KIP-768): an RS256 signature by a key of the JWKS it is
given, `iss` and `aud` as expected, `exp`, `iat` and `sub` present. The devstack gives it the JWKS as
a file (`sasl.oauthbearer.jwks.endpoint.url=file://...`, which Kafka 4 allows only when the
`org.apache.kafka.sasl.oauthbearer.allowed.urls` system property lists it).

Signing uses `openssl` (RSA PKCS#1 v1.5 over SHA-256, what RS256 is), as the rest of the devstack's
TLS material does: no crypto library is imported. The key is made once per state dir
(`tls/oauth-signing.key`, mode 0600) and shared by its pytest sessions; without openssl there is no
OAUTHBEARER listener.

`TokenEndpoint` serves `POST /token` on loopback in a thread: a client that authenticates with HTTP
Basic as `client_id` and `secret` gets a token for `sub=client_id`; any other gets `401
invalid_client` (RFC 6749 §5.2). It counts what it issued, so tests can tell a cached token from a
new one.
"""

from __future__ import annotations

import base64
import binascii
import json
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote_plus

from turnledger.devstack.credentials import link_private
from turnledger.devstack.errors import DevstackError

ISSUER = "https://turnledger-devstack.invalid/"
AUDIENCE = "turnledger-kafka"
KEY_ID = "turnledger-devstack"
SIGNING_KEY_FILE = "oauth-signing.key"
RSA_BITS = "2048"
PUBLIC_EXPONENT = 65537


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class SigningKey:
    """An RSA private key in a PEM file, and what the broker verifies its signatures with."""

    path: Path
    openssl: str

    def jwks(self) -> dict[str, Any]:
        """The JWK Set of its public key (RFC 7517/7518 §6.3.1: `n` and `e` big-endian, base64url)."""
        text = _openssl(self.openssl, ["rsa", "-in", str(self.path), "-noout", "-modulus"]).decode()
        modulus = bytes.fromhex(text.strip().removeprefix("Modulus="))
        exponent = PUBLIC_EXPONENT.to_bytes(3, "big")
        key = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": KEY_ID, "n": b64url(modulus)}
        return {"keys": [{**key, "e": b64url(exponent)}]}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()) + "\n")
        return path

    def sign(self, claims: Mapping[str, Any]) -> str:
        """A compact JWS (RFC 7515 §7.1) of `claims`, RS256, with this key's `kid`."""
        header = {"alg": "RS256", "typ": "JWT", "kid": KEY_ID}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(dict(claims)).encode())}"
        command = ["dgst", "-sha256", "-sign", str(self.path)]
        signature = _openssl(self.openssl, command, signing_input.encode())
        return f"{signing_input}.{b64url(signature)}"

    def mint(
        self,
        subject: str,
        lifetime_s: float,
        now: float | None = None,
        audience: str = AUDIENCE,
        issuer: str = ISSUER,
    ) -> str:
        """A token the devstack broker accepts for `subject` until `lifetime_s` from `now`."""
        issued = int(time.time() if now is None else now)
        expires = issued + int(lifetime_s)
        claims = {"iss": issuer, "aud": audience, "sub": subject, "iat": issued, "exp": expires}
        return self.sign({**claims, "scope": "kafka"})


def ensure_signing_key(directory: Path, openssl: str) -> SigningKey:
    """The state dir's signing key, made once (mode 0600). Made in a private draft and linked into
    place, so two sessions that start at once agree on the first one."""
    path = directory / SIGNING_KEY_FILE
    if not path.exists():
        pem = _openssl(
            openssl,
            [
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                f"rsa_keygen_bits:{RSA_BITS}",
                "-pkeyopt",
                f"rsa_keygen_pubexp:{PUBLIC_EXPONENT}",
            ],
        )
        link_private(path, pem.decode())
    return SigningKey(path, openssl)


def _openssl(tool: str, args: list[str], stdin: bytes | None = None) -> bytes:
    done = subprocess.run([tool, *args], input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        raise DevstackError(
            f"openssl {args[0]} failed (exit {done.returncode}) making the OAUTHBEARER listener's "
            f"token key: {done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout


class TokenEndpoint:
    """An OAuth 2.0 token endpoint on 127.0.0.1 for one client, serving in a daemon thread."""

    def __init__(self, key: SigningKey, client_id: str, secret: str, lifetime_s: float = 3600.0) -> None:
        self.key = key
        self.client_id = client_id
        self.secret = secret
        self.lifetime_s = lifetime_s
        self.issued = 0
        self.refused = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-endpoint", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def __enter__(self) -> TokenEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, authorization: str | None, form: Mapping[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for one token request."""
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        if _basic(authorization) != (self.client_id, self.secret):
            self.refused += 1
            return 401, {"error": "invalid_client", "error_description": "unknown client or wrong secret"}
        self.issued += 1
        token = self.key.mint(self.client_id, self.lifetime_s)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(self.lifetime_s)}


def _basic(authorization: str | None) -> tuple[str, str] | None:
    """The client id and secret of an HTTP Basic header whose parts are form-encoded (RFC 6749 §2.3.1)."""
    scheme, _, encoded = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, colon, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (unquote_plus(user), unquote_plus(password)) if colon else None


def _handler(endpoint: TokenEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode(errors="replace"))
            status, body = endpoint.answer(self.headers.get("Authorization"), form)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler
