"""The devstack broker's OAUTHBEARER listener, reached as a turnledger client reaches a managed cluster
that takes bearer tokens (Confluent Cloud, Redpanda Cloud, Strimzi with Keycloak, Event Hubs).

The broker validates every token with Kafka's own `OAuthBearerValidatorCallbackHandler` against the
devstack's key. Clients are built from the KAFKA_* variables, as the services' are: `dev up`'s token
file, and the client-credentials grant against a real HTTP token endpoint (`TokenEndpoint`, signing
with the key the broker trusts). What the broker refuses (a token of another key, an expired one, one
for another audience) and what the issuer refuses (a wrong client secret) are each a
`KafkaAccessError` from `diagnose`, not an outage waited out: before `kafka/oauth_refusal.py`, aiokafka
took the refused token for a login.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from tests.conftest import skip_unless_installed
from tests.integration.test_secured_listener import _read
from turnledger.devstack.identity import SigningKey, TokenEndpoint, ensure_signing_key
from turnledger.devstack.kafka_admin import create_topic
from turnledger.devstack.session import Endpoints, in_ci
from turnledger.errors import KafkaAccessError
from turnledger.kafka import oauth
from turnledger.kafka.connection import ENV_CA_FILE, KafkaSecurity, diagnose
from turnledger.kafka.oauth import TokenRefused

pytestmark = pytest.mark.integration

CLIENT_ID = "svc-turnledger"
CLIENT_SECRET = "the-client-secret"


@pytest.fixture(scope="module")
def oauth_env(devstack: Endpoints) -> dict[str, str]:
    """The variables for the listener with `dev up`'s token file. Only the local devstack's broker has
    one, and only with openssl: skipped otherwise, failed under CI (whose run starts the local devstack
    with openssl), so that a listener gone missing cannot pass as a skip."""
    env = devstack.oauth_client_env()
    if env is None:
        if shutil.which("openssl") is None:
            skip_unless_installed("openssl", "apt-get install -y openssl")
        message = f"the broker at {devstack.bootstrap} ({devstack.source}) has no OAUTHBEARER listener"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return env


@pytest.fixture(scope="module")
def key(devstack: Endpoints, oauth_env: dict[str, str]) -> SigningKey:
    assert devstack.oauth_signing_key is not None
    return SigningKey(Path(devstack.oauth_signing_key), shutil.which("openssl") or "openssl")


@pytest.fixture
def endpoint(key: SigningKey) -> Iterator[TokenEndpoint]:
    with TokenEndpoint(key, CLIENT_ID, CLIENT_SECRET, lifetime_s=600) as served:
        yield served


def grant_env(oauth_env: dict[str, str], url: str, secret: str = CLIENT_SECRET) -> dict[str, str]:
    env = {k: v for k, v in oauth_env.items() if k != oauth.ENV_TOKEN_FILE}
    return {
        **env,
        oauth.ENV_TOKEN_ENDPOINT: url,
        oauth.ENV_CLIENT_ID: CLIENT_ID,
        oauth.ENV_CLIENT_SECRET: secret,
    }


def token_env(oauth_env: dict[str, str], token_file: Path) -> dict[str, str]:
    return {**oauth_env, oauth.ENV_TOKEN_FILE: str(token_file)}


async def round_trip(bootstrap: str, security: KafkaSecurity, topic: str) -> None:
    options = security.client_options()
    await create_topic(bootstrap, topic, **options)
    sent = [f"{topic}-{i}".encode() for i in range(5)]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, **options)
    await producer.start()
    try:
        for value in sent:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    assert await _read(bootstrap, topic, len(sent), options) == sent


async def test_dev_ups_token_file_logs_in_and_carries_records(
    oauth_env: dict[str, str], topic_name: Callable[[str], str]
) -> None:
    security = KafkaSecurity.from_env(oauth_env)
    bootstrap = oauth_env["KAFKA_BOOTSTRAP_SERVERS"]
    assert security.describe() == (
        f"SASL_SSL, OAUTHBEARER from token file {oauth_env[oauth.ENV_TOKEN_FILE]}, "
        f"CA {oauth_env[ENV_CA_FILE]}"
    )
    await diagnose(bootstrap, security)
    await round_trip(bootstrap, security, topic_name("oauth-file"))


async def test_the_client_credentials_grant_logs_in_with_one_token_for_every_client(
    oauth_env: dict[str, str], endpoint: TokenEndpoint, topic_name: Callable[[str], str]
) -> None:
    security = KafkaSecurity.from_env(
        {
            **grant_env(oauth_env, endpoint.url),
            oauth.ENV_EXTENSIONS: "logicalCluster=lkc-1,identityPoolId=pool-2",
        }
    )
    await round_trip(oauth_env["KAFKA_BOOTSTRAP_SERVERS"], security, topic_name("oauth-grant"))
    assert (endpoint.issued, endpoint.refused) == (1, 0), "admin, producer and consumer shared one token"


async def test_a_token_past_four_fifths_of_its_life_is_fetched_again_for_the_next_login(
    oauth_env: dict[str, str], key: SigningKey, topic_name: Callable[[str], str]
) -> None:
    with TokenEndpoint(key, CLIENT_ID, CLIENT_SECRET, lifetime_s=5) as short:
        security = KafkaSecurity.from_env(grant_env(oauth_env, short.url))
        bootstrap = oauth_env["KAFKA_BOOTSTRAP_SERVERS"]
        await diagnose(bootstrap, security)
        assert short.issued == 1
        deadline = time.monotonic() + 60
        while short.issued < 2 and time.monotonic() < deadline:
            await diagnose(bootstrap, security)  # each a new connection, so a new login
            time.sleep(0.2)
        assert short.issued == 2
        await round_trip(bootstrap, security, topic_name("oauth-refreshed"))


def stranger_key(tmp_path: Path) -> SigningKey:
    return ensure_signing_key(tmp_path / "stranger", shutil.which("openssl") or "openssl")


@pytest.mark.parametrize(
    "token",
    ["signed by another key", "expired", "for another audience", "not a JWT"],
)
async def test_a_token_the_broker_refuses_is_an_access_error_not_an_outage(
    oauth_env: dict[str, str], key: SigningKey, token: str, tmp_path: Path
) -> None:
    now = time.time()
    value = {
        "signed by another key": lambda: stranger_key(tmp_path).mint("turnledger", 600),
        "expired": lambda: key.mint("turnledger", 600, now=now - 3600),
        "for another audience": lambda: key.mint("turnledger", 600, audience="someone-else"),
        "not a JWT": lambda: "not-a-jwt",
    }[token]()
    token_file = tmp_path / "token"
    token_file.write_text(value)
    security = KafkaSecurity.from_env(token_env(oauth_env, token_file))
    bootstrap = oauth_env["KAFKA_BOOTSTRAP_SERVERS"]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=10000, **security.client_options()
    )
    with pytest.raises(KafkaConnectionError):  # aiokafka no longer takes the refusal for a login
        await producer.start()
    await producer.stop()
    with pytest.raises(KafkaAccessError) as refused:
        await diagnose(bootstrap, security)
    cause = refused.value.cause
    assert type(cause) is SaslAuthenticationFailed and '{"status":"invalid_token"}' in str(cause)
    assert str(refused.value) == (
        f"Kafka at {bootstrap!r} refused the connection (SASL_SSL, OAUTHBEARER from token file {token_file}, "
        f"CA {oauth_env[ENV_CA_FILE]}): SaslAuthenticationFailed: {cause}. The broker refused the token in "
        f"{token_file} (KAFKA_SASL_OAUTHBEARER_TOKEN_FILE): check that whoever writes it keeps it current "
        "and that its issuer and audience are the ones the broker expects."
    )


async def test_a_client_secret_the_issuer_refuses_is_an_access_error(
    oauth_env: dict[str, str], endpoint: TokenEndpoint
) -> None:
    security = KafkaSecurity.from_env(grant_env(oauth_env, endpoint.url, secret="not-the-secret"))
    bootstrap = oauth_env["KAFKA_BOOTSTRAP_SERVERS"]
    with pytest.raises(KafkaAccessError) as refused:
        await diagnose(bootstrap, security)
    assert type(refused.value.cause) is TokenRefused
    assert str(refused.value) == (
        f"Kafka at {bootstrap!r} refused the connection (SASL_SSL, OAUTHBEARER from token endpoint "
        f"{endpoint.url} as client {CLIENT_ID!r}, CA {oauth_env[ENV_CA_FILE]}): TokenRefused: the token "
        f"endpoint {endpoint.url} refused client {CLIENT_ID!r}: 401 invalid_client (unknown client or wrong "
        "secret). Check KAFKA_SASL_OAUTHBEARER_CLIENT_ID, KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET (or "
        "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE), KAFKA_SASL_OAUTHBEARER_SCOPE and "
        "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL."
    )
    assert "not-the-secret" not in str(refused.value)
    assert (endpoint.issued, endpoint.refused) == (0, 1)


async def test_an_issuer_that_is_down_is_an_outage_diagnose_leaves_alone(oauth_env: dict[str, str]) -> None:
    security = KafkaSecurity.from_env(grant_env(oauth_env, "http://127.0.0.1:1/token"))
    await diagnose(oauth_env["KAFKA_BOOTSTRAP_SERVERS"], security)  # returns: not ours to judge


async def test_clients_outlive_their_tokens_by_logging_in_again_with_fresh_ones(
    oauth_env: dict[str, str], key: SigningKey, topic_name: Callable[[str], str]
) -> None:
    """The broker ends a session when its token expires (`connections.max.reauth.ms`, KIP-368, which
    aiokafka does not answer by re-authenticating): a transactional producer and a consumer kept open
    across four lifetimes of a 5 s token carry every record, each reconnection logging in with a token
    fetched again at 4/5 of the last one's life."""
    with TokenEndpoint(key, CLIENT_ID, CLIENT_SECRET, lifetime_s=5) as short:
        security = KafkaSecurity.from_env(grant_env(oauth_env, short.url))
        options = security.client_options()
        bootstrap = oauth_env["KAFKA_BOOTSTRAP_SERVERS"]
        topic = topic_name("oauth-expiring")
        await create_topic(bootstrap, topic, **options)
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx", request_timeout_ms=15000, **options
        )
        await producer.start()
        sent: list[bytes] = []
        try:
            started = time.monotonic()
            while time.monotonic() - started < 20:
                value = f"{topic}-{len(sent)}".encode()
                async with producer.transaction():
                    await producer.send_and_wait(topic, value)
                sent.append(value)
                await asyncio.sleep(0.5)
        finally:
            await producer.stop()
        assert await _read(bootstrap, topic, len(sent), options) == sent
        assert len(sent) >= 20
        assert short.issued >= 4, "a fresh token for each session the broker ended"
        assert short.refused == 0
