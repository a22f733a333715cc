"""Projection and replay-audit throughput on the real broker and Redis.

1. Builds an ingress log (per conversation: a system+user turn, a dispatch request
   that renders a manifest, a follow-up user turn), folds it with the BatchEngine and
   writes the outputs transactionally (what the processor does).
2. Projection: the projector over the five projected output topics into Redis,
   records per second (one Lua script call per fetched batch).
3. Replay audit: re-fold the ingress topic and compare with all output topics,
   ingress events per second, against a raw read_committed consume of the same
   ingress topic in the same run.

Run: `python -m bench.bench_projection [--conversations N]` (uses KAFKA_BOOTSTRAP_SERVERS /
REDIS_URL, a `turnledger dev up` stack, or starts a private one).

`--cluster-url redis+cluster://HOST:PORT` also projects the same topics into that Redis Cluster (every
key in the hash slot of the prefix, `redisconn/cluster.py`), `--repeats` times each, alternating with
the single Redis under a fresh prefix each time, and reports both medians and their ratio. With
`--shards N` a third projection, into the cluster split in N slot groups (`projections/shards.py`: one
script call per group a batch, the groups' hash tags on every node), joins the alternation.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer

from turnledger.codec import encode
from turnledger.devstack.session import session_endpoints
from turnledger.kafka.reading import partitions_of, read_to_end, start_reader
from turnledger.model.events import DispatchRequested, IngressEvent, SubmittedBlock, TurnSubmitted
from turnledger.processors.topics import ensure_topics
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import Projector
from turnledger.projections.snapshot import drop_prefix, drop_projection
from turnledger.redisconn.client import redis_client
from turnledger.replay.audit import audit
from turnledger.replay.refold import refold
from turnledger.topology import Topics

ADAPTER, MODEL = "anthropic-messages@1", "anthropic/claude-sonnet-4@2025-05"


def ingress(conversations: int) -> list[IngressEvent]:
    out: list[IngressEvent] = []
    for i in range(conversations):
        conv, t = f"bench-{i}", 1_000 * i

        def turn(n: int, *blocks: SubmittedBlock, conv: str = conv, t: int = t) -> TurnSubmitted:
            return TurnSubmitted(
                conversation_id=conv,
                event_id=f"{conv}-e{n}",
                occurred_at_ms=t + n,
                turn_id=f"{conv}-t{n}",
                blocks=blocks,
            )

        out.append(
            turn(
                1,
                SubmittedBlock(
                    id=f"{conv}-s", role="system", kind="text", trust_label="operator", text="Answer briefly."
                ),
                SubmittedBlock(
                    id=f"{conv}-u1",
                    role="user",
                    kind="text",
                    trust_label="user",
                    text=f"Question number {i}: " + "lorem ipsum " * 20,
                ),
            )
        )
        out.append(
            DispatchRequested(
                conversation_id=conv,
                event_id=f"{conv}-e2",
                occurred_at_ms=t + 2,
                operation_id=f"{conv}/op1",
                adapter=ADAPTER,
                provider="anthropic",
                model_revision=MODEL,
                max_output_tokens=256,
            )
        )
        out.append(
            turn(
                3,
                SubmittedBlock(
                    id=f"{conv}-u2", role="user", kind="text", trust_label="user", text="And another thing."
                ),
            )
        )
    return out


async def prepare(bootstrap: str, topics: Topics, events: list[IngressEvent]) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for e in events:
            await producer.send(topics.ingress, encode(e), key=e.conversation_id.encode())
        await producer.flush()
    finally:
        await producer.stop()
    writer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"{topics.prefix}bench", linger_ms=5
    )
    await writer.start()
    written = 0
    try:
        async for folded in refold(bootstrap, topics):
            async with writer.transaction():
                for o in folded.outputs:
                    await writer.send(topics.name(o.stream), o.value, key=o.key)
                    written += 1
    finally:
        await writer.stop()
    return written


async def raw_consume(bootstrap: str, topic: str) -> tuple[int, float]:
    began = time.perf_counter()
    consumer = await start_reader(bootstrap)
    n = 0
    try:
        async for batch in read_to_end(consumer, await partitions_of(consumer, bootstrap, [topic])):
            n += len(batch)
    finally:
        await consumer.stop()
    return n, time.perf_counter() - began


async def project_once(url: str, bootstrap: str, topics: Topics, shards: int = 1) -> float:
    """Records per second of one projection of every output topic into a fresh prefix at `url`."""
    redis = redis_client(url)
    keys = ProjectionKeys.of(f"bench:{uuid.uuid4().hex[:8]}:", redis, shards)
    try:
        stats = await Projector(redis, bootstrap, topics, keys).run_to_end()
    finally:
        await drop_projection(redis, keys)
        await redis.aclose()
    return stats.records / stats.seconds


async def compare_cluster(
    cluster_url: str, bootstrap: str, redis_url: str, topics: Topics, repeats: int, shards: int | None
) -> None:
    targets = {"single": (redis_url, 1), "cluster": (cluster_url, 1)}
    if shards is not None:
        targets[f"cluster, {shards} slot groups"] = (cluster_url, shards)
    rates: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(repeats):
        for name, (url, groups) in targets.items():
            rates[name].append(await project_once(url, bootstrap, topics, groups))
    single = statistics.median(rates["single"])
    print(f"\nprojection, medians of {repeats} alternating runs\n")
    print("| Redis | records/s (each run) | median | ratio |")
    print("|---|---|---:|---:|")
    for name, runs in rates.items():
        median = statistics.median(runs)
        print(f"| {name} | {', '.join(f'{r:,.0f}' for r in runs)} | {median:,.0f} | {median / single:.2f} |")


async def run(
    conversations: int, cluster_url: str | None = None, repeats: int = 3, shards: int | None = None
) -> None:
    with session_endpoints() as endpoints:
        topics = Topics(prefix=f"bench-{uuid.uuid4().hex[:8]}.")
        await ensure_topics(endpoints.bootstrap, topics, partitions=3)
        events = ingress(conversations)
        written = await prepare(endpoints.bootstrap, topics, events)
        await asyncio.sleep(0.5)  # let the last commit markers land (the LSO)
        redis = aioredis.from_url(endpoints.redis_url)
        keys = ProjectionKeys(f"bench:{uuid.uuid4().hex[:8]}:")
        try:
            stats = await Projector(redis, endpoints.bootstrap, topics, keys).run_to_end()
            raw_n, raw_s = await raw_consume(endpoints.bootstrap, topics.ingress)
            report = await audit(endpoints.bootstrap, topics)
            if cluster_url is not None:
                await compare_cluster(
                    cluster_url, endpoints.bootstrap, endpoints.redis_url, topics, repeats, shards
                )
        finally:
            await drop_prefix(redis, keys.prefix)
            await redis.aclose()
    assert report.ok, report.divergences[:5]
    raw_rate = raw_n / raw_s
    audit_rate = report.ingress_records / report.seconds
    print(f"\n{len(events)} ingress events, {written} output records ({stats.records} projected)\n")
    print("| measure | records | seconds | records/s | ratio |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| projection (5 output topics -> Redis, Lua per batch) | {stats.records} | {stats.seconds:.2f} | "
        f"{stats.records / stats.seconds:,.0f} | |"
    )
    print(f"| raw read_committed consume of ingress | {raw_n} | {raw_s:.2f} | {raw_rate:,.0f} | 1.00 |")
    print(
        f"| replay audit (re-fold + read {report.actual} outputs + compare) | {report.ingress_records} | "
        f"{report.seconds:.2f} | {audit_rate:,.0f} | {audit_rate / raw_rate:.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument(
        "--cluster-url", help="also project into this Redis Cluster (redis+cluster://HOST:PORT)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs each, with --cluster-url")
    parser.add_argument("--shards", type=int, help="with --cluster-url: also split in this many slot groups")
    args, _ = parser.parse_known_args()
    asyncio.run(run(args.conversations, args.cluster_url, args.repeats, args.shards))


if __name__ == "__main__":
    main()
