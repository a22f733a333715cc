"""A broken idempotent session (OutOfOrderSequenceNumber after a broker restart, seen in the chaos
run) makes the gateway client replace its producer and report a retriable outage, so the caller's
retry runs on a new producer instead of failing for ever on the broken one."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiokafka.errors import (
    InvalidProducerIdMapping,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)

from turnledger.codec import decode
from turnledger.errors import KafkaUnavailableError
from turnledger.gateway import client as client_module
from turnledger.gateway.client import EventFactory, GatewayClient, RefusedEventError, ToolResult
from turnledger.model.events import DispatchRequested
from turnledger.model.limits import Limits
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition

EVENTS = EventFactory()


class FakeProducer:
    """Stands in for AIOKafkaProducer. `fail_with`: the error of every send's acknowledgement;
    `start_failures`: how many of the next starts (of any instance) fail with a connection error;
    `stop_error`: what its `stop` raises. `addressed` is each send's (topic, key)."""

    made: list[FakeProducer] = []
    start_failures = 0

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.fail_with: BaseException | None = None
        self.started = 0
        self.stopped = 0
        self.stop_error: BaseException | None = None
        self.sent: list[bytes] = []
        self.addressed: list[tuple[str, bytes]] = []
        FakeProducer.made.append(self)

    async def start(self) -> None:
        if FakeProducer.start_failures:
            FakeProducer.start_failures -= 1
            raise KafkaConnectionError("broker away")
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1
        if self.stop_error is not None:
            raise self.stop_error

    async def send(self, topic: str, *, value: bytes, key: bytes) -> asyncio.Future[None]:
        self.sent.append(value)
        self.addressed.append((topic, key))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail_with is not None:  # a moment later, so that concurrent appends all send first
            asyncio.get_running_loop().call_later(0.01, ack.set_exception, self.fail_with)
        else:
            ack.set_result(None)
        return ack


@pytest.fixture
def fake_producers(monkeypatch: pytest.MonkeyPatch) -> list[FakeProducer]:
    FakeProducer.made = []
    FakeProducer.start_failures = 0
    monkeypatch.setattr(client_module, "AIOKafkaProducer", FakeProducer)
    return FakeProducer.made


def turn(n: int) -> Any:
    return EVENTS.user_turn("conv-1", f"hello {n}")


async def test_a_broken_session_is_replaced_once_and_the_retry_succeeds(
    fake_producers: list[FakeProducer],
) -> None:
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    [first] = fake_producers
    first.fail_with = OutOfOrderSequenceNumber()

    results = await asyncio.gather(client.append(turn(1)), client.append(turn(2)), return_exceptions=True)

    assert [type(r) for r in results] == [KafkaUnavailableError, KafkaUnavailableError]
    assert isinstance(results[0].__cause__, OutOfOrderSequenceNumber)
    assert str(results[0]) == (
        "Kafka at '127.0.0.1:1' answered while trying to append to 'turnledger.ingress' "
        "(OutOfOrderSequenceNumber: [Error 45] OutOfOrderSequenceNumber), but the producer's idempotent "
        "session broke (a broker restart can do that); a new producer replaced it, retry the append."
    )
    assert client.sessions_replaced == 1
    assert len(fake_producers) == 2 and first.stopped == 1
    second = fake_producers[1]
    assert second.started == 1
    await client.append(turn(3))
    assert len(second.sent) == 1 and len(first.sent) == 2
    assert second.started == 1  # started once: the next append does not start it again


async def test_a_replacement_that_cannot_start_yet_is_started_by_the_next_append(
    fake_producers: list[FakeProducer],
) -> None:
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    fake_producers[0].fail_with = UnknownProducerId()
    FakeProducer.start_failures = 2  # Kafka is away for the replacement's first two starts

    with pytest.raises(KafkaUnavailableError, match="idempotent session broke"):
        await client.append(turn(1))
    with pytest.raises(KafkaUnavailableError) as caught:
        await client.append(turn(2))  # starting the pending replacement fails: nothing is sent
    error = caught.value
    assert (error.bootstrap, error.action, type(error.cause)) == (
        "127.0.0.1:1",
        "start the replacement ingress producer to append to 'turnledger.ingress'",
        KafkaConnectionError,
    )
    assert error.__cause__ is error.cause
    assert str(error).startswith(
        "Kafka is not reachable at '127.0.0.1:1' while trying to start the replacement ingress producer "
        "to append to 'turnledger.ingress' (KafkaConnectionError: broker away). "
    )
    await client.append(turn(3))

    assert client.sessions_replaced == 1
    assert [(p.started, len(p.sent)) for p in fake_producers] == [(1, 1), (0, 0), (0, 0), (1, 1)]


async def test_a_second_break_replaces_the_new_producer_too_and_is_counted(
    fake_producers: list[FakeProducer], caplog: pytest.LogCaptureFixture
) -> None:
    """Each broken session (here OutOfOrderSequenceNumber, then InvalidProducerIdMapping) is replaced
    and counted, with one warning each; a broken producer whose stop raises is still replaced."""
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    fake_producers[0].fail_with = OutOfOrderSequenceNumber()
    fake_producers[0].stop_error = RuntimeError("already closed")
    with caplog.at_level(logging.WARNING, logger="turnledger.gateway.client"):
        with pytest.raises(KafkaUnavailableError, match="idempotent session broke"):
            await client.append(turn(1))
        fake_producers[1].fail_with = InvalidProducerIdMapping()
        with pytest.raises(KafkaUnavailableError, match="idempotent session broke"):
            await client.append(turn(2))
    assert client.sessions_replaced == 2
    assert [(p.started, p.stopped) for p in fake_producers] == [(1, 1), (1, 1), (1, 0)]
    assert [r.getMessage() for r in caplog.records] == [
        "the ingress producer's idempotent session broke; replacing it with a new producer"
    ] * 2


async def test_a_replacement_that_fails_to_start_and_to_stop_is_retried_by_the_next_append(
    fake_producers: list[FakeProducer],
) -> None:
    """The failed replacement's own stop raising changes nothing: the caller still sees the broken
    session, and the next append starts a fresh producer."""
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    fake_producers[0].fail_with = OutOfOrderSequenceNumber()
    FakeProducer.start_failures = 1
    real_init = FakeProducer.__init__

    def stop_fails(self: FakeProducer, **options: Any) -> None:
        real_init(self, **options)
        self.stop_error = RuntimeError("not started")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FakeProducer, "__init__", stop_fails)
        with pytest.raises(KafkaUnavailableError, match="idempotent session broke"):
            await client.append(turn(1))
    await client.append(turn(2))
    assert [(p.started, p.stopped, len(p.sent)) for p in fake_producers] == [(1, 1, 1), (0, 1, 0), (1, 0, 1)]


async def test_the_producer_is_built_idempotent_with_acks_from_all_replicas(
    fake_producers: list[FakeProducer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The options every producer (the first and each replacement) is built with: the defaults, then
    the connection's security options."""
    monkeypatch.setattr(client_module, "kafka_options", lambda: {"security_protocol": "SSL"})
    GatewayClient("broker:9092")
    GatewayClient("b:1", client_id="gw-2", request_timeout_ms=500, linger_ms=0)
    common = {
        "enable_idempotence": True,
        "acks": "all",
        "max_batch_size": 262_144,
        "security_protocol": "SSL",
    }
    assert [p.options for p in fake_producers] == [
        {
            "bootstrap_servers": "broker:9092",
            "client_id": "turnledger-gateway",
            "linger_ms": 2,
            "request_timeout_ms": 15_000,
            **common,
        },
        {
            "bootstrap_servers": "b:1",
            "client_id": "gw-2",
            "linger_ms": 0,
            "request_timeout_ms": 500,
            **common,
        },
    ]


async def test_stop_stops_a_started_producer_once(fake_producers: list[FakeProducer]) -> None:
    """A client never started stops nothing; a started one stops its producer once, however often asked."""
    idle = GatewayClient("127.0.0.1:1")
    await idle.stop()
    async with GatewayClient("127.0.0.1:1") as client:
        assert fake_producers[1].started == 1
    await client.stop()
    assert [(p.started, p.stopped) for p in fake_producers] == [(0, 0), (1, 1)]


async def test_a_start_kafka_refuses_is_an_outage_after_the_diagnosis(
    fake_producers: list[FakeProducer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed start stops the producer, asks `diagnose` about the bootstrap (which would raise a
    refused login), then raises KafkaUnavailableError; the client is not started."""
    diagnosed: list[str] = []

    async def diagnose(bootstrap: str) -> None:
        diagnosed.append(bootstrap)

    monkeypatch.setattr(client_module, "diagnose", diagnose)
    FakeProducer.start_failures = 1
    client = GatewayClient("broker:9092")
    with pytest.raises(KafkaUnavailableError) as caught:
        await client.start()
    error = caught.value
    assert (error.bootstrap, error.action, type(error.cause)) == (
        "broker:9092",
        "start the ingress producer",
        KafkaConnectionError,
    )
    assert error.__cause__ is error.cause
    assert str(error).startswith(
        "Kafka is not reachable at 'broker:9092' while trying to start the ingress producer "
        "(KafkaConnectionError: broker away). "
    )
    assert diagnosed == ["broker:9092"]
    assert (fake_producers[0].started, fake_producers[0].stopped) == (0, 1)
    await client.stop()
    assert fake_producers[0].stopped == 1


async def test_each_event_goes_to_the_topic_keyed_by_its_conversation(
    fake_producers: list[FakeProducer],
) -> None:
    """The key is the conversation id's UTF-8 bytes; the topic the client's."""
    client = GatewayClient("127.0.0.1:1", topic="ingress-x")
    await client.start()
    await client.append_many([EVENTS.user_turn("conv-é", "a"), EVENTS.user_turn("conv-2", "b")])
    assert fake_producers[0].addressed == [("ingress-x", "conv-é".encode()), ("ingress-x", b"conv-2")]


async def test_the_client_refuses_by_its_own_limits(fake_producers: list[FakeProducer]) -> None:
    """A client given smaller limits refuses what the default limits would send."""
    client = GatewayClient("127.0.0.1:1", limits=Limits(max_blocks_per_turn=1))
    await client.start()
    two = EVENTS.tool_results(
        "conv-1", [ToolResult("c1", "t", "d", 1, "x"), ToolResult("c2", "t", "d", 1, "y")]
    )
    with pytest.raises(RefusedEventError) as caught:
        await client.append(two)
    assert (caught.value.reason, caught.value.detail) == (
        ReasonCode.TOO_MANY_BLOCKS,
        "the turn has 2 blocks, at most 1",
    )
    assert fake_producers[0].sent == []


@pytest.mark.parametrize(
    ("failure", "named"),
    [
        (KafkaConnectionError("gone"), "KafkaConnectionError: gone"),
        (KafkaTimeoutError(), "KafkaTimeoutError"),
        (NotLeaderForPartitionError(), "NotLeaderForPartitionError: [Error 6] NotLeaderForPartitionError"),
    ],
    ids=["connection", "timeout", "retriable"],
)
async def test_an_outage_or_a_retriable_error_is_kafka_unavailable(
    fake_producers: list[FakeProducer], failure: KafkaError, named: str
) -> None:
    """What a retry can cure is KafkaUnavailableError for the append, caused by the broker's error."""
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    fake_producers[0].fail_with = failure
    with pytest.raises(KafkaUnavailableError) as caught:
        await client.append(turn(1))
    error = caught.value
    assert (error.bootstrap, error.action, error.cause) == (
        "127.0.0.1:1",
        "append to 'turnledger.ingress'",
        failure,
    )
    assert error.__cause__ is failure
    assert str(error).startswith(
        f"Kafka is not reachable at '127.0.0.1:1' while trying to append to 'turnledger.ingress' ({named}). "
    )
    assert client.sessions_replaced == 0


async def test_an_error_no_retry_can_cure_is_raised_as_it_is(fake_producers: list[FakeProducer]) -> None:
    """A record the broker will never take (not retriable) is the broker's own error."""
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    failure = MessageSizeTooLargeError()
    fake_producers[0].fail_with = failure
    with pytest.raises(MessageSizeTooLargeError) as caught:
        await client.append(turn(1))
    assert caught.value is failure


async def test_the_gateway_calls_append_exactly_the_event_they_return(
    fake_producers: list[FakeProducer],
) -> None:
    """`submit_user_turn`, `submit_tool_results`, `request_dispatch` and `cancel` each send one event:
    the one returned, built from every argument given."""
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    user = await client.submit_user_turn("conv-1", "hi", turn_id="u-1", block_id="b", expected_revision=2)
    results = await client.submit_tool_results("conv-1", [ToolResult("c1", "t", "d", 1, "x")], turn_id="tr")
    streamed = await client.request_dispatch(
        "conv-1",
        adapter="openai-chat@1",
        provider="openai",
        model_revision="gpt@1",
        max_output_tokens=64,
        tools=[ToolDefinition(name="t", description="d", input_schema={"type": "object"})],
        policy={"stream_options": {"include_usage": False}, "temperature": 0},
        operation_id="op-given",
        settle_within_ms=9_000,
    )
    plain = await client.request_dispatch(
        "conv-1",
        adapter="openai-chat@1",
        provider="openai",
        model_revision="gpt@1",
        max_output_tokens=8,
        stream=False,
    )
    await client.cancel("conv-1", "op-given", reason="user left")
    await client.cancel("conv-1")
    sent = [decode(v) for v in fake_producers[0].sent]
    assert sent[:4] == [user, results, streamed, plain]
    assert (user.turn_id, user.blocks[0].id, user.expected_revision) == ("u-1", "b", 2)
    assert (results.turn_id, [b.call_id for b in results.blocks]) == ("tr", ["c1"])
    assert (streamed.operation_id, streamed.adapter, streamed.provider, streamed.model_revision) == (
        "op-given",
        "openai-chat@1",
        "openai",
        "gpt@1",
    )
    assert (streamed.max_output_tokens, [t.name for t in streamed.tools], streamed.settle_within_ms) == (
        64,
        ["t"],
        9_000,
    )
    assert streamed.policy == {"stream": True, "stream_options": {"include_usage": False}, "temperature": 0}
    assert (plain.policy, plain.tools, plain.settle_within_ms) == ({}, (), None)
    prefix, _, digits = plain.operation_id.partition("-")
    assert (prefix, len(digits), int(digits, 16) >= 0) == ("op", 16, True)
    assert [(e.conversation_id, e.operation_id, e.reason) for e in sent[4:]] == [
        ("conv-1", "op-given", "user left"),
        ("conv-1", None, ""),
    ]
    assert [type(e).__name__ for e in sent[4:]] == ["CancelRequested"] * 2


async def test_a_responses_dispatch_asked_not_to_be_stored_is_sent_without_background_mode(
    fake_producers: list[FakeProducer],
) -> None:
    """Background mode keeps the response whatever `store` says (adapters/profiles.py): the event asks
    for a stream alone; without `stream`, the policy is the one given."""
    client = GatewayClient("127.0.0.1:1")
    await client.start()

    async def dispatch(policy: dict[str, Any], stream: bool = True) -> DispatchRequested:
        return await client.request_dispatch(
            "conv-1",
            adapter="openai-responses@4",
            provider="openai",
            model_revision="o4@1",
            max_output_tokens=8,
            policy=policy,
            stream=stream,
        )

    streamed = await dispatch({"store": False})
    stored = await dispatch({"store": True})
    plain = await dispatch({"store": False}, stream=False)
    assert [decode(v) for v in fake_producers[0].sent] == [streamed, stored, plain]
    assert streamed.policy == {"stream": True, "store": False}
    assert stored.policy == {"stream": True, "background": True, "store": True}
    assert plain.policy == {"store": False}
