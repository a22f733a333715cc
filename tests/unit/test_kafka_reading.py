"""`wait_for_partitions`: a topic's partitions once the client's metadata knows them; a topic the
brokers answered without is missing, one the client could not ask about is an outage."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from turnledger.errors import KafkaUnavailableError, MissingTopicError
from turnledger.kafka.reading import wait_for_partitions


class Client:
    def __init__(self, refreshes: list[bool]) -> None:
        self.refreshes, self.asked = refreshes, 0

    async def force_metadata_update(self) -> bool:
        self.asked += 1
        return self.refreshes.pop(0) if self.refreshes else True


class Consumer:
    """`partitions_for_topic` knows the topic from its `known_after`-th question on (None: never)."""

    def __init__(self, known_after: int | None, refreshes: list[bool] | None = None) -> None:
        self.known_after, self.questions = known_after, 0
        self._client = Client(refreshes or [])

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self.questions += 1
        if self.known_after is None or self.questions < self.known_after:
            return None
        return {2, 0, 1}


async def test_known_partitions_come_back_sorted_without_a_refresh() -> None:
    consumer = Consumer(known_after=1)
    assert await wait_for_partitions(consumer, "k:1", "t") == [TopicPartition("t", p) for p in (0, 1, 2)]  # type: ignore[arg-type]
    assert consumer._client.asked == 0


async def test_a_topic_the_metadata_learns_after_a_refresh() -> None:
    consumer = Consumer(known_after=3)
    assert await wait_for_partitions(consumer, "k:1", "t", timeout_s=30) == [  # type: ignore[arg-type]
        TopicPartition("t", p) for p in (0, 1, 2)
    ]
    assert (consumer.questions, consumer._client.asked) == (3, 2)


async def test_a_topic_the_brokers_answered_without_is_missing() -> None:
    consumer = Consumer(known_after=None)
    with pytest.raises(MissingTopicError) as raised:
        await wait_for_partitions(consumer, "k:1", "t", timeout_s=0.05)  # type: ignore[arg-type]
    assert str(raised.value) == str(MissingTopicError("t", "k:1")) and consumer._client.asked >= 1


async def test_a_topic_the_client_could_not_ask_about_is_an_outage() -> None:
    consumer = Consumer(known_after=None, refreshes=[False] * 1000)
    with pytest.raises(KafkaUnavailableError) as raised:
        await wait_for_partitions(consumer, "k:1", "t", timeout_s=0.05)  # type: ignore[arg-type]
    assert (raised.value.bootstrap, raised.value.action, raised.value.cause) == (
        "k:1",
        "read the partitions of 't'",
        None,
    )


async def test_only_the_last_refresh_counts() -> None:
    """Brokers that failed once and then answered without the topic: it is missing."""
    consumer = Consumer(known_after=None, refreshes=[False])
    with pytest.raises(MissingTopicError):
        await wait_for_partitions(consumer, "k:1", "t", timeout_s=0.25)  # type: ignore[arg-type]
    assert consumer._client.asked >= 2
