"""What a Redis client is built with besides its URL: a CA file for `rediss://` and a password file.

redis-py's `from_url` reads the scheme (`rediss://` is TLS), the user and password, and passes every
other query parameter to the connection as it stands (`?ssl_ca_certs=/etc/ca.pem`,
`?ssl_cert_reqs=none`), so the URL alone can say it all. Two variables keep what should not be in it:

| variable | meaning |
|---|---|
| `REDIS_SSL_CA_FILE` | PEM of the CAs that signed the server's certificate (`rediss://` only) |
| `REDIS_PASSWORD_FILE` | a file holding the password, so that it is in neither the URL nor the process list |

redis-py lets the URL's own options win over keyword arguments, so a setting given both ways would be
decided silently; here it is a `RedisSettingsError` naming both, as is a TLS option on a plaintext
URL, or any query option the connection does not take (`?ssl=true`, a typo): redis-py passes those to
the connection as they stand, which fails with a `TypeError` on the first command, not at start.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from redis.asyncio.connection import (
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)

from turnledger.errors import RedisSettingsError

ENV_URL = "REDIS_URL"
ENV_CA_FILE = "REDIS_SSL_CA_FILE"
ENV_PASSWORD_FILE = "REDIS_PASSWORD_FILE"
SCHEMES = ("redis", "rediss", "unix")
QUERY_CA = "ssl_ca_certs"
CONNECTION_CLASSES = {"redis": Connection, "rediss": SSLConnection, "unix": UnixDomainSocketConnection}
"""The asyncio connection redis-py builds for each scheme, whose arguments a URL's query may set."""
CONNECT_TIMEOUT_S = 5.0
"""Every client gives up a connection attempt after this long: without it a Redis that swallows the
packets (a firewall, TLS spoken to a plaintext port) holds a command for ever."""


def client_options(url: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments besides `url` that every redis-py client of this process is built with,
    checked against the URL: a `RedisSettingsError` when they cannot make one setting."""
    env = os.environ if env is None else env
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise RedisSettingsError(
            f"{ENV_URL} (or --redis-url) must start with redis://, rediss:// (TLS) or unix://, not "
            f"{scheme + '://' if scheme else 'nothing'}"
        )
    query = parse_qs(parts.query)
    options: dict[str, Any] = {"socket_connect_timeout": CONNECT_TIMEOUT_S}
    ca_file = _readable(env, ENV_CA_FILE)
    tls_options = sorted(name for name in query if name.startswith("ssl_"))
    if scheme != "rediss" and (ca_file is not None or tls_options):
        named = ([ENV_CA_FILE] if ca_file is not None else []) + [f"?{name}=" for name in tls_options]
        raise RedisSettingsError(
            f"{', '.join(named)} set, but {ENV_URL} is {scheme}://: TLS needs a rediss:// URL"
        )
    if ca_file is not None:
        if QUERY_CA in query:
            raise RedisSettingsError(f"set {ENV_CA_FILE} or ?{QUERY_CA}= in {ENV_URL}, not both")
        options["ssl_ca_certs"] = str(ca_file)
    password_file = _readable(env, ENV_PASSWORD_FILE)
    if password_file is not None:
        if parts.password or "password" in {name.lower() for name in query}:
            raise RedisSettingsError(f"set a password in {ENV_URL} or {ENV_PASSWORD_FILE}, not both")
        options["password"] = _password(password_file)
    unknown = sorted(name for name in query if name not in accepted_options(scheme))
    if unknown:
        hint = " (TLS is a rediss:// URL)" if "ssl" in unknown and scheme != "rediss" else ""
        raise RedisSettingsError(
            f"{', '.join(f'?{name}=' for name in unknown)} in {ENV_URL}: not an option a {scheme}:// "
            f"connection takes{hint}"
        )
    return options


@functools.cache
def accepted_options(scheme: str) -> frozenset[str]:
    """The keyword arguments of the pool and of `scheme`'s connection class, its bases' included (each
    passes the rest of its keywords up): what a URL's query may name."""
    classes = (*CONNECTION_CLASSES[scheme].__mro__, ConnectionPool)
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


def _password(path: Path) -> str:
    """The file's text without the newline a mounted secret often ends in."""
    try:
        password = path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise RedisSettingsError(f"{ENV_PASSWORD_FILE}: {path} is not UTF-8") from None
    if not password:
        raise RedisSettingsError(f"{ENV_PASSWORD_FILE}: {path} is empty")
    return password
