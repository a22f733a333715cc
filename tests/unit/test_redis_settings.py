"""How every Redis client is built (`redisconn.settings`, `redisconn.client`) and named (`naming`):
the URL as given (redis-py reads `rediss://` and passes `?ssl_*` options through), REDIS_SSL_CA_FILE,
REDIS_PASSWORD_FILE, and the settings that cannot work, each a `RedisSettingsError` naming why."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from turnledger.errors import RedisSettingsError
from turnledger.redisconn.client import redis_client
from turnledger.redisconn.naming import client_url, describe
from turnledger.redisconn.settings import client_options

FIXTURE_CA = Path(__file__).resolve().parents[1] / "fixtures" / "client_tls" / "ca.pem"
"""A CA file that loads (the client TLS fixtures' own)."""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    ca, password = tmp_path / "ca.pem", tmp_path / "redis.password"
    ca.write_bytes(FIXTURE_CA.read_bytes())
    password.write_text("s3cret-pw\n")
    return {"ca": ca, "password": password}


def _kwargs(client: aioredis.Redis) -> dict[str, object]:
    return dict(client.connection_pool.connection_kwargs)


def test_a_plain_url_gets_only_the_connect_timeout() -> None:
    assert client_options("redis://127.0.0.1:6379/0", {}) == {"socket_connect_timeout": 5.0}


def test_the_ca_and_the_password_file_are_applied_to_a_rediss_url(files: dict[str, Path]) -> None:
    env = {"REDIS_SSL_CA_FILE": str(files["ca"]), "REDIS_PASSWORD_FILE": str(files["password"])}
    assert client_options("rediss://gateway@cache.example.net:6380/0", env) == {
        "socket_connect_timeout": 5.0,
        "ssl_ca_certs": str(files["ca"]),
        "password": "s3cret-pw",
    }


def test_the_builder_makes_a_tls_client_with_them(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_SSL_CA_FILE", str(files["ca"]))
    monkeypatch.setenv("REDIS_PASSWORD_FILE", str(files["password"]))
    client = redis_client("rediss://gateway@cache.example.net:6380/2")
    assert client.connection_pool.connection_class is aioredis.SSLConnection
    kwargs = _kwargs(client)
    assert {k: kwargs[k] for k in ("host", "port", "db", "username", "password", "ssl_ca_certs")} == {
        "host": "cache.example.net",
        "port": 6380,
        "db": 2,
        "username": "gateway",
        "password": "s3cret-pw",
        "ssl_ca_certs": str(files["ca"]),
    }
    assert client_url(client) == "rediss://gateway:***@cache.example.net:6380/2"
    assert describe(client) == f"TLS, CA {files['ca']}, user 'gateway' with a password"


def test_redis_py_passes_the_url_s_own_tls_options_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `parse_url` in redis/asyncio/connection.py does with a query it has no parser for: the
    string as it stands, which `SSLConnection` takes (`ssl_cert_reqs` by name: none, optional,
    required)."""
    monkeypatch.delenv("REDIS_SSL_CA_FILE", raising=False)
    monkeypatch.delenv("REDIS_PASSWORD_FILE", raising=False)
    client = redis_client("rediss://:pw@cache.example.net:6380/0?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=none")
    kwargs = _kwargs(client)
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_cert_reqs"], kwargs["password"]) == (
        "/etc/ca.pem",
        "none",
        "pw",
    )
    assert describe(client) == "TLS, certificate not verified, the default user with a password"
    assert client_url(client) == "rediss://:***@cache.example.net:6380/0"


def test_a_plain_client_is_named_without_tls_or_login() -> None:
    client = aioredis.from_url("redis://127.0.0.1:6379/0")
    assert (client_url(client), describe(client)) == ("redis://127.0.0.1:6379/0", "plaintext, no login")
    cert_none = aioredis.from_url("rediss://u@h:1/0", ssl_cert_reqs=ssl.CERT_NONE)
    assert describe(cert_none) == "TLS, certificate not verified, user 'u' without a password"


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [
        (
            "http://cache:6379/0",
            {},
            "REDIS_URL (or --redis-url) must start with redis://, rediss:// (TLS), unix://, "
            "redis+sentinel:// (rediss+sentinel://) or redis+cluster:// (rediss+cluster://), not http://",
        ),
        (
            "cache:6379",
            {},
            "REDIS_URL (or --redis-url) must start with redis://, rediss:// (TLS), unix://, "
            "redis+sentinel:// (rediss+sentinel://) or redis+cluster:// (rediss+cluster://), not cache://",
        ),
        (
            "redis://cache:6379/0",
            {"REDIS_SSL_CA_FILE": "{ca}"},
            "REDIS_SSL_CA_FILE set, but REDIS_URL is redis://: TLS needs a rediss:// URL",
        ),
        (
            "redis://cache:6379/0?ssl_cert_reqs=none&ssl_ca_certs=/x",
            {},
            "?ssl_ca_certs=, ?ssl_cert_reqs= set, but REDIS_URL is redis://: TLS needs a rediss:// URL",
        ),
        (
            "rediss://cache:6380/0?ssl_ca_certs=/x",
            {"REDIS_SSL_CA_FILE": "{ca}"},
            "set REDIS_SSL_CA_FILE or ?ssl_ca_certs= in REDIS_URL, not both",
        ),
        (
            "rediss://u:pw@cache:6380/0",
            {"REDIS_PASSWORD_FILE": "{password}"},
            "set a password in REDIS_URL or REDIS_PASSWORD_FILE, not both",
        ),
        (
            "rediss://cache:6380/0?password=pw",
            {"REDIS_PASSWORD_FILE": "{password}"},
            "set a password in REDIS_URL or REDIS_PASSWORD_FILE, not both",
        ),
        (
            "rediss://cache:6380/0",
            {"REDIS_SSL_CA_FILE": "{missing}"},
            "REDIS_SSL_CA_FILE: cannot read the file {missing}",
        ),
        (
            "rediss://cache:6380/0",
            {"REDIS_PASSWORD_FILE": "{missing}"},
            "REDIS_PASSWORD_FILE: cannot read the file {missing}",
        ),
        (
            "rediss://cache:6380/0",
            {"REDIS_PASSWORD_FILE": "{empty}"},
            "REDIS_PASSWORD_FILE: {empty} is empty",
        ),
        (
            "rediss://cache:6380/0",
            {"REDIS_PASSWORD_FILE": "{latin1}"},
            "REDIS_PASSWORD_FILE: {latin1} is not UTF-8",
        ),
    ],
)
def test_settings_that_cannot_work_are_a_typed_error_naming_why(
    tmp_path: Path, files: dict[str, Path], url: str, env: dict[str, str], message: str
) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "latin1").write_bytes("pässword".encode("latin-1"))
    names = {
        **{k: str(v) for k, v in files.items()},
        **{n: str(tmp_path / n) for n in ("missing", "empty", "latin1")},
    }
    with pytest.raises(RedisSettingsError) as caught:
        client_options(url, {k: v.format(**names) for k, v in env.items()})
    assert str(caught.value) == message.format(**names)
    assert "pw" not in str(caught.value).replace("password", "")


def test_the_builder_checks_the_settings_before_redis_py_sees_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_SSL_CA_FILE", raising=False)
    with pytest.raises(RedisSettingsError, match=r"^\?ssl_ca_certs= set, but REDIS_URL is redis://"):
        redis_client("redis://cache:6379/0?ssl_ca_certs=/etc/ca.pem")


def test_a_url_without_a_host_is_named_by_the_host_redis_py_connects_to() -> None:
    """redis-py's `Connection` connects to localhost:6379, db 0, when the URL names none of them."""
    client = aioredis.from_url("redis://")
    assert "host" not in _kwargs(client) and "port" not in _kwargs(client)
    assert client_url(client) == "redis://localhost:6379/0"


def test_the_process_environment_is_read_when_no_env_is_given(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_SSL_CA_FILE", str(files["ca"]))
    monkeypatch.delenv("REDIS_PASSWORD_FILE", raising=False)
    assert client_options("rediss://cache:6380/0") == {
        "socket_connect_timeout": 5.0,
        "ssl_ca_certs": str(files["ca"]),
    }


@pytest.mark.parametrize(
    "url", ["REDISS://cache:6380/0", "unix:///run/redis.sock", "redis://cache:6379/0?protocol=3"]
)
def test_a_scheme_in_any_case_and_a_query_without_tls_options_are_accepted(url: str) -> None:
    """A query option that is not an `ssl_*` one is left to redis-py."""
    assert client_options(url, {"REDIS_SSL_CA_FILE": " ", "REDIS_PASSWORD_FILE": ""}) == {
        "socket_connect_timeout": 5.0
    }


def test_a_password_file_applies_to_any_scheme_and_loses_its_surrounding_whitespace(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("  pässword with spaces \r\n", encoding="utf-8")
    env = {"REDIS_PASSWORD_FILE": f" {secret}\n"}
    for url in ("redis://gateway@cache:6379/0", "unix:///run/redis.sock?db=1"):
        assert client_options(url, env) == {"socket_connect_timeout": 5.0, "password": "pässword with spaces"}


def test_a_password_file_is_utf_8_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes("pässword\n".encode())
    assert (
        client_options("redis://cache:6379/0", {"REDIS_PASSWORD_FILE": str(secret)})["password"] == "pässword"
    )


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [
        (
            "",
            {},
            "REDIS_URL (or --redis-url) must start with redis://, rediss:// (TLS), unix://, "
            "redis+sentinel:// (rediss+sentinel://) or redis+cluster:// (rediss+cluster://), not nothing",
        ),
        (
            "//cache:6379/0",
            {},
            "REDIS_URL (or --redis-url) must start with redis://, rediss:// (TLS), unix://, "
            "redis+sentinel:// (rediss+sentinel://) or redis+cluster:// (rediss+cluster://), not nothing",
        ),
        (
            "unix:///run/redis.sock",
            {"REDIS_SSL_CA_FILE": "{ca}"},
            "REDIS_SSL_CA_FILE set, but REDIS_URL is unix://: TLS needs a rediss:// URL",
        ),
        (
            "redis://cache:6379/0?ssl_cert_reqs=none",
            {"REDIS_SSL_CA_FILE": "{ca}"},
            "REDIS_SSL_CA_FILE, ?ssl_cert_reqs= set, but REDIS_URL is redis://: TLS needs a rediss:// URL",
        ),
        (
            "rediss://:pw@cache:6380/0",
            {"REDIS_PASSWORD_FILE": "{password}"},
            "set a password in REDIS_URL or REDIS_PASSWORD_FILE, not both",
        ),
        (
            "rediss://cache:6380/0?Password=pw",
            {"REDIS_PASSWORD_FILE": "{password}"},
            "set a password in REDIS_URL or REDIS_PASSWORD_FILE, not both",
        ),
        (
            "rediss://cache:6380/0",
            {"REDIS_SSL_CA_FILE": "{directory}"},
            "REDIS_SSL_CA_FILE: cannot read the file {directory}",
        ),
        (
            "rediss://cache:6380/0",
            {"REDIS_PASSWORD_FILE": "{directory}"},
            "REDIS_PASSWORD_FILE: cannot read the file {directory}",
        ),
    ],
)
def test_more_settings_that_cannot_work(
    tmp_path: Path, files: dict[str, Path], url: str, env: dict[str, str], message: str
) -> None:
    names = {**{k: str(v) for k, v in files.items()}, "directory": str(tmp_path)}
    with pytest.raises(RedisSettingsError) as caught:
        client_options(url, {k: v.format(**names) for k, v in env.items()})
    assert str(caught.value) == message.format(**names)


def test_how_each_login_and_tls_setting_is_named() -> None:
    named = {
        url: (client_url(client), describe(client))
        for url, client in (
            (url, aioredis.from_url(url, **options))
            for url, options in (
                ("redis://gateway@cache:6379", {}),
                ("redis://:pw@cache:6379/3", {}),
                ("rediss://cache:6380/1", {}),
                ("rediss://cache:6380/1?ssl_cert_reqs=required", {}),
                ("rediss://u:pw@cache:6380/0", {"ssl_ca_certs": "/ca.pem", "ssl_cert_reqs": "none"}),
                ("unix:///run/redis.sock", {}),
                ("unix://u:pw@/run/redis.sock?db=3", {}),
            )
        )
    }
    assert named == {
        "redis://gateway@cache:6379": (
            "redis://gateway@cache:6379/0",
            "plaintext, user 'gateway' without a password",
        ),
        "redis://:pw@cache:6379/3": (
            "redis://:***@cache:6379/3",
            "plaintext, the default user with a password",
        ),
        "rediss://cache:6380/1": ("rediss://cache:6380/1", "TLS, the system's CAs, no login"),
        "rediss://cache:6380/1?ssl_cert_reqs=required": (
            "rediss://cache:6380/1",
            "TLS, the system's CAs, no login",
        ),
        "rediss://u:pw@cache:6380/0": (
            "rediss://u:***@cache:6380/0",
            "TLS, certificate not verified, user 'u' with a password",
        ),
        "unix:///run/redis.sock": ("unix:///run/redis.sock?db=0", "plaintext, no login"),
        "unix://u:pw@/run/redis.sock?db=3": (
            "unix:///run/redis.sock?db=3",
            "plaintext, user 'u' with a password",
        ),
    }


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "redis://cache:6379/0?ssl=true",
            "?ssl= in REDIS_URL: not an option a redis:// connection takes (TLS is a rediss:// URL)",
        ),
        (
            "rediss://cache:6380/0?ssl=true&sockettimeout=3",
            "?sockettimeout=, ?ssl= in REDIS_URL: not an option a rediss:// connection takes",
        ),
        (
            "redis://cache:6379/0?timeout=3",
            "?timeout= in REDIS_URL: not an option a redis:// connection takes",
        ),
        (
            "unix:///run/redis.sock?db=0&host=cache",
            "?host= in REDIS_URL: not an option a unix:// connection takes",
        ),
    ],
)
def test_a_query_option_the_connection_does_not_take_is_refused_at_start(url: str, message: str) -> None:
    with pytest.raises(RedisSettingsError) as refused:
        client_options(url, {})
    assert str(refused.value) == message


async def test_what_the_check_refuses_redis_py_would_have_failed_on_at_the_first_command() -> None:
    client = aioredis.from_url("redis://127.0.0.1:9/0?ssl=true", socket_connect_timeout=0.1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'ssl'"):
        await client.ping()
    await client.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "redis://cache:6379/0?socket_timeout=3&health_check_interval=10&max_connections=20&client_name=tl",
        "rediss://cache:6380/0?ssl_cert_reqs=required&ssl_check_hostname=true&ssl_min_version=TLSv1_2",
        "unix:///run/redis.sock?db=2&socket_timeout=1",
    ],
)
def test_the_connections_own_options_pass(url: str) -> None:
    assert client_options(url, {}) == {"socket_connect_timeout": 5.0}


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://u:S3CRET@127.0.0.1:abc/0", "Port could not be cast to integer value as 'abc'"),
        ("redis://127.0.0.1:99999/0", "Port out of range 0-65535"),
        ("redis://127.0.0.1:1/0?socket_timeout=abc", "Invalid value for 'socket_timeout' in connection URL."),
        ("redis+cluster://127.0.0.1:abc", "Port could not be cast to integer value as 'abc'"),
        (
            "redis://u:S3CRET@127.0.0.1:1/notadb",
            "the database after the host must be a number (redis://host:6379/0), not 'notadb'",
        ),
        (
            "rediss://127.0.0.1:1/0x",
            "the database after the host must be a number (redis://host:6379/0), not '0x'",
        ),
        (
            "redis://127.0.0.1:1/X1",
            "the database after the host must be a number (redis://host:6379/0), not 'X1'",
        ),
    ],
)
def test_a_url_redis_py_cannot_read_is_a_settings_error_without_its_password(url: str, why: str) -> None:
    with pytest.raises(RedisSettingsError) as refused:
        redis_client(url)
    assert str(refused.value) == f"REDIS_URL {url.replace(':S3CRET@', ':***@')!r}: {why}"
    assert "S3CRET" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("redis://u:S3CRET@not..a..host:6379/0", "not..a..host"),
        ("rediss://" + "k" * 64 + ":6380/0", "k" * 64),
        ("redis+cluster://node 1.example:7000", "node 1.example"),
        ("redis+sentinel://:S3CRET@s1:26379,[::1]:26380,.s3:26379/mymaster", ".s3"),
    ],
)
def test_a_host_no_resolver_takes_is_a_settings_error_without_the_password(url: str, host: str) -> None:
    """redis-py connects to any text: a label the `idna` codec cannot encode ended `history`, `project`
    and the rest in a `UnicodeError` traceback, exit 1."""
    with pytest.raises(RedisSettingsError) as refused:
        redis_client(url)
    assert str(refused.value) == (
        f"REDIS_URL {url.replace(':S3CRET@', ':***@')!r}: {host!r} is no host name or IP address"
    )


@pytest.mark.parametrize(
    "url",
    [
        "redis://k_1.example:6379/0",
        "rediss://bücher.example/0",
        "redis://[::1]:6379/0",
        "redis:///0",
        "unix:///r.sock",
    ],
)
def test_host_names_ip_addresses_and_no_host_are_kept(url: str) -> None:
    assert client_options(url, {}) == {"socket_connect_timeout": 5.0}


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1", "redis://127.0.0.1:1/", "redis://127.0.0.1:1/15"])
async def test_a_url_with_no_database_or_a_number_is_read(url: str) -> None:
    await redis_client(url).aclose()


@pytest.mark.parametrize(
    ("content", "why"),
    [("not a certificate\n", " (NO_CERTIFICATE_OR_CRL_FOUND)"), ("-----BEGIN CERTIFICATE-----\n", "")],
    ids=["no PEM", "a PEM cut short"],
)
def test_a_ca_file_that_holds_no_pem_certificate_is_refused_at_start(
    tmp_path: Path, content: str, why: str
) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text(content)
    with pytest.raises(RedisSettingsError) as refused:
        client_options("rediss://cache:6380/0", {"REDIS_SSL_CA_FILE": str(bad)})
    assert str(refused.value) == f"REDIS_SSL_CA_FILE: {bad} holds no PEM certificate{why}"
