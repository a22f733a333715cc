"""A projection split in slot groups (`turnledger project --shards N`) on three real redis-servers
sharing the slots: the groups spread over the nodes, each conversation's keys live in its group, and the
groups merged equal the projection of the same records on a single Redis; a re-delivered batch is a
no-op; a crash between two groups' script calls leaves nothing applied twice; a projector started with
another group count is refused in one line and one started without `--shards` adopts the projection's;
`history`, `status` and `serve` read it as they read a single Redis; a node that comes back empty gets
its groups rebuilt from the topics while the other groups skip what they hold."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis
from aiokafka import TopicPartition
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from tests.integration.projections.checks import until, waiting_out_an_outage
from tests.integration.projections.workload import produce, settled, workload
from tests.integration.redis_cluster_nodes import ClusterNode, node_of_slot, three_node_cluster
from tests.integration.replay.ingress_workload import (
    conversation_events,
    ingress_events,
    produce_ingress,
    run_processor,
)
from tests.integration.serve.conftest import serving
from turnledger.model.base import Frozen
from turnledger.processors.topics import ensure_topics
from turnledger.projections.direct import project_records
from turnledger.projections.keys import ProjectionKeys, shard_of
from turnledger.projections.plan import BatchPlan
from turnledger.projections.projector import Projector
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.settings import FollowSettings
from turnledger.projections.shards import discover
from turnledger.projections.snapshot import diff_snapshots, drop_projection, snapshot, snapshot_projection
from turnledger.redisconn.client import connect
from turnledger.redisconn.client import redis_client as build_client
from turnledger.serve.app import ServeConfig
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

PREFIX = "sh:"
SHARDS = 8
"""`{sh:#0}` ... `{sh:#7}` hash to slots of all three nodes (thirds of the slots: 0 1 1 2 0 1 1 2)."""
GROUP_WIDE = ("stats", "rejections", "conversations")
"""What each group holds for all its conversations (plus `op-conversations:<op>`): merged to compare."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    with three_node_cluster(tmp_path_factory.mktemp("cluster-shards")) as nodes:
        yield nodes


@pytest.fixture
async def client(cluster: list[ClusterNode]) -> AsyncIterator[RedisCluster]:
    connected = await connect(f"redis+cluster://127.0.0.1:{cluster[0].port}")
    assert isinstance(connected, RedisCluster)
    split = ProjectionKeys.of(PREFIX, connected, SHARDS)
    await drop_projection(connected, split)
    try:
        yield connected
    finally:
        await drop_projection(connected, split)
        await connected.aclose()


@pytest.fixture
async def topics(kafka_bootstrap: str, topic_name: Callable[[str], str]) -> Topics:
    made = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, made, partitions=2)
    return made


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "TURNLEDGER_PROJECTION"))}
    return subprocess.run(
        [sys.executable, "-m", "turnledger.cli", *args],
        env={**inherited, "REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _conversation_of(name: str) -> str | None:
    """The conversation a key (name relative to its base) belongs to; None for a group-wide one."""
    kind, _, rest = name.partition(":")
    if name in GROUP_WIDE or kind == "op-conversations":
        return None
    return (
        rest.partition(":")[0].replace("%3A", ":").replace("%25", "%") if kind in ("op", "preview") else rest
    )


def merged(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The groups' snapshots as one projection's: per-conversation keys side by side (each in the group
    of its conversation, checked), counters summed, listings and sets united in Redis's order."""
    out: dict[str, Any] = {}
    for index, held in enumerate(groups):
        for name, value in held.items():
            conversation = _conversation_of(name)
            if conversation is not None:
                assert shard_of(conversation, len(groups)) == index, f"{name} in group {index}"
                assert name not in out
                out[name] = value
            elif name == "stats":
                total = out.setdefault(name, {})
                for counter, count in value.items():
                    total[counter] = str(int(total.get(counter, "0")) + int(count))
            elif isinstance(value, list) and value and isinstance(value[0], tuple):  # a sorted set
                out[name] = sorted([*out.get(name, []), *value], key=lambda member: (member[1], member[0]))
            else:  # a set
                out[name] = sorted({*out.get(name, []), *value})
    out["stats"] = dict(sorted(out.get("stats", {}).items()))
    return dict(sorted(out.items()))


async def groups_of(client: RedisCluster) -> list[dict[str, Any]]:
    keys = ProjectionKeys.of(PREFIX, client, SHARDS)
    return [await snapshot(client, group.base) for group in keys.groups]


async def reference(single: aioredis.Redis, prefix: str, records: list[tuple[str, Frozen]]) -> dict[str, Any]:
    keys = ProjectionKeys(prefix)
    await project_records(single, keys, records)
    return await snapshot(single, keys.base)


async def test_a_split_projection_spreads_over_the_nodes_and_merged_equals_one_on_a_single_redis(
    cluster: list[ClusterNode],
    client: RedisCluster,
    kafka_bootstrap: str,
    topics: Topics,
    redis_client: aioredis.Redis,
    redis_prefix: str,
) -> None:
    records = workload(12)
    await produce(kafka_bootstrap, topics, records, per_transaction=5, transactional_id=topics.prefix)
    await settled(kafka_bootstrap, topics.outputs)
    url = f"redis+cluster://127.0.0.1:{cluster[1].port}"
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix, "--key-prefix", PREFIX]
    run = _cli("project", *common, "--until-caught-up", "--shards", str(SHARDS), url=url)
    assert run.returncode == 0, run.stderr
    assert f"applied {len(records)}, skipped 0 (already applied), undecodable 0" in run.stderr

    expected = await reference(redis_client, redis_prefix + "ref:", records)
    groups = await groups_of(client)
    assert all(groups) and diff_snapshots(merged(groups), expected) == []
    keys = await discover(PREFIX, client)
    assert (keys.shards, await client.get(keys.layout)) == (SHARDS, b"8")

    holding: dict[int, int] = {}  # node port -> keys of the projection it holds
    for group, held in zip(keys.groups, groups, strict=True):
        port = node_of_slot(cluster[0].port, key_slot(group.base.encode()))
        holding[port] = holding.get(port, 0) + len(held) + 1  # + the group's offsets hash
    layout_node = node_of_slot(cluster[0].port, key_slot(keys.base.encode()))
    holding[layout_node] = holding.get(layout_node, 0) + 1
    assert sorted(holding) == sorted(node.port for node in cluster)  # every node holds some groups
    for node in cluster:
        with redis.Redis(port=node.port) as direct:
            assert direct.dbsize() == holding[node.port]

    zero = {TopicPartition(t, p): 0 for t in topics.outputs for p in range(2)}
    again = await Projector(client, kafka_bootstrap, topics, keys, batch_size=4).run_to_end(start=zero)
    assert (again.applied, again.skipped) == (0, len(records))
    assert await groups_of(client) == groups

    refused = _cli("project", *common, "--until-caught-up", "--shards", "4", url=url)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"turnledger project: the projection under key prefix {PREFIX!r} is split in 8 slot group(s), and "
        "this projector was started with --shards 4: start it with --shards 8 (or without --shards), or "
        "rebuild the projection in 4 with `turnledger replay rebuild --shards 4`"
    )
    adopted = _cli("project", *common, "--until-caught-up", url=url)
    assert adopted.returncode == 0, adopted.stderr
    assert "applied 0, skipped 0 (already applied)" in adopted.stderr  # positioned past every record

    reader = await ProjectionReader.open(client, PREFIX)
    plain = ProjectionReader(redis_client, redis_prefix + "ref:")
    assert reader.keys.shards == SHARDS
    assert await reader.stats() == await plain.stats()
    assert await reader.rejections() == await plain.rejections()
    assert await reader.applied_offsets() == {f"{t}:{p}": o for t, p, o in await _last_offsets(client)}
    for conversation in [f"conv-{i}" for i in range(12)]:
        assert await reader.history(conversation) == await plain.history(conversation)
        assert await reader.operations(conversation) == await plain.operations(conversation)
        assert await reader.quarantine(conversation) == await plain.quarantine(conversation)
        assert await reader.rejections(conversation) == await plain.rejections(conversation)
    for args in (["history", "conv-3", "--json"], ["status", "conv-3-op1", "--json"]):
        on_split = _cli(*args, "--key-prefix", PREFIX, url=url)
        assert on_split.returncode == 0, on_split.stderr
        assert '"conv-3' in on_split.stdout


async def _last_offsets(client: RedisCluster) -> list[tuple[str, int, int]]:
    """Each partition's lowest applied offset over the groups, read from each group's hash."""
    keys = ProjectionKeys.of(PREFIX, client, SHARDS)
    lowest: dict[str, int] = {}
    for group in keys.groups:
        for name, value in (await client.hgetall(group.offsets)).items():
            if name != b"~epoch":
                lowest[name.decode()] = min(lowest.get(name.decode(), int(value)), int(value))
    return [(n.rpartition(":")[0], int(n.rpartition(":")[2]), o) for n, o in sorted(lowest.items())]


async def test_a_failed_call_of_one_group_is_applied_again_by_that_group_alone(
    client: RedisCluster,
    kafka_bootstrap: str,
    topics: Topics,
    redis_client: aioredis.Redis,
    redis_prefix: str,
) -> None:
    """The fourth group's call of the second batch fails (its node went away, or the projector died
    there): the seven others hold that batch and group 3 does not; the next run starts from group 3's
    offsets and only group 3 applies again (the conversations' `turns` counters and the summed `stats`
    would count a record applied twice)."""
    records = workload(6)
    await produce(kafka_bootstrap, topics, records, per_transaction=5, transactional_id=topics.prefix)
    await settled(kafka_bootstrap, topics.outputs)
    keys = ProjectionKeys.of(PREFIX, client, SHARDS)
    calls: list[str] = []

    async def fail_the_fourth_group_of_the_second_batch(plan: BatchPlan) -> None:
        calls.append(plan.keys[0])
        if len(calls) == SHARDS + 4:
            raise RuntimeError("the fourth group's call failed")

    failing = Projector(
        client,
        kafka_bootstrap,
        topics,
        keys,
        batch_size=9,
        before_apply=fail_the_fourth_group_of_the_second_batch,
    )
    with pytest.raises(RuntimeError, match="the fourth group's call failed"):
        await failing.run_to_end()
    assert calls == [group.offsets for group in keys.groups] * 2  # every group was asked, in order
    expected = await reference(redis_client, redis_prefix + "ref:", records)
    assert diff_snapshots(merged(await groups_of(client)), expected) != []
    held = [await _applied(client, group) for group in keys.groups]
    assert [h == held[0] for h in held] == [True, True, True, False, True, True, True, True]

    resumed = await Projector(client, kafka_bootstrap, topics, keys, batch_size=9).run_to_end()
    assert resumed.skipped > 0  # the batch group 3 lacked, read again: the others skipped it
    assert diff_snapshots(merged(await groups_of(client)), expected) == []
    held = [await _applied(client, group) for group in keys.groups]
    assert all(h == held[0] for h in held)


async def _applied(client: RedisCluster, group: ProjectionKeys) -> dict[bytes, bytes]:
    """A group's applied offsets (its epoch left out)."""
    return {k: v for k, v in (await client.hgetall(group.offsets)).items() if k != b"~epoch"}


async def test_serve_lists_every_group_s_conversations_newest_first(
    client: RedisCluster, cluster: list[ClusterNode], kafka_bootstrap: str, topics: Topics
) -> None:
    keys = ProjectionKeys.of(PREFIX, client, SHARDS)
    records = workload(10)
    await project_records(client, keys, records)
    await client.set(keys.layout, str(SHARDS))
    served = await connect(f"redis+cluster://127.0.0.1:{cluster[2].port}")
    reader = ProjectionReader(client, PREFIX, keys)
    try:
        async with (
            serving(served, kafka_bootstrap, topics, ServeConfig(key_prefix=PREFIX)) as url,
            httpx.AsyncClient(base_url=url) as http,
        ):
            listing = (await http.get("/api/conversations")).json()["conversations"]
            assert [c["conversationId"] for c in listing] == [f"conv-{i}" for i in reversed(range(10))]
            assert len({shard_of(c["conversationId"], SHARDS) for c in listing}) > 1
            top = (await http.get("/api/conversations", params={"limit": 3})).json()["conversations"]
            assert [c["conversationId"] for c in top] == ["conv-9", "conv-8", "conv-7"]
            body = (await http.get("/api/conversations/conv-4")).json()
            assert [b["id"] for b in body["history"]] == [b.id for b in await reader.history("conv-4")]
            assert body["history"]
    finally:
        await served.aclose()


async def test_a_node_back_empty_gets_its_groups_rebuilt_while_the_others_skip(
    cluster: list[ClusterNode],
    client: RedisCluster,
    kafka_bootstrap: str,
    topics: Topics,
    redis_client: aioredis.Redis,
    redis_prefix: str,
) -> None:
    """A follower projects half the records; the node holding groups 0 and 4 (and the layout) is
    stopped, the other half is produced, the node comes back empty (no persistence): its groups' epochs
    are gone, the follower positions every partition at the lowest applied offset (from the beginning),
    groups 0 and 4 are projected again whole, the six others skip what they hold, and the layout is
    recorded again."""
    keys = ProjectionKeys.of(PREFIX, client, SHARDS)
    lost = node_of_slot(cluster[0].port, key_slot(keys.groups[0].base.encode()))
    assert lost == node_of_slot(cluster[0].port, key_slot(keys.base.encode()))  # its layout too
    owner = next(node for node in cluster if node.port == lost)
    seed = next(node for node in cluster if node is not owner)
    records = workload(8)
    halves = [records[: len(records) // 2], records[len(records) // 2 :]]
    expected = [
        await reference(redis_client, f"{redis_prefix}ref{n}:", [r for h in halves[:n] for r in h])
        for n in (1, 2)
    ]
    follower_client = build_client(f"redis+cluster://127.0.0.1:{seed.port}")
    stop = asyncio.Event()
    projector = Projector(follower_client, kafka_bootstrap, topics, keys, batch_size=10)
    task = asyncio.create_task(projector.run_forever(stop, follow=FollowSettings(verify_every_s=0.5)))

    def holds(projection: dict[str, Any]) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            try:
                return diff_snapshots(merged(await groups_of(follower_client)), projection) == []
            except redis.RedisError:
                return False

        return check

    try:
        await produce(
            kafka_bootstrap, topics, halves[0], per_transaction=5, transactional_id=f"{topics.prefix}1"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(holds(expected[0]), task, "the groups to hold the first half")
        owner.stop()
        await produce(
            kafka_bootstrap, topics, halves[1], per_transaction=5, transactional_id=f"{topics.prefix}2"
        )
        await settled(kafka_bootstrap, topics.outputs)
        await until(lambda: waiting_out_an_outage(projector), task, "the projector to wait the outage out")
        owner.start()
        await until(holds(expected[1]), task, "the node, back empty, to hold its groups again")
        assert await follower_client.get(keys.layout) == b"8"  # recorded again where the node lost it
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await follower_client.aclose()


async def test_replay_rebuild_keeps_or_changes_the_split_and_equals_a_fresh_fold(
    cluster: list[ClusterNode], client: RedisCluster, kafka_bootstrap: str, topics: Topics
) -> None:
    """`turnledger replay rebuild` drops every group (and the layout), projects the topics again split
    as the projection was, and compares it group by group with a fresh fold's projection split alike;
    `--shards 3` rebuilds it in three groups, dropping the eight."""
    await produce_ingress(kafka_bootstrap, topics, ingress_events(6))
    assert await run_processor(kafka_bootstrap, topics) > 0
    await settled(kafka_bootstrap, topics.outputs)
    url = f"redis+cluster://127.0.0.1:{cluster[0].port}"
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix, "--key-prefix", PREFIX]
    assert _cli("project", *common, "--until-caught-up", "--shards", str(SHARDS), url=url).returncode == 0
    eight = ProjectionKeys.of(PREFIX, client, SHARDS)
    before = await snapshot_projection(client, eight)
    assert before and len({name.partition("/")[0] for name in before}) > 1

    kept = _cli("replay", "rebuild", *common, url=url)
    assert kept.returncode == 0, kept.stderr + kept.stdout
    assert f"dropped {len(before) + SHARDS + 1} keys; projected " in kept.stdout  # + offsets, layout
    assert "equal to a projection of a fresh fold (" in kept.stdout
    assert await snapshot_projection(client, eight) == before

    three = _cli("replay", "rebuild", *common, "--shards", "3", url=url)
    assert three.returncode == 0, three.stderr + three.stdout
    assert "equal to a projection of a fresh fold (" in three.stdout
    assert (await discover(PREFIX, client)).shards == 3
    for gone in eight.groups[3:]:  # groups 0-2 are the three's now ({sh:#0}...), 3-7 are dropped
        assert await snapshot(client, gone.base) == {} and not await client.exists(gone.offsets)
    split = await snapshot_projection(client, ProjectionKeys.of(PREFIX, client, 3))
    assert merged_by_conversation(split) == merged_by_conversation(before)
    leftovers = [k async for k in client.scan_iter(match="{verify:*")]
    assert leftovers == [], "verification keys are dropped"


def merged_by_conversation(named: dict[str, Any]) -> dict[str, Any]:
    """A split projection's per-conversation keys without their group's number (`#3/history:c` ->
    `history:c`): the same whatever the group count."""
    out = {}
    for name, value in named.items():
        relative = name.partition("/")[2]
        if _conversation_of(relative) is not None:
            out[relative] = value
    return dict(sorted(out.items()))


async def test_a_new_split_is_built_beside_the_old_one_and_followed_from_where_its_rebuild_ended(
    cluster: list[ClusterNode], client: RedisCluster, kafka_bootstrap: str, topics: Topics
) -> None:
    """The README's way to change the group count while the readers keep the old projection: `replay
    rebuild` under a new key prefix with the new count leaves the old projection as it was, then a
    projector of a group of its own follows the new prefix from the offsets the rebuild applied (it
    skips nothing: it reads only what came after, as the old projection's next run does), and the new
    projection ends equal to the old one conversation by conversation."""
    new_prefix, new_shards = "sh2:", 3
    new = ProjectionKeys.of(new_prefix, client, new_shards)
    await drop_projection(client, new)
    await produce_ingress(kafka_bootstrap, topics, ingress_events(4))
    assert await run_processor(kafka_bootstrap, topics) > 0
    await settled(kafka_bootstrap, topics.outputs)
    url = f"redis+cluster://127.0.0.1:{cluster[0].port}"
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
    old_args = [*common, "--key-prefix", PREFIX, "--until-caught-up", "--shards", str(SHARDS)]
    assert _cli("project", *old_args, url=url).returncode == 0
    old = ProjectionKeys.of(PREFIX, client, SHARDS)
    before = await snapshot_projection(client, old)
    assert before

    built = _cli(
        "replay", "rebuild", *common, "--key-prefix", new_prefix, "--shards", str(new_shards), url=url
    )
    assert built.returncode == 0, built.stderr + built.stdout
    assert "dropped 0 keys; projected " in built.stdout
    assert "equal to a projection of a fresh fold (" in built.stdout
    assert await snapshot_projection(client, old) == before
    assert merged_by_conversation(await snapshot_projection(client, new)) == merged_by_conversation(before)

    follower_client = build_client(url)
    stop = asyncio.Event()
    projector = Projector(follower_client, kafka_bootstrap, topics, new, batch_size=10)
    follow = FollowSettings(group_id=f"{topics.prefix}projector-{new_prefix}", verify_every_s=0.5)
    task = asyncio.create_task(projector.run_forever(stop, follow=follow))
    try:
        later = [e for i in range(4, 7) for e in conversation_events(f"conv-{i}", late_duplicate=False)]
        await produce_ingress(kafka_bootstrap, topics, later)
        written = await run_processor(kafka_bootstrap, topics)
        assert written > 0
        await settled(kafka_bootstrap, topics.outputs)
        caught = _cli("project", *old_args, url=url)
        assert caught.returncode == 0, caught.stderr
        applied = int(caught.stderr.rpartition("applied ")[2].partition(",")[0])
        assert f"applied {applied}, skipped 0 (already applied)" in caught.stderr
        old_now = merged_by_conversation(await snapshot_projection(client, old))
        assert len(old_now) > len(merged_by_conversation(before))

        async def caught_up() -> bool:
            return merged_by_conversation(await snapshot_projection(client, new)) == old_now

        await until(caught_up, task, "the new split to hold what the old one holds")
    finally:
        stop.set()
        stats = await asyncio.wait_for(task, 60)
        await follower_client.aclose()
        await drop_projection(client, new)
    assert (stats.skipped, stats.applied) == (0, applied)  # what the old projector applied of it too
