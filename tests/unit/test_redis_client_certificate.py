"""A client certificate for a Redis that asks for one (`tls-auth-clients yes`): REDIS_SSL_CERT_FILE and
REDIS_SSL_KEY_FILE in `redisconn.settings`, checked at start, and how a client with one is named.

The PEM files are tests/fixtures/client_tls/ (a CA nothing trusts, 100 years). On a real redis-server:
tests/integration/test_redis_client_certificate.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis

from turnledger.errors import RedisSettingsError
from turnledger.redisconn.client import redis_client
from turnledger.redisconn.naming import describe
from turnledger.redisconn.settings import client_options

TLS = Path(__file__).resolve().parents[1] / "fixtures" / "client_tls"
CERT, KEY = str(TLS / "client.pem"), str(TLS / "client.key")
URL = "rediss://gateway@cache.example.net:6380/0"


def test_the_certificate_and_its_key_are_applied_to_a_rediss_url() -> None:
    env = {"REDIS_SSL_CA_FILE": str(TLS / "ca.pem"), "REDIS_SSL_CERT_FILE": CERT, "REDIS_SSL_KEY_FILE": KEY}
    assert client_options(URL, env) == {
        "socket_connect_timeout": 5.0,
        "ssl_ca_certs": str(TLS / "ca.pem"),
        "ssl_certfile": CERT,
        "ssl_keyfile": KEY,
    }


def test_the_builder_makes_a_client_that_presents_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_SSL_CA_FILE", "REDIS_PASSWORD_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_SSL_CERT_FILE", CERT)
    monkeypatch.setenv("REDIS_SSL_KEY_FILE", KEY)
    client = redis_client(URL)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == (CERT, KEY)
    assert (
        describe(client)
        == f"TLS, the system's CAs, client certificate {CERT}, user 'gateway' without a password"
    )


def test_a_certificate_given_in_the_url_is_named_too() -> None:
    client = aioredis.from_url(f"{URL}?ssl_certfile=/etc/redis/client.pem&ssl_cert_reqs=none")
    assert describe(client) == (
        "TLS, certificate not verified, client certificate /etc/redis/client.pem, user 'gateway' without a "
        "password"
    )


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [
        (
            URL,
            {"REDIS_SSL_CERT_FILE": CERT},
            "a client certificate needs both REDIS_SSL_CERT_FILE and REDIS_SSL_KEY_FILE",
        ),
        (
            URL,
            {"REDIS_SSL_KEY_FILE": KEY},
            "a client certificate needs both REDIS_SSL_CERT_FILE and REDIS_SSL_KEY_FILE",
        ),
        (
            "redis://cache:6379/0",
            {"REDIS_SSL_CERT_FILE": CERT, "REDIS_SSL_KEY_FILE": KEY},
            "REDIS_SSL_CERT_FILE, REDIS_SSL_KEY_FILE set, but REDIS_URL is redis://: TLS needs a rediss:// "
            "URL",
        ),
        (
            "unix:///run/redis.sock",
            {"REDIS_SSL_KEY_FILE": KEY},
            "REDIS_SSL_KEY_FILE set, but REDIS_URL is unix://: TLS needs a rediss:// URL",
        ),
        (
            f"{URL}?ssl_certfile=/etc/redis/client.pem",
            {"REDIS_SSL_CERT_FILE": CERT, "REDIS_SSL_KEY_FILE": KEY},
            "set REDIS_SSL_CERT_FILE or ?ssl_certfile= in REDIS_URL, not both",
        ),
        (
            f"{URL}?ssl_keyfile=/etc/redis/client.key",
            {"REDIS_SSL_CERT_FILE": CERT, "REDIS_SSL_KEY_FILE": KEY},
            "set REDIS_SSL_KEY_FILE or ?ssl_keyfile= in REDIS_URL, not both",
        ),
        (
            URL,
            {"REDIS_SSL_CERT_FILE": str(TLS / "missing.pem"), "REDIS_SSL_KEY_FILE": KEY},
            f"REDIS_SSL_CERT_FILE: cannot read the file {TLS / 'missing.pem'}",
        ),
        (
            URL,
            {"REDIS_SSL_CERT_FILE": CERT, "REDIS_SSL_KEY_FILE": str(TLS)},
            f"REDIS_SSL_KEY_FILE: cannot read the file {TLS}",
        ),
        (
            URL,
            {"REDIS_SSL_CERT_FILE": CERT, "REDIS_SSL_KEY_FILE": str(TLS / "other.key")},
            f"REDIS_SSL_CERT_FILE, REDIS_SSL_KEY_FILE: {TLS / 'other.key'} is not the key of {CERT} "
            "(KEY_VALUES_MISMATCH)",
        ),
        (
            URL,
            {"REDIS_SSL_CERT_FILE": str(TLS / "ca.pem"), "REDIS_SSL_KEY_FILE": KEY},
            f"REDIS_SSL_CERT_FILE, REDIS_SSL_KEY_FILE: {KEY} is not the key of {TLS / 'ca.pem'} "
            "(KEY_VALUES_MISMATCH)",
        ),
        (
            URL,
            {"REDIS_SSL_CERT_FILE": KEY, "REDIS_SSL_KEY_FILE": KEY},
            f"REDIS_SSL_CERT_FILE, REDIS_SSL_KEY_FILE: {KEY} and {KEY} are not a PEM certificate and its PEM "
            "key",
        ),
        (
            URL,
            {"REDIS_SSL_CERT_FILE": CERT, "REDIS_SSL_KEY_FILE": str(TLS / "encrypted.key")},
            f"REDIS_SSL_KEY_FILE: {TLS / 'encrypted.key'} is encrypted; give the key unencrypted (a file "
            "only this service's user can read)",
        ),
    ],
)
def test_a_client_certificate_that_cannot_work_is_refused_at_start(
    url: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(RedisSettingsError) as caught:
        client_options(url, env)
    assert str(caught.value) == message
