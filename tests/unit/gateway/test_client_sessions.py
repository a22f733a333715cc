"""A broken idempotent session (OutOfOrderSequenceNumber after a broker restart, seen in the chaos
run) makes the gateway client replace its producer and report a retriable outage, so the caller's
retry runs on a new producer instead of failing for ever on the broken one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber, UnknownProducerId

from turnledger.errors import KafkaUnavailableError
from turnledger.gateway import client as client_module
from turnledger.gateway.client import EventFactory, GatewayClient

EVENTS = EventFactory()


class FakeProducer:
    """Stands in for AIOKafkaProducer. `fail_with`: the error of every send's acknowledgement;
    `start_failures`: how many of the next starts (of any instance) fail with a connection error."""

    made: list[FakeProducer] = []
    start_failures = 0

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.fail_with: BaseException | None = None
        self.started = 0
        self.stopped = 0
        self.sent: list[bytes] = []
        FakeProducer.made.append(self)

    async def start(self) -> None:
        if FakeProducer.start_failures:
            FakeProducer.start_failures -= 1
            raise KafkaConnectionError("broker away")
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1

    async def send(self, topic: str, *, value: bytes, key: bytes) -> asyncio.Future[None]:
        self.sent.append(value)
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


async def test_a_replacement_that_cannot_start_yet_is_started_by_the_next_append(
    fake_producers: list[FakeProducer],
) -> None:
    client = GatewayClient("127.0.0.1:1")
    await client.start()
    fake_producers[0].fail_with = UnknownProducerId()
    FakeProducer.start_failures = 2  # Kafka is away for the replacement's first two starts

    with pytest.raises(KafkaUnavailableError, match="idempotent session broke"):
        await client.append(turn(1))
    with pytest.raises(KafkaUnavailableError, match=r"Kafka is not reachable .* start the replacement"):
        await client.append(turn(2))  # starting the pending replacement fails: nothing is sent
    await client.append(turn(3))

    assert client.sessions_replaced == 1
    assert [(p.started, len(p.sent)) for p in fake_producers] == [(1, 1), (0, 0), (0, 0), (1, 1)]
