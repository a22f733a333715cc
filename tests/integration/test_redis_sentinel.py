"""Redis behind Sentinel, on real redis-servers and a real sentinel: `redis+sentinel://` reaches the
primary the sentinel names, `history` reads through it, and a projector following the topics goes on
through a failover (`SENTINEL FAILOVER`): the old primary, demoted, answers READONLY; redis-py's
sentinel connection drops it and asks the sentinel again; the new primary ends holding the whole
projection."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from tests.integration.projections.checks import direct_snapshot, node_holds, until, wait_for
from tests.integration.projections.workload import produce, settled, workload
from tests.integration.worker_ports import RESTART_PORTS
from turnledger.devstack.ports import free_port
from turnledger.devstack.redis_tls import RedisTls
from turnledger.devstack.restartable import RestartableRedis
from turnledger.devstack.session import Endpoints
from turnledger.errors import RedisSentinelAccessError
from turnledger.processors.topics import ensure_topics
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector
from turnledger.projections.settings import FollowSettings
from turnledger.redisconn.client import connect
from turnledger.redisconn.client import redis_client as build_client
from turnledger.redisconn.naming import client_url, describe
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

SERVICE = "turnledger-primary"
PREFIX = "tl:"


class Nodes:
    def __init__(self, a: RestartableRedis, b: RestartableRedis, sentinel_port: int) -> None:
        self.a, self.b, self.sentinel_port = a, b, sentinel_port
        self.url = f"redis+sentinel://127.0.0.1:{sentinel_port}/{SERVICE}/0"

    def primary_port(self) -> int:
        with redis.Redis(port=self.sentinel_port) as sentinel:
            _, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """A primary, its replica and one sentinel (quorum 1) watching them."""
    workdir = tmp_path_factory.mktemp("sentinel")
    with (
        RestartableRedis(workdir / "a", port=RESTART_PORTS.take) as a,
        RestartableRedis(workdir / "b", port=RESTART_PORTS.take) as b,
    ):
        a.start()
        b.start()
        with redis.Redis(port=b.port) as replica:
            replica.replicaof("127.0.0.1", a.port)
        port = free_port()
        conf = workdir / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {a.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 2000\n"
            f"sentinel failover-timeout {SERVICE} 20000\n"
        )
        with open(workdir / "sentinel.log", "wb") as log:
            sentinel = subprocess.Popen(
                ["redis-server", str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
            )
        try:

            def replica_known() -> bool:
                with redis.Redis(port=port) as s:
                    replicas = s.sentinel_slaves(SERVICE)
                return any(r["is_slave"] and r["master-link-status"] == "ok" for r in replicas)

            wait_for(replica_known, "the sentinel to know the replica")
            yield Nodes(a, b, port)
        finally:
            sentinel.terminate()
            sentinel.wait(timeout=30)


async def test_the_client_reaches_the_primary_the_sentinel_names(nodes: Nodes) -> None:
    client = await connect(nodes.url)
    try:
        assert client_url(client) == nodes.url
        assert describe(client) == f"the primary of {SERVICE!r} by 1 sentinel, plaintext, no login"
        info = await client.info("server")
        assert info["tcp_port"] == nodes.primary_port()
    finally:
        await client.aclose()


async def test_a_service_the_sentinels_do_not_know_is_a_refusal_naming_it(nodes: Nodes) -> None:
    """Every sentinel answered and none monitors it (`redisconn.sentinel_probe`): waiting cannot help."""
    url = nodes.url.replace(SERVICE, "no-such-service")
    with pytest.raises(RedisSentinelAccessError) as caught:
        await connect(url)
    assert str(caught.value) == (
        f"Redis at {url!r}: no sentinel named a primary for 'no-such-service': "
        f"127.0.0.1:{nodes.sentinel_port} does not monitor 'no-such-service'. Name in REDIS_URL a service "
        "they monitor (redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]; `SENTINEL MASTERS` on a "
        "sentinel lists them), or have them monitor 'no-such-service' (`sentinel monitor no-such-service "
        "HOST PORT QUORUM`)."
    )


def test_history_reads_through_the_sentinel(nodes: Nodes) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_")}
    run = subprocess.run(
        [sys.executable, "-m", "turnledger.cli", "history", "nobody", "--json"],
        env={**env, "REDIS_URL": nodes.url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (run.returncode, run.stdout) == (1, ""), run.stderr
    assert run.stderr == "conversation 'nobody' is not in the projection (key prefix 'tl:')\n"


async def test_a_projector_follows_through_a_sentinel_failover(
    nodes: Nodes,
    kafka_bootstrap: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
    topic_name: Callable[[str], str],
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    records = workload(4)
    parts = [records[: len(records) // 2], records[len(records) // 2 :]]

    async def reference(upto: int) -> dict[str, object]:
        return await direct_snapshot(
            redis_client, f"{redis_prefix}ref{upto}:", [r for p in parts[:upto] for r in p]
        )

    def holds(port: int, expected: dict[str, object]) -> Callable[[], Awaitable[bool]]:
        return node_holds(port, PREFIX, expected)

    first_primary = nodes.primary_port()
    client = build_client(nodes.url)
    stop = asyncio.Event()
    task = asyncio.create_task(
        Projector(client, kafka_bootstrap, topics, ProjectionKeys(PREFIX), batch_size=10).run_forever(
            stop, follow=FollowSettings(verify_every_s=0.5)
        )
    )
    try:
        await produce(
            kafka_bootstrap, topics, parts[0], per_transaction=5, transactional_id=f"{topics.prefix}1"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(
            holds(first_primary, await reference(1)), task, "the first primary to hold the first half"
        )

        with redis.Redis(port=nodes.sentinel_port) as sentinel:
            assert sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        second_primary = nodes.b.port if first_primary == nodes.a.port else nodes.a.port
        wait_for(lambda: nodes.primary_port() == second_primary, "the sentinel to name the new primary")

        await produce(
            kafka_bootstrap, topics, parts[1], per_transaction=5, transactional_id=f"{topics.prefix}2"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(holds(second_primary, await reference(2)), task, "the new primary to hold every record")
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await client.aclose()


def _tls_server(workdir: Path, argv: list[str]) -> subprocess.Popen[bytes]:
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "redis.log", "wb") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir
        )


@pytest.fixture(scope="module")
def tls_nodes(
    devstack: Endpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, int]]:
    """A primary and its replica that speak only TLS (replicating over TLS), and a sentinel that speaks
    only TLS and reaches them over TLS, all with the devstack's Redis certificate (127.0.0.1): the
    REDIS_URL, the CA file and the sentinel's port."""
    env = devstack.redis_tls_client_env()
    if env is None:
        pytest.skip("no devstack Redis TLS material (openssl missing, or an external Redis)")
    material = RedisTls.at(Path(env["REDIS_SSL_CA_FILE"]).parent)
    tls = [
        "--tls-cert-file", str(material.cert_file), "--tls-key-file", str(material.key_file),
        "--tls-ca-cert-file", str(material.ca_file), "--tls-auth-clients", "no", "--tls-replication", "yes",
    ]  # fmt: skip
    workdir = tmp_path_factory.mktemp("tls-sentinel")
    a_port, b_port, s_port = free_port(), free_port(), free_port()
    node = ["redis-server", "--port", "0", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *tls]
    servers = [
        _tls_server(workdir / "a", [*node, "--tls-port", str(a_port)]),
        _tls_server(
            workdir / "b", [*node, "--tls-port", str(b_port), "--replicaof", "127.0.0.1", str(a_port)]
        ),
    ]
    conf = workdir / "sentinel.conf"
    conf.write_text(
        f"port 0\ntls-port {s_port}\nbind 127.0.0.1\ndir {workdir}\n"
        + "".join(f"{tls[i].lstrip('-')} {tls[i + 1]}\n" for i in range(0, len(tls), 2))
        + f"sentinel monitor {SERVICE} 127.0.0.1 {a_port} 1\n"
        f"sentinel down-after-milliseconds {SERVICE} 2000\nsentinel failover-timeout {SERVICE} 20000\n"
    )
    servers.append(_tls_server(workdir / "sentinel", ["redis-server", str(conf), "--sentinel"]))
    try:

        def replica_known() -> bool:
            with redis.Redis(port=s_port, ssl=True, ssl_ca_certs=str(material.ca_file)) as s:
                replicas = s.sentinel_slaves(SERVICE)
            return any(r["is_slave"] and r["master-link-status"] == "ok" for r in replicas)

        wait_for(replica_known, "the TLS sentinel to know the TLS replica")
        yield f"rediss+sentinel://127.0.0.1:{s_port}/{SERVICE}/0", str(material.ca_file), s_port
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)


async def test_rediss_sentinel_reaches_a_tls_primary_and_the_next_one_after_a_failover(
    tls_nodes: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca_file, sentinel_port = tls_nodes
    for name in [n for n in os.environ if n.startswith("REDIS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("REDIS_SSL_CA_FILE", ca_file)
    client = await connect(url)
    try:
        assert describe(client) == f"the primary of {SERVICE!r} by 1 sentinel, TLS, CA {ca_file}, no login"
        first = (await client.info("server"))["tcp_port"]
        await client.set("tl:sentinel-tls", "before")
        with redis.Redis(port=sentinel_port, ssl=True, ssl_ca_certs=ca_file) as sentinel:
            assert sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)

            def moved() -> bool:
                _, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                return int(port) != first

            wait_for(moved, "the TLS sentinel to name the new primary")
            host, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        # the old primary takes writes until the sentinel converts it (then answers READONLY, and the
        # client's connection to it is dropped), and it loses them when it resyncs as a replica: the client
        # reached the new primary once that primary itself holds its write (asked on a connection of its
        # own, promoted before the sentinel named it: nothing replicates into it from the old one). A CI
        # run's check by the client's INFO and GET failed: its write had gone to the old primary.
        with redis.Redis(host=host, port=int(port), ssl=True, ssl_ca_certs=ca_file) as new_primary:
            deadline = time.monotonic() + 60
            while True:
                with suppress(redis.ConnectionError):
                    await client.set("tl:sentinel-tls", "after")
                if new_primary.get("tl:sentinel-tls") == b"after":
                    break
                assert time.monotonic() < deadline, "the client never reached the new primary"
                await asyncio.sleep(0.2)
    finally:
        await client.aclose()


SENTINEL_PASSWORD = "s3ntinel-pw"
SENTINEL_LOGIN_FIX = (
    "Put the sentinels' own password (`requirepass` in sentinel.conf) in REDIS_SENTINEL_PASSWORD_FILE, or "
    "unset it for sentinels that require none; a password in REDIS_URL or REDIS_PASSWORD_FILE is the Redis "
    "nodes' login, not the sentinels'."
)


@contextmanager
def lone_sentinel(
    workdir: Path, settings: str, ready: Callable[[int], bool], what: str
) -> Iterator[tuple[int, int]]:
    """A Redis of its own and a sentinel monitoring it with `settings` more in sentinel.conf, apart from
    `nodes` (whose failover it must not take part in), once `ready(port)` holds: the sentinel's port and
    the Redis's."""
    with RestartableRedis(workdir / "node") as node:
        node.start()
        port = free_port()
        conf = workdir / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {workdir}\n{settings}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {node.port} 1\n"
        )
        with open(workdir / "sentinel.log", "wb") as log:
            sentinel = subprocess.Popen(
                ["redis-server", str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_for(lambda: ready(port), what)
            yield port, node.port
        finally:
            sentinel.terminate()
            sentinel.wait(timeout=30)


@pytest.fixture(scope="module")
def locked_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """A sentinel with a password (`requirepass` in sentinel.conf): its port and its Redis's."""

    def primary_known(port: int) -> bool:
        with redis.Redis(port=port, password=SENTINEL_PASSWORD) as s:
            return s.sentinel_get_master_addr_by_name(SERVICE, return_responses=True) is not None

    workdir = tmp_path_factory.mktemp("locked-sentinel")
    settings = f"requirepass {SENTINEL_PASSWORD}"
    with lone_sentinel(workdir, settings, primary_known, "the locked sentinel to name its primary") as ports:
        yield ports


@pytest.mark.parametrize(
    ("password", "login", "said"),
    [
        (
            None,
            "without a password",
            ("HELLO must be called with the client already authenticated", "Authentication required"),
        ),
        (
            "wr0ng-pw",
            "with the password of REDIS_SENTINEL_PASSWORD_FILE",
            ("invalid username-password pair or user is disabled",),
        ),
    ],
    ids=["none sent", "a wrong one"],
)
async def test_a_sentinel_that_refuses_our_login_is_refused_at_once(
    locked_sentinel: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    password: str | None,
    login: str,
    said: tuple[str, ...],
) -> None:
    """Where it was an outage waited out for ever: a `RedisAccessError` (exit 2), whatever redis-py's
    protocol (HELLO under RESP3 is refused in other words than a command under RESP2)."""
    sentinel_port, _ = locked_sentinel
    for name in [n for n in os.environ if n.startswith("REDIS_")]:
        monkeypatch.delenv(name)
    if password is not None:
        (tmp_path / "sentinel.password").write_text(password)
        monkeypatch.setenv("REDIS_SENTINEL_PASSWORD_FILE", str(tmp_path / "sentinel.password"))
    url = f"redis+sentinel://127.0.0.1:{sentinel_port}/{SERVICE}/0"
    began = time.monotonic()
    with pytest.raises(RedisSentinelAccessError) as caught:
        await connect(url)
    assert time.monotonic() - began < 10
    message = str(caught.value)
    assert message.startswith(
        f"Redis at {url!r}: no sentinel named a primary for {SERVICE!r}: 127.0.0.1:{sentinel_port} refused "
        f"our login {login} (AuthenticationError: "
    )
    assert message.endswith(f"). {SENTINEL_LOGIN_FIX}")
    cause = message[message.index("(AuthenticationError: ") : -len(f". {SENTINEL_LOGIN_FIX}")]
    assert any(cause.startswith(f"(AuthenticationError: {words}") for words in said), cause
    assert SENTINEL_PASSWORD not in message and "wr0ng-pw" not in message


async def test_the_sentinel_password_file_logs_in_to_a_locked_sentinel(
    locked_sentinel: tuple[int, int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sentinel_port, node_port = locked_sentinel
    for name in [n for n in os.environ if n.startswith("REDIS_")]:
        monkeypatch.delenv(name)
    (tmp_path / "sentinel.password").write_text(f"{SENTINEL_PASSWORD}\n")
    monkeypatch.setenv("REDIS_SENTINEL_PASSWORD_FILE", str(tmp_path / "sentinel.password"))
    client = await connect(f"redis+sentinel://127.0.0.1:{sentinel_port}/{SERVICE}/0")
    try:
        assert (await client.info("server"))["tcp_port"] == node_port
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def acl_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A sentinel whose default user may run everything but SENTINEL (`-sentinel` in its ACL): its port."""

    def answers(port: int) -> bool:
        with redis.Redis(port=port) as s:
            return bool(s.ping())

    workdir = tmp_path_factory.mktemp("acl-sentinel")
    settings = "user default on nopass ~* &* +@all -sentinel"
    with lone_sentinel(workdir, settings, answers, "the ACL-locked sentinel to answer") as (port, _):
        yield port


def _without_redis_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("REDIS_")]:
        monkeypatch.delenv(name)


async def _refusal(url: str) -> str:
    """What `connect` refuses `url` with, checked to come at once rather than after a wait."""
    began = time.monotonic()
    with pytest.raises(RedisSentinelAccessError) as caught:
        await connect(url)
    assert time.monotonic() - began < 30
    return str(caught.value)


async def test_a_sentinel_whose_acl_forbids_sentinel_commands_is_refused_at_once(
    acl_sentinel: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOPERM from a real sentinel's ACL, where it was an outage waited out for ever."""
    _without_redis_settings(monkeypatch)
    url = f"redis+sentinel://127.0.0.1:{acl_sentinel}/{SERVICE}/0"
    assert await _refusal(url) == (
        f"Redis at {url!r}: no sentinel named a primary for {SERVICE!r}: 127.0.0.1:{acl_sentinel} took "
        "our login without a password but may not let it run SENTINEL (NoPermissionError: this user has "
        "no permissions to run the 'sentinel|get-master-addr-by-name' command). The sentinels' default "
        "user (the one REDIS_SENTINEL_PASSWORD_FILE's password logs in as) may not run the SENTINEL "
        "commands turnledger asks: allow it `+sentinel|masters +sentinel|get-master-addr-by-name` (or "
        "`+@all`) in each sentinel's ACL (`user default ...` in sentinel.conf, or ACL SETUSER)."
    )


async def test_a_redis_named_as_a_sentinel_is_refused_at_once(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without_redis_settings(monkeypatch)
    url = f"redis+sentinel://127.0.0.1:{nodes.a.port}/{SERVICE}/0"
    assert await _refusal(url) == (
        f"Redis at {url!r}: no sentinel named a primary for {SERVICE!r}: 127.0.0.1:{nodes.a.port} is a "
        "Redis, not a sentinel (ResponseError: unknown command 'SENTINEL', with args beginning with: "
        f"'GET-MASTER-ADDR-BY-NAME' '{SERVICE}' ). A redis+sentinel:// URL names sentinels (their port, "
        "26379 by default), not Redis nodes: put the sentinels' HOST:PORT in REDIS_URL, or name this Redis "
        "itself with redis:// (rediss:// for TLS)."
    )


def test_the_cli_refuses_a_redis_named_as_a_sentinel_in_one_line(nodes: Nodes) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_")}
    url = f"redis+sentinel://127.0.0.1:{nodes.a.port}/{SERVICE}/0"
    run = subprocess.run(
        [sys.executable, "-m", "turnledger.cli", "history", "nobody", "--json"],
        env={**env, "REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (run.returncode, run.stdout, run.stderr.count("\n")) == (2, "", 1), run.stderr
    head = f"turnledger: Redis at {url!r}: no sentinel named a primary for {SERVICE!r}: "
    assert run.stderr.startswith(head)
    assert "is a Redis, not a sentinel" in run.stderr


async def test_tls_to_a_plaintext_sentinel_is_refused_naming_the_protocol(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TLS hello a plaintext sentinel never answers: asked again in plaintext, which it answers."""
    _without_redis_settings(monkeypatch)
    url = f"rediss+sentinel://127.0.0.1:{nodes.sentinel_port}/{SERVICE}/0"
    assert await _refusal(url) == (
        f"Redis at {url!r}: no sentinel named a primary for {SERVICE!r}: 127.0.0.1:{nodes.sentinel_port} "
        "speaks plaintext, not TLS (in TLS: no answer within 3s). This sentinel's port speaks plaintext, not "
        "TLS: rediss+sentinel:// speaks TLS to the sentinels and the nodes alike; use redis+sentinel:// in "
        "REDIS_URL for sentinels without TLS, or their TLS port."
    )


async def test_plaintext_to_a_tls_sentinel_is_refused_naming_the_protocol(
    tls_nodes: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    _without_redis_settings(monkeypatch)
    _, _, sentinel_port = tls_nodes
    url = f"redis+sentinel://127.0.0.1:{sentinel_port}/{SERVICE}/0"
    message = await _refusal(url)
    head = f"Redis at {url!r}: no sentinel named a primary for {SERVICE!r}: 127.0.0.1:{sentinel_port} "
    assert message.startswith(head + "speaks TLS, not plaintext (in plaintext: "), message
    assert message.endswith(
        "). This sentinel's port speaks TLS: use rediss+sentinel:// in REDIS_URL (with REDIS_SSL_CA_FILE "
        "for a private CA), or the sentinels' plaintext port."
    )
