"""Redis behind Sentinel: the primary found by asking the sentinels, and found again after a failover.

    redis+sentinel://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB][?OPTION=VALUE...]
    rediss+sentinel://...        the same, TLS to the sentinels and to the Redis nodes

redis-py's `from_url` has no such URL, so it is read here: the hosts are the sentinels (26379 when a
port is left out), SERVICE the name they monitor (`sentinel monitor SERVICE ...`), DB the database
(0), the user and password the Redis nodes' login, and the query the nodes' connection options,
converted by redis-py's own URL parser. The sentinels' own password, when they have one
(`requirepass` in sentinel.conf), is `REDIS_SENTINEL_PASSWORD_FILE`. The client is redis-py's
`Sentinel(...).master_for(SERVICE)`: a connection asks the sentinels for the primary's address, and
a node that answers as a replica (a failover happened) is dropped for the new primary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel

from turnledger.errors import RedisSettingsError
from turnledger.redisconn.url_parts import split_url

SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
"""A Sentinel URL's scheme and the scheme of its nodes' connections."""
DEFAULT_PORT = 26379
ENV_SENTINEL_PASSWORD_FILE = "REDIS_SENTINEL_PASSWORD_FILE"


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    node_scheme: str
    options: dict[str, Any]
    """The nodes' connection options: the login and the query, converted as redis-py converts them."""

    @property
    def tls(self) -> bool:
        return self.node_scheme == "rediss"


def is_sentinel(url: str) -> bool:
    return split_url(url).scheme.lower() in SCHEMES


def parse(url: str) -> SentinelUrl:
    """A Sentinel URL's parts, or a `RedisSettingsError` saying what is wrong with it."""
    parts = split_url(url)
    node_scheme = SCHEMES[parts.scheme.lower()]
    hosts = parts.netloc.rpartition("@")[2]
    sentinels = tuple(_address(host) for host in hosts.split(",")) if hosts else ()
    if not sentinels:
        raise RedisSettingsError(f"{_shape(parts.scheme)}: name at least one sentinel")
    path = [unquote(piece) for piece in parts.path.split("/") if piece]
    if not path or len(path) > 2:
        raise RedisSettingsError(f"{_shape(parts.scheme)}: name the service the sentinels monitor")
    db = path[1] if len(path) == 2 else "0"
    if not db.isdigit():
        raise RedisSettingsError(f"{_shape(parts.scheme)}: the database must be a number, not {db!r}")
    login = parts.netloc.rpartition("@")[0]
    stand_in = f"{node_scheme}://{login + '@' if login else ''}sentinel-node"
    try:
        options: dict[str, Any] = dict(parse_url(stand_in + (f"?{parts.query}" if parts.query else "")))
    except ValueError as exc:
        raise RedisSettingsError(f"REDIS_URL: {exc}") from None
    for placed in ("host", "port", "connection_class"):  # the sentinels say where the primary is
        options.pop(placed, None)
    return SentinelUrl(sentinels, path[0], int(options.pop("db", db)), node_scheme, options)


def sentinel_client(
    url: SentinelUrl, options: dict[str, Any], sentinel_password: str | None = None
) -> aioredis.Redis:
    """The primary's client: `options` (this process's settings and the caller's) for the nodes, the
    URL's own winning as `from_url` lets them; the sentinels get the same TLS settings and timeouts,
    and their own password."""
    node = options | url.options
    shared = {name: value for name, value in node.items() if name.startswith(("socket_", "ssl_"))}
    to_sentinels: dict[str, Any] = {**shared, "ssl": url.tls}
    if sentinel_password is not None:
        to_sentinels["password"] = sentinel_password
    sentinel = Sentinel(list(url.sentinels), sentinel_kwargs=to_sentinels, ssl=url.tls)
    client: aioredis.Redis = sentinel.master_for(url.service, db=url.db, **node)
    return client


def _address(host: str) -> tuple[str, int]:
    name, colon, port = host.strip().rpartition(":") if ":" in host else (host.strip(), "", "")
    name = name.strip("[]")
    if not name or (colon and not port.isdigit()):
        raise RedisSettingsError(f"REDIS_URL: {host!r} is not a sentinel's HOST:PORT")
    return name, int(port) if colon else DEFAULT_PORT


def _shape(scheme: str) -> str:
    return f"REDIS_URL ({scheme}://[USER@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB])"
