"""What a Redis client is built with besides its URL: a CA file and a client certificate for `rediss://`,
and a password file.

redis-py's `from_url` reads the scheme (`rediss://` is TLS), the user and password, and passes every
other query parameter to the connection as it stands (`?ssl_ca_certs=/etc/ca.pem`,
`?ssl_cert_reqs=none`), so the URL alone can say it all. These variables keep what should not be in it:

| variable | meaning |
|---|---|
| `REDIS_SSL_CA_FILE` | PEM of the CAs that signed the server's certificate (`rediss://` only) |
| `REDIS_SSL_CERT_FILE`, `REDIS_SSL_KEY_FILE` | a client certificate and its key (PEM, the key unencrypted) |
| `REDIS_PASSWORD_FILE` | a file holding the password, so that it is in neither the URL nor the process list |
| `REDIS_SENTINEL_PASSWORD_FILE` | the sentinels' own password (a `redis+sentinel://` URL: `sentinel.py`) |

The client certificate is for a Redis that asks for one (`tls-auth-clients yes`: mutual TLS).

redis-py lets the URL's own options win over keyword arguments, so a setting given both ways would be
decided silently; here it is a `RedisSettingsError` naming both, as is a TLS option on a plaintext
URL, a certificate without its key, a key that is not the certificate's (checked at start: the handshake
would fail on every connection, and the server's alert would blame the certificate), or any query
option the connection does not take (`?ssl=true`, a typo): redis-py passes those to
the connection as they stand, which fails with a `TypeError` on the first command, not at start.
"""

from __future__ import annotations

import functools
import inspect
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

from turnledger.errors import RedisSettingsError, redact_url
from turnledger.host_names import is_host_name
from turnledger.redisconn.url_parts import split_url

ENV_URL = "REDIS_URL"
ENV_CA_FILE = "REDIS_SSL_CA_FILE"
ENV_CERT_FILE = "REDIS_SSL_CERT_FILE"
ENV_KEY_FILE = "REDIS_SSL_KEY_FILE"
ENV_PASSWORD_FILE = "REDIS_PASSWORD_FILE"
ENV_SENTINEL_PASSWORD_FILE = "REDIS_SENTINEL_PASSWORD_FILE"
SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster")
TLS_SCHEMES = ("rediss", "rediss+sentinel", "rediss+cluster")
QUERY_CA = "ssl_ca_certs"
QUERY_CERT = "ssl_certfile"
QUERY_KEY = "ssl_keyfile"
CONNECTION_CLASSES = {
    "redis": Connection,
    "rediss": SSLConnection,
    "unix": UnixDomainSocketConnection,
    "redis+sentinel": SentinelManagedConnection,
    "rediss+sentinel": SentinelManagedSSLConnection,
}
"""The asyncio connection redis-py builds for each scheme, whose arguments a URL's query may set."""
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
"""A cluster client takes its options itself (`RedisCluster.__init__`) and builds its nodes' connections."""
CONNECT_TIMEOUT_S = 5.0
"""Every client gives up a connection attempt after this long: without it a Redis that swallows the
packets (a firewall, TLS spoken to a plaintext port) holds a command for ever."""


def client_options(url: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments besides `url` that every redis-py client of this process is built with,
    checked against the URL: a `RedisSettingsError` when they cannot make one setting."""
    env = os.environ if env is None else env
    parts = split_url(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise RedisSettingsError(
            f"{ENV_URL} (or --redis-url) must start with redis://, rediss:// (TLS), unix://, "
            "redis+sentinel:// (rediss+sentinel://) or redis+cluster:// (rediss+cluster://), not "
            f"{scheme + '://' if scheme else 'nothing'}"
        )
    if scheme != "unix":
        _check_hosts(url, parts.netloc)
    query = parse_qs(parts.query)
    options: dict[str, Any] = {"socket_connect_timeout": CONNECT_TIMEOUT_S}
    files = {name: _readable(env, name) for name in (ENV_CA_FILE, ENV_CERT_FILE, ENV_KEY_FILE)}
    tls_options = sorted(name for name in query if name.startswith("ssl_"))
    given = [name for name, path in files.items() if path is not None]
    if scheme not in TLS_SCHEMES and (given or tls_options):
        named = given + [f"?{name}=" for name in tls_options]
        raise RedisSettingsError(
            f"{', '.join(named)} set, but {ENV_URL} is {scheme}://: TLS needs a rediss:// URL"
            + (f" ({scheme.replace('redis+', 'rediss+')}://)" if "+" in scheme else "")
        )
    for name, option in ((ENV_CA_FILE, QUERY_CA), (ENV_CERT_FILE, QUERY_CERT), (ENV_KEY_FILE, QUERY_KEY)):
        path = files[name]
        if path is None:
            continue
        if option in query:
            raise RedisSettingsError(f"set {name} or ?{option}= in {ENV_URL}, not both")
        options[option] = str(path)
    ca_file = files[ENV_CA_FILE]
    if ca_file is not None:
        _check_ca(ca_file)
    cert_file, key_file = files[ENV_CERT_FILE], files[ENV_KEY_FILE]
    if (cert_file is None) != (key_file is None):
        raise RedisSettingsError(f"a client certificate needs both {ENV_CERT_FILE} and {ENV_KEY_FILE}")
    if cert_file is not None and key_file is not None:
        _check_pair(cert_file, key_file)
    password_file = _readable(env, ENV_PASSWORD_FILE)
    if password_file is not None:
        if parts.password or "password" in {name.lower() for name in query}:
            raise RedisSettingsError(f"set a password in {ENV_URL} or {ENV_PASSWORD_FILE}, not both")
        options["password"] = _password(password_file, ENV_PASSWORD_FILE)
    unknown = sorted(name for name in query if name not in accepted_options(scheme))
    if unknown:
        hint = " (TLS is a rediss:// URL)" if "ssl" in unknown and scheme != "rediss" else ""
        raise RedisSettingsError(
            f"{', '.join(f'?{name}=' for name in unknown)} in {ENV_URL}: not an option a {scheme}:// "
            f"connection takes{hint}"
        )
    return options


def _check_hosts(url: str, netloc: str) -> None:
    """Every host the URL names (a Sentinel URL's several) is an IP address or a host name
    (`host_names`): redis-py connects to any text, and one the `idna` codec cannot encode (`a..b`) ended
    the command in a `UnicodeError` traceback. An empty host is redis-py's default, localhost."""
    for address in netloc.rpartition("@")[2].split(","):
        address = address.strip()
        host = address if address.startswith("[") else address.rpartition(":")[0] or address
        if host and not host.startswith("[") and not is_host_name(host):
            raise RedisSettingsError(f"{ENV_URL} {redact_url(url)!r}: {host!r} is no host name or IP address")


def sentinel_password(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The sentinels' own password (`requirepass` in sentinel.conf), from its file; only with a
    Sentinel URL."""
    env = os.environ if env is None else env
    path = _readable(env, ENV_SENTINEL_PASSWORD_FILE)
    if path is None:
        return None
    if not split_url(url).scheme.lower().endswith("+sentinel"):
        raise RedisSettingsError(
            f"{ENV_SENTINEL_PASSWORD_FILE} set, but {ENV_URL} is not a redis+sentinel:// URL"
        )
    return _password(path, ENV_SENTINEL_PASSWORD_FILE)


@functools.cache
def accepted_options(scheme: str) -> frozenset[str]:
    """The keyword arguments of the pool and of `scheme`'s connection class, its bases' included (each
    passes the rest of its keywords up), or of a cluster client: what a URL's query may name."""
    classes = (
        (RedisCluster,)
        if scheme in CLUSTER_SCHEMES
        else (*CONNECTION_CLASSES[scheme].__mro__, ConnectionPool)
    )
    return frozenset(
        parameter.name
        for cls in classes
        if "__init__" in vars(cls)
        for parameter in inspect.signature(vars(cls)["__init__"]).parameters.values()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        and parameter.name != "self"
    )


def _readable(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    path = Path(value)
    if not path.is_file() or not os.access(path, os.R_OK):
        raise RedisSettingsError(f"{name}: cannot read the file {path}")
    return path


def _check_ca(ca_file: Path) -> None:
    """Load the CAs as a TLS client would: a file that holds no PEM certificate is a `RedisSettingsError`
    now, not a handshake that fails on every connection as if the server spoke no TLS."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=ca_file)
    except ssl.SSLError as exc:
        said = f"{ca_file} holds no PEM certificate" + (f" ({exc.reason})" if exc.reason else "")
        raise RedisSettingsError(f"{ENV_CA_FILE}: {said}") from None


def _check_pair(cert_file: Path, key_file: Path) -> None:
    """Load the certificate and its key as a TLS client would: a file that is not PEM, a key of another
    certificate or an encrypted key is a `RedisSettingsError` now rather than a failed handshake on
    every connection."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert_file, key_file, password=lambda: _encrypted(key_file))
    except ssl.SSLError as exc:
        what = (
            f"{key_file} is not the key of {cert_file} ({exc.reason})"
            if exc.reason == "KEY_VALUES_MISMATCH"
            else f"{cert_file} and {key_file} are not a PEM certificate and its PEM key"
        )
        raise RedisSettingsError(f"{ENV_CERT_FILE}, {ENV_KEY_FILE}: {what}") from None


def _encrypted(key_file: Path) -> str:
    """Asked for the key's password, so only for an encrypted key: without it OpenSSL would prompt on
    the terminal."""
    raise RedisSettingsError(
        f"{ENV_KEY_FILE}: {key_file} is encrypted; give the key unencrypted (a file only this service's "
        "user can read)"
    )


def _password(path: Path, name: str) -> str:
    """The file's text without the newline a mounted secret often ends in."""
    try:
        password = path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise RedisSettingsError(f"{name}: {path} is not UTF-8") from None
    if not password:
        raise RedisSettingsError(f"{name}: {path} is empty")
    return password
