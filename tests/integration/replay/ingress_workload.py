"""A real ingress workload (driven through the dispatch test scenario) and the real processor.

`run_processor` runs `ProcessorApp` with `DispatchPartitionFold` (what `turnledger process` runs) over
the ingress topic until every record is committed, so the output topics hold exactly what
production would have written, Rejected source coordinates and batching included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.integration.test_processor_eos import committed_offsets, wait_for
from tests.unit.dispatch.scenario import Conversation, text_stream, tool_stream
from turnledger.codec import encode
from turnledger.model.events import IngressEvent
from turnledger.processors.app import ProcessorApp
from turnledger.processors.config import ProcessorConfig
from turnledger.processors.dispatch_partition import DispatchPartitionFold
from turnledger.topology import Topics

ARGS_PARIS = '{"city": "Paris"}'
ARGS_ROME = '{"city": "Rome"}'


def captured_events(conversation_id: str, script: Callable[[Conversation], None]) -> list[IngressEvent]:
    """The ingress events `script` folds into a test `Conversation` of that id, in order."""
    captured: list[IngressEvent] = []
    c = Conversation(conversation_id)
    original = c.apply

    def capture(event: IngressEvent) -> list:  # type: ignore[type-arg]
        captured.append(event)
        return original(event)

    c.apply = capture  # type: ignore[method-assign]
    script(c)
    return captured


def conversation_events(conversation_id: str, late_duplicate: bool) -> list[IngressEvent]:
    return captured_events(conversation_id, lambda c: _weather(c, conversation_id, late_duplicate))


def _weather(c: Conversation, conversation_id: str, late_duplicate: bool) -> None:
    op1, op2 = op_ids(conversation_id)
    c.user(f"weather in Paris and Rome? ({conversation_id})")
    c.dispatch_to_streaming(op1)
    c.deltas(
        tool_stream(
            [
                ("call-1", "get_weather", [ARGS_PARIS[:9], ARGS_PARIS[9:]]),
                ("call-2", "get_weather", [ARGS_ROME]),
            ]
        ),
        op=op1,
    )
    c.request(op2)  # WAITING on both calls
    c.tool_results(("call-1", "get_weather", ARGS_PARIS))
    c.tool_results(("call-2", "get_weather", ARGS_ROME))  # -> PREPARED, second manifest
    c.attempt(op2)
    c.sent(op2, 1)
    c.bind(op2, 1, "msg_2")
    stream = text_stream(["Sunny in Paris, ", "rain in Rome."], handle="msg_2")
    c.deltas(stream[:3], op=op2)
    c.deltas(stream[3:], op=op2)
    if late_duplicate:
        c.deltas(stream, op=op2)  # after commit -> quarantine


def op_ids(conversation_id: str) -> tuple[str, str]:
    """Operation ids are global: make them unique per conversation."""
    return (f"{conversation_id}/op-1", f"{conversation_id}/op-2")


def ingress_events(conversations: int) -> list[IngressEvent]:
    out: list[IngressEvent] = []
    for i in range(conversations):
        out.extend(conversation_events(f"conv-{i}", late_duplicate=i % 2 == 0))
    return out


async def produce_ingress(bootstrap: str, topics: Topics, events: list[IngressEvent]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for e in events:
            await producer.send(topics.ingress, encode(e), key=e.conversation_id.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def ingress_end_offsets(bootstrap: str, topics: Topics) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
        tps = [
            TopicPartition(topics.ingress, p)
            for p in sorted(cluster.partitions_for_topic(topics.ingress) or ())
        ]
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def run_processor(
    bootstrap: str, topics: Topics, *, batch_max_records: int = 50, timeout_s: float = 60
) -> int:
    """The real partition processor (ProcessorApp + DispatchPartitionFold, one EOS transaction per batch) over
    the whole ingress topic: runs until its group committed every ingress offset, then stops it.
    Returns the number of output records it wrote."""
    ends = await ingress_end_offsets(bootstrap, topics)
    config = ProcessorConfig(
        bootstrap=bootstrap, app_id=f"{topics.prefix}app", topics=topics, batch_max_records=batch_max_records
    )
    app = ProcessorApp(config, lambda p: DispatchPartitionFold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))

    async def caught_up() -> bool:
        if task.done():
            task.result()  # a failed processor fails the test at once
            raise AssertionError("the processor stopped before consuming the ingress topic")
        committed = await committed_offsets(bootstrap, config.offsets_group, topics.ingress, sorted(ends))
        return all(committed[p] >= end for p, end in ends.items())

    try:
        await wait_for(caught_up, timeout_s, f"the processor to commit ingress offsets {ends}")
    finally:
        app.stop()
        await asyncio.wait_for(task, 30)
    return sum(p.metrics.outputs_out for p in app.processors.values())
