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
        self.received: list[tuple[dict[str, str], bytes]] = []
        """Each request's headers and body as they came."""
        self.stall: threading.Event | None = None
        """When set, each answer waits for it (at most 2 s): an issuer that does not answer in time."""
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                canned.received.append((dict(self.headers.items()), body))
                canned.requests.append((self.headers.get("Authorization"), parse_qs(body.decode())))
                if canned.stall is not None:
                    canned.stall.wait(2)
                try:
                    self.send_response(canned.status)
                    self.send_header("Content-Length", str(len(canned.body)))
                    self.end_headers()
                    self.wfile.write(canned.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a stalled answer's client gave up and left: nobody to answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

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
            {**ENDPOINT, "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p"},
            "KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD set, but KAFKA_SASL_MECHANISM=OAUTHBEARER logs in "
            "with a token: unset them",
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


async def test_install_replaces_aiokafkas_oauth_authenticator() -> None:
    from aiokafka.conn import AIOKafkaConnection

    oauth_refusal.install()
    oauth_refusal.install()
    assert oauth_refusal.installed()
    connection = AIOKafkaConnection.__new__(AIOKafkaConnection)
    connection._sasl_oauth_token_provider = OAuthTokenProvider(Counting(lifetime=1.0))
    exchange = connection.authenticator_oauth()
    assert isinstance(exchange, oauth_refusal.RefusalAwareOAuthAuthenticator)
    assert await exchange.step(None) == (b"n,,\x01auth=Bearer t1\x01\x01", True)  # the connection's provider


def test_install_fails_loudly_on_an_aiokafka_without_the_method(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiokafka.conn import AIOKafkaConnection

    monkeypatch.delattr(AIOKafkaConnection, "authenticator_oauth")
    with pytest.raises(RuntimeError) as caught:
        oauth_refusal.install()
    assert str(caught.value) == (
        "aiokafka changed: AIOKafkaConnection.authenticator_oauth is gone; see oauth_refusal.py"
    )


def test_the_variables_list_is_every_oauthbearer_variable() -> None:
    assert set(oauth.VARIABLES) == {
        value for name, value in vars(oauth).items() if name.startswith("ENV_") and isinstance(value, str)
    }


def test_the_grant_sends_exactly_this_form_and_these_headers(endpoint: Canned) -> None:
    """RFC 6749 §2.3.1: the client id and secret are form-encoded before Basic, so a `/` (which
    `quote` keeps by default) becomes %2F; the issuer is asked for JSON."""
    endpoint.answer(200, {"access_token": "tok-1"})
    client(endpoint.url, "svc/one:two", secret="s3cr/t %&=", scope="kafka read").fetch(now=0.0)
    client(endpoint.url, "svc-turnledger").fetch(now=0.0)
    [(with_scope, form_with_scope), (without_scope, form_without_scope)] = endpoint.received
    assert form_with_scope == b"grant_type=client_credentials&scope=kafka+read"
    assert form_without_scope == b"grant_type=client_credentials"
    basic = base64.b64encode(b"svc%2Fone%3Atwo:s3cr%2Ft%20%25%26%3D").decode()
    assert with_scope["Authorization"] == f"Basic {basic}"
    assert with_scope["Accept"] == "application/json"
    assert with_scope["Content-Type"] == "application/x-www-form-urlencoded"
    assert (
        without_scope["Authorization"]
        == "Basic " + base64.b64encode(b"svc-turnledger:s3cr%25t%3A%26%3D").decode()
    )


def test_an_issuer_that_does_not_answer_in_time_is_an_outage(
    endpoint: Canned, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request has a timeout (`ISSUER_TIMEOUT_S`, here shortened): without one, a login would wait
    for an issuer that never answers."""
    assert oauth.ISSUER_TIMEOUT_S == 10.0
    monkeypatch.setattr(oauth, "ISSUER_TIMEOUT_S", 0.05)
    endpoint.answer(200, {"access_token": "late"})
    endpoint.stall = threading.Event()
    try:
        with pytest.raises(TokenUnavailable) as caught:
            client(endpoint.url).fetch(now=0.0)
    finally:
        endpoint.stall.set()
    assert str(caught.value) == f"the token endpoint {endpoint.url} did not answer: ReadTimeout"


@pytest.mark.parametrize(
    ("expires_in", "expires_at"),
    [(1, 1_001.0), (0.5, 1_000.5), (0, 5_000.0), (-30, 5_000.0), (True, 5_000.0)],
)
def test_expires_in_counts_only_when_it_is_a_positive_number(
    endpoint: Canned, expires_in: float, expires_at: float
) -> None:
    """Else the JWT's own `exp` (5000) says when it expires."""
    endpoint.answer(200, {"access_token": jwt({"exp": 5_000}), "expires_in": expires_in})
    assert client(endpoint.url).fetch(now=1_000.0).expires_at == expires_at


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ({"error": "invalid_scope"}, " invalid_scope"),
        ({"error": "invalid_scope", "error_description": ""}, " invalid_scope"),
        ({"error": "invalid_scope", "error_description": 42}, " invalid_scope"),
        ({"error": "invalid_scope", "error_description": "no kafka"}, " invalid_scope (no kafka)"),
        ({"error": 42, "error_description": "no kafka"}, ""),
        ({"message": "bad request"}, ""),
        ([{"error": "invalid_scope"}], ""),
        (b"<html>bad request</html>", ""),
    ],
)
def test_a_refusal_shows_only_an_oauth_error_and_its_description(
    endpoint: Canned, body: dict[str, Any] | list[Any] | bytes, shown: str
) -> None:
    endpoint.answer(400, body if isinstance(body, bytes | dict) else json.dumps(body).encode())
    with pytest.raises(TokenRefused) as refused:
        client(endpoint.url).fetch(now=0.0)
    assert (
        str(refused.value) == f"the token endpoint {endpoint.url} refused client 'svc-turnledger': 400{shown}"
    )


def test_a_refused_token_files_check_names_the_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    settings = KafkaSecurity.from_env({**BASE, "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": str(token)})
    assert settings.fix(SaslAuthenticationFailed('{"status":"invalid_token"}')) == (
        f"The broker refused the token in {token} (KAFKA_SASL_OAUTHBEARER_TOKEN_FILE): check that whoever "
        "writes it keeps it current and that its issuer and audience are the ones the broker expects."
    )


def test_a_token_file_is_utf_8_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    token = tmp_path / "token"
    token.write_bytes("tök€n\n".encode())
    assert TokenFile(token).fetch(now=0.0) == Token("tök€n", None)


def test_the_first_login_fetches_whatever_the_clock_reads() -> None:
    source = Counting(lifetime=100.0)
    provider = OAuthTokenProvider(source, clock=lambda: -1.0)
    assert provider.current() == "t1" and source.fetched == 1


CLIENT_CREDENTIALS = (
    "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL logs in with the client-credentials grant: set "
)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "https://idp.example/token"},
            f"{CLIENT_CREDENTIALS}KAFKA_SASL_OAUTHBEARER_CLIENT_ID, KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET (or "
            "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE)",
        ),
        (
            {
                "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "https://idp.example/token",
                "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": "very-secret-value",
            },
            f"{CLIENT_CREDENTIALS}KAFKA_SASL_OAUTHBEARER_CLIENT_ID",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "ftp://idp.example/token"},
            "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL must be an http:// or https:// URL, not "
            "'ftp://idp.example/token'",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "https:///token"},
            "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL must be an http:// or https:// URL, not 'https:///token'",
        ),
        (
            {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_EXTENSIONS": "clé=x"},
            "KAFKA_SASL_OAUTHBEARER_EXTENSIONS: 'clé=x' is not key=value with a key of letters only "
            "(not 'auth')",
        ),
    ],
)
def test_the_settings_messages_exactly(env: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSettingsError) as refused:
        oauth.provider_from_env(env)
    assert str(refused.value) == message


def test_an_http_endpoint_and_no_scope_are_taken_as_they_are() -> None:
    env = {**ENDPOINT, "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": " http://127.0.0.1:8080/token "}
    assert source_from_env(env) == ClientCredentials(
        "http://127.0.0.1:8080/token", "svc-turnledger", Secret("very-secret-value", "ClientSecret"), None
    )


def test_an_extensions_value_may_hold_an_equals_sign() -> None:
    env = {"KAFKA_SASL_OAUTHBEARER_EXTENSIONS": "identityPoolId=pool=Ab==, logicalCluster = lkc-1"}
    assert extensions_from_env(env) == {"identityPoolId": "pool=Ab==", "logicalCluster": "lkc-1"}


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
