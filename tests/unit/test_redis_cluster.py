"""Redis Cluster (`redisconn.cluster`): the `redis+cluster://` client, how it is named, which of its
errors are refusals and which outages, and the one hash slot a projection's keys share.

The same on a real three-node cluster: tests/integration/test_redis_cluster.py.
"""

from __future__ import annotations

import ssl

import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AuthenticationError,
    ClusterDownError,
    RedisClusterException,
    RedisClusterUnreachableError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from turnledger.errors import RedisAccessError, RedisFailoverError, RedisSettingsError, RedisUnavailableError
from turnledger.projections.keys import ProjectionKeys
from turnledger.redisconn import refusals
from turnledger.redisconn.client import redis_client
from turnledger.redisconn.cluster import (
    drop_connections,
    is_cluster,
    node_url,
    seed_address,
    slot_base,
    slot_tag,
)
from turnledger.redisconn.naming import client_url, describe, is_tls
from turnledger.redisconn.refusals import (
    CHECK_CERTIFICATE,
    CHECK_CLUSTER,
    CHECK_LOGIN,
    CHECK_NOT_CLUSTER,
    classify,
)

URL = "rediss+cluster://gateway:s3cret-pw@clustercfg.cache.example.net:6379"
SHOWN = "rediss+cluster://gateway:***@clustercfg.cache.example.net:6379/0"


@pytest.fixture
def cluster() -> RedisCluster:
    """A cluster client that never connects: naming and classifying read only its settings."""
    client = redis_client(URL, ssl_ca_certs="/etc/redis/ca.pem")
    assert isinstance(client, RedisCluster)
    return client


def test_a_cluster_url_builds_a_cluster_client_seeded_by_its_node(cluster: RedisCluster) -> None:
    assert is_cluster(cluster) and is_tls(cluster)
    assert [(n.host, n.port) for n in cluster.nodes_manager.startup_nodes.values()] == [
        ("clustercfg.cache.example.net", 6379)
    ]
    assert cluster.get_connection_kwargs()["ssl_ca_certs"] == "/etc/redis/ca.pem"
    plain = redis_client("redis+cluster://10.0.0.7:7000/0")
    assert isinstance(plain, RedisCluster) and not is_tls(plain)
    assert client_url(plain) == "redis+cluster://10.0.0.7:7000/0"
    assert not is_cluster(redis_client("redis://10.0.0.7:7000/0"))


def test_a_cluster_client_is_named_without_its_password(cluster: RedisCluster) -> None:
    assert client_url(cluster) == SHOWN
    assert describe(cluster) == "a Redis Cluster, TLS, CA /etc/redis/ca.pem, user 'gateway' with a password"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis+cluster://h:7000", "redis://h:7000"),
        ("rediss+cluster://u:p@h:7000/0?ssl_cert_reqs=none", "rediss://u:p@h:7000/0?ssl_cert_reqs=none"),
        ("REDIS+CLUSTER://h:7000/", "redis://h:7000/"),
    ],
)
def test_the_nodes_url_has_the_nodes_scheme(url: str, expected: str) -> None:
    assert node_url(url) == expected


@pytest.mark.parametrize("database", ["2", "X", "0/1"])
def test_a_cluster_has_only_database_0(database: str) -> None:
    with pytest.raises(RedisSettingsError) as caught:
        redis_client(f"redis+cluster://h:7000/{database}")
    assert str(caught.value) == (
        f"REDIS_URL: a Redis Cluster has only database 0, not {database!r} "
        "(redis+cluster://HOST:PORT or redis+cluster://HOST:PORT/0)"
    )


def test_an_option_no_cluster_client_takes_is_a_settings_error_not_a_type_error() -> None:
    with pytest.raises(RedisSettingsError) as caught:
        redis_client("redis+cluster://h:7000/0?ssl_ca_certs=/ca.pem")
    assert (
        str(caught.value)
        == "?ssl_ca_certs= set, but REDIS_URL is redis+cluster://: TLS needs a rediss:// URL (rediss+cluster://)"
    )
    with pytest.raises(RedisSettingsError) as caught:
        redis_client("rediss+cluster://h:7000/0?read_from_replica=yes")
    assert str(caught.value) == (
        "?read_from_replica= in REDIS_URL: not an option a rediss+cluster:// connection takes"
    )
    client = redis_client("redis+cluster://h:7000/0?socket_timeout=2.5")
    assert isinstance(client, RedisCluster) and client.get_connection_kwargs()["socket_timeout"] == 2.5


@pytest.mark.parametrize(
    ("key", "tag"),
    [
        ("{tl:}history:c-1", "tl:"),
        ("tl:history:{c-1}", "c-1"),
        ("a{b}c{d}", "b"),
        ("{}x{y}", None),
        ("x{", None),
        ("plain", None),
        ("}{z}", "z"),
        ("{a}", "a"),
        ("{ab", None),
    ],
)
def test_the_slot_tag_is_what_redis_hashes(key: str, tag: str | None) -> None:
    assert slot_tag(key) == tag


@pytest.mark.parametrize(
    ("prefix", "base"),
    [("tl:", "{tl:}"), ("{tl}:", "{tl}:"), ("app{x}-", "app{x}-"), ("a{", "{a{}"), ("x}y", "{x}y}")],
)
def test_a_prefix_becomes_a_hash_tag_unless_it_holds_one(prefix: str, base: str) -> None:
    assert slot_base(prefix) == base


@pytest.mark.parametrize("prefix", ["", "}x"])
def test_a_prefix_that_cannot_be_a_hash_tag_is_refused(prefix: str) -> None:
    with pytest.raises(RedisSettingsError) as caught:
        ProjectionKeys(prefix, one_slot=True)
    assert str(caught.value) == (
        f"key prefix {prefix!r}: in a Redis Cluster every key of a projection must share one hash slot, "
        "and this prefix cannot give them one; use a prefix such as 'tl:' or '{tl}:'"
    )


def _all_keys(keys: ProjectionKeys, conversation: str, operation: str) -> list[str]:
    return [
        keys.offsets,
        keys.stats,
        keys.rejections,
        keys.conversations,
        keys.events(conversation),
        keys.conversation(conversation),
        keys.history(conversation),
        keys.history_order(conversation),
        keys.operations(conversation),
        keys.operation(conversation, operation),
        keys.operation_conversations(operation),
        keys.quarantine(conversation),
        keys.previews(conversation, operation),
    ]


IDS = st.text(alphabet=st.sampled_from("ab{}:%-1"), min_size=1, max_size=12)


@given(prefix=st.text(alphabet=st.sampled_from("tl{}:x"), max_size=6), conversation=IDS, operation=IDS)
def test_every_key_of_a_projection_on_a_cluster_is_in_one_slot(
    prefix: str, conversation: str, operation: str
) -> None:
    """Whatever braces the ids hold, the prefix's tag decides the slot of every key: the one script
    call of a batch is allowed on a cluster."""
    try:
        keys = ProjectionKeys(prefix, one_slot=True)
    except RedisSettingsError:
        assert slot_tag("{" + prefix + "}") is None and slot_tag(prefix) is None
        return
    every = _all_keys(keys, conversation, operation)
    assert all(key.startswith(keys.base) for key in every)
    assert {key_slot(key.encode()) for key in every} == {key_slot(keys.base.encode())}


def test_keys_are_the_prefix_s_on_one_redis_and_tagged_on_a_cluster(cluster: RedisCluster) -> None:
    one = ProjectionKeys.of("gw:", redis_client("redis://h:6379/0"))
    tagged = ProjectionKeys.of("gw:", cluster)
    assert (one.base, one.history("c-1"), one.offsets) == ("gw:", "gw:history:c-1", "gw:offsets")
    assert (tagged.base, tagged.history("c-1"), tagged.offsets) == (
        "{gw:}",
        "{gw:}history:c-1",
        "{gw:}offsets",
    )
    verify = tagged.beside("verify:gw:")
    assert (verify.one_slot, verify.base) == (True, "{verify:gw:}")


def test_the_cluster_table_replaces_the_single_node_s_cluster_refusal() -> None:
    checks = [rule.check for rule in refusals.CLUSTER_RULES]
    assert checks[:2] == [CHECK_NOT_CLUSTER, None]
    assert CHECK_CLUSTER not in checks and checks[-1] is None
    assert [r.check for r in refusals.CLUSTER_RULES[2:-1]] == [
        r.check for r in refusals.RULES if r.check != CHECK_CLUSTER
    ]


def _seeding(
    answer: BaseException, kind: type[RedisClusterException] = RedisClusterException
) -> BaseException:
    """As redis-py raises what its seed node answered while it reads the slot map."""
    try:
        raise kind(
            f"Redis Cluster cannot be connected. Please provide at least one reachable node: {answer}"
        ) from answer
    except RedisClusterException as exc:
        return exc


TRIED = "a Redis Cluster, TLS, CA /etc/redis/ca.pem, user 'gateway' with a password"


def test_a_seed_node_that_is_no_cluster_is_a_refusal(cluster: RedisCluster) -> None:
    answer = RedisClusterException("Cluster mode is not enabled on this node")
    failure = classify(_seeding(answer), cluster)
    assert isinstance(failure, RedisAccessError) and not failure.retriable
    assert str(failure) == (
        f"Redis at {SHOWN!r} refused the connection ({TRIED}): RedisClusterException: "
        f"Cluster mode is not enabled on this node. {CHECK_NOT_CLUSTER}"
    )


@pytest.mark.parametrize(
    ("answer", "check"),
    [
        (AuthenticationError("invalid username-password pair or user is disabled."), CHECK_LOGIN),
        (AuthenticationError("HELLO must be called with the client already authenticated"), CHECK_LOGIN),
        (
            RedisConnectionError("Error 1 connecting to 10.0.0.7:7000. certificate verify failed."),
            None,
        ),
    ],
    ids=["wrong password", "no password", "outage"],
)
def test_what_the_seed_node_answered_is_judged_not_the_cluster_error_around_it(
    cluster: RedisCluster, answer: BaseException, check: str | None
) -> None:
    failure = classify(_seeding(answer), cluster)
    if check is None:
        assert type(failure) is RedisUnavailableError and failure.cause is answer
    else:
        assert isinstance(failure, RedisAccessError)
        assert str(failure) == (
            f"Redis at {SHOWN!r} refused the connection ({TRIED}): {type(answer).__name__}: "
            f"{str(answer).rstrip('.')}. {check}"
        )


def test_a_certificate_the_seed_node_s_client_cannot_verify_is_a_refusal(cluster: RedisCluster) -> None:
    verify = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    try:
        raise RedisConnectionError("Error 1 connecting to 10.0.0.7:7000.") from verify
    except RedisConnectionError as exc:
        failure = classify(_seeding(exc, RedisClusterUnreachableError), cluster)
    assert isinstance(failure, RedisAccessError) and str(failure).endswith(f". {CHECK_CERTIFICATE}")


@pytest.mark.parametrize(
    "error",
    [
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
        RedisClusterUnreachableError(
            "Redis Cluster cannot be connected. Please provide at least one reachable node"
        ),
        RedisConnectionError("Error 111 connecting to 10.0.0.7:7000. Connection refused."),
    ],
    ids=lambda v: type(v).__name__,
)
def test_a_cluster_that_is_down_or_moving_a_slot_is_an_outage(
    cluster: RedisCluster, error: BaseException
) -> None:
    failure = classify(error, cluster)
    assert type(failure) is RedisUnavailableError and failure.retriable and failure.cause is error
    assert failure.url == SHOWN


def test_a_cluster_s_refused_login_is_a_refusal(cluster: RedisCluster) -> None:
    failure = classify(AuthenticationError("invalid username-password pair or user is disabled."), cluster)
    assert isinstance(failure, RedisAccessError) and str(failure).endswith(f". {CHECK_LOGIN}")


def test_keys_of_two_slots_in_one_command_are_ours_to_fix_not_an_outage(cluster: RedisCluster) -> None:
    assert (
        classify(RedisClusterException("EVALSHA - all keys must map to the same key slot"), cluster) is None
    )


def test_a_single_node_client_refuses_a_cluster_s_replies_naming_the_cluster_url() -> None:
    client = aioredis.from_url("redis://10.0.0.7:7000/0")
    failure = classify(ClusterDownError("CLUSTERDOWN Hash slot not served"), client)
    assert isinstance(failure, RedisAccessError) and str(failure).endswith(f". {CHECK_CLUSTER}")
    assert "redis+cluster://" in CHECK_CLUSTER
    assert not isinstance(classify(ClusterDownError("x"), client), RedisFailoverError)


async def test_after_a_failover_only_a_single_node_client_drops_its_connections(
    cluster: RedisCluster,
) -> None:
    single = aioredis.from_url("redis://10.0.0.7:7000/0")
    calls: list[str] = []

    async def disconnect(inuse_connections: bool = True) -> None:
        calls.append("disconnect")

    single.connection_pool.disconnect = disconnect  # type: ignore[method-assign]
    await drop_connections(single)
    await drop_connections(cluster)
    assert calls == ["disconnect"]


def test_a_client_is_first_asked_of_its_seed_node_or_its_host(cluster: RedisCluster) -> None:
    """What `explain` probes when a command failed as an outage: the cluster's seed node, one Redis's
    host and port, nothing for a Unix socket."""
    assert seed_address(cluster) == ("clustercfg.cache.example.net", 6379)
    assert seed_address(redis_client("rediss://cache.example.net:6380/0")) == ("cache.example.net", 6380)
    assert seed_address(redis_client("unix:///run/redis.sock?db=0")) is None
