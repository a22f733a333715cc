"""Replay on the real broker and Redis: audit, manifest reproduction, rebuild, shadow diff."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis
import typer
from aiokafka import AIOKafkaProducer
from typer.testing import CliRunner, Result

from tests.integration.projections.workload import settled
from tests.integration.replay.ingress_workload import ingress_events, op_ids, produce_ingress, run_processor
from turnledger.processors.topics import ensure_topics
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.snapshot import snapshot
from turnledger.replay.audit import audit
from turnledger.replay.cli import replay_app, shadow_app
from turnledger.replay.manifest_check import latest_manifests, reproduce
from turnledger.replay.rebuild import rebuild
from turnledger.replay.semantic_diff import DiffKind
from turnledger.replay.shadow import compare_all, read_legacy
from turnledger.topology import Topics

pytestmark = pytest.mark.integration


async def invoke(app: typer.Typer, args: list[str]) -> Result:
    """The CLI runs its own event loop: call it from a thread, as a user's shell would."""
    return await asyncio.to_thread(CliRunner().invoke, app, args)


CONVERSATIONS = 6


@pytest.fixture
async def topics(kafka_bootstrap: str, topic_name: Callable[[str], str]) -> Topics:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    await produce_ingress(kafka_bootstrap, topics, ingress_events(CONVERSATIONS))
    assert await run_processor(kafka_bootstrap, topics) > 0
    await settled(kafka_bootstrap, topics.outputs)
    return topics


async def test_audit_is_clean_then_reports_a_corrupted_record_with_its_coordinates(
    kafka_bootstrap: str, topics: Topics
) -> None:
    clean = await audit(kafka_bootstrap, topics)
    assert clean.ok and clean.checked == clean.expected == clean.actual > CONVERSATIONS * 10
    assert clean.ingress_records == len(ingress_events(CONVERSATIONS))

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topics.committed, b"\xc3\x01garbage", key=b"conv-2")
    finally:
        await producer.stop()
    report = await audit(kafka_bootstrap, topics)
    assert not report.ok and len(report.divergences) == 1
    (d,) = report.divergences
    assert (d.kind, d.stream, d.key) == ("extra", "committed", "conv-2")
    assert d.actual is not None and (d.actual.topic, d.actual.partition, d.actual.offset) == (
        topics.committed,
        meta.partition,
        meta.offset,
    )
    result = await invoke(
        replay_app, ["audit", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
    )
    assert result.exit_code == 1, result.output
    assert f"{meta.partition}]@{meta.offset}" in result.output


async def test_replay_manifest_reproduces_every_manifest(kafka_bootstrap: str, topics: Topics) -> None:
    checked = 0
    for i in range(CONVERSATIONS):
        for op in op_ids(f"conv-{i}"):
            results = await reproduce(kafka_bootstrap, topics, operation_id=op)
            assert len(results) == 1 and results[0].ok, [(c.name, c.ok) for r in results for c in r.checks]
            assert {c.name for c in results[0].checks} >= {
                "request bytes",
                "request digest",
                "sequence digest",
            }
            checked += 1
    assert checked == 2 * CONVERSATIONS
    one = (await reproduce(kafka_bootstrap, topics, operation_id="conv-1/op-2"))[0]
    by_digest = await reproduce(kafka_bootstrap, topics, digest=one.manifest_digest)
    assert [r.manifest_digest for r in by_digest] == [one.manifest_digest] and by_digest[0].ok
    result = await invoke(
        replay_app,
        [
            "manifest",
            "--digest",
            one.manifest_digest,
            "--bootstrap",
            kafka_bootstrap,
            "--topic-prefix",
            topics.prefix,
        ],
    )
    assert result.exit_code == 0, result.output


async def test_rebuild_equals_a_fresh_fold(
    kafka_bootstrap: str, topics: Topics, redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    keys = ProjectionKeys(redis_prefix)
    await Projector(redis_client, kafka_bootstrap, topics, keys).run_to_end()
    before = await snapshot(redis_client, redis_prefix)
    reader = ProjectionReader(redis_client, redis_prefix)
    op = await reader.operation("conv-0", "conv-0/op-2")
    assert op is not None and op.state == "COMMITTED"
    assert [(b.role, b.kind) for b in await reader.history("conv-0")] == [
        ("user", "text"),
        ("assistant", "tool_call"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("tool", "tool_result"),
        ("assistant", "text"),
    ]
    assert await reader.previews("conv-0") == []
    assert len(await reader.quarantine("conv-0")) >= 1 and await reader.quarantine("conv-1") == []

    report = await rebuild(redis_client, kafka_bootstrap, topics, keys)
    assert report.ok, report.differences
    assert report.dropped_keys > 0 and report.folded_records > 0
    assert await snapshot(redis_client, redis_prefix) == before
    assert not [k async for k in redis_client.scan_iter(match="verify:*")], "verification keys are dropped"


async def test_shadow_diff_flags_legacy_split_of_anthropic_tool_results(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    op1, op2 = op_ids("conv-3")
    manifests = await latest_manifests(kafka_bootstrap, topics, {op1, op2})
    ours = orjson.loads(manifests[("conv-3", op2)].request_body)
    results_message = next(
        m
        for m in ours["messages"]
        if isinstance(m["content"], list)
        and sum(1 for p in m["content"] if p.get("type") == "tool_result") == 2
    )
    index = ours["messages"].index(results_message)
    split = [{"role": "user", "content": [part]} for part in results_message["content"]]
    legacy_split = {**ours, "messages": [*ours["messages"][:index], *split, *ours["messages"][index + 1 :]]}
    path = tmp_path / "legacy.jsonl"
    path.write_bytes(
        orjson.dumps({"operationId": op2, "request": legacy_split})
        + b"\n"
        + orjson.dumps(
            {
                "operationId": op1,
                "request": orjson.loads(manifests[("conv-3", op1)].request_body),
            }
        )
        + b"\n"
        + orjson.dumps({"operationId": "op-unknown", "request": {}})
        + b"\n"
    )
    results = compare_all(read_legacy(path), manifests)
    assert [r.status for r in results] == ["differs", "equal", "no manifest"]
    assert DiffKind.SPLIT_TOOL_RESULTS in {d.kind for d in results[0].differences}

    args = ["diff", str(path), "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
    assert (await invoke(shadow_app, args)).exit_code == 0
    failing = await invoke(shadow_app, [*args, "--fail-on-diff"])
    assert failing.exit_code == 1 and "split tool results" in failing.output
