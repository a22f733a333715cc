"""Redis Cluster: the client, and the one hash slot a projection's keys share.

    redis+cluster://[USER[:PASSWORD]@]HOST:PORT[/0][?OPTION=VALUE...]
    rediss+cluster://...        the same, TLS to every node

HOST:PORT is any node of the cluster (ElastiCache's configuration endpoint, a Serverless cache's
endpoint, a Memorystore cluster's discovery endpoint); the client asks it for the slot map and then
talks to the node that holds each key, following MOVED and ASK through resharding and failovers
(redis-py's `RedisCluster`). A cluster has only database 0.

A cluster runs a script only on keys of one hash slot, and the projection applies a whole batch of
many conversations, with the offsets that say it was applied, in one script call: that one call is
what makes a batch all-or-nothing and a re-delivered record a no-op. So every key of a projection
carries one hash tag, its prefix (`slot_base`): `{tl:}history:c-1`, `{tl:}offsets`. Redis hashes only
the text between the first `{` and the next `}`, so the conversation ids after the prefix cannot move
a key to another slot. The cost: one projection lives on one shard (its memory and its CPU); two
projections under two prefixes may live on two.
"""

from __future__ import annotations

from typing import Any, TypeAlias
from urllib.parse import urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from turnledger.errors import RedisSettingsError
from turnledger.redisconn.url_parts import split_url

SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""A cluster URL's scheme and the scheme of its nodes' connections."""

RedisClient: TypeAlias = aioredis.Redis | RedisCluster
"""What every service holds: a client of one Redis (direct or behind Sentinel) or of a cluster."""


def is_cluster_url(url: str) -> bool:
    return split_url(url).scheme.lower() in SCHEMES


def is_cluster(client: RedisClient) -> bool:
    return isinstance(client, RedisCluster)


def node_url(url: str) -> str:
    """The URL redis-py's `RedisCluster.from_url` reads: the scheme of the nodes' connections, and
    a `RedisSettingsError` for a database other than 0."""
    parts = split_url(url)
    database = parts.path.strip("/")
    if database not in ("", "0"):
        raise RedisSettingsError(
            f"REDIS_URL: a Redis Cluster has only database 0, not {database!r} "
            f"({parts.scheme}://HOST:PORT or {parts.scheme}://HOST:PORT/0)"
        )
    return urlunsplit((SCHEMES[parts.scheme.lower()], parts.netloc, parts.path, parts.query, parts.fragment))


def cluster_client(url: str, options: dict[str, Any]) -> RedisCluster:
    """A cluster client seeded by the URL's node; `options` as for any client (`settings.client_options`),
    the URL's own winning as `from_url` lets them."""
    return RedisCluster.from_url(node_url(url), **options)


def connection_kwargs(client: RedisClient) -> dict[str, Any]:
    """The keyword arguments `client`'s connections are built with (host and port excepted for a
    cluster, whose nodes each have their own)."""
    if isinstance(client, RedisCluster):
        return dict(client.get_connection_kwargs())
    return dict(client.connection_pool.connection_kwargs)


def seed_node(client: RedisCluster) -> tuple[str, int]:
    """The node a cluster client asks for the slot map first: the URL's (redis-py refuses a cluster
    client with none)."""
    node = next(iter(client.nodes_manager.startup_nodes.values()))
    return node.host, int(node.port)


def seed_address(client: RedisClient) -> tuple[str, int] | None:
    """The host and port a client connects to first: the URL's node for a cluster; None for a Unix
    socket (whose pool has neither)."""
    if isinstance(client, RedisCluster):
        return seed_node(client)
    kwargs = client.connection_pool.connection_kwargs
    host, port = kwargs.get("host"), kwargs.get("port")
    if not isinstance(host, str) or not isinstance(port, int):
        return None
    return host, port


async def drop_connections(client: RedisClient) -> None:
    """After a failover: the pooled connections of one Redis reach the node that was demoted, so the
    next command must connect again, to wherever the URL names the primary now. A cluster client
    needs nothing: a MOVED reply or a lost node makes it read the slot map again."""
    if not isinstance(client, RedisCluster):
        await client.connection_pool.disconnect()


def slot_tag(key: str) -> str | None:
    """The text Redis Cluster hashes `key` by when it holds one: between the first `{` and the first
    `}` after it, when that is not empty; None when Redis hashes the whole key."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:  # no "}" after it (-1), or nothing between
        return None
    return key[start + 1 : end]


def slot_base(prefix: str) -> str:
    """What every key of a projection under `prefix` starts with in a cluster: the prefix itself
    when it already fixes a hash tag (`{tl}:`), else the prefix in braces (`{tl:}`); a
    `RedisSettingsError` when neither can (an empty prefix, one that starts with `}`)."""
    if slot_tag(prefix) is not None:
        return prefix
    base = "{" + prefix + "}"
    if slot_tag(base) is None:
        raise RedisSettingsError(
            f"key prefix {prefix!r}: in a Redis Cluster every key of a projection must share one hash "
            "slot, and this prefix cannot give them one; use a prefix such as 'tl:' or '{tl}:'"
        )
    return base
