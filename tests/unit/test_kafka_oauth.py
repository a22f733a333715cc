"""OAUTHBEARER's settings, token sources and provider (kafka/oauth.py), and the answer to a broker's
refusal aiokafka lacked (kafka/oauth_refusal.py). The token endpoints here are real HTTP servers on
loopback serving canned answers; logins on the real broker: tests/integration/test_oauth_listener.py."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import pytest
from aiokafka.errors import SaslAuthenticationFailed

from turnledger.errors import KafkaSettingsError
from turnledger.kafka import oauth, oauth_refusal
from turnledger.kafka.connection import KafkaSecurity
from turnledger.kafka.oauth import (
    Answer,
    ClientCredentials,
    OAuthTokenProvider,
    Token,
    TokenFile,
    TokenRefused,
    TokenUnavailable,
    extensions_from_env,
    judge,
    jwt_expiry,
    source_from_env,
)
from turnledger.kafka.secret import Secret


def jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


class Canned:
    """A token endpoint that answers every POST with `status` and `body`, and keeps what it was sent."""

    def __init__(self, status: int = 200, body: bytes = b"{}") -> None:
        self.status, self.body = status, body
        self.requests: list[tuple[str | None, dict[str, list[str]]]] = []
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                canned.requests.append((self.headers.get("Authorization"), form))
                self.send_response(canned.status)
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"

    def answer(self, status: int, body: dict[str, Any] | bytes) -> None:
        self.status, self.body = status, body if isinstance(body, bytes) else json.dumps(body).encode()


@pytest.fixture
def endpoint() -> Iterator[Canned]:
    canned = Canned()
    yield canned
    canned.server.shutdown()
    canned.server.server_close()


def client(
    url: str, client_id: str = "svc-turnledger", secret: str = "s3cr%t:&=", scope: str | None = None
) -> ClientCredentials:
    return ClientCredentials(url, client_id, Secret(secret, "ClientSecret"), scope)


BASE = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "oauthbearer"}
ENDPOINT = {
    **BASE,
    "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "https://idp.example/oauth2/token",
    "KAFKA_SASL_OAUTHBEARER_CLIENT_ID": "svc-turnledger",
    "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": "very-secret-value",
}


def test_the_client_credentials_settings_give_aiokafka_one_provider_and_never_the_secret() -> None:
    settings = KafkaSecurity.from_env({**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_SCOPE": "kafka"})
    options = settings.client_options()
    options.pop("ssl_context")
    provider = options.pop("sasl_oauth_token_provider")
    assert options == {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}
    assert isinstance(provider, OAuthTokenProvider) and provider is settings.oauth
    assert provider.source == ClientCredentials(
        "https://idp.example/oauth2/token",
        "svc-turnledger",
        Secret("very-secret-value", "ClientSecret"),
        "kafka",
    )
    assert settings.describe() == (
        "SASL_SSL, OAUTHBEARER from token endpoint https://idp.example/oauth2/token as client "
        "'svc-turnledger', the system's CAs"
    )
    shown = repr(settings) + repr(provider) + repr(provider.source) + settings.describe()
    assert "very-secret" not in shown and "ClientSecret('***')" in shown
    assert oauth_refusal.installed()


def test_what_to_check_follows_who_refused() -> None:
    settings = KafkaSecurity.from_env(ENDPOINT)
    assert settings.fix(SaslAuthenticationFailed('{"status":"invalid_token"}')) == (
        "The broker refused the token from https://idp.example/oauth2/token: check that it is the issuer "
        "the broker trusts (KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL), and KAFKA_SASL_OAUTHBEARER_SCOPE "
        "(the audience and scope the broker expects)."
    )
    assert settings.fix(TokenRefused("no", "Check the client.")) == "Check the client."


def test_a_token_file_is_a_source_read_again_at_every_login(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    settings = KafkaSecurity.from_env({**BASE, "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": str(token)})
    assert settings.oauth is not None and settings.oauth.source == TokenFile(token)
    assert settings.describe() == f"SASL_SSL, OAUTHBEARER from token file {token}, the system's CAs"
    assert settings.oauth.current() == "first"
    token.write_text("second")
    assert settings.oauth.current() == "second"
    token.write_text("")
    with pytest.raises(TokenUnavailable, match=f"the token file {token} is empty"):
        settings.oauth.current()
    token.unlink()
    with pytest.raises(TokenUnavailable, match=r"cannot read the token file .*FileNotFoundError"):
        settings.oauth.current()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            BASE,
            "KAFKA_SASL_MECHANISM=OAUTHBEARER needs one source of tokens: "
            "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL (with KAFKA_SASL_OAUTHBEARER_CLIENT_ID and "
            "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET), KAFKA_SASL_OAUTHBEARER_TOKEN_FILE or "
            "KAFKA_SASL_OAUTHBEARER_AWS_REGION (AWS MSK IAM)",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": "/etc/hostname"},
            "(AWS MSK IAM), not KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL and "
            "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE together",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": ""},
            "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL "
            "logs in with the client-credentials grant: set KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET (or "
            "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE)",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_CLIENT_ID": " "},
            "client-credentials grant: set KAFKA_SASL_OAUTHBEARER_CLIENT_ID",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "idp.example/token"},
            "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL must be an http:// or https:// URL, not "
            "'idp.example/token'",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "file:///etc/token"},
            "must be an http:// or https:// URL, not 'file:///etc/token'",
        ),
        (
            {
                **BASE,
                "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": "/etc/hostname",
                "KAFKA_SASL_OAUTHBEARER_SCOPE": "x",
            },
            "KAFKA_SASL_OAUTHBEARER_SCOPE set beside KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: unset them",
        ),
        (
            {**BASE, "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": "/nonexistent/token"},
            "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: cannot read /nonexistent/token (No such file or directory)",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_USERNAME": "u"},
            "KAFKA_SASL_USERNAME set, but KAFKA_SASL_MECHANISM=OAUTHBEARER logs in with a token: unset them",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_PASSWORD": "p"},
            "KAFKA_SASL_PASSWORD set, but KAFKA_SASL_MECHANISM=OAUTHBEARER logs in with a token: unset them",
        ),
        (
            {
                **ENDPOINT,
                "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                "KAFKA_SASL_USERNAME": "u",
                "KAFKA_SASL_PASSWORD": "p",
            },
            "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL, "
            "KAFKA_SASL_OAUTHBEARER_CLIENT_ID, KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET set, but "
            "KAFKA_SASL_MECHANISM is not OAUTHBEARER: set KAFKA_SECURITY_PROTOCOL=SASL_SSL and "
            "KAFKA_SASL_MECHANISM=OAUTHBEARER to log in with a token, or unset them",
        ),
        (
            {"KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": "/etc/hostname"},
            "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE set, but KAFKA_SASL_MECHANISM is not OAUTHBEARER",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_EXTENSIONS": "logicalCluster"},
            "KAFKA_SASL_OAUTHBEARER_EXTENSIONS: 'logicalCluster' is not key=value with a key of letters only",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_EXTENSIONS": "auth=Bearer x"},
            "'auth=Bearer x' is not key=value",
        ),
        ({**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_EXTENSIONS": "pool_id=p"}, "'pool_id=p' is not key=value"),
        ({**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_EXTENSIONS": "a="}, "'a=' is not key=value"),
    ],
)
def test_oauthbearer_settings_that_cannot_work_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSettingsError) as refused:
        KafkaSecurity.from_env(env)
    assert message in str(refused.value)
    assert "very-secret" not in str(refused.value)


def test_extensions_are_key_value_pairs_sent_with_the_token() -> None:
    env = {
        **ENDPOINT,
        "KAFKA_SASL_OAUTHBEARER_EXTENSIONS": " logicalCluster=lkc-12 , identityPoolId=pool-Ab,",
    }
    assert extensions_from_env(env) == {"logicalCluster": "lkc-12", "identityPoolId": "pool-Ab"}
    settings = KafkaSecurity.from_env(env)
    assert settings.oauth is not None
    assert settings.oauth.extensions() == {"logicalCluster": "lkc-12", "identityPoolId": "pool-Ab"}
    assert extensions_from_env(ENDPOINT) == {}


def test_the_client_secret_can_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    env = {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": ""}
    source = source_from_env({**env, "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE": str(secret)})
    assert isinstance(source, ClientCredentials) and source.secret.reveal() == "from-a-file"
    with pytest.raises(
        KafkaSettingsError,
        match="set KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET or "
        "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE, not both",
    ):
        source_from_env({**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE": str(secret)})


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (200, Answer.TOKEN),
        (400, Answer.REFUSED),
        (401, Answer.REFUSED),
        (403, Answer.REFUSED),
        (404, Answer.REFUSED),
        (302, Answer.REFUSED),
        (201, Answer.REFUSED),
        (408, Answer.UNAVAILABLE),
        (429, Answer.UNAVAILABLE),
        (500, Answer.UNAVAILABLE),
        (502, Answer.UNAVAILABLE),
        (503, Answer.UNAVAILABLE),
    ],
)
def test_the_issuers_status_decides_refused_or_unavailable(status: int, answer: Answer) -> None:
    assert judge(status) is answer


def test_the_grant_authenticates_the_client_with_form_encoded_basic(endpoint: Canned) -> None:
    endpoint.answer(200, {"access_token": "tok-1", "token_type": "Bearer", "expires_in": 300})
    token = client(endpoint.url, "svc:one", scope="kafka read").fetch(now=1_000.0)
    assert token == Token("tok-1", 1_300.0)
    [(authorization, form)] = endpoint.requests
    assert form == {"grant_type": ["client_credentials"], "scope": ["kafka read"]}
    assert authorization is not None and authorization.startswith("Basic ")
    user, _, password = base64.b64decode(authorization.removeprefix("Basic ")).decode().partition(":")
    assert (user, password) == ("svc%3Aone", "s3cr%25t%3A%26%3D")
    assert (unquote(user), unquote(password)) == ("svc:one", "s3cr%t:&=")


def test_without_expires_in_the_token_lives_until_its_exp(endpoint: Canned) -> None:
    endpoint.answer(200, {"access_token": jwt({"sub": "x", "exp": 5_000})})
    assert client(endpoint.url).fetch(now=1_000.0).expires_at == 5_000.0
    endpoint.answer(200, {"access_token": "opaque", "expires_in": "soon"})
    assert client(endpoint.url).fetch(now=1_000.0) == Token("opaque", None)
    [_, (_, form)] = endpoint.requests
    assert form == {"grant_type": ["client_credentials"]}


def test_a_refusal_names_the_issuers_error_and_never_the_secret(endpoint: Canned) -> None:
    endpoint.answer(401, {"error": "invalid_client", "error_description": "Bad client secret"})
    with pytest.raises(TokenRefused) as refused:
        client(endpoint.url).fetch(now=0.0)
    assert str(refused.value) == (
        f"the token endpoint {endpoint.url} refused client 'svc-turnledger': 401 invalid_client (Bad client "
        "secret)"
    )
    assert refused.value.check == (
        "Check KAFKA_SASL_OAUTHBEARER_CLIENT_ID, KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET (or "
        "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE), KAFKA_SASL_OAUTHBEARER_SCOPE and "
        "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL."
    )
    assert "s3cr" not in str(refused.value)
    endpoint.answer(404, b"<html>not here, s3cr%t:&=</html>")
    with pytest.raises(TokenRefused, match=r"refused client 'svc-turnledger': 404$"):
        client(endpoint.url).fetch(now=0.0)


def test_an_answer_without_a_token_is_refused(endpoint: Canned) -> None:
    for body in (b"<html>login</html>", json.dumps({"token": "x"}).encode(), b'{"access_token": ""}'):
        endpoint.answer(200, body)
        with pytest.raises(TokenRefused, match=r"answered 200 without an access_token$") as refused:
            client(endpoint.url).fetch(now=0.0)
        assert refused.value.check == (
            "Check KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL: the issuer's token endpoint, not its "
            "discovery document."
        )


def test_a_failing_or_absent_issuer_is_an_outage(endpoint: Canned) -> None:
    endpoint.answer(503, {"error": "temporarily_unavailable"})
    with pytest.raises(TokenUnavailable, match=f"the token endpoint {endpoint.url} answered 503"):
        client(endpoint.url).fetch(now=0.0)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(TokenUnavailable, match="did not answer: ConnectError"):
        client(f"http://127.0.0.1:{port}/token").fetch(now=0.0)


class Counting:
    def __init__(self, lifetime: float | None) -> None:
        self.lifetime, self.fetched = lifetime, 0

    def describe(self) -> str:
        return "counting"

    def check(self) -> str:
        return "check"

    def fetch(self, now: float) -> Token:
        self.fetched += 1
        return Token(f"t{self.fetched}", None if self.lifetime is None else now + self.lifetime)


def test_one_token_serves_until_four_fifths_of_its_life() -> None:
    now = [1_000.0]
    source = Counting(lifetime=100.0)
    provider = OAuthTokenProvider(source, clock=lambda: now[0])
    assert [provider.current() for _ in range(3)] == ["t1", "t1", "t1"]
    now[0] = 1_079.9
    assert provider.current() == "t1"
    now[0] = 1_080.0
    assert provider.current() == "t2" and source.fetched == 2
    now[0] = 1_159.9
    assert provider.current() == "t2"
    now[0] = 1_160.0
    assert provider.current() == "t3"


def test_a_token_of_unknown_life_is_fetched_at_every_login() -> None:
    source = Counting(lifetime=None)
    provider = OAuthTokenProvider(source, clock=lambda: 0.0)
    assert [provider.current() for _ in range(3)] == ["t1", "t2", "t3"]


async def test_logins_at_once_make_one_request() -> None:
    import asyncio

    class Slow(Counting):
        def fetch(self, now: float) -> Token:
            gate.wait(5)
            return super().fetch(now)

    gate = threading.Event()
    source = Slow(lifetime=3600.0)
    provider = OAuthTokenProvider(source)
    logins = [asyncio.ensure_future(provider.token()) for _ in range(4)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*logins) == ["t1"] * 4 and source.fetched == 1


def test_jwt_expiry_reads_only_a_numeric_exp() -> None:
    assert jwt_expiry(jwt({"exp": 1_700_000_000})) == 1_700_000_000.0
    assert jwt_expiry(jwt({"exp": 12.5})) == 12.5
    assert jwt_expiry(jwt({"exp": True})) is None
    assert jwt_expiry(jwt({"exp": "1700000000"})) is None
    assert jwt_expiry(jwt({"sub": "x"})) is None
    assert jwt_expiry("opaque-token") is None
    assert jwt_expiry("a.!!!.c") is None
    assert jwt_expiry("a." + base64.urlsafe_b64encode(b"[1]").decode() + ".c") is None


async def test_the_refusal_aware_exchange_answers_an_error_challenge_with_x01() -> None:
    provider = OAuthTokenProvider(Counting(lifetime=60.0), {"logicalCluster": "lkc-1"})
    exchange = oauth_refusal.RefusalAwareOAuthAuthenticator(sasl_oauth_token_provider=provider)
    first = await exchange.step(None)
    assert first == (b"n,,\x01auth=Bearer t1\x01logicalCluster=lkc-1\x01\x01", True)
    assert await exchange.step(b'{"status":"invalid_token"}') == (b"\x01", True)
    taken = oauth_refusal.RefusalAwareOAuthAuthenticator(sasl_oauth_token_provider=provider)
    await taken.step(None)
    assert await taken.step(b"") is None


def test_install_replaces_aiokafkas_oauth_authenticator() -> None:
    from aiokafka.conn import AIOKafkaConnection

    oauth_refusal.install()
    oauth_refusal.install()
    assert oauth_refusal.installed()
    connection = AIOKafkaConnection.__new__(AIOKafkaConnection)
    connection._sasl_oauth_token_provider = OAuthTokenProvider(Counting(lifetime=1.0))
    assert isinstance(connection.authenticator_oauth(), oauth_refusal.RefusalAwareOAuthAuthenticator)


def test_the_variables_list_is_every_oauthbearer_variable() -> None:
    assert set(oauth.VARIABLES) == {
        value for name, value in vars(oauth).items() if name.startswith("ENV_") and isinstance(value, str)
    }


def test_jwt_expiry_decodes_the_whole_base64url_alphabet_and_nothing_else() -> None:
    three = jwt({"sub": "ab", "exp": 1_700_000_000})  # a payload of 4n+3 characters: one "=" of padding
    assert len(three.split(".")[1]) % 4 == 3 and jwt_expiry(three) == 1_700_000_000.0
    for sub in ("~~~", "???"):  # payloads holding "-" and "_"
        token = jwt({"sub": sub, "exp": 1_700_000_000})
        assert {"-", "_"} & set(token.split(".")[1]) and jwt_expiry(token) == 1_700_000_000.0
    payload = base64.urlsafe_b64encode(b'{"exp":1}').decode()
    assert jwt_expiry(f"a.{payload}.c") == 1.0
    assert jwt_expiry(f"a.{payload}!!!!.c") is None  # urlsafe_b64decode alone reads {"exp":1}
    assert jwt_expiry(f"a.{payload[:4]} {payload[4:]}.c") is None
