"""Regression: positioning a consumer right after `assign()` must not race its initial offset reset.

aiokafka 0.14 answers a `seek_to_beginning()` issued while assign's reset (strategy
`auto_offset_reset`, "latest" by default) is in flight with the in-flight reset's offset: the
partition is then read from its end, silently. On this broker a loop of assign +
seek_to_beginning with a "latest" consumer landed at the end in about one try in five.
`seek_settled` (a partition's feed; every static reader through `seek_all`) waits for the
reset, then seeks explicitly; these tests hold it to the exact offset against the worst-case reset strategy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.integration.test_processor_eos import (
    assert_exactly_once,
    counter_fold,
    produce,
    wait_all_committed,
)
from turnledger.kafka import clients
from turnledger.kafka.positions import seek_settled
from turnledger.processors.app import ProcessorApp
from turnledger.processors.config import ProcessorConfig
from turnledger.processors.topics import ensure_topics
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

RECORDS = 10
ATTEMPTS = 30


async def _filled_topic(bootstrap: str, topics: Topics) -> TopicPartition:
    await ensure_topics(bootstrap, topics, partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send_and_wait(topics.ingress, str(i).encode(), key=b"k")
    finally:
        await producer.stop()
    return TopicPartition(topics.ingress, 0)


@pytest.mark.parametrize("group", [False, True], ids=["no-group", "group"])
async def test_seek_settled_is_exact_against_a_latest_reset(
    kafka_bootstrap: str, topic_name: Callable[[str], str], group: bool
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    tp = await _filled_topic(kafka_bootstrap, topics)
    for attempt in range(ATTEMPTS):
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka_bootstrap,
            group_id=f"{topics.prefix}g{attempt}" if group else None,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            fetch_max_wait_ms=50,
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            await asyncio.sleep(0.003 * (attempt % 6))  # land anywhere in the reset's flight
            target = None if attempt % 3 else 1 + attempt % (RECORDS - 1)
            assert await seek_settled(consumer, tp, target) == (target or 0)
            await asyncio.sleep(0.02)
            fetched: list[int] = []
            deadline = time.monotonic() + 30  # one fetch may come back empty on a loaded machine
            while not fetched and time.monotonic() < deadline:
                got = await consumer.getmany(tp, timeout_ms=2000, max_records=1)
                fetched = [m.offset for m in got.get(tp, [])]
            assert fetched == [target or 0], f"attempt {attempt}"
        finally:
            await consumer.stop()


async def test_processor_reads_from_the_beginning_whatever_the_reset_strategy(
    kafka_bootstrap: str, topic_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processor's own consumers are forced to `auto_offset_reset="latest"`: with no committed
    offset it must still fold every record from the beginning (it no longer relies on the reset)."""

    def latest(*args: Any, **kwargs: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(*args, **{**kwargs, "auto_offset_reset": "latest"})

    monkeypatch.setattr(clients, "AIOKafkaConsumer", latest)  # every consumer is built there
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    sent = await produce(
        kafka_bootstrap, topics.ingress, [(f"k{i % 5}", f"v{i}".encode()) for i in range(60)]
    )
    config = ProcessorConfig(bootstrap=kafka_bootstrap, app_id=f"{topics.prefix}app", topics=topics)
    app = ProcessorApp(config, lambda p: counter_fold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_all_committed(kafka_bootstrap, config.offsets_group, topics, sent, timeout_s=30)
    finally:
        app.stop()
        await asyncio.wait_for(task, 30)
    await assert_exactly_once(kafka_bootstrap, topics, sent)
