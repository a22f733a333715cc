"""A REDIS_URL read alike on every CPython (`redisconn/url_parts.py`): a Sentinel URL with IPv6 literals
among its sentinels, which CPython's `urlsplit` refuses since its 2025 security releases, and a URL no
`urlsplit` reads, which is a `RedisSettingsError` without the password, not a bare `ValueError`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

import pytest

from turnledger.errors import RedisSettingsError
from turnledger.redisconn import url_parts
from turnledger.redisconn.client import redis_client
from turnledger.redisconn.cluster import is_cluster_url
from turnledger.redisconn.sentinel import SentinelUrl, is_sentinel, parse
from turnledger.redisconn.settings import client_options, sentinel_password
from turnledger.redisconn.url_parts import split_url

MIXED = "redis+sentinel://u:p%40w@s1:1,[::1]:3,s2/my%20master/2?socket_timeout=1.5"
MIXED_PARSED = SentinelUrl(
    (("s1", 1), ("::1", 3), ("s2", 26379)),
    "my master",
    2,
    "redis",
    {"username": "u", "password": "p@w", "socket_timeout": 1.5},
)


def _strict_urlsplit(url: str, scheme: str = "", allow_fragments: bool = True) -> SplitResult:
    """`urlsplit` as CPython's 2025 security releases have it: a bracket in the host part must open it."""
    parts = urlsplit(url, scheme, allow_fragments)
    host = parts.netloc.rpartition("@")[2]
    if "[" in host and not host.startswith("["):
        raise ValueError("Invalid IPv6 URL")
    return parts


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(url_parts, "urlsplit", _strict_urlsplit)
    for name in ("REDIS_SSL_CA_FILE", "REDIS_SSL_CERT_FILE", "REDIS_SSL_KEY_FILE", "REDIS_PASSWORD_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("strict")
def test_a_sentinel_url_with_an_ipv6_sentinel_after_another_is_read_where_urlsplit_is_strict(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="Invalid IPv6 URL"):
        _strict_urlsplit(MIXED)  # the stand-in refuses what the 2025 releases refuse
    assert is_sentinel(MIXED) and not is_cluster_url(MIXED)
    assert parse(MIXED) == MIXED_PARSED
    assert client_options(MIXED, {}) == {"socket_connect_timeout": 5.0}
    (tmp_path / "sentinel.password").write_text("s3cret\n")
    assert sentinel_password(
        MIXED, {"REDIS_SENTINEL_PASSWORD_FILE": str(tmp_path / "sentinel.password")}
    ) == ("s3cret")
    assert redis_client(MIXED).connection_pool.service_name == "my master"


@pytest.mark.usefixtures("strict")
def test_a_sentinel_url_keeps_its_netloc_as_written_and_urlsplit_reads_the_rest() -> None:
    assert split_url("REDISS+SENTINEL://a:1,[::2]:3/m/1?x=1#f") == SplitResult(
        "rediss+sentinel", "a:1,[::2]:3", "/m/1", "x=1", "f"
    )
    assert split_url("redis+sentinel://[::1]:3,b?x=1") == SplitResult(
        "redis+sentinel", "[::1]:3,b", "", "x=1", ""
    )
    assert split_url("redis+sentinel://a,[::1]#f") == SplitResult("redis+sentinel", "a,[::1]", "", "", "f")
    assert split_url("redis+sentinel://a,[::1]") == SplitResult("redis+sentinel", "a,[::1]", "", "", "")
    assert split_url("redis+sentinel://a,[::1]/m?client_name=x://y") == SplitResult(
        "redis+sentinel", "a,[::1]", "/m", "client_name=x://y", ""
    )
    assert split_url("redis://[::1]:6380/2") == SplitResult("redis", "[::1]:6380", "/2", "", "")


@pytest.mark.parametrize(
    "url",
    [
        "redis://gateway:s3cret@[::1:6379/0",
        "redis+cluster://gateway:s3cret@[::1/0",
        "rediss://s3cret@]::1]/0",
    ],
)
def test_a_url_no_urlsplit_reads_is_a_settings_error_that_keeps_the_password_out(url: str) -> None:
    for read in (split_url, client_options, redis_client):
        with pytest.raises(RedisSettingsError) as caught:
            read(url)
        assert str(caught.value).startswith("REDIS_URL (or --redis-url) is no URL this Python reads: ")
        assert "s3cret" not in str(caught.value)


STRICT_PYTHON = Path("/usr/bin/python3.11")


def _strict_python() -> bool:
    if not STRICT_PYTHON.exists() or Path(sys.executable).resolve() == STRICT_PYTHON.resolve():
        return False
    probe = "from urllib.parse import urlsplit\ntry: urlsplit('r://a,[::1]/')\n"
    probe += "except ValueError: print('strict')"
    run = subprocess.run([str(STRICT_PYTHON), "-c", probe], capture_output=True, text=True, check=False)
    return run.stdout.strip() == "strict"


@pytest.mark.skipif(
    not _strict_python(), reason="no CPython 3.11 with the 2025 urlsplit check beside this one"
)
def test_the_sentinel_url_is_read_by_a_cpython_whose_urlsplit_is_strict() -> None:
    """Debian's CPython 3.11 (with the 2025 backport) reading the URL through this checkout and the
    venv's packages: before `split_url`, `is_sentinel` raised its `ValueError` there."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    root = Path(__file__).resolve().parents[2]
    script = textwrap.dedent(
        f"""
        from turnledger.redisconn.sentinel import is_sentinel, parse
        url = {MIXED!r}
        print(is_sentinel(url), parse(url).sentinels)
        """
    )
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{site}"}
    run = subprocess.run(
        [str(STRICT_PYTHON), "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert (run.returncode, run.stdout, run.stderr) == (
        0,
        "True (('s1', 1), ('::1', 3), ('s2', 26379))\n",
        "",
    )
