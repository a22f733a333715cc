"""`turnledger demo` for now: a smoke round trip through the real stack, printed readably.

Kafka (transactional produce, read_committed consume) -> Redis (atomic Lua apply with an offset guard).
Issue "Gateway side and the main job" replaces this with the real demo.
"""

from __future__ import annotations

import time
import uuid

import orjson
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from rich.console import Console
from rich.table import Table

from turnledger.devstack.aio import run_sync
from turnledger.devstack.kafka_admin import create_topic
from turnledger.devstack.session import Endpoints, session_endpoints

APPLY_LUA = """
local applied = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
local offset = tonumber(ARGV[2])
if offset <= applied then return {0, applied} end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], offset)
return {1, offset}
"""


async def round_trip(endpoints: Endpoints) -> dict[str, object]:
    run_id = uuid.uuid4().hex[:8]
    topic = f"demo-smoke-{run_id}"
    started = time.monotonic()
    await create_topic(endpoints.bootstrap, topic)
    event = {"event_id": f"evt-{run_id}", "kind": "smoke", "body": "hello from turnledger"}
    producer = AIOKafkaProducer(bootstrap_servers=endpoints.bootstrap, transactional_id=f"demo-{run_id}")
    await producer.start()
    try:
        async with producer.transaction():
            meta = await producer.send_and_wait(topic, orjson.dumps(event), key=event["event_id"].encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=endpoints.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        record = await consumer.getone()
    finally:
        await consumer.stop()
    client = aioredis.from_url(endpoints.redis_url)
    try:
        keys = [f"demo:{run_id}:applied", f"demo:{run_id}:event"]
        args = [f"{topic}:0", record.offset, record.value]
        first = await client.eval(APPLY_LUA, 2, *keys, *args)
        replay = await client.eval(APPLY_LUA, 2, *keys, *args)
        raw = await client.get(keys[1])
        stored = orjson.loads(raw) if raw is not None else None
        await client.delete(*keys)
    finally:
        await client.aclose()
    return {
        "topic": topic,
        "produced at offset": meta.offset,
        "consumed (read_committed)": orjson.loads(record.value),
        "redis apply (applied, offset)": list(first),
        "redis replay is a no-op": list(replay),
        "value read back from redis": stored,
        "round trip ms": round((time.monotonic() - started) * 1000, 1),
        "matches": stored == event and first[0] == 1 and replay[0] == 0,
    }


def run() -> bool:
    console = Console()
    with console.status("Bringing up the stack (Kafka + Redis)..."), session_endpoints() as endpoints:
        console.print(
            f"Kafka {endpoints.bootstrap}, Redis {endpoints.redis_url} (source: {endpoints.source})"
        )
        result = run_sync(round_trip(endpoints))
    table = Table(title="turnledger smoke round trip: Kafka -> Redis")
    table.add_column("step")
    table.add_column("result")
    for key, value in result.items():
        table.add_row(key, str(value))
    console.print(table)
    ok = bool(result["matches"])
    console.print("[green]OK[/green]" if ok else "[red]MISMATCH[/red]")
    return ok
