"""How a Redis client is named in a message: its URL without the password, and how it connects."""

from __future__ import annotations

import re
import ssl

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

from turnledger.redisconn.cluster import RedisClient, connection_kwargs, seed_node

_REPR_ADDRESS = re.compile(r"\bhost=([^,()<>]+),port=(\d+)")
"""Where a redis-py connection's repr names its address."""
_NAME = re.compile(r"[A-Za-z_][\w.]*")
_NAME_PART = re.compile(r"[\w.]")


def is_tls(client: RedisClient) -> bool:
    if isinstance(client, RedisCluster):
        connection_class = client.get_connection_kwargs().get("connection_class") or aioredis.Connection
    else:
        connection_class = client.connection_pool.connection_class
    return issubclass(connection_class, aioredis.SSLConnection)


def client_url(client: RedisClient) -> str:
    """The address `client` connects to as a URL, its user named and its password never
    (`rediss://gateway:***@cache.example.net:6380/0`), for messages and log lines; what the URL left
    out is redis-py's default (localhost:6379, db 0)."""
    kwargs = connection_kwargs(client)
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    user = kwargs.get("username")
    login = f"{user or ''}:***@" if kwargs.get("password") else (f"{user}@" if user else "")
    scheme = "rediss" if is_tls(client) else "redis"
    if isinstance(client, RedisCluster):
        host, port = seed_node(client)
        return f"{scheme}+cluster://{login}{_address({'host': host, 'port': port})}/0"
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        sentinels = ",".join(sentinel_addresses(pool))
        return f"{scheme}+sentinel://{login}{sentinels}/{pool.service_name}/{kwargs.get('db', 0)}"
    return f"{scheme}://{login}{_address(kwargs)}/{kwargs.get('db', 0)}"


def sentinel_addresses(pool: SentinelConnectionPool) -> list[str]:
    """The HOST:PORT of each sentinel a Sentinel client's pool asks for the primary."""
    return [_address(node.connection_pool.connection_kwargs) for node in pool.sentinel_manager.sentinels]


_CLIENT_REPRS = (
    re.compile(r"<(?:<class '[\w.]+'>\.)?[A-Za-z_][\w.]*\(.*\)>", re.DOTALL),
    re.compile(r"[A-Za-z_][\w.]*<.*=.*>", re.DOTALL),
    re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>"),
)
"""The shapes of a redis-py object's repr, whole: redis-py 4 on's `<redis.asyncio.client.Redis(<...
ConnectionPool(<...Connection(host=s1,port=26379,...)>)>)>` (an async `Sentinel`'s
`<<class '...'>.Sentinel(sentinels=[...])>`), redis-py 3's `Redis<ConnectionPool<Connection<host=s1,
port=26379,db=0>>>` and `Sentinel<sentinels=[...]>`, and Python's default `<... object at 0x...>`."""


def without_client_reprs(text: str) -> str:
    """`text` with each redis-py client's, pool's or connection's repr in it (`_CLIENT_REPRS`) replaced
    by the HOST:PORT the repr names, or dropped when it names none; any other text in angle brackets
    is kept (Redis's own words: `HELLO <proto> AUTH <user> <pass>`). redis-py names each sentinel it
    could not ask for the primary (`MasterNotFoundError`) by its client's repr: some 1.5 KB a sentinel,
    every setting of its connections."""
    kept: list[str] = []
    at = 0
    while at < len(text):
        end = _client_repr_end(text, at)
        if end is None:
            kept.append(text[at])
            at += 1
            continue
        named = _REPR_ADDRESS.search(text, at, end)
        kept.append(_address({"host": named[1], "port": named[2]}) if named else "")
        at = end
    return "".join(kept)


def _client_repr_end(text: str, start: int) -> int | None:
    """Where the client repr that starts at `start` ends (past its `>`); None when none starts there: a
    `<` and its matching `>` around no repr's shape, a `<` never closed, or a name not before a `<`."""
    opening = start
    if text[start] != "<":
        named = _NAME.match(text, start)
        if named is None or (start and _NAME_PART.fullmatch(text[start - 1])):
            return None
        opening = named.end()
        if text[opening : opening + 1] != "<":
            return None
    depth = 0
    for at in range(opening, len(text)):
        depth += {"<": 1, ">": -1}.get(text[at], 0)
        if depth == 0:
            whole = text[start : at + 1]
            return at + 1 if any(shape.fullmatch(whole) for shape in _CLIENT_REPRS) else None
    return None


def _address(kwargs: dict[str, object]) -> str:
    host = str(kwargs.get("host", "localhost"))
    return f"{f'[{host}]' if ':' in host else host}:{kwargs.get('port', 6379)}"


def describe(client: RedisClient) -> str:
    """How `client` connects, for a `RedisAccessError`: `TLS, CA /etc/redis/ca.pem, client certificate
    /etc/redis/client.pem, user 'gateway' with a password`; never the password itself."""
    kwargs = connection_kwargs(client)
    parts = ["plaintext"]
    if is_tls(client):
        ca = kwargs.get("ssl_ca_certs")
        if kwargs.get("ssl_cert_reqs") in ("none", ssl.CERT_NONE):
            parts = ["TLS, certificate not verified"]
        else:
            parts = ["TLS", f"CA {ca}" if ca else "the system's CAs"]
        if kwargs.get("ssl_certfile"):
            parts.append(f"client certificate {kwargs['ssl_certfile']}")
    pool = None if isinstance(client, RedisCluster) else client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        count = len(pool.sentinel_manager.sentinels)
        parts.insert(0, f"the primary of {pool.service_name!r} by {count} sentinel{'s' if count > 1 else ''}")
    elif pool is None:
        parts.insert(0, "a Redis Cluster")
    user, password = kwargs.get("username"), kwargs.get("password")
    if user:
        parts.append(f"user {user!r} with a password" if password else f"user {user!r} without a password")
    else:
        parts.append("the default user with a password" if password else "no login")
    return ", ".join(parts)
