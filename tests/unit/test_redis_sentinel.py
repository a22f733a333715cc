"""A Redis behind Sentinel (`redisconn/sentinel.py`): the URL read into sentinels, service, database and
the nodes' options; the client redis-py builds from it, with this process's settings for the nodes
and the sentinels; how it is named; the settings that cannot work. On real sentinels:
tests/integration/test_redis_sentinel.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.unit.fake_sentinel import NOAUTH_HELLO
from tests.unit.tls_servers import HOST, closed_port
from turnledger.errors import RedisSentinelUnavailableError, RedisSettingsError, RedisUnavailableError
from turnledger.redisconn.client import connect, redis_client
from turnledger.redisconn.naming import client_url, describe, without_client_reprs
from turnledger.redisconn.refusals import classify
from turnledger.redisconn.sentinel import SentinelUrl, is_sentinel, parse
from turnledger.redisconn.settings import client_options, sentinel_password

FIXTURE_CA = Path(__file__).resolve().parents[1] / "fixtures" / "client_tls" / "ca.pem"
"""A CA file that loads (the client TLS fixtures' own)."""

VARIABLES = (
    "REDIS_SSL_CA_FILE",
    "REDIS_SSL_CERT_FILE",
    "REDIS_SSL_KEY_FILE",
    "REDIS_PASSWORD_FILE",
    "REDIS_SENTINEL_PASSWORD_FILE",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("redis+sentinel://s1:26380/mymaster", SentinelUrl((("s1", 26380),), "mymaster", 0, "redis", {})),
        (
            "redis+sentinel://u:p%40w@s1:1,s2,[::1]:3/my%20master/2?socket_timeout=1.5",
            SentinelUrl(
                (("s1", 1), ("s2", 26379), ("::1", 3)),
                "my master",
                2,
                "redis",
                {"socket_timeout": 1.5, "username": "u", "password": "p@w"},
            ),
        ),
        ("REDISS+SENTINEL://s1/m/", SentinelUrl((("s1", 26379),), "m", 0, "rediss", {})),
        ("redis+sentinel://s1/m?db=4", SentinelUrl((("s1", 26379),), "m", 4, "redis", {})),
        ("redis+sentinel://s1/m/5?db=4", SentinelUrl((("s1", 26379),), "m", 4, "redis", {})),
        ("redis+sentinel://XENON-1:7/m/5", SentinelUrl((("XENON-1", 7),), "m", 5, "redis", {})),
        (
            "redis+sentinel://s1/m?host=elsewhere&port=7000&socket_timeout=2",
            SentinelUrl((("s1", 26379),), "m", 0, "redis", {"socket_timeout": 2.0}),
        ),
    ],
)
def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database(
    url: str, parsed: SentinelUrl
) -> None:
    assert is_sentinel(url)
    assert parse(url) == parsed
    assert parse(url).tls is (parsed.node_scheme == "rediss")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "redis+sentinel:///mymaster",
            "REDIS_URL (redis+sentinel://[USER@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]): name at least one "
            "sentinel",
        ),
        (
            "redis+sentinel://s1:26379",
            "REDIS_URL (redis+sentinel://[USER@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]): name the service the "
            "sentinels monitor",
        ),
        (
            "redis+sentinel://s1/m/0/extra",
            "REDIS_URL (redis+sentinel://[USER@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]): name the service the "
            "sentinels monitor",
        ),
        (
            "redis+sentinel://s1/m/zero",
            "REDIS_URL (redis+sentinel://[USER@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]): the database must be "
            "a number, not 'zero'",
        ),
        ("redis+sentinel://s1:port/m", "REDIS_URL: 's1:port' is not a sentinel's HOST:PORT"),
        ("redis+sentinel://s1,,s2/m", "REDIS_URL: '' is not a sentinel's HOST:PORT"),
        (
            "redis+sentinel://s1/m?socket_timeout=soon",
            "REDIS_URL: Invalid value for 'socket_timeout' in connection URL.",
        ),
    ],
)
def test_a_sentinel_url_that_cannot_work_says_why(url: str, message: str) -> None:
    with pytest.raises(RedisSettingsError) as caught:
        parse(url)
    assert str(caught.value) == message


def test_other_urls_are_not_sentinel_urls() -> None:
    assert [is_sentinel(u) for u in ("redis://h/0", "rediss://h/0", "unix:///s", "sentinel://h/m")] == [
        False
    ] * 4


def test_the_client_asks_the_sentinels_for_the_primary_with_this_process_s_settings(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "redis.password").write_text("node-pw\n")
    (tmp_path / "sentinel.password").write_text("sentinel-pw\n")
    clean_env.setenv("REDIS_PASSWORD_FILE", str(tmp_path / "redis.password"))
    clean_env.setenv("REDIS_SENTINEL_PASSWORD_FILE", str(tmp_path / "sentinel.password"))
    client = redis_client("redis+sentinel://gateway@s1:26380,s2/mymaster/3")
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.is_master
    assert (pool.service_name, pool.connection_class) == ("mymaster", SentinelManagedConnection)
    node = {
        k: v
        for k, v in pool.connection_kwargs.items()
        if k in ("db", "username", "password", "socket_connect_timeout")
    }
    assert node == {"db": 3, "username": "gateway", "password": "node-pw", "socket_connect_timeout": 5.0}
    sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
    assert [(s["host"], s["port"], s.get("password"), s.get("username")) for s in sentinels] == [
        ("s1", 26380, "sentinel-pw", None),
        ("s2", 26379, "sentinel-pw", None),
    ]
    assert client_url(client) == "redis+sentinel://gateway:***@s1:26380,s2:26379/mymaster/3"
    assert (
        describe(client)
        == "the primary of 'mymaster' by 2 sentinels, plaintext, user 'gateway' with a password"
    )
    assert "pw" not in client_url(client).replace("***", "") + describe(client)


def test_tls_reaches_both_the_sentinels_and_the_nodes(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(FIXTURE_CA.read_bytes())
    clean_env.setenv("REDIS_SSL_CA_FILE", str(ca))
    client = redis_client(
        "rediss+sentinel://s1/m?ssl_check_hostname=false&socket_connect_timeout=2.5&ssl_password=key-pw"
    )
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.connection_class is SentinelManagedSSLConnection
    node = pool.connection_kwargs
    assert (node["ssl_ca_certs"], node["ssl_check_hostname"], node["socket_connect_timeout"]) == (
        str(ca),
        False,
        2.5,
    )
    [sentinel] = pool.sentinel_manager.sentinels
    assert sentinel.connection_pool.connection_class is SSLConnection
    kwargs = sentinel.connection_pool.connection_kwargs
    assert (
        kwargs["ssl_ca_certs"],
        kwargs["ssl_check_hostname"],
        kwargs["socket_connect_timeout"],
        kwargs["ssl_password"],
    ) == (str(ca), False, 2.5, "key-pw"), "the URL's options win over the process's, for the sentinels too"
    assert describe(client) == f"the primary of 'm' by 1 sentinel, TLS, CA {ca}, no login"


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [
        (
            "redis+sentinel://s1/m?ssl_ca_certs=/ca.pem",
            {},
            "?ssl_ca_certs= set, but REDIS_URL is redis+sentinel://: TLS needs a rediss:// URL (rediss+sentinel://)",
        ),
        (
            "redis+sentinel://s1/m?sentinel=1",
            {},
            "?sentinel= in REDIS_URL: not an option a redis+sentinel:// connection takes",
        ),
        (
            "redis+sentinel://u:pw@s1/m",
            {"REDIS_PASSWORD_FILE": "{password}"},
            "set a password in REDIS_URL or REDIS_PASSWORD_FILE, not both",
        ),
    ],
)
def test_settings_that_cannot_work_with_a_sentinel_url(
    tmp_path: Path, url: str, env: dict[str, str], message: str
) -> None:
    (tmp_path / "password").write_text("pw\n")
    with pytest.raises(RedisSettingsError) as caught:
        client_options(url, {k: v.format(password=tmp_path / "password") for k, v in env.items()})
    assert str(caught.value) == message


def test_the_sentinels_password_is_only_for_a_sentinel_url(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.password"
    path.write_text(" s3cret \n")
    env = {"REDIS_SENTINEL_PASSWORD_FILE": str(path)}
    assert sentinel_password("redis+sentinel://s1/m", env) == "s3cret"
    assert sentinel_password("redis+sentinel://s1/m", {}) is None
    with pytest.raises(RedisSettingsError) as caught:
        sentinel_password("redis://cache:6379/0", env)
    assert (
        str(caught.value) == "REDIS_SENTINEL_PASSWORD_FILE set, but REDIS_URL is not a redis+sentinel:// URL"
    )
    path.write_text("\n")
    with pytest.raises(RedisSettingsError) as caught:
        sentinel_password("redis+sentinel://s1/m", env)
    assert str(caught.value) == f"REDIS_SENTINEL_PASSWORD_FILE: {path} is empty"


def test_an_ipv6_address_is_named_in_brackets_and_a_missing_database_as_0() -> None:
    assert client_url(redis_client("redis+sentinel://[::1]:3/m")) == "redis+sentinel://[::1]:3/m/0"
    assert client_url(aioredis.from_url("redis://[::1]:6380/2")) == "redis://[::1]:6380/2"
    primary = Sentinel([("s1", 26379)]).master_for("m")  # redis-py's own: no database given
    assert client_url(primary) == "redis+sentinel://s1:26379/m/0"


FIX = (
    "Check that the sentinels run and can be reached at those addresses, that they monitor 'mymaster' "
    "(`sentinel monitor mymaster HOST PORT QUORUM`) and see its primary up, and that "
    "REDIS_SENTINEL_PASSWORD_FILE holds their password if they require one; or set REDIS_URL (or "
    "--redis-url) to sentinels that can: redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]."
)


async def test_sentinels_that_cannot_be_reached_are_named_by_their_addresses_not_their_clients(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """redis-py's `MasterNotFoundError` names each sentinel it could not ask by its client's repr (the
    pool and every connection setting, some 1.5 KB a sentinel); the outage names it by HOST:PORT."""
    port = await closed_port()
    url = f"redis+sentinel://gateway:s3cret-pw@{HOST}:{port}/mymaster/0"
    with pytest.raises(RedisSentinelUnavailableError) as caught:
        await connect(url)
    message = str(caught.value)
    ours_before = (
        f"Redis is not reachable at 'redis+sentinel://gateway:***@{HOST}:{port}/mymaster/0': no sentinel of "
        f"{HOST}:{port} named a primary for 'mymaster' (MasterNotFoundError: "
    )
    ours_after = f"). {FIX}"
    assert message.startswith(ours_before) and message.endswith(ours_after)
    said = message[len(ours_before) : -len(ours_after)]
    # redis-py's own words (8.2: "No master found for 'mymaster' : HOST:PORT - network:ConnectionError:
    # Error 111 ..."), which another release may phrase otherwise: only the address is ours to require.
    assert f"{HOST}:{port}" in said and "mymaster" in said
    assert caught.value.retriable
    assert (caught.value.sentinels, caught.value.service) == ((f"{HOST}:{port}",), "mymaster")
    assert len(message) < 800
    assert "<" not in message and "ConnectionPool" not in message and "s3cret-pw" not in message


def test_every_sentinel_asked_is_named_once_whatever_it_answered() -> None:
    client = redis_client("redis+sentinel://s1:26380,[::1]:26381,s3/mymaster/2")
    first, second, third = client.connection_pool.sentinel_manager.sentinels
    refused = RedisConnectionError("Error 111 connecting to s1:26380. Connection refused.")
    login = AuthenticationError("Authentication required.")
    answers = f"{first} - {refused!r}: {refused}, {second} - {login!r}: {login}"  # as redis-py joins them
    failure = classify(MasterNotFoundError(f"No master found for 'mymaster' : {answers}"), client)
    assert type(failure) is RedisSentinelUnavailableError and len(repr(third)) > 1000
    assert str(failure) == (
        "Redis is not reachable at 'redis+sentinel://s1:26380,[::1]:26381,s3:26379/mymaster/2': no sentinel "
        "of s1:26380, [::1]:26381, s3:26379 named a primary for 'mymaster' (MasterNotFoundError: No master "
        f"found for 'mymaster' : s1:26380 - {refused!r}: Error 111 connecting to s1:26380. Connection "
        f"refused., [::1]:26381 - {login!r}: Authentication required). {FIX}"
    )


def test_sentinels_that_answered_without_a_primary_say_so() -> None:
    client = redis_client("redis+sentinel://s1/mymaster")
    failure = classify(MasterNotFoundError("No master found for 'mymaster'"), client)
    assert str(failure) == (
        "Redis is not reachable at 'redis+sentinel://s1:26379/mymaster/0': no sentinel of s1:26379 named a "
        f"primary for 'mymaster' (MasterNotFoundError: No master found for 'mymaster'). {FIX}"
    )


def test_what_the_sentinels_answered_is_cut_to_a_bound() -> None:
    error = MasterNotFoundError("x" * 600)
    failure = RedisSentinelUnavailableError("redis+sentinel://s1:1/m/0", ["s1:1"], "m", error, "x" * 600)
    assert f"(MasterNotFoundError: {'x' * 499}…). Check that" in str(failure)
    assert str(failure).count("x") == 499


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("Error 111 connecting to s1:26379.", "Error 111 connecting to s1:26379."),
        (
            "<a.Redis(<b.Pool(<c.Connection(db=0,host=s1,port=26379,x=<object at 0x1>)>)>)> - E",
            "s1:26379 - E",
        ),
        ("<a.Connection(orig_host_address=h,port=1)> - E", " - E"),
        ("<Connection(host=::1,port=7)>, <Connection(host=s2,port=8)>", "[::1]:7, s2:8"),
        ("a < b", "a < b"),
        ("Redis<ConnectionPool<Connection<host=s9,port=7,db=0>>> - E", "s9:7 - E"),  # redis-py 3
        ("Sentinel<sentinels=[s1:1]>: E", ": E"),
        ("E: Sentinel<sentinels=[s1:1]>", "E: "),
        ("<a.Connection(orig_host_address=h,port=1)> - E, <Connection(host=s2,port=8)>", " - E, s2:8"),
        ("<<class 'redis.asyncio.sentinel.Sentinel'>.Sentinel(sentinels=[s1:1])>: E", ": E"),
        ("<redis.asyncio.cluster.RedisCluster object at 0x7f71732d2c30>: E", ": E"),
        ("HELLO <proto> AUTH <user> <pass> option", "HELLO <proto> AUTH <user> <pass> option"),
        ("AUTH <password> called", "AUTH <password> called"),
        ("a<b> and x < y > z", "a<b> and x < y > z"),
        ("<Connection(host=s1,port=1)> <unclosed", "s1:1 <unclosed"),
        ("9Redis<host=s1,port=2>", "9Redis<host=s1,port=2>"),  # a name starts a word
        ("<with (parens) inside> <a.B(c)>", "<with (parens) inside> "),
    ],
)
def test_a_client_s_repr_becomes_the_address_it_names_and_other_angle_brackets_stay(
    text: str, named: str
) -> None:
    assert without_client_reprs(text) == named


def test_redis_s_own_words_in_angle_brackets_survive_beside_real_client_reprs() -> None:
    """A sentinel that wants a login refuses redis-py's `HELLO 3` in words with `<proto>`, `<user>` and
    `<pass>`: what it said is kept whole, and each real client repr (redis-py's own, with its nested
    `<REDACTED>`, `<... object at 0x...>`) becomes its address."""
    client = redis_client("redis+sentinel://s1:26380,[::1]:26381/mymaster/2")
    first, second = client.connection_pool.sentinel_manager.sentinels
    refused = AuthenticationError(NOAUTH_HELLO.removeprefix("NOAUTH "))
    text = f"No master found for 'mymaster' : {first} - {refused!r}: {refused}, {second} - {refused!r}"
    assert len(repr(first)) > 1000 and "<REDACTED>" in repr(first) and " object at 0x" in repr(first)
    kept = without_client_reprs(text)
    assert kept == (
        f"No master found for 'mymaster' : s1:26380 - {refused!r}: {refused}, [::1]:26381 - {refused!r}"
    )
    assert "the HELLO <proto> AUTH <user> <pass> option" in kept
    failure = classify(MasterNotFoundError(text), client)
    assert "the HELLO <proto> AUTH <user> <pass> option" in str(failure)


@pytest.mark.parametrize("url", ["redis://cache:6379/0", "redis+cluster://n1:7000"])
def test_no_primary_found_for_a_client_without_sentinels_is_a_plain_outage(url: str) -> None:
    error = MasterNotFoundError("No master found for 'mymaster'")
    failure = classify(error, redis_client(url))
    assert type(failure) is RedisUnavailableError and failure.cause is error
    assert str(failure) == (
        f"Redis is not reachable at {client_url(redis_client(url))!r} (MasterNotFoundError: No master found "
        "for 'mymaster'). Start the local stack with `turnledger dev up`, or set REDIS_URL (or --redis-url) "
        "to a reachable Redis, e.g. redis://127.0.0.1:6379/0."
    )
