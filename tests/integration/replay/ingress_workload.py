"""A real ingress workload (driven through the dispatch test scenario) and a stand-in processor.

`run_processor` folds the ingress topic with the same BatchEngine the partition
processor runs and writes its outputs, keyed by conversation, in transactions: the
output topics then hold what the processor would have written.
"""

from __future__ import annotations

from aiokafka import AIOKafkaProducer

from tests.unit.dispatch.scenario import Conversation, text_stream, tool_stream
from turnledger.codec import encode
from turnledger.model.events import IngressEvent
from turnledger.processors.topics import Topics
from turnledger.projections.streams import topic_for
from turnledger.replay.refold import refold

ARGS_PARIS = '{"city": "Paris"}'
ARGS_ROME = '{"city": "Rome"}'


def conversation_events(conversation_id: str, late_duplicate: bool) -> list[IngressEvent]:
    captured: list[IngressEvent] = []
    c = Conversation(conversation_id)
    original = c.apply

    def capture(event: IngressEvent) -> list:  # type: ignore[type-arg]
        captured.append(event)
        return original(event)

    c.apply = capture  # type: ignore[method-assign]
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
    return captured


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


async def run_processor(bootstrap: str, topics: Topics) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topics.prefix}stand-in")
    await producer.start()
    written = 0
    try:
        async for folded in refold(bootstrap, topics, batch=25):
            async with producer.transaction():
                for o in folded.outputs:
                    await producer.send(topic_for(topics, o.stream), o.value, key=o.key)
                    written += 1
    finally:
        await producer.stop()
    return written
