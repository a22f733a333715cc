"""Redis Cluster, on three real redis-servers sharing the slots: `redis+cluster://` projects the topics
into one hash slot of the cluster (every key under the prefix as a hash tag), the projection equals
one on a single Redis, a re-delivered record is still a no-op, a dropped projection is projected
again the same, `history` and `status` read it as they read a single Redis, `serve` answers and
streams from it (XREAD on the node of the slot), and `replay rebuild` verifies it against a fresh
fold. Refused in one line: a `redis+cluster://` URL naming a Redis that is no cluster, a wrong or
missing password (a one-node cluster with `requirepass`), a TLS cluster's certificate without its CA
(`rediss+cluster://` on a TLS-only node, which reads and projects with it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import redis
import redis.asyncio as aioredis
from aiokafka import TopicPartition
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from tests.integration.projections.checks import wait_for
from tests.integration.projections.workload import conversation, produce, settled, workload
from tests.integration.redis_cluster_nodes import cluster_node, cluster_port, node_of_slot, three_node_cluster
from tests.integration.replay.ingress_workload import ingress_events, produce_ingress, run_processor
from tests.integration.serve.conftest import serving
from tests.integration.serve.sse import read_frames
from turnledger.devstack.redis_server import redis_argv
from turnledger.devstack.redis_tls import RedisTls
from turnledger.devstack.session import Endpoints, in_ci
from turnledger.processors.topics import ensure_topics
from turnledger.projections.direct import project_records
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector
from turnledger.projections.snapshot import diff_snapshots, drop_prefix, snapshot
from turnledger.redisconn.client import connect
from turnledger.redisconn.client import redis_client as build_client
from turnledger.redisconn.refusals import CHECK_CERTIFICATE, CHECK_LOGIN, CHECK_NOT_CLUSTER
from turnledger.serve.app import ServeConfig
from turnledger.topology import Topics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    with three_node_cluster(tmp_path_factory.mktemp("cluster")) as nodes:
        yield [node.port for node in nodes]


@pytest.fixture
def cluster_url(cluster: list[int]) -> str:
    return f"redis+cluster://127.0.0.1:{cluster[1]}"


@pytest.fixture
async def cluster_client(cluster_url: str, redis_prefix: str) -> AsyncIterator[RedisCluster]:
    client = await connect(cluster_url)
    assert isinstance(client, RedisCluster)
    try:
        yield client
    finally:
        for base in (f"{{{redis_prefix}}}", f"{{{redis_prefix}ref:}}"):
            await drop_prefix(client, base)
        await client.aclose()


def _cli(*args: str, url: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_")}
    return subprocess.run(
        [sys.executable, "-m", "turnledger.cli", *args],
        env={**inherited, **(env or {}), "REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def test_a_projection_on_a_cluster_equals_one_on_a_single_redis_in_one_slot(
    cluster: list[int],
    cluster_url: str,
    cluster_client: RedisCluster,
    kafka_bootstrap: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    records = workload(6)
    await produce(kafka_bootstrap, topics, records, per_transaction=5, transactional_id=topics.prefix)
    await settled(kafka_bootstrap, topics.outputs)

    run = _cli(
        "project",
        "--bootstrap",
        kafka_bootstrap,
        "--topic-prefix",
        topics.prefix,
        "--key-prefix",
        redis_prefix,
        "--until-caught-up",
        url=cluster_url,
    )
    assert run.returncode == 0, run.stderr
    assert f"applied {len(records)}, skipped 0 (already applied), undecodable 0" in run.stderr

    reference = ProjectionKeys(redis_prefix + "ref:")
    await project_records(redis_client, reference, records)
    expected = await snapshot(redis_client, reference.base)
    keys = ProjectionKeys.of(redis_prefix, cluster_client)
    assert keys.base == "{" + redis_prefix + "}"
    held = await snapshot(cluster_client, keys.base)
    assert held and diff_snapshots(held, expected) == []

    slot = key_slot(keys.base.encode())
    owner = node_of_slot(cluster[0], slot)
    for port in cluster:
        with redis.Redis(port=port) as node:
            assert node.dbsize() == (len(held) + 1 if port == owner else 0)  # + the offsets hash
            if port == owner:
                assert node.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == len(held) + 1

    zero = {TopicPartition(t, p): 0 for t in topics.outputs for p in range(2)}
    again = await Projector(cluster_client, kafka_bootstrap, topics, keys, batch_size=4).run_to_end(
        start=zero
    )
    assert (again.applied, again.skipped) == (0, len(records))
    assert await snapshot(cluster_client, keys.base) == held

    assert await drop_prefix(cluster_client, keys.base) == len(held) + 1
    assert await snapshot(cluster_client, keys.base) == {}
    rebuilt = await Projector(cluster_client, kafka_bootstrap, topics, keys, batch_size=7).run_to_end()
    assert (rebuilt.applied, rebuilt.skipped) == (len(records), 0)
    assert await snapshot(cluster_client, keys.base) == held


async def test_history_and_status_read_a_cluster_as_they_read_one_redis(
    cluster_url: str,
    cluster_client: RedisCluster,
    redis_url: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
) -> None:
    records = conversation("c-7")
    await project_records(cluster_client, ProjectionKeys.of(redis_prefix, cluster_client), records)
    await project_records(redis_client, ProjectionKeys(redis_prefix), records)
    for args in (["history", "c-7", "--json"], ["status", "c-7-op1", "--json"]):
        on_cluster = _cli(*args, "--key-prefix", redis_prefix, url=cluster_url)
        on_one = _cli(*args, "--key-prefix", redis_prefix, url=redis_url)
        assert on_cluster.returncode == 0 == on_one.returncode, on_cluster.stderr + on_one.stderr
        assert on_cluster.stdout == on_one.stdout
        assert '"c-7' in on_cluster.stdout


async def test_serve_answers_and_streams_from_a_cluster(
    cluster_url: str,
    cluster_client: RedisCluster,
    kafka_bootstrap: str,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    keys = ProjectionKeys.of(redis_prefix, cluster_client)
    await project_records(cluster_client, keys, conversation("c-1"))
    entries = await cluster_client.xrange(keys.events("c-1"))
    served = await connect(cluster_url)  # its own client: the blocking XREADs
    try:
        config = ServeConfig(key_prefix=redis_prefix)
        async with (
            serving(served, kafka_bootstrap, topics, config) as url,
            httpx.AsyncClient(base_url=url) as http,
        ):
            listing = (await http.get("/api/conversations")).json()["conversations"]
            assert [c["conversationId"] for c in listing] == ["c-1"]
            body = (await http.get("/api/conversations/c-1")).json()
            assert [b["id"] for b in body["history"]] == ["c-1-b0", "c-1-b1", "c-1-b2"]
            assert body["lastEventId"] == entries[-1][0].decode()
            frames = await read_frames(http, "/api/conversations/c-1/events", len(entries))
            assert [(f.id, f.event) for f in frames] == [
                (i.decode(), fields[b"type"].decode()) for i, fields in entries
            ]
    finally:
        await served.aclose()


def test_a_cluster_url_naming_a_single_redis_is_refused(redis_url: str) -> None:
    address = urlsplit(redis_url).netloc
    run = _cli("history", "nobody", url=f"redis+cluster://{address}/0")
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"turnledger: Redis at 'redis+cluster://{address}/0' refused the connection (a Redis Cluster, "
        "plaintext, no login): RedisClusterException: "
    )
    assert last.endswith(f"Cluster mode is not enabled on this node. {CHECK_NOT_CLUSTER}")


PASSWORD = "cluster-s3cret"


@pytest.fixture(scope="module")
def guarded_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A one-node cluster serving every slot, with a password."""
    with cluster_node(tmp_path_factory.mktemp("guarded"), cluster_port(), PASSWORD) as port:
        with redis.Redis(port=port, password=PASSWORD) as node:
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_for(lambda: _ok_with_password(port), "the guarded node to serve its slots")
        yield port


def _ok_with_password(port: int) -> bool:
    with redis.Redis(port=port, password=PASSWORD) as node:
        return bool(node.cluster("info")["cluster_state"] == "ok")


@pytest.mark.parametrize(
    ("login", "shown", "tried"),
    [
        (":wrong-password@", ":***@", "the default user with a password"),
        ("", "", "no login"),
    ],
)
def test_a_cluster_that_refuses_the_login_is_refused_in_one_line(
    guarded_node: int, login: str, shown: str, tried: str
) -> None:
    """redis-py raises the seed node's AuthenticationError wrapped in a RedisClusterException; the
    refusal names the login, not the cluster."""
    run = _cli("history", "nobody", url=f"redis+cluster://{login}127.0.0.1:{guarded_node}")
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"turnledger: Redis at 'redis+cluster://{shown}127.0.0.1:{guarded_node}/0' refused the connection "
        f"(a Redis Cluster, plaintext, {tried}): AuthenticationError: "
    )
    assert last.endswith(f". {CHECK_LOGIN}")
    assert "wrong-password" not in run.stderr
    read = _cli("history", "nobody", "--json", url=f"redis+cluster://:{PASSWORD}@127.0.0.1:{guarded_node}")
    assert (read.returncode, read.stdout) == (1, ""), read.stderr
    assert read.stderr == "conversation 'nobody' is not in the projection (key prefix 'tl:')\n"


@pytest.fixture(scope="module")
def tls_cluster_node(
    devstack: Endpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, str]]:
    """A one-node cluster that speaks only TLS, on its clients' port and its bus (`tls-cluster yes`, as
    ElastiCache Serverless requires), with the devstack's Redis certificate: its port and CA file."""
    env = devstack.redis_tls_client_env()
    if env is None:
        message = "no devstack Redis TLS material (openssl missing, or an external Redis)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    material = RedisTls.at(Path(env["REDIS_SSL_CA_FILE"]).parent)
    workdir = tmp_path_factory.mktemp("tls-cluster")
    port = cluster_port()
    binary = shutil.which("redis-server")
    assert binary is not None
    tls = [
        "--tls-port", str(port), "--tls-cert-file", str(material.cert_file), "--tls-key-file",
        str(material.key_file), "--tls-ca-cert-file", str(material.ca_file), "--tls-auth-clients", "no",
        "--tls-cluster", "yes", "--cluster-enabled", "yes",
        "--cluster-config-file", str(workdir / "nodes.conf"),
    ]  # fmt: skip
    argv = redis_argv(binary, 0, workdir, [], tls)
    with open(workdir / "redis.log", "wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:

        def ask(*command: object) -> object:
            with redis.Redis(port=port, ssl=True, ssl_ca_certs=str(material.ca_file)) as node:
                return node.execute_command(*command)

        wait_for(lambda: server.poll() is None and ask("PING") is True, "the TLS cluster node to answer")
        ask("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_for(lambda: b"cluster_state:ok" in ask("CLUSTER", "INFO"), "the TLS node to serve its slots")
        yield port, str(material.ca_file)
    finally:
        server.terminate()
        server.wait(timeout=30)


async def test_a_tls_cluster_is_reached_by_rediss_cluster_with_its_ca(
    tls_cluster_node: tuple[int, str],
) -> None:
    """`rediss+cluster://` with REDIS_SSL_CA_FILE projects and reads; without the CA the certificate
    is refused in one line (the seed node's error, which redis-py wraps in its cluster error)."""
    port, ca_file = tls_cluster_node
    url = f"rediss+cluster://127.0.0.1:{port}"
    client = build_client(url, ssl_ca_certs=ca_file)
    try:
        keys = ProjectionKeys.of("tls:", client)
        await project_records(client, keys, conversation("c-9"))
        assert keys.base == "{tls:}" and await client.exists(keys.history("c-9")) == 1
    finally:
        await client.aclose()
    ok = _cli("history", "c-9", "--json", "--key-prefix", "tls:", url=url, env={"REDIS_SSL_CA_FILE": ca_file})
    assert ok.returncode == 0, ok.stderr
    assert [b["id"] for b in orjson.loads(ok.stdout)["blocks"]] == ["c-9-b0", "c-9-b1", "c-9-b2"]
    refused = _cli("history", "c-9", url=url)
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"turnledger: Redis at '{url}/0' refused the connection (a Redis Cluster, TLS, the system's CAs, "
        "no login): SSLCertVerificationError: "
    )
    assert last.endswith(f". {CHECK_CERTIFICATE}")


async def test_replay_rebuild_on_a_cluster_equals_a_fresh_fold(
    cluster_url: str,
    cluster_client: RedisCluster,
    kafka_bootstrap: str,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> None:
    """`turnledger replay rebuild` drops the projection across the cluster's nodes (SCAN on every
    primary), projects the topics again and compares it, key by key, with a projection of a fresh fold
    of the ingress log, made beside it under the verification prefix (its own slot)."""
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    await produce_ingress(kafka_bootstrap, topics, ingress_events(4))
    assert await run_processor(kafka_bootstrap, topics) > 0
    await settled(kafka_bootstrap, topics.outputs)
    keys = ProjectionKeys.of(redis_prefix, cluster_client)
    await Projector(cluster_client, kafka_bootstrap, topics, keys).run_to_end()
    before = await snapshot(cluster_client, keys.base)
    assert before

    args = ["replay", "rebuild", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
    run = _cli(*args, "--key-prefix", redis_prefix, url=cluster_url)
    assert run.returncode == 0, run.stderr + run.stdout
    assert f"dropped {len(before) + 1} keys; projected " in run.stdout
    assert "equal to a projection of a fresh fold (" in run.stdout
    assert await snapshot(cluster_client, keys.base) == before
    verify = keys.beside("verify:" + redis_prefix)
    assert not [k async for k in cluster_client.scan_iter(match=verify.base + "*")], (
        "verification keys are dropped"
    )
