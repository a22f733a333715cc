"""Access tokens for a SASL/OAUTHBEARER login (KIP-255, KIP-768), from one of three sources.

Managed clusters that take no password take a bearer token: Confluent Cloud and Redpanda Cloud from an
OIDC issuer, Strimzi from Keycloak, Event Hubs from Entra ID, MSK signed with AWS keys, Kubernetes
workloads from a token file a sidecar or the kubelet keeps current. With
`KAFKA_SASL_MECHANISM=OAUTHBEARER`, exactly one source:

- `KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL` with `..._CLIENT_ID`, `..._CLIENT_SECRET` (or
  `..._CLIENT_SECRET_FILE`) and optionally `..._SCOPE`: the OAuth 2.0 client-credentials grant
  (RFC 6749 §4.4), the client authenticated with HTTP Basic (§2.3.1), as Kafka's own Java client asks
  (`HttpAccessTokenRetriever`);
- `KAFKA_SASL_OAUTHBEARER_TOKEN_FILE`: a file holding the token, read again at every login;
- `KAFKA_SASL_OAUTHBEARER_AWS_REGION`, optionally with `..._AWS_PROFILE`: AWS MSK IAM access control,
  a token signed with AWS keys (`kafka/msk_iam.py`, which imports botocore only when chosen).

`KAFKA_SASL_OAUTHBEARER_EXTENSIONS` (`key=value,key=value`) adds SASL extensions to the login
(Confluent Cloud asks for `logicalCluster` and `identityPoolId`).

One token serves every connection of the process until 80% of its lifetime has passed (Kafka's
`sasl.login.refresh.window.factor`), from the issuer's `expires_in`, else the JWT's `exp`; a token
of unknown lifetime is fetched again at every login. How the issuer answers decides what the
services do (`ISSUER_ANSWERS`): a refusal of our client (a wrong secret, an unknown client, a scope
it may not have) is `TokenRefused`, an authentication failure that waiting does not mend, which
`connection.diagnose` turns into a `KafkaAccessError`; an issuer that cannot be reached or is
failing is `TokenUnavailable`, a connection error aiokafka retries like any outage.

The client secret is never printed; a token is never logged.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urlsplit

import httpx
import orjson
from aiokafka import errors as kafka_errors
from aiokafka.abc import AbstractTokenProvider

from turnledger.errors import KafkaSettingsError, TurnledgerError
from turnledger.kafka import oauth_refusal
from turnledger.kafka.secret import Secret, read_secret, read_text

ENV_TOKEN_ENDPOINT = "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL"
ENV_CLIENT_ID = "KAFKA_SASL_OAUTHBEARER_CLIENT_ID"
ENV_CLIENT_SECRET = "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET"
ENV_CLIENT_SECRET_FILE = "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE"
ENV_SCOPE = "KAFKA_SASL_OAUTHBEARER_SCOPE"
ENV_TOKEN_FILE = "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"
ENV_EXTENSIONS = "KAFKA_SASL_OAUTHBEARER_EXTENSIONS"
ENV_AWS_REGION = "KAFKA_SASL_OAUTHBEARER_AWS_REGION"
ENV_AWS_PROFILE = "KAFKA_SASL_OAUTHBEARER_AWS_PROFILE"
VARIABLES = (
    ENV_TOKEN_ENDPOINT,
    ENV_CLIENT_ID,
    ENV_CLIENT_SECRET,
    ENV_CLIENT_SECRET_FILE,
    ENV_SCOPE,
    ENV_TOKEN_FILE,
    ENV_EXTENSIONS,
    ENV_AWS_REGION,
    ENV_AWS_PROFILE,
)

REFRESH_FACTOR = 0.8
"""A token is fetched again once this share of its lifetime has passed (Kafka's default
`sasl.login.refresh.window.factor`), so a login never presents one about to expire."""
ISSUER_TIMEOUT_S = 10.0


class TokenRefused(kafka_errors.AuthenticationFailedError, TurnledgerError):  # type: ignore[misc]
    """The issuer refused to give us a token, or gave none: our settings are wrong, waiting does not
    help. An aiokafka authentication error, so a client's bootstrap fails and `diagnose` reports it,
    with `check` as what to fix."""

    def __init__(self, message: str, check: str) -> None:
        super().__init__(message)
        self.check = check

    def __str__(self) -> str:  # aiokafka's errors prefix their class name, which the caller adds
        return str(self.args[0])


class TokenUnavailable(kafka_errors.KafkaConnectionError, TurnledgerError):  # type: ignore[misc]
    """The issuer could not be reached or failed: an outage, which aiokafka retries."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Token:
    value: str
    expires_at: float | None
    """Seconds since the epoch; None when neither the issuer nor the token says."""


class TokenSource(Protocol):
    """Where tokens come from. `fetch` may block (a file, an HTTP request): it runs in a thread."""

    def describe(self) -> str: ...

    def fetch(self, now: float) -> Token: ...

    def check(self) -> str:
        """What to check when the broker refuses a token of this source."""
        ...


class Answer(Enum):
    TOKEN = "token"
    REFUSED = "refused"
    UNAVAILABLE = "unavailable"


ISSUER_ANSWERS: tuple[tuple[Callable[[int], bool], Answer], ...] = (
    (lambda status: status == 200, Answer.TOKEN),
    (lambda status: status in (408, 429) or status >= 500, Answer.UNAVAILABLE),
    (lambda status: 400 <= status < 500, Answer.REFUSED),  # RFC 6749 §5.2: 400 and 401 are refusals
    (lambda status: True, Answer.REFUSED),  # a redirect or another success: not a token endpoint
)
"""The token endpoint's HTTP status → what it means, first match wins: a timeout, a rate limit or a
failing issuer will pass; any other refusal (a wrong secret, a wrong URL) will not."""


def judge(status: int) -> Answer:
    return next(answer for matches, answer in ISSUER_ANSWERS if matches(status))


def jwt_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT (RFC 7519 §4.1.4), read without verifying it: only for when to fetch
    the next one. None when `token` is not a JWT with a numeric `exp`: also when its payload holds a
    character base64 has not (`urlsafe_b64decode` alone would skip it and read the rest)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = orjson.loads(base64.b64decode(payload, altchars=b"-_", validate=True))
    except (ValueError, orjson.JSONDecodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


@dataclass(frozen=True)
class ClientCredentials:
    """The client-credentials grant against an OAuth 2.0 token endpoint."""

    url: str
    client_id: str
    secret: Secret
    scope: str | None = None

    def describe(self) -> str:
        return f"token endpoint {self.url} as client {self.client_id!r}"

    def check(self) -> str:
        return (
            f"The broker refused the token from {self.url}: check that it is the issuer the broker "
            f"trusts ({ENV_TOKEN_ENDPOINT}), and {ENV_SCOPE} (the audience and scope the broker expects)."
        )

    def fetch(self, now: float) -> Token:
        user = f"{quote(self.client_id, safe='')}:{quote(self.secret.reveal(), safe='')}"
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        headers = {
            "Authorization": "Basic " + base64.b64encode(user.encode()).decode(),
            "Accept": "application/json",
        }
        try:
            response = httpx.post(self.url, data=form, headers=headers, timeout=ISSUER_TIMEOUT_S)
        except httpx.HTTPError as exc:
            why = type(exc).__name__
            raise TokenUnavailable(f"the token endpoint {self.url} did not answer: {why}") from exc
        answer = judge(response.status_code)
        if answer is Answer.UNAVAILABLE:
            raise TokenUnavailable(f"the token endpoint {self.url} answered {response.status_code}")
        if answer is Answer.REFUSED:
            raise TokenRefused(
                f"the token endpoint {self.url} refused client {self.client_id!r}: {response.status_code}"
                f"{_oauth_error(response)}",
                f"Check {ENV_CLIENT_ID}, {ENV_CLIENT_SECRET} (or {ENV_CLIENT_SECRET_FILE}), {ENV_SCOPE} "
                f"and {ENV_TOKEN_ENDPOINT}.",
            )
        return self._token(response, now)

    def _token(self, response: httpx.Response, now: float) -> Token:
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = None
        value = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(value, str) or not value:
            raise TokenRefused(
                f"the token endpoint {self.url} answered 200 without an access_token",
                f"Check {ENV_TOKEN_ENDPOINT}: the issuer's token endpoint, not its discovery document.",
            )
        lifetime = body.get("expires_in") if isinstance(body, dict) else None
        if isinstance(lifetime, int | float) and not isinstance(lifetime, bool) and lifetime > 0:
            return Token(value, now + float(lifetime))
        return Token(value, jwt_expiry(value))


def _oauth_error(response: httpx.Response) -> str:
    """` invalid_client (Invalid client secret)`: the error and its description of an RFC 6749 §5.2
    answer, else nothing (the body of a page that is not an OAuth answer is not shown)."""
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return ""
    description = body.get("error_description")
    return f" {body['error']}" + (f" ({description})" if isinstance(description, str) and description else "")


@dataclass(frozen=True)
class TokenFile:
    """A token someone else keeps current in a file (a Kubernetes projected token, a sidecar's)."""

    path: Path

    def describe(self) -> str:
        return f"token file {self.path}"

    def check(self) -> str:
        return (
            f"The broker refused the token in {self.path} ({ENV_TOKEN_FILE}): check that whoever writes "
            "it keeps it current and that its issuer and audience are the ones the broker expects."
        )

    def fetch(self, now: float) -> Token:
        try:
            value = self.path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenUnavailable(f"cannot read the token file {self.path}: {type(exc).__name__}") from exc
        if not value:
            raise TokenUnavailable(f"the token file {self.path} is empty")
        return Token(value, None)  # read again at every login: whoever writes it decides when it changes


class OAuthTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """aiokafka's token callback for one process: one token shared by every connection, fetched again
    once `REFRESH_FACTOR` of its lifetime has passed. The fetch runs in a thread under a lock, so it
    never blocks an event loop and two connections that log in at once make one request."""

    def __init__(
        self,
        source: TokenSource,
        extensions: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self._extensions = dict(extensions or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._refresh_at = 0.0

    def __repr__(self) -> str:
        return f"OAuthTokenProvider({self.source.describe()})"

    async def token(self) -> str:
        return await asyncio.to_thread(self.current)

    def current(self) -> str:
        with self._lock:
            now = self._clock()
            if self._token is None or now >= self._refresh_at:
                self._token = self.source.fetch(now)
                expires_at = self._token.expires_at
                self._refresh_at = now if expires_at is None else now + REFRESH_FACTOR * (expires_at - now)
            return self._token.value

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)


_CLIENT_VARIABLES = (ENV_CLIENT_ID, ENV_CLIENT_SECRET, ENV_CLIENT_SECRET_FILE, ENV_SCOPE)
NOT_BESIDE = {
    ENV_TOKEN_ENDPOINT: (ENV_AWS_PROFILE,),
    ENV_TOKEN_FILE: (*_CLIENT_VARIABLES, ENV_AWS_PROFILE),
    ENV_AWS_REGION: _CLIENT_VARIABLES,
}
"""The variable that chooses each source → those of the others, which it would ignore."""


def source_from_env(env: Mapping[str, str]) -> TokenSource:
    """The one source the variables name, or a KafkaSettingsError naming what is missing or too much."""
    chosen = [name for name in NOT_BESIDE if env.get(name, "").strip()]
    if len(chosen) != 1:
        raise KafkaSettingsError(
            f"KAFKA_SASL_MECHANISM=OAUTHBEARER needs one source of tokens: {ENV_TOKEN_ENDPOINT} (with "
            f"{ENV_CLIENT_ID} and {ENV_CLIENT_SECRET}), {ENV_TOKEN_FILE} or {ENV_AWS_REGION} (AWS MSK IAM)"
            + (f", not {', '.join(chosen[:-1])} and {chosen[-1]} together" if chosen else "")
        )
    stray = [name for name in NOT_BESIDE[chosen[0]] if env.get(name, "").strip()]
    if stray:
        raise KafkaSettingsError(f"{', '.join(stray)} set beside {chosen[0]}: unset them")
    if chosen[0] == ENV_AWS_REGION:
        from turnledger.kafka.msk_iam import msk_iam_from_env  # botocore only for who needs it

        return msk_iam_from_env(env)
    if chosen[0] == ENV_TOKEN_FILE:
        path = Path(env[ENV_TOKEN_FILE].strip())
        read_text(ENV_TOKEN_FILE, path)  # readable now, or said at start
        return TokenFile(path)
    endpoint = env[ENV_TOKEN_ENDPOINT].strip()
    scheme = urlsplit(endpoint).scheme
    if scheme not in ("https", "http") or not urlsplit(endpoint).netloc:
        raise KafkaSettingsError(f"{ENV_TOKEN_ENDPOINT} must be an http:// or https:// URL, not {endpoint!r}")
    client_id = env.get(ENV_CLIENT_ID, "").strip()
    secret = read_secret(env, ENV_CLIENT_SECRET, ENV_CLIENT_SECRET_FILE, "ClientSecret")
    missing = [name for name, value in ((ENV_CLIENT_ID, client_id), (ENV_CLIENT_SECRET, secret)) if not value]
    if missing:
        raise KafkaSettingsError(
            f"{ENV_TOKEN_ENDPOINT} logs in with the client-credentials grant: set {', '.join(missing)}"
            + (f" (or {ENV_CLIENT_SECRET_FILE})" if ENV_CLIENT_SECRET in missing else "")
        )
    assert secret is not None
    return ClientCredentials(endpoint, client_id, secret, env.get(ENV_SCOPE, "").strip() or None)


def extensions_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """`key=value,key=value` → a dict; RFC 7628 §3.1 keys are letters only, and `auth` is reserved."""
    text = env.get(ENV_EXTENSIONS, "").strip()
    extensions: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key.isascii() or not key.isalpha() or key == "auth" or not value.strip():
            raise KafkaSettingsError(
                f"{ENV_EXTENSIONS}: {item!r} is not key=value with a key of letters only (not 'auth')"
            )
        extensions[key] = value.strip()
    return extensions


def provider_from_env(env: Mapping[str, str]) -> OAuthTokenProvider:
    """The process's token provider; also makes aiokafka hear a broker refuse a token
    (`oauth_refusal`)."""
    provider = OAuthTokenProvider(source_from_env(env), extensions_from_env(env))
    oauth_refusal.install()
    return provider


def oauth_variables_set(env: Mapping[str, str]) -> list[str]:
    return [name for name in VARIABLES if env.get(name, "").strip()]
