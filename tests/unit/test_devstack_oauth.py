"""The devstack's token issuer (devstack/identity.py) and its OAUTHBEARER listener's configuration,
checked with openssl itself; logins on the real broker: tests/integration/test_oauth_listener.py."""

from __future__ import annotations

import base64
import json
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnledger.devstack import kafka
from turnledger.devstack.identity import (
    AUDIENCE,
    ISSUER,
    KEY_ID,
    SigningKey,
    TokenEndpoint,
    ensure_signing_key,
)
from turnledger.devstack.session import Endpoints
from turnledger.devstack.stack import StackState
from turnledger.devstack.tls import BrokerTls
from turnledger.kafka.connection import KafkaSecurity
from turnledger.kafka.oauth import TokenFile

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def claims_of(token: str) -> dict[str, Any]:
    header, payload, _ = token.split(".")
    assert json.loads(unb64(header)) == {"alg": "RS256", "typ": "JWT", "kid": KEY_ID}
    decoded: dict[str, Any] = json.loads(unb64(payload))
    return decoded


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    tool = shutil.which("openssl")
    if tool is None:
        pytest.skip("needs openssl")
    return ensure_signing_key(tmp_path_factory.mktemp("tls"), tool)


def verifies(key: SigningKey, token: str, tmp_path: Path) -> bool:
    """openssl's own verdict on the RS256 signature, with the public key rebuilt from the JWKS."""
    jwk = key.jwks()["keys"][0]
    modulus, exponent = int.from_bytes(unb64(jwk["n"]), "big"), int.from_bytes(unb64(jwk["e"]), "big")
    der = tmp_path / "public.conf"
    der.write_text(f"asn1=SEQUENCE:rsa\n[rsa]\nn=INTEGER:0x{modulus:X}\ne=INTEGER:0x{exponent:X}\n")
    public = tmp_path / "public.der"
    subprocess.run(["openssl", "asn1parse", "-genconf", str(der), "-out", str(public), "-noout"], check=True)
    signing_input, _, signature = token.rpartition(".")
    (tmp_path / "sig").write_bytes(unb64(signature))
    (tmp_path / "data").write_bytes(signing_input.encode())
    done = subprocess.run(
        [
            "openssl",
            "dgst",
            "-sha256",
            "-verify",
            str(public),
            "-keyform",
            "DER",
            "-signature",
            str(tmp_path / "sig"),
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 and "unable to load" in done.stderr.lower():
        # OpenSSL 3 reads a PKCS#1 RSAPublicKey as DER only through `-pubin`'s SubjectPublicKeyInfo: convert.
        spki = tmp_path / "public.pem"
        subprocess.run(
            [
                "openssl",
                "rsa",
                "-RSAPublicKey_in",
                "-inform",
                "DER",
                "-in",
                str(public),
                "-pubout",
                "-out",
                str(spki),
            ],
            check=True,
            capture_output=True,
        )
        done = subprocess.run(
            [
                "openssl",
                "dgst",
                "-sha256",
                "-verify",
                str(spki),
                "-signature",
                str(tmp_path / "sig"),
                str(tmp_path / "data"),
            ],
            capture_output=True,
            text=True,
        )
    return done.returncode == 0 and done.stdout.strip() == "Verified OK"


def test_the_key_is_made_once_private_and_its_jwks_is_its_modulus(key: SigningKey) -> None:
    assert stat.S_IMODE(key.path.stat().st_mode) == 0o600
    before = key.path.read_bytes()
    again = ensure_signing_key(key.path.parent, key.openssl)
    assert again == key and key.path.read_bytes() == before
    modulus = subprocess.run(
        ["openssl", "rsa", "-in", str(key.path), "-noout", "-modulus"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    [jwk] = key.jwks()["keys"]
    assert jwk["kty"] == "RSA" and jwk["alg"] == "RS256" and jwk["use"] == "sig" and jwk["kid"] == KEY_ID
    assert unb64(jwk["n"]).hex().upper() == modulus.removeprefix("Modulus=")
    assert len(unb64(jwk["n"])) == 256 and jwk["e"] == "AQAB"


def test_a_minted_token_has_the_claims_the_broker_requires_and_openssl_verifies_it(
    key: SigningKey, tmp_path: Path
) -> None:
    token = key.mint("turnledger", 600, now=1_700_000_000.5)
    assert claims_of(token) == {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "turnledger",
        "iat": 1_700_000_000,
        "exp": 1_700_000_600,
        "scope": "kafka",
    }
    assert verifies(key, token, tmp_path)
    header, _, signature = token.split(".")
    forged = base64.urlsafe_b64encode(json.dumps({**claims_of(token), "sub": "admin"}).encode()).rstrip(b"=")
    assert not verifies(key, f"{header}.{forged.decode()}.{signature}", tmp_path)


def test_the_token_endpoint_gives_its_client_a_token_and_refuses_any_other(key: SigningKey) -> None:
    with TokenEndpoint(key, "svc", "right-secret", lifetime_s=90) as endpoint:
        form = {"grant_type": "client_credentials"}
        refused = httpx.post(endpoint.url, data=form, auth=("svc", "wrong"))
        assert (refused.status_code, refused.json()["error"]) == (401, "invalid_client")
        anonymous = httpx.post(endpoint.url, data=form)
        assert anonymous.status_code == 401
        wrong_grant = httpx.post(endpoint.url, data={"grant_type": "password"}, auth=("svc", "right-secret"))
        assert (wrong_grant.status_code, wrong_grant.json()) == (400, {"error": "unsupported_grant_type"})
        before = time.time()
        given = httpx.post(endpoint.url, data=form, auth=("svc", "right-secret"))
        assert given.status_code == 200
        body = given.json()
        assert (body["token_type"], body["expires_in"]) == ("Bearer", 90)
        claims = claims_of(body["access_token"])
        assert claims["sub"] == "svc" and claims["exp"] - claims["iat"] == 90
        assert before - 1 <= claims["iat"] <= time.time()
        assert (endpoint.issued, endpoint.refused) == (1, 2)


def test_the_oauth_listener_is_a_fifth_listener_validated_by_kafkas_oidc_handler(tmp_path: Path) -> None:
    material = BrokerTls(tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "broker.p12", "store-secret")
    jwks = tmp_path / "kafka" / "oauth-jwks.json"
    props = kafka.render_config(
        tmp_path / "kafka", 19092, 19093, 19094, "sasl-secret", material, 19095, 19096, jwks
    )
    lines = props.read_text().splitlines()
    ports = (
        "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,SASL_SSL://127.0.0.1:19094,"
        "SSL://127.0.0.1:19095,OAUTH://127.0.0.1:19096"
    )
    assert f"listeners={ports}" in lines and f"advertised.listeners={ports}" in lines
    assert (
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,"
        "OAUTH:SASL_SSL" in lines
    )
    prefix = "listener.name.oauth."
    assert [line for line in lines if line.startswith(prefix) or line.startswith("sasl.oauthbearer.")] == [
        f"{prefix}sasl.enabled.mechanisms=OAUTHBEARER",
        f"{prefix}oauthbearer.sasl.jaas.config="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        f"{prefix}oauthbearer.sasl.server.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        f"{prefix}oauthbearer.connections.max.reauth.ms=3600000",
        f"sasl.oauthbearer.jwks.endpoint.url=file://{jwks}",
        f"sasl.oauthbearer.expected.issuer={ISSUER}",
        f"sasl.oauthbearer.expected.audience={AUDIENCE}",
        f"{prefix}ssl.keystore.type=PKCS12",
        f"{prefix}ssl.keystore.location={tmp_path / 'tls' / 'broker.p12'}",
        f"{prefix}ssl.keystore.password=store-secret",
        f"{prefix}ssl.key.password=store-secret",
    ]
    without = kafka.render_config(tmp_path / "plain", 19092, 19093, 19094, "s", material, 19095, 19096, None)
    settings = [line for line in without.read_text().splitlines() if not line.startswith("#")]
    assert [
        line for line in settings if "OAUTH" in line or line.startswith(("listener.name.oauth.", "sasl."))
    ] == []


@needs_openssl
def test_the_listener_gets_a_jwks_and_a_private_week_long_token(tmp_path: Path) -> None:
    listener = kafka._oauth_listener(tmp_path / "kafka", tmp_path / "tls", 19096, tmp_path / "tls" / "ca.pem")
    assert listener is not None
    assert listener.bootstrap == "127.0.0.1:19096"
    assert listener.signing_key == tmp_path / "tls" / "oauth-signing.key"
    key = SigningKey(listener.signing_key, shutil.which("openssl") or "openssl")
    assert json.loads((tmp_path / "kafka" / "oauth-jwks.json").read_text()) == key.jwks()
    assert stat.S_IMODE(listener.token_file.stat().st_mode) == 0o600
    claims = claims_of(listener.token_file.read_text().strip())
    assert claims["sub"] == "turnledger" and claims["exp"] - claims["iat"] == 7 * 24 * 3600
    again = kafka._oauth_listener(tmp_path / "kafka", tmp_path / "tls", 19096, tmp_path / "tls" / "ca.pem")
    assert again == listener and stat.S_IMODE(listener.token_file.stat().st_mode) == 0o600
    assert claims_of(listener.token_file.read_text().strip())["iat"] >= claims["iat"]


def test_without_openssl_there_is_no_oauth_listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka, "openssl", lambda: None)
    assert kafka._oauth_listener(tmp_path / "kafka", tmp_path / "tls", 19096, tmp_path / "ca.pem") is None
    assert not (tmp_path / "tls").exists()


OLD_STATE = {
    "bootstrap": "127.0.0.1:1111",
    "redis_url": "redis://127.0.0.1:2222/0",
    "kafka_version": "4.4.0",
    "kafka_pid": None,
    "kafka_marker": None,
    "redis_pid": None,
    "redis_marker": None,
    "kafka_log": None,
    "redis_log": None,
}


def test_the_oauth_export_line_points_a_client_at_the_listener_with_the_token_file(tmp_path: Path) -> None:
    token, ca = tmp_path / "oauth.token", tmp_path / "ca.pem"
    token.write_text("a.b.c\n")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    state = StackState(
        **OLD_STATE,  # type: ignore[arg-type]
        ssl_ca_file=str(ca),
        oauth_bootstrap="127.0.0.1:5555",
        oauth_token_file=str(token),
        oauth_signing_key="/state/tls/oauth-signing.key",
    )
    assert state.oauth_export_line == (
        "# SASL_SSL OAUTHBEARER: export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:5555 "
        "KAFKA_SECURITY_PROTOCOL=SASL_SSL KAFKA_SASL_MECHANISM=OAUTHBEARER "
        f"KAFKA_SASL_OAUTHBEARER_TOKEN_FILE={token} KAFKA_SSL_CA_FILE={ca}"
    )
    env = state.oauth_client_env()
    assert env is not None
    security = KafkaSecurity.from_env(env)
    assert security.oauth is not None and security.oauth.source == TokenFile(token)
    endpoints = Endpoints(state.bootstrap, state.redis_url, "dev up").with_broker_of(state)
    assert endpoints.oauth_client_env() == env
    assert endpoints.oauth_signing_key == "/state/tls/oauth-signing.key"
    assert StackState(**OLD_STATE).oauth_export_line is None  # type: ignore[arg-type]
    assert Endpoints("elsewhere:9092", state.redis_url, "env").oauth_client_env() is None
