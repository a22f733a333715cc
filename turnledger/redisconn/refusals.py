"""Which Redis client errors are a refusal (waiting cannot help) and which an outage (it may).

redis-py makes a refused login an `AuthenticationError`, which is a `ConnectionError`, and wraps a
certificate it cannot verify in a `ConnectionError` too: a service that waited out every
`ConnectionError` would wait for ever for a password to become right. `RULES` is read top down and
the first rule that matches decides; a refusal comes with what to check.

Two refusals do not show as themselves here: TLS spoken to a plaintext port usually hangs until the
connect timeout, and plaintext spoken to a TLS port is reset. They stay outages in this table and
`probe.other_protocol` tells them apart, once, when a command starts (`client.connect`).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import MasterNotFoundError, SentinelConnectionPool
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    BusyLoadingError,
    ClusterCrossSlotError,
    ClusterDownError,
    MasterDownError,
    NoPermissionError,
    ReadOnlyError,
    RedisClusterException,
    RedisClusterUnreachableError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from turnledger.errors import (
    RedisAccessError,
    RedisFailoverError,
    RedisSentinelUnavailableError,
    RedisUnavailableError,
    TurnledgerError,
)
from turnledger.redisconn.cluster import RedisClient, connection_kwargs, is_cluster
from turnledger.redisconn.naming import client_url, describe, sentinel_addresses, without_client_reprs
from turnledger.redisconn.settings import (
    ENV_CA_FILE,
    ENV_CERT_FILE,
    ENV_KEY_FILE,
    ENV_PASSWORD_FILE,
    ENV_URL,
    QUERY_CA,
    QUERY_CERT,
)
from turnledger.tls_alerts import certificate_alert

CHECK_LOGIN = (
    f"Check the user and password: the user in {ENV_URL} (rediss://USER@host:port/0) and the password "
    f"in {ENV_PASSWORD_FILE} (or in {ENV_URL}); a Redis with ACL users (ElastiCache RBAC, Redis Cloud) "
    "needs both, one with only a default-user password needs the password alone."
)
CHECK_PERMISSIONS = (
    "The user is logged in but may not run turnledger's commands on its keys: grant it the key prefix "
    "and the commands (e.g. `~tl:* +@all`; on a cluster the keys start with the prefix in braces: "
    "`~{tl:}* +@all`), or use another user."
)
CHECK_CERTIFICATE = (
    f"The server's certificate could not be verified: set {ENV_CA_FILE} (or ?{QUERY_CA}= in {ENV_URL}) "
    "to the CA that signed it (else the system's CAs are used), and connect by a name the certificate "
    "holds."
)
CHECK_CLUSTER = (
    f"This Redis is a Redis Cluster node: name the cluster with a redis+cluster:// URL (rediss+cluster:// "
    f"for TLS) in {ENV_URL}, so that each key is asked of the node that holds its slot (ElastiCache "
    "Serverless and cluster-mode groups, Memorystore clusters are clusters)."
)
CHECK_NOT_CLUSTER = (
    f"This Redis is not a cluster (cluster mode is disabled on it): use a redis:// URL (rediss:// for TLS) "
    f"in {ENV_URL}, or redis+sentinel:// for its sentinels."
)
CHECK_NO_CLIENT_CERTIFICATE = (
    f"Redis asks for a client certificate (mutual TLS, `tls-auth-clients yes`): set {ENV_CERT_FILE} and "
    f"{ENV_KEY_FILE} to a certificate signed by a CA Redis trusts (its tls-ca-cert-file) and its key."
)
CHECK_CLIENT_CERTIFICATE = (
    f"Redis did not accept the client certificate: check {ENV_CERT_FILE} and {ENV_KEY_FILE} (a "
    "certificate signed by a CA Redis trusts, its tls-ca-cert-file, still valid)."
)
CHECK_TLS = (
    f"The TLS handshake failed: check that the port speaks TLS ({ENV_URL} rediss:// needs the server's "
    "TLS port) and the ssl_* options in the URL."
)
CHECK_PLAINTEXT_PORT = (
    "This port speaks plaintext Redis, not TLS: use redis:// for it, or the server's TLS port with rediss://."
)
CHECK_TLS_PORT = (
    f"This port speaks TLS: use rediss:// (with {ENV_CA_FILE} for a private CA), or the server's "
    "plaintext port."
)

Match = Callable[[BaseException], BaseException | None]
"""The error to report when the rule applies to a client error (the error itself, or the `ssl` error
inside it), else None."""


Check = Callable[[RedisClient], str]
"""What to check, for a refusal, by how the client connects."""


Outage = Callable[[RedisClient, BaseException], RedisUnavailableError]
"""The outage reported for a client's error."""


def unavailable(client: RedisClient, exc: BaseException) -> RedisUnavailableError:
    return RedisUnavailableError(client_url(client), exc)


def failover(client: RedisClient, exc: BaseException) -> RedisUnavailableError:
    return RedisFailoverError(client_url(client), exc)


def sentinels_unavailable(client: RedisClient, exc: BaseException) -> RedisUnavailableError:
    """No sentinel named the primary: named by the sentinels' addresses and the service, as redis-py's
    own text names each sentinel it could not ask by its client's whole repr."""
    pool = None if isinstance(client, RedisCluster) else client.connection_pool
    if not isinstance(pool, SentinelConnectionPool):
        return unavailable(client, exc)
    return RedisSentinelUnavailableError(
        client_url(client), sentinel_addresses(pool), pool.service_name, exc, without_client_reprs(str(exc))
    )


@dataclass(frozen=True)
class Rule:
    match: Match
    check: str | Check | None
    """What to check, for a refusal; None: an outage."""
    outage: Outage = unavailable
    """The outage reported, when `check` is None."""


def client_certificate_check(client: RedisClient) -> str:
    """A certificate alert says Redis refused who we are: with no certificate given, that it wants one."""
    if connection_kwargs(client).get(QUERY_CERT):
        return CHECK_CLIENT_CERTIFICATE
    return CHECK_NO_CLIENT_CERTIFICATE


def of_type(*types: type[BaseException]) -> Match:
    return lambda exc: exc if isinstance(exc, types) else None


def cluster_reply(exc: BaseException) -> BaseException | None:
    """A reply only a Redis Cluster node gives (MOVED, ASK, CROSSSLOT, TRYAGAIN, CLUSTERDOWN), not
    `MASTERDOWN`, which redis-py files under CLUSTERDOWN but a replica of a plain primary sends."""
    cluster = (AskError, ClusterCrossSlotError, TryAgainError, ClusterDownError)
    return exc if isinstance(exc, cluster) and not isinstance(exc, MasterDownError) else None


def not_a_cluster(exc: BaseException) -> BaseException | None:
    """A cluster client's seed node that answers but has cluster mode disabled; redis-py says so only
    in the message of the `RedisClusterException` it raises while finding the slots."""
    if isinstance(exc, RedisClusterException) and "Cluster mode is not enabled" in str(exc):
        return exc
    return None


def response_starting(*codes: str) -> Match:
    """A `ResponseError` whose message starts with one of the server's error codes: a parser that does
    not map them to `AuthenticationError` leaves them so."""
    return lambda exc: exc if isinstance(exc, ResponseError) and str(exc).startswith(codes) else None


def caused_by(kind: type[BaseException], *but: type[BaseException]) -> Match:
    """The first error of `kind` (none of `but`) in the chain of causes of a connection's error, `exc`
    included: redis-py raises its `ConnectionError` from the `ssl` error, or while handling it."""
    return in_chain(
        lambda current: current if isinstance(current, kind) and not isinstance(current, but) else None
    )


def in_chain(found: Match) -> Match:
    """The first error of a connection's chain of causes, `exc` included, that `found` reports."""

    def match(exc: BaseException) -> BaseException | None:
        if not isinstance(exc, RedisConnectionError | OSError):
            return None
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            reported = found(current)
            if reported is not None:
                return reported
            seen.add(id(current))
            current = current.__cause__ or current.__context__
        return None

    return match


REFUSED_LOGIN: tuple[Match, ...] = (
    of_type(AuthenticationError, AuthenticationWrongNumberOfArgsError),
    response_starting("WRONGPASS", "NOAUTH"),
)
"""A refused login: redis-py's own error for it, or the server's code a parser left in a `ResponseError`
(a Redis's, or a sentinel's: `sentinel_probe`)."""


RULES: tuple[Rule, ...] = (
    *(Rule(match, CHECK_LOGIN) for match in REFUSED_LOGIN),
    Rule(of_type(NoPermissionError), CHECK_PERMISSIONS),
    Rule(cluster_reply, CHECK_CLUSTER),
    Rule(caused_by(ssl.SSLCertVerificationError), CHECK_CERTIFICATE),
    Rule(in_chain(certificate_alert), client_certificate_check),
    Rule(caused_by(ssl.SSLError, ssl.SSLEOFError, ssl.SSLZeroReturnError), CHECK_TLS),
    Rule(of_type(ReadOnlyError, MasterDownError), None, failover),
    Rule(response_starting("NOREPLICAS"), None, failover),
    Rule(of_type(MasterNotFoundError), None, sentinels_unavailable),
    Rule(of_type(RedisConnectionError, RedisTimeoutError, BusyLoadingError, OSError), None),
)
"""A refused login before the outage rule (`AuthenticationError` is a `ConnectionError`); a Redis
Cluster node's replies (MOVED to another node, CROSSSLOT) to a client of one node are a refusal:
the URL must name a cluster (`redis+cluster://`), and waiting cannot change that. Redis's alert
about our certificate (`tls_alerts`, after the handshake under TLS 1.3, so on the first read) before
any other TLS error; a TLS error that is only the peer going away (EOF, a closed session) is left to
the outage rule. A node that takes no writes (`READONLY`: demoted to a replica; `MASTERDOWN`: a replica
without its primary; `NOREPLICAS`: a primary configured with `min-replicas-to-write` that lost its
replicas, as an old primary does once a replica was promoted) is a failover under way, an outage too
(`RedisFailoverError`): a `ResponseError` that used to end the projector. No sentinel naming the primary
(`MasterNotFoundError`, a `ConnectionError`) is an outage named by the sentinels and the service
(`RedisSentinelUnavailableError`): redis-py keeps of each sentinel's error only its text, so whether
they refused us is asked of them again where a command starts or meets it, and where the projector
waits (`sentinel_probe`)."""


CLUSTER_RULES: tuple[Rule, ...] = (
    Rule(not_a_cluster, CHECK_NOT_CLUSTER),
    Rule(of_type(ClusterDownError, TryAgainError), None),
    *(rule for rule in RULES if rule.match is not cluster_reply),
    Rule(of_type(RedisClusterUnreachableError), None),
)
"""A cluster client's: its seed node not a cluster is a refusal; a slot without a serving node
(`CLUSTERDOWN`, a failover under way) or a slot being moved (`TRYAGAIN`) is an outage, as is any node
the client cannot reach (`RedisClusterUnreachableError` with no error behind it: `classify` judges the
seed node's own answer first, `seed_answer`). MOVED and ASK never reach here: the client follows them.
Any other `RedisClusterException` (keys of one command in two slots) is a fault of ours, not judged."""


def seed_answer(exc: BaseException) -> BaseException:
    """What a cluster client's seed node answered: redis-py raises a `RedisClusterException` from it
    while it reads the slot map (a refused login, a certificate it cannot verify, a node that is no
    cluster, a connection refused), so the rules judge the error it was raised from."""
    while isinstance(exc, RedisClusterException) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def classify(exc: BaseException, client: RedisClient) -> TurnledgerError | None:
    """`RedisAccessError` (a refusal), `RedisUnavailableError` (an outage, kept as it is when it is
    one already) or None (not a Redis connection's failure: not ours to judge) for an error one of
    `client`'s commands raised."""
    if isinstance(exc, RedisUnavailableError | RedisAccessError):
        return exc
    cluster = is_cluster(client)
    if cluster:
        exc = seed_answer(exc)
    for rule in CLUSTER_RULES if cluster else RULES:
        reported = rule.match(exc)
        if reported is None:
            continue
        if rule.check is None:
            return rule.outage(client, exc)
        check = rule.check if isinstance(rule.check, str) else rule.check(client)
        return RedisAccessError(client_url(client), describe(client), reported, check)
    return None
